#!/usr/bin/env bash
# Runs crr's cargo-fuzz targets (fuzz/README.md) for a bounded time each and prints, per target,
# the executions and the crashes found. Installs what it needs (cargo-fuzz, and a nightly
# toolchain when one can be had), so it works on a fresh machine. cargo-fuzz is pinned in
# hack/versions.sh and built once per machine into the cache (hack/cargo-tool.sh).
#
#   hack/fuzz.sh [--smoke] [TARGET...]
#
#   (default)  CRR_FUZZ_SECONDS per target (600); new inputs are kept in fuzz/corpus-generated/
#              (not committed), read together with the committed seeds in fuzz/corpus/.
#   --smoke    CRR_FUZZ_SECONDS per target (5) from the committed seeds, new inputs thrown away:
#              a short real fuzz run (not part of make test: the seeds themselves run in
#              cargo test, fuzz/oracles/tests/corpus.rs).
#
# Toolchain: cargo-fuzz passes -Z flags (sanitizers, coverage), which need nightly. The script
# uses the nightly toolchain if it is installed or `rustup toolchain install nightly` works, and
# otherwise the stable one with RUSTC_BOOTSTRAP=1. CRR_FUZZ_TOOLCHAIN=nightly|stable forces one.
#
# A crash: libFuzzer stops that target, the input is in fuzz/artifacts/<target>/, the script
# goes on with the other targets and exits 1 at the end. Replay one with
#   cargo fuzz run <target> fuzz/artifacts/<target>/crash-...
set -euo pipefail
cd "$(dirname "$0")/.."

. hack/versions.sh
smoke=false
targets=()
for argument in "$@"; do
  case "$argument" in
    --smoke) smoke=true ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz: unknown option $argument" >&2; exit 2 ;;
    *) targets+=("$argument") ;;
  esac
done
if $smoke; then seconds=${CRR_FUZZ_SECONDS:-5}; else seconds=${CRR_FUZZ_SECONDS:-600}; fi

# --- toolchain --------------------------------------------------------------------------------
toolchain=${CRR_FUZZ_TOOLCHAIN:-}
if [[ -z $toolchain ]]; then
  if rustup run nightly rustc --version >/dev/null 2>&1; then
    toolchain=nightly
  elif rustup toolchain install nightly --profile minimal >/dev/null 2>&1 \
    && rustup run nightly rustc --version >/dev/null 2>&1; then
    toolchain=nightly
  else
    toolchain=stable
  fi
fi
case "$toolchain" in
  nightly) cargo=(cargo +nightly) ;;
  stable) cargo=(cargo +stable); export RUSTC_BOOTSTRAP=1 ;;
  *) echo "fuzz: CRR_FUZZ_TOOLCHAIN must be nightly or stable, not $toolchain" >&2; exit 2 ;;
esac
echo "fuzz: toolchain $toolchain ($("${cargo[@]}" --version)${RUSTC_BOOTSTRAP:+, RUSTC_BOOTSTRAP=1})"

# --- cargo-fuzz -------------------------------------------------------------------------------
# The pinned one (hack/versions.sh), built once per machine into the cache (hack/cargo-tool.sh),
# first on PATH so that `cargo fuzz` finds it.
fuzz_tool="$(hack/cargo-tool.sh cargo-fuzz "$CARGO_FUZZ_VERSION" "$CARGO_FUZZ_ROOT" cargo-fuzz)"
export PATH="$(dirname "$fuzz_tool"):$PATH"

if ((${#targets[@]} == 0)); then
  mapfile -t targets < <("${cargo[@]}" fuzz list --fuzz-dir fuzz)
fi

# --- build, then run each target ----------------------------------------------------------------
started=$SECONDS
"${cargo[@]}" fuzz build --fuzz-dir fuzz
echo "fuzz: built in $((SECONDS - started)) s"

logs=fuzz/target/fuzz-logs
mkdir -p "$logs"
scratch=""
if $smoke; then
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' EXIT
fi
failed=0
summary=()
for target in "${targets[@]}"; do
  if $smoke; then generated=$scratch/$target; else generated=fuzz/corpus-generated/$target; fi
  mkdir -p "$generated" "fuzz/corpus/$target" "fuzz/artifacts/$target"
  log=$logs/$target.log
  before=$(find "fuzz/artifacts/$target" -type f | wc -l)
  run_started=$SECONDS
  status=0
  # -timeout: an input that takes this long is a hang, reported like a crash.
  "${cargo[@]}" fuzz run --fuzz-dir fuzz "$target" "$generated" "fuzz/corpus/$target" -- \
    -max_total_time="$seconds" -timeout=10 -print_final_stats=1 >"$log" 2>&1 || status=$?
  elapsed=$((SECONDS - run_started))
  crashes=$(($(find "fuzz/artifacts/$target" -type f | wc -l) - before))
  executions=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  if [[ -z $executions ]]; then
    # No final stats after a crash: the last status line ("#N ...") has the count.
    executions=$(grep -o '^#[0-9]\+' "$log" | tail -1 | tr -d '#')
  fi
  per_second=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  line=$(printf '%-20s %5ss %12s executions %8s/s %3s crashes' \
    "$target" "$elapsed" "${executions:-?}" "${per_second:-?}" "$crashes")
  if ((status != 0 || crashes > 0)); then
    failed=1
    line+="  FAILED (exit $status, log $log)"
    grep -m1 -A3 "panicked at\|ERROR: libFuzzer\|ERROR: AddressSanitizer" "$log" >&2 || tail -20 "$log" >&2
    grep "Test unit written to" "$log" >&2 || true
  fi
  echo "fuzz: $line"
  summary+=("$line")
done

echo "fuzz: summary ($seconds s per target$($smoke && echo ', smoke'))"
printf '  %s\n' "${summary[@]}"
if ((failed)); then
  echo "fuzz: FAILED: crash inputs are in fuzz/artifacts/<target>/" >&2
  exit 1
fi
echo "fuzz: ${#targets[@]} passed, 0 failed"
