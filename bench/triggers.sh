#!/usr/bin/env bash
# The config-change trigger at scale: 2,000 ConfigMaps and 200 Deployments with
# crr.dev/recreate-on-config-change on 10 kwok nodes, on the test bed with a release build of crr
# (tests/e2e/src/bin/crr-bench-triggers.rs; its header lists the figures and the knobs).
#   bench/triggers.sh     (make bench-triggers)   Results: bench/results/<date>-triggers.{md,json}
# Removes its namespaces, the kwok nodes and kwok at the end; the test bed keeps running.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$root/hack/versions.sh"
. "$root/hack/cluster-env.sh"
log() { echo "bench-triggers: $*" >&2; }
. "$root/bench/kwok.sh"

if [[ "${CRR_BENCH_SKIP_INSTALL:-}" != 1 ]]; then
  "$root/hack/cluster.sh" up
  CRR_PROFILE=release "$root/hack/install.sh"
fi
cd "$root"
cargo build -q --release -p crr-e2e --bin crr-bench-triggers

cleanup() {
  local rc=$?
  log "removing the kwok nodes and what ran on them"
  kubectl delete namespace -l crr.dev/bench=triggers --wait=false >/dev/null 2>&1 || true
  kwok_stop
  exit "$rc"
}
trap cleanup EXIT
# What an earlier run left (its namespaces may still be terminating).
kubectl delete namespace -l crr.dev/bench=triggers --timeout=300s >/dev/null
kwok_start

KUBECONFIG="$KUBECONFIG_ADMIN" CRR_BENCH_OUT="${CRR_BENCH_OUT:-$root/bench/results}" \
  "$root/target/release/crr-bench-triggers"
