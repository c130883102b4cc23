#!/usr/bin/env bash
# `make bench`: release build of crr, installed on the local test bed, then the figures of
# BENCHMARKS.md (tests/e2e/src/bin/crr-bench.rs) and the webhook's own TLS load bench.
# Knobs: CRR_BENCH_REPETITIONS (10), CRR_BENCH_BURST (50), CRR_BENCH_IDLE_PODS (100),
# CRR_BENCH_IDLE_SECONDS (300), CRR_BENCH_SHUTDOWN_REPETITIONS (3); CRR_BENCH_ONLY=shutdowns runs only
# section 6 (two containers with 3 s shutdowns). Results: bench/results/<date>.{json,md}, latest.md.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$root/hack/versions.sh"
. "$root/hack/cluster-env.sh"
"$root/hack/cluster.sh" up
CRR_PROFILE=release "$root/hack/install.sh"
cd "$root"
# The webhook's load bench first, while the node is quiet (after the crr bench, the kubelet is
# still tearing down its 100 idle pods and the figures swing by a factor of three).
if [[ -n "${CRR_BENCH_ONLY:-}" ]]; then
  webhook_figures="not run (CRR_BENCH_ONLY=$CRR_BENCH_ONLY)"
else
  echo "bench: 4. webhook admission over TLS on loopback (webhook/benches/admission.rs)" >&2
  webhook_figures="$(cargo bench -q -p crr-webhook --bench admission 2>/dev/null | grep -v '^$' || echo "webhook bench failed")"
fi
KUBECONFIG="$KUBECONFIG_ADMIN" CRR_BENCH_OUT="$root/bench/results" \
  cargo run -q --release -p crr-e2e --bin crr-bench
{
  echo
  echo '**webhook admission over TLS (loopback, the pod given as a value)**:'
  echo '```'
  echo "$webhook_figures"
  echo '```'
} | tee -a "$root/bench/results/latest.md"
{
  echo
  echo "Machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), kernel $(uname -r);"
  echo "Stack $CRR_STACK: Kubernetes $KUBE_VERSION, containerd $(containerd --version | awk '{print $3}'), runc $RUNC_VERSION; $(date -u +%Y-%m-%d)."
} | tee -a "$root/bench/results/latest.md"
