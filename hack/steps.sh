# The step timer of `make test` (hack/test.sh), sourced by the scripts whose steps it times
# (hack/test.sh, hack/cluster-test.sh). Every step is one line of the table `make test` prints
# last: its name, its wall-clock seconds and how it ended.
#
#   step NAME COMMAND...     runs COMMAND, records NAME with its seconds and exit status, and
#                            returns that status (set -e then stops the script as before)
#   steps_table              prints the table of every step recorded so far, then why the
#                            failed ones failed
#
# The record is the file $CRR_STEPS (hack/test.sh sets it and exports it, so a script it runs
# records its own steps there too, one level deeper); without it `step` only runs the command.
# A step's line is written when it begins and again when it ends, so a step cut short (CI's
# time limit, a signal) shows as unfinished with the seconds it had run. Lines are appended
# with one write each, so steps that run at the same time (the background builds) do not mix.
# Steps run in the background are named with a leading `&`.
#
# Why a step failed is printed after the table, as CI's record of a run keeps only the end of its
# log: each step's output also goes to $CRR_STEPS.logs/<id>.log (through tee, in the current
# shell, so a step may be a function that waits for its children), and a failed step's lines that
# say what failed (a scenario's FAILED line with its error, a test's panic, a compiler error) are
# appended to $CRR_STEPS.why, unless a step inside it already said why.

# step NAME COMMAND...
step() {
  local name="$1" started=$SECONDS status=0 depth="${CRR_STEP_DEPTH:-0}" id
  shift
  if [[ -z "${CRR_STEPS:-}" ]]; then
    "$@"
    return
  fi
  id="$BASHPID.$(date +%s%N)"
  printf 'begin\t%s\t%s\t%s\t%s\n' "$id" "$depth" "$(date +%s)" "$name" >>"$CRR_STEPS"
  echo "=== step: $name" >&2
  local log="$CRR_STEPS.logs/$id.log" why_before tee_pid
  mkdir -p "$CRR_STEPS.logs"
  why_before=$(step_why_lines)
  # The redirection is the group's, so tee is this shell's child and $! names it.
  { CRR_STEP_DEPTH=$((depth + 1)) "$@"; } > >(tee -a "$log") 2>&1 || status=$?
  tee_pid=$!
  if ((status != 0)); then
    # tee ends when the step's output closes; a daemon the step started may hold it open, so
    # the wait for the last lines is bounded.
    for _ in 1 2 3 4 5 6 7 8 9 10; do step_running "$tee_pid" || break; sleep 0.2; done
    if [[ $(step_why_lines) == "$why_before" ]]; then
      step_failure_lines "$log" | awk -v name="$name" '{ print name ": " $0 }' >>"$CRR_STEPS.why"
    fi
  fi
  printf 'end\t%s\t%s\t%s\n' "$id" "$((SECONDS - started))" "$status" >>"$CRR_STEPS"
  echo "=== step: $name: $((SECONDS - started)) s, $([[ $status == 0 ]] && echo ok || echo "exit $status")" >&2
  return "$status"
}

step_why_lines() { if [[ -f "$CRR_STEPS.why" ]]; then wc -l <"$CRR_STEPS.why"; else echo 0; fi; }

# step_running PID: whether PID runs (an ended child not yet waited for is a zombie: not running).
step_running() {
  local state
  state=$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null) && [[ -n $state && $state != Z ]]
}

# step_failure_lines LOG: the lines of LOG that say what failed, the first 12, each cut at 400
# characters: the suites' FAILED lines (tests/e2e), libtest's failed tests and panics, compiler
# and rustfmt errors, a failed background build.
step_failure_lines() {
  grep -E -e '^[[:alnum:]-]+: [[:alnum:]_-]+ (FAILED|FAIL \(not its known failure\)) \(' \
    -e ': FAILED: ' -e '^test .* \.\.\. FAILED$' -e 'panicked at' -e '^error(\[E[0-9]+\])?: ' \
    -e '^Diff in ' -e '^make test: the background step' -e '^Error: ' "$1" 2>/dev/null |
    head -n 12 | cut -c 1-400 || true
}

# steps_table: the steps in the order they began, nested steps indented under theirs; then, if
# any step failed, why.
steps_table() {
  [[ -n "${CRR_STEPS:-}" && -f "$CRR_STEPS" ]] || return 0
  local now
  now=$(date +%s)
  awk -F '\t' -v now="$now" '
    $1 == "begin" { order[++n] = $2; depth[$2] = $3; began[$2] = $4; name[$2] = $5 }
    $1 == "end" { seconds[$2] = $3; status[$2] = $4 }
    END {
      first = n ? began[order[1]] : now
      printf "%-44s %8s %8s  %s\n", "step", "start s", "seconds", "result"
      for (i = 1; i <= n; i++) {
        id = order[i]
        label = sprintf("%*s%s", 2 * depth[id], "", name[id])
        if (id in seconds) {
          result = status[id] == 0 ? "ok" : "FAILED (exit " status[id] ")"
          printf "%-44s %8d %8d  %s\n", label, began[id] - first, seconds[id], result
        } else {
          printf "%-44s %8d %8d  %s\n", label, began[id] - first, now - began[id], "unfinished"
        }
      }
      printf "%-44s %8s %8d\n", "total (wall clock)", "", now - first
    }' "$CRR_STEPS"
  if [[ -s "$CRR_STEPS.why" ]]; then
    echo "why (the lines of the failed steps' output that say what failed):"
    sed 's/^/  /' "$CRR_STEPS.why"
  fi
}
