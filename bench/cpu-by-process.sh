#!/usr/bin/env bash
# CPU-seconds each program takes on this machine while a command runs: utime+stime of every
# process, summed by command name, sampled once a second (a process that ends between two
# samples loses its last second). Prints the table after the command, and the machine's total.
#   bench/cpu-by-process.sh cargo test -p crr-e2e --test chaos -- --include-ignored fat-tenant
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 COMMAND [ARGS...]" >&2; exit 2; }
samples="$(mktemp)"
trap 'rm -f "$samples"' EXIT
ticks="$(getconf CLK_TCK)"
(
  while :; do
    now="$(date +%s)"
    for stat in /proc/[0-9]*/stat; do
      read -r line < "$stat" 2>/dev/null || continue
      comm="${line#*(}"; comm="${comm%%)*}"; rest="${line##*) }"
      # Fields 14 and 15 of stat (utime, stime) are the 12th and 13th after the name.
      set -- $rest
      echo "$now ${comm// /_} $(( ${12} + ${13} ))"
    done | awk '{ticks[$1" "$2] += $3} END {for (key in ticks) print key, ticks[key]}'
    sleep 1
  done
) > "$samples" &
sampler=$!
start="$(date +%s)"
status=0
"$@" || status=$?
kill "$sampler" 2>/dev/null || true
wait "$sampler" 2>/dev/null || true
elapsed=$(( $(date +%s) - start ))
awk -v ticks="$ticks" -v elapsed="$elapsed" '
  { if (($2, $1) in seen) next; seen[$2, $1] = 1
    if ($2 in last && $3 > last[$2]) used[$2] += $3 - last[$2]
    last[$2] = $3 }
  END {
    for (name in used) total += used[name]
    printf "cpu-by-process: %d s, %.1f CPU-seconds in all (%.2f cores)\n", elapsed, total / ticks, total / ticks / (elapsed ? elapsed : 1)
    for (name in used) printf "%10.1f  %s\n", used[name] / ticks, name | "sort -rn | head -15"
  }' <(sort -k1,1n "$samples")
exit "$status"
