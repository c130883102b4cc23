#!/usr/bin/env bash
# Questions to the test bed's Prometheus (hack/prometheus.sh) over its HTTP API, with promtool
# (no curl or jq assumed). For the metrics suite: after the suite, every metric family that
# docs/metrics.md lists must have a series.
#
#   hack/prometheus-query.sh missing [FAMILY...]   prints the families with no series in the last two hours, one a
#                                                  line; exit 1 if any (default: every family of
#                                                  docs/metrics.md)
#   hack/prometheus-query.sh counts [FAMILY...]    prints "FAMILY SERIES" for each
#   hack/prometheus-query.sh value EXPR            prints the value of a PromQL expression that
#                                                  gives one sample (e.g. sum(...)); exit 1 if none
#   hack/prometheus-query.sh families [--series] [DOC]   the families of docs/metrics.md (first
#                                                  column of its tables, in backticks); --series adds
#                                                  a histogram's _bucket, _sum and _count
#
# A family is a metric name as exposed and listed: counters with _total; a histogram family F has
# series F_bucket, F_sum and F_count, which count as its own. Prometheus's URL: $CRR_PROMETHEUS_URL,
# else `hack/prometheus.sh url`.
#
# Not run by `make test` yet and not tried against the test bed by its author: the test lead wires
# it into the e2e run (hack/prometheus.sh up before the suite; `missing` after it). Note the series
# of a family only appear once it has a sample: label sets a component never touched (a CRI method
# never called, an outcome never reached) are absent until the suite makes them happen.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
url="${CRR_PROMETHEUS_URL:-}"

die() { echo "prometheus-query: $*" >&2; exit 1; }

families() {
  local series=0 doc="$root/docs/metrics.md"
  [[ "${1:-}" == --series ]] && { series=1; shift; }
  [[ -n "${1:-}" ]] && doc="$1"
  [[ -f "$doc" ]] || die "$doc does not exist (the catalog of crr's metrics)"
  awk -F'|' -v series="$series" '/^ *\|/ && NF > 2 {
      row = tolower($0); first = $2
      while (match(first, /`[^`]*`/)) {
        name = substr(first, RSTART + 1, RLENGTH - 2); first = substr(first, RSTART + RLENGTH)
        sub(/[{(].*/, "", name)
        if (name !~ /^[a-zA-Z_:][a-zA-Z0-9_:]*$/) continue
        print name
        if (series && row ~ /histogram/) { print name "_bucket"; print name "_sum"; print name "_count" }
      }
    }' "$doc" | awk '!seen[$0]++'
}

# value EXPR: the value of the single sample EXPR evaluates to (promtool's "{...} => V @[T]").
value() {
  local out
  out="$(promtool query instant "$url" "$1")" || die "query failed: $1 ($url)"
  [[ -n "$out" ]] || return 1
  [[ $(wc -l <<<"$out") == 1 ]] || die "more than one sample for $1: $out"
  sed -E 's/.* => ([^ ]+) @\[.*/\1/' <<<"$out"
}

# series_count FAMILY: how many series the family has had in the last two hours (0 when none): a
# series counts even if its pod is gone since (a webhook replaced in the middle of the suite takes
# its counters with it, and its series go stale).
series_count() {
  local n
  n="$(value "count(last_over_time({__name__=~\"$1|$1_bucket|$1_sum|$1_count\"}[2h]))")" || n=0
  echo "$n"
}

cmd="${1:-}"; shift || true
[[ -n "$url" || $cmd == families ]] || url="$("$here/prometheus.sh" url)"
case "$cmd" in
  families) families "$@" ;;
  value) [[ $# == 1 ]] || die "usage: $0 value EXPR"; value "$1" ;;
  counts|missing)
    (( $# )) || set -- $(families)
    (( $# )) || die "no family to look for"
    missing=0
    for family in "$@"; do
      n="$(series_count "$family")"
      if [[ $cmd == counts ]]; then echo "$family $n"
      elif [[ $n == 0 ]]; then echo "$family"; missing=$(( missing + 1 )); fi
    done
    [[ $cmd == counts ]] || (( missing == 0 )) || { echo "prometheus-query: $missing famil$( (( missing == 1 )) && echo y || echo ies) without a series in $url" >&2; exit 1; }
    ;;
  *) echo "usage: $0 missing|counts [FAMILY...] | value EXPR | families [--series] [DOC]" >&2; exit 2 ;;
esac
