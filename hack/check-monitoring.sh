#!/usr/bin/env bash
# Static checks of crr's monitoring (`make monitoring-check`, part of `make test`). No
# cluster needed: promtool (Debian's prometheus package, hack/install-deps.sh) and the chart.
#   1. promtool check rules monitoring/alerts.yaml
#   2. promtool test rules monitoring/alerts_test.yaml (every alert fires and stays quiet)
#   3. promtool check config on monitoring/prometheus.yml rendered as hack/prometheus.sh does,
#      with stand-in certificate files
#   4. the chart's files/alerts.yaml is byte-identical to monitoring/alerts.yaml
#   5. helm template with metrics.prometheusRule.enabled=true renders one PrometheusRule whose
#      spec is alerts.yaml (promtool checks it again), with metrics.prometheusRule.labels on it;
#      with the default values it renders none; helm lint --strict with it enabled
#   5b. the chart's files/dashboard.json is byte-identical to monitoring/dashboard.json, and
#      metrics.grafanaDashboard.enabled=true renders it in a ConfigMap labelled grafana_dashboard
#   6. monitoring/dashboard.json is JSON and every metric named by alerts.yaml and by the
#      dashboard's queries is a family of docs/metrics.md (CRR_METRICS_DOC overrides the path);
#      `up` is Prometheus's own
#   7. monitoring/restarts.yaml (planned restarts told from crashes): promtool check and test
#      rules (monitoring/restarts_test.yaml), and the crr metrics it reads are in the catalog
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
. "$here/versions.sh"
mon="$root/monitoring"
chart="$root/manifests/helm/crr"
metrics_doc="${CRR_METRICS_DOC:-$root/docs/metrics.md}"

# promql_metrics: PromQL on stdin (one or more expressions) -> the metric names it selects.
promql_metrics() {
  sed -E \
    -e 's/"(\\.|[^"\\])*"//g' \
    -e 's/\{[^}]*\}//g' \
    -e 's/\[[^]]*\]//g' \
    -e 's/\$\{?[A-Za-z_][A-Za-z0-9_:]*\}?//g' \
    -e 's/\b(by|without|on|ignoring|group_left|group_right)[[:space:]]*\([^)]*\)//g' \
    -e 's/label_values\(([^,)]*)(,[^)]*)?\)/\1/g' \
    -e 's/(^|[^A-Za-z0-9_:.])[0-9][0-9.]*([eE][-+]?[0-9]+)?[smhdwy]?/\1/g' |
    grep -oE '[A-Za-z_:][A-Za-z0-9_:]*[[:space:]]*\(?' |
    grep -vE '\($' |
    sed -E 's/[[:space:]]+$//' |
    grep -vxE 'and|or|unless|bool|offset|by|without|on|ignoring|group_left|group_right|inf|nan|Inf|NaN' |
    sort -u || true
}
# The expr of every rule of a rules file (one-line or block scalar), one after another.
rule_exprs() {
  awk '
    in_block { if (match($0, /^ */) && RLENGTH > indent && $0 !~ /^ *$/) { print; next } else in_block = 0 }
    /^ *expr: *[|>][-+]? *$/ { match($0, /^ */); indent = RLENGTH; in_block = 1; next }
    /^ *expr: / { sub(/^ *expr: */, ""); print }
  ' "$1"
}
# Every query of a Grafana dashboard (JSON strings): the targets' expr, and the template
# variables' query and definition when they call a function (label_values(...), not the
# datasource variable's "prometheus").
dashboard_exprs() {
  grep -oE '"(expr|query|definition)": *"(\\.|[^"\\])*"' "$1" |
    grep -E '^"expr"|\(' |
    sed -E -e 's/^"(expr|query|definition)": *"//' -e 's/"$//' -e 's/\\"/"/g' -e 's/\\n/ /g' -e 's/\\\\/\\/g'
}

# `--used-metrics`: only print the metric names the alerts and the dashboard select, one a line
# (the e2e run checks each has a series in the test bed's Prometheus: hack/cluster-test.sh).
if [[ "${1:-}" == --used-metrics ]]; then
  { rule_exprs "$mon/alerts.yaml"; dashboard_exprs "$mon/dashboard.json"; } | promql_metrics | grep -vxF up || true
  exit 0
fi

command -v promtool >/dev/null || { echo "check-monitoring: promtool not found: run hack/install-deps.sh (Debian's prometheus)" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "check-monitoring: FAIL: $*" >&2; failures=$(( failures + 1 )); }
ok() { echo "check-monitoring: ok: $*"; }

# 1, 2: the rules and their unit tests.
if promtool check rules "$mon/alerts.yaml" >"$tmp/out" 2>&1; then ok "promtool check rules monitoring/alerts.yaml"
else cat "$tmp/out" >&2; fail "promtool check rules monitoring/alerts.yaml"; fi
if promtool test rules "$mon/alerts_test.yaml" >"$tmp/out" 2>&1; then ok "promtool test rules monitoring/alerts_test.yaml"
else cat "$tmp/out" >&2; fail "promtool test rules monitoring/alerts_test.yaml"; fi
# Every alert of alerts.yaml has a test (promtool does not say when one has none).
alerts="$(sed -n 's/^ *- alert: *\([A-Za-z0-9_]*\).*/\1/p' "$mon/alerts.yaml" | sort -u)"
for alert in $alerts; do
  grep -q "alertname: $alert\$" "$mon/alerts_test.yaml" || fail "alert $alert has no test in monitoring/alerts_test.yaml"
done

# 3: the scrape configuration, with stand-ins for the test bed's files.
mkdir -p "$tmp/pki"
touch "$tmp/pki/ca.crt" "$tmp/pki/admin.crt" "$tmp/pki/admin.key"
( . "$here/prometheus.sh"; render_config --pki "$tmp/pki" --targets "$tmp/targets" ) > "$tmp/prometheus.yml"
if grep -n '@[A-Z_]*@' "$tmp/prometheus.yml" >&2; then fail "monitoring/prometheus.yml: placeholders left after rendering"; fi
if promtool check config "$tmp/prometheus.yml" >"$tmp/out" 2>&1; then ok "promtool check config monitoring/prometheus.yml (rendered)"
else cat "$tmp/out" >&2; fail "promtool check config monitoring/prometheus.yml (rendered)"; fi
for job in crr-webhook crr-operator crr-node-daemon; do
  grep -q "^- job_name: $job\$" "$mon/prometheus.yml" || fail "monitoring/prometheus.yml has no job $job"
done

# 4: the chart's copy of the rules.
if cmp -s "$mon/alerts.yaml" "$chart/files/alerts.yaml"; then ok "manifests/helm/crr/files/alerts.yaml = monitoring/alerts.yaml"
else fail "manifests/helm/crr/files/alerts.yaml differs from monitoring/alerts.yaml: cp monitoring/alerts.yaml manifests/helm/crr/files/alerts.yaml"; fi

# 5: the PrometheusRule of the chart.
"$here/build-helm.sh" >/dev/null
helm_template() { "$HELM_BIN/helm" template crr "$chart" --namespace crr-system --kube-version 1.35.0 "$@"; }
if [[ ! -f "$chart/templates/prometheusrule.yaml" ]]; then
  fail "manifests/helm/crr/templates/prometheusrule.yaml is missing"
elif ! helm_template --show-only templates/prometheusrule.yaml --set metrics.prometheusRule.enabled=true \
    --set metrics.prometheusRule.labels.release=check-monitoring >"$tmp/rule.yaml" 2>"$tmp/out"; then
  cat "$tmp/out" >&2; fail "helm template with metrics.prometheusRule.enabled=true"
else
  problems=()
  [[ $(grep -c '^kind: PrometheusRule$' "$tmp/rule.yaml") == 1 ]] || problems+=("not one kind: PrometheusRule")
  grep -q '^apiVersion: monitoring.coreos.com/v1$' "$tmp/rule.yaml" || problems+=("apiVersion is not monitoring.coreos.com/v1")
  grep -q '^  namespace: crr-system$' "$tmp/rule.yaml" || problems+=("not in the release's namespace")
  grep -q '^    release: check-monitoring$' "$tmp/rule.yaml" || problems+=("metrics.prometheusRule.labels not on it")
  # spec: alerts.yaml indented by two (blank lines may carry the indentation).
  sed -n '/^spec:$/,$p' "$tmp/rule.yaml" | tail -n +2 | sed -e 's/^  //' -e 's/^ *$//' > "$tmp/spec.yaml"
  sed -e 's/^ *$//' "$mon/alerts.yaml" | diff -u - "$tmp/spec.yaml" >"$tmp/out" 2>&1 ||
    { cat "$tmp/out" >&2; problems+=("its spec is not monitoring/alerts.yaml"); }
  promtool check rules "$tmp/spec.yaml" >"$tmp/out" 2>&1 || { cat "$tmp/out" >&2; problems+=("promtool check rules of its spec"); }
  "$HELM_BIN/helm" lint --strict "$chart" --set metrics.prometheusRule.enabled=true >"$tmp/out" 2>&1 ||
    { cat "$tmp/out" >&2; problems+=("helm lint --strict with it enabled"); }
  if (( ${#problems[@]} )); then
    cat "$tmp/rule.yaml" >&2
    for p in "${problems[@]}"; do fail "chart PrometheusRule: $p"; done
  else
    ok "helm template renders the PrometheusRule (metrics.prometheusRule.enabled=true, labels)"
  fi
fi
# 5b: the chart's copy of the dashboard, as a ConfigMap for Grafana's sidecar.
if cmp -s "$mon/dashboard.json" "$chart/files/dashboard.json"; then ok "manifests/helm/crr/files/dashboard.json = monitoring/dashboard.json"
else fail "manifests/helm/crr/files/dashboard.json differs from monitoring/dashboard.json: cp monitoring/dashboard.json manifests/helm/crr/files/dashboard.json"; fi
if helm_template --show-only templates/grafana-dashboard.yaml --set metrics.grafanaDashboard.enabled=true \
    >"$tmp/dashboard.yaml" 2>"$tmp/out"; then
  # data.crr.json: the dashboard indented by four.
  sed -n '/^  crr.json: |-$/,$p' "$tmp/dashboard.yaml" | tail -n +2 | sed -e 's/^    //' > "$tmp/dashboard.json"
  if grep -q '^    grafana_dashboard: "1"$' "$tmp/dashboard.yaml" && diff -q <(sed -e '$a\' "$mon/dashboard.json") "$tmp/dashboard.json" >/dev/null; then
    ok "helm template renders the dashboard ConfigMap (metrics.grafanaDashboard.enabled=true, grafana_dashboard: \"1\")"
  else
    diff <(sed -e '$a\' "$mon/dashboard.json") "$tmp/dashboard.json" | head -5 >&2 || true
    fail "chart dashboard ConfigMap: not labelled grafana_dashboard: \"1\", or its crr.json is not monitoring/dashboard.json"
  fi
else
  cat "$tmp/out" >&2; fail "helm template with metrics.grafanaDashboard.enabled=true"
fi
if helm_template >"$tmp/default.yaml" 2>"$tmp/out"; then
  if grep -q '^kind: PrometheusRule$' "$tmp/default.yaml"; then fail "the chart renders a PrometheusRule with its default values"
  else ok "no PrometheusRule with the default values"; fi
  if grep -q '^  name: crr-grafana-dashboard$' "$tmp/default.yaml"; then fail "the chart renders the dashboard ConfigMap with its default values"
  else ok "no dashboard ConfigMap with the default values"; fi
else
  cat "$tmp/out" >&2; fail "helm template with the default values"
fi

# 6: the metric names the rules and the dashboard use.
# JSON syntax: with jq or python3, whichever the machine has (neither is a dependency).
if command -v jq >/dev/null; then json_ok() { jq empty "$1"; }
elif command -v python3 >/dev/null; then json_ok() { python3 -m json.tool "$1" >/dev/null; }
else json_ok() { echo "check-monitoring: no jq or python3: dashboard.json's syntax not checked" >&2; }; fi
if json_ok "$mon/dashboard.json" 2>"$tmp/out"; then ok "monitoring/dashboard.json is JSON"
else cat "$tmp/out" >&2; fail "monitoring/dashboard.json is not JSON"; fi
rule_exprs "$mon/alerts.yaml" | promql_metrics | sed 's/^/alerts.yaml /' > "$tmp/used"
dashboard_exprs "$mon/dashboard.json" | promql_metrics | sed 's/^/dashboard.json /' >> "$tmp/used"
[[ -s "$tmp/used" ]] || fail "no metric found in alerts.yaml and dashboard.json (the extraction is broken)"
if [[ ! -f "$metrics_doc" ]]; then
  fail "${metrics_doc#"$root/"} does not exist: it is the catalog of crr's metrics, the metrics of alerts.yaml and dashboard.json are checked against it"
else
  # The families: backticked names in the first column of its tables; a histogram's row (one
  # that says histogram) also allows the _bucket, _sum and _count series.
  "$here/prometheus-query.sh" families --series "$metrics_doc" | sort -u > "$tmp/catalog"
  echo up >> "$tmp/catalog"
  [[ $(wc -l < "$tmp/catalog") -gt 1 ]] || fail "${metrics_doc#"$root/"}: no metric family found in its tables' first column"
  unknown=0
  while read -r file metric; do
    grep -qxF "$metric" "$tmp/catalog" || { fail "$file uses $metric, which ${metrics_doc#"$root/"} does not list"; unknown=$(( unknown + 1 )); }
  done < "$tmp/used"
  (( unknown )) || ok "the $(cut -d' ' -f2 "$tmp/used" | sort -u | wc -l) metrics of alerts.yaml and dashboard.json are in ${metrics_doc#"$root/"}"
fi

# 7: planned restarts told from crashes (monitoring/restarts.yaml: rules for clusters with
# kube-state-metrics, not in the chart's PrometheusRule). Its unit tests; every alert tested; the
# crr metrics it reads are in the catalog (kube-state-metrics' own and the rules' records aside).
if promtool check rules "$mon/restarts.yaml" >"$tmp/out" 2>&1; then ok "promtool check rules monitoring/restarts.yaml"
else cat "$tmp/out" >&2; fail "promtool check rules monitoring/restarts.yaml"; fi
if promtool test rules "$mon/restarts_test.yaml" >"$tmp/out" 2>&1; then ok "promtool test rules monitoring/restarts_test.yaml"
else cat "$tmp/out" >&2; fail "promtool test rules monitoring/restarts_test.yaml"; fi
for alert in $(sed -n 's/^ *- alert: *\([A-Za-z0-9_]*\).*/\1/p' "$mon/restarts.yaml" | sort -u); do
  grep -q "alertname: $alert\$" "$mon/restarts_test.yaml" || fail "alert $alert has no test in monitoring/restarts_test.yaml"
done
restart_metrics="$(rule_exprs "$mon/restarts.yaml" | promql_metrics | grep -vE '^kube_|:' || true)"
[[ -n "$restart_metrics" ]] || fail "no crr metric found in monitoring/restarts.yaml (the extraction is broken)"
if [[ -f "$tmp/catalog" ]]; then
  for metric in $restart_metrics; do
    grep -qxF "$metric" "$tmp/catalog" || fail "monitoring/restarts.yaml uses $metric, which ${metrics_doc#"$root/"} does not list"
  done
fi

if (( failures )); then
  echo "check-monitoring: $failures check(s) failed" >&2
  exit 1
fi
echo "check-monitoring: all checks passed"
