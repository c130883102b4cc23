#!/usr/bin/env bash
# What one ContainerRecreateRequest costs the API server: writes, pod GETs and webhook
# calls per request, by crr component, from the test bed apiserver's audit log and metrics
# (tests/e2e/src/bin/crr-api-costs.rs). Release build, installed on the local test bed.
#   CRR_COST_REQUESTS=20 bench/api-costs.sh     Results: bench/results/<date>-api-costs.md
#   CRR_PROFILE=dev bench/api-costs.sh          the same counts from a dev build (no release
#                                               build to wait for: counts do not depend on it)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$root/hack/versions.sh"
. "$root/hack/cluster-env.sh"
"$root/hack/cluster.sh" up
profile="${CRR_PROFILE:-release}"
CRR_PROFILE="$profile" "$root/hack/install.sh"
cd "$root"
release=()
[ "$profile" = release ] && release=(--release)
KUBECONFIG="$KUBECONFIG_ADMIN" CRR_BENCH_OUT="$root/bench/results" \
  cargo run -q "${release[@]}" -p crr-e2e --bin crr-api-costs
