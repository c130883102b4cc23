# The step timer of `make test` (hack/test.sh), sourced by the scripts whose steps it times
# (hack/test.sh, hack/cluster-test.sh). Every step is one line of the table `make test` prints
# last: its name, its wall-clock seconds and how it ended.
#
#   step NAME COMMAND...     runs COMMAND, records NAME with its seconds and exit status, and
#                            returns that status (set -e then stops the script as before)
#   steps_table              prints the table of every step recorded so far
#
# The record is the file $CRR_STEPS (hack/test.sh sets it and exports it, so a script it runs
# records its own steps there too, one level deeper); without it `step` only runs the command.
# A step's line is written when it begins and again when it ends, so a step cut short (CI's
# time limit, a signal) shows as unfinished with the seconds it had run. Lines are appended
# with one write each, so steps that run at the same time (the background builds) do not mix.
# Steps run in the background are named with a leading `&`.

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
  CRR_STEP_DEPTH=$((depth + 1)) "$@" || status=$?
  printf 'end\t%s\t%s\t%s\n' "$id" "$((SECONDS - started))" "$status" >>"$CRR_STEPS"
  echo "=== step: $name: $((SECONDS - started)) s, $([[ $status == 0 ]] && echo ok || echo "exit $status")" >&2
  return "$status"
}

# steps_table: the steps in the order they began, nested steps indented under theirs.
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
}
