#!/usr/bin/env bash
# `make test`: everything CI runs (.ci/run), each step timed, the table of steps printed last
# (hack/steps.sh), where CI's kept tail shows it. The order, and what runs beside what:
#
#   foreground                                   background (started at once)
#   deps                                         & stack 1.37: Kubernetes, containerd, runc
#   fmt-check, clippy, unit                      & tools, at nice 10: cargo-deny (a cheap build,
#   previous-release (the upgrade's images,        hack/cargo-tool.sh), then helm
#     built in the same target/ as unit)         & stack 1.35, at nice 19, once 1.37 is built:
#   manifests-check, monitoring-check (helm)       it takes the cores the cluster suites leave
#   deny                                           idle (they mostly wait on the cluster)
#   cluster-test (waits for stack 1.37)
#   compat-test (waits for stack 1.35)
#
# The Rust steps come first: they are the longest part of the foreground on a cold machine, and
# nothing else waits for them. The Go builds need no Rust and the Rust builds no Go: on 2 cores and
# 24 GiB they overlap without running out of memory (a Go build of Kubernetes peaks at a few GiB).
# The oldest stack waits for the newest so that their module downloads do not share the network
# while the newest is what cluster-test waits for. Each background build writes its log to
# target/steps/<name>.log; a failed one fails the step that waits for it.
#
# CRR_STEPS names the record (default target/steps/steps.tsv); `hack/steps.sh` says its format.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
. "$here/steps.sh"
cd "$root"

logs="$root/target/steps"
mkdir -p "$logs"
export CRR_STEPS="${CRR_STEPS:-$logs/steps.tsv}"
: >"$CRR_STEPS"
rm -rf "$CRR_STEPS.why" "$CRR_STEPS.logs"

background=()
finish() {
  local rc=$? pid
  for pid in "${background[@]}"; do
    # A background build still running when a step failed: stopped with its children.
    kill -- "-$pid" 2>/dev/null || kill "$pid" 2>/dev/null || true
  done
  echo
  echo "make test: steps (seconds of wall clock; & ran in the background)"
  steps_table
  if ((rc == 0)); then echo "make test: passed"; else echo "make test: FAILED (exit $rc)"; fi
  exit "$rc"
}
trap finish EXIT

# in_background NAME LOG COMMAND...: COMMAND as a timed step of its own in a new process group
# (so that `finish` can stop it with its children); its pid is the last of `background`.
in_background() {
  local name="$1" log="$2"
  shift 2
  set -m
  step "& $name" "$@" >"$log" 2>&1 &
  set +m
  background+=("$!")
}

# wait_for_background PID NAME LOG: waits for a background step; shows its log if it failed.
wait_for_background() {
  local pid="$1" name="$2" log="$3" status=0
  wait "$pid" || status=$?
  if ((status != 0)); then
    echo "make test: the background step '$name' failed (exit $status); the end of $log:" >&2
    tail -n 40 "$log" >&2
  fi
  return "$status"
}

step deps "$here/install-deps.sh"

build_stack='"$0/build-kube.sh" && "$0/build-runtime.sh"'
in_background "stack 1.37" "$logs/stack-1.37.log" env CRR_STACK=1.37 bash -c "$build_stack" "$here"
stack_newest=${background[-1]}
in_background "stack 1.35" "$logs/stack-1.35.log" bash -c \
  'while kill -0 "$1" 2>/dev/null; do sleep 2; done; CRR_STACK=1.35 exec nice -n 19 bash -c "$2" "$0"' \
  "$here" "$stack_newest" "$build_stack"
stack_oldest=${background[-1]}
in_background "tools: cargo-deny, helm" "$logs/tools.log" \
  nice -n 10 bash -c '"$0/cargo-deny.sh" --install-only && "$0/build-helm.sh"' "$here"
tools=${background[-1]}

step fmt-check cargo fmt --all -- --check
step clippy cargo clippy --workspace --all-targets -- -D warnings
step unit cargo test --workspace
# Straight after unit, while the tools and the newest stack are still building on a cold machine:
# it needs neither.
step previous-release "$here/previous-release.sh" build
step "wait: tools" wait_for_background "$tools" tools "$logs/tools.log"
step manifests-check "$here/render-manifests.sh" --check
step monitoring-check "$here/check-monitoring.sh"
step deny "$here/cargo-deny.sh"
step "wait: stack 1.37" wait_for_background "$stack_newest" "stack 1.37" "$logs/stack-1.37.log"
step cluster-test "$here/cluster-test.sh"
step "wait: stack 1.35" wait_for_background "$stack_oldest" "stack 1.35" "$logs/stack-1.35.log"
step compat-test "$here/cluster-test.sh" --compat
