#!/usr/bin/env bash
# Restarting a whole Deployment: `kubectl rollout restart` (new pods) against a
# ContainerRecreateRollout (in place), on the test bed with 2 nodes and a release build of crr
# (tests/e2e/src/bin/crr-bench-rollout.rs; its header lists the figures).
#   CRR_ROLLOUT_PODS=60 bench/rollout.sh     Results: bench/results/<date>-rollout.{md,json}
#   CRR_PROFILE=dev bench/rollout.sh         a dev build (compare with runs of the same build only)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$root/hack/versions.sh"
. "$root/hack/cluster-env.sh"
CRR_NODES="${CRR_NODES:-2}" "$root/hack/cluster.sh" up
profile="${CRR_PROFILE:-release}"
CRR_PROFILE="$profile" "$root/hack/install.sh"
cd "$root"
release=()
[ "$profile" = release ] && release=(--release)
KUBECONFIG="$KUBECONFIG_ADMIN" CRR_BENCH_OUT="$root/bench/results" \
  cargo run -q "${release[@]}" -p crr-e2e --bin crr-bench-rollout
