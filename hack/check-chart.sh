#!/usr/bin/env bash
# Checks manifests/helm/crr beyond its default rendering (hack/render-manifests.sh --check calls
# this; no cluster needed):
#   - `helm lint --strict` (NOTES.txt included) and `helm template` pass with the default values,
#     with every optional piece on (Prometheus-operator objects, a managed certificate Secret) and
#     with the minimal install (no node daemon, no tests), each rendering the objects it should;
#   - rendered with -n other-ns, nothing names another namespace and every object has the
#     standard labels (helm.sh/chart, app.kubernetes.io/part-of, instance, managed-by, version); no
#     Namespace unless createNamespace=true; imagePullSecrets, a digest, podLabels, podAnnotations
#     and topologySpreadConstraints render; an old namespace value naming another namespace fails;
#   - values.schema.json refuses bad values, each with a message naming the value: a negative
#     replica count, an unknown log format or pull policy, a mistyped key, ports and seconds out of
#     range, a Prometheus interval that is no duration, two monitors scraping the same pods.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/versions.sh"
chart="$here/../manifests/helm/crr"
"$here/build-helm.sh"
helm() { "$HELM_BIN/helm" "$@"; }
template() { helm template crr "$chart" --namespace crr-system --kube-version 1.35.0 "$@"; }
status=0
failed() { echo "check-chart: $*" >&2; status=1; }

all_on=(--set metrics.serviceMonitor.enabled=true --set metrics.serviceMonitor.labels.release=prometheus
        --set metrics.podMonitor.enabled=true --set metrics.prometheusRule.enabled=true
        --set webhook.certFiles.secretName=crr-webhook-tls --set nodeDaemon.priorityClassName=
        --set operator.replicas=3 --set nodeDaemon.criSocketGroup=1000 --set webhook.networkPolicy.enabled=true --set webhook.clientAuth.caConfigMap=apiserver-webhook-client-ca --set-json 'webhook.networkPolicy.from=[{"ipBlock":{"cidr":"10.0.0.0/24"}}]' --set-json 'operator.nodeSelector={"kubernetes.io/os":"linux"}')

# The minimal install: no node daemon (the webhook refuses requests), no tests, no namespace.
minimal=(--set featureGates.nodeDaemon=false --set tests.enabled=false --set createNamespace=false
         --set readinessGateInjection.enabled=false --set operator.replicas=1 --set webhook.replicas=1)

for values in default all-on minimal; do
  case $values in
    default) args=(); kinds=(Deployment DaemonSet PodDisruptionBudget Pod) ;;
    all-on) args=("${all_on[@]}"); kinds=(Deployment DaemonSet PodDisruptionBudget Pod ServiceMonitor PodMonitor Service NetworkPolicy ValidatingAdmissionPolicy)
            [[ -f $chart/templates/prometheusrule.yaml ]] && kinds+=(PrometheusRule) ;;
    minimal) args=("${minimal[@]}"); kinds=(Deployment Service) ;;
  esac
  helm lint --strict "$chart" --kube-version 1.35.0 "${args[@]}" >/dev/null 2>&1 ||
    { helm lint --strict "$chart" --kube-version 1.35.0 "${args[@]}" >&2 || true; failed "helm lint fails with the $values values"; }
  out="$(template "${args[@]}" 2>&1)" || { echo "$out" >&2; failed "helm template fails with the $values values"; continue; }
  for kind in "${kinds[@]}"; do
    grep -qx "kind: $kind" <<<"$out" || failed "the $values values render no $kind"
  done
  if [[ $values == minimal ]]; then
    for kind in DaemonSet PodDisruptionBudget Pod Namespace; do
      ! grep -qx "kind: $kind" <<<"$out" || failed "the minimal values render a $kind"
    done
  fi
done

# Helm's conventions, on every rendering: the namespace is the release's (`-n`), nothing names
# another; every object carries the standard labels; the chart creates no namespace unless told.
standard_labels=(helm.sh/chart app.kubernetes.io/part-of app.kubernetes.io/instance app.kubernetes.io/managed-by app.kubernetes.io/version)
# unlabelled RENDERING: the `kind: NAME` of each object whose metadata.labels lacks a standard label.
unlabelled() {
  awk -v wanted="${standard_labels[*]}" '
    function check() {
      if (kind == "") return
      n = split(wanted, keys, " ")
      for (i = 1; i <= n; i++) if (!(keys[i] in seen)) { print kind ": " keys[i]; }
    }
    /^---/ { check(); kind = ""; delete seen; inmeta = 0; inlabels = 0; next }
    /^kind: / { kind = $2 }
    /^metadata:/ { inmeta = 1; next }
    /^[^ #]/ { inmeta = 0; inlabels = 0 }
    inmeta && /^  labels:/ { inlabels = 1; next }
    inmeta && /^  [^ ]/ { inlabels = 0 }
    inlabels && /^    [^ ]/ { key = $1; sub(/:$/, "", key); seen[key] = 1 }
    END { check() }' <<<"$1"
}
for values in default all-on minimal; do
  case $values in
    default) args=() ;;
    all-on) args=("${all_on[@]}") ;;
    minimal) args=("${minimal[@]}") ;;
  esac
  out="$(helm template crr "$chart" --namespace other-ns --kube-version 1.35.0 "${args[@]}" 2>&1)" ||
    { echo "$out" >&2; failed "helm template -n other-ns fails with the $values values"; continue; }
  others="$(grep -nE '^ *namespace: [a-z0-9-]+$' <<<"$out" | grep -vE 'namespace: other-ns$' || true)"
  [[ -z $others ]] || { echo "$others" >&2; failed "with -n other-ns and the $values values, objects name another namespace"; }
  # The PrometheusRule's runbooks are monitoring/alerts.yaml's prose, which names the usual namespace.
  ! awk '/^---/ { if (doc !~ /\nkind: PrometheusRule\n/) printf "%s", doc; doc = "" } { doc = doc "\n" $0 }
         END { if (doc !~ /\nkind: PrometheusRule\n/) printf "%s", doc }' <<<"$out" | grep -q 'crr-system' ||
    failed "with -n other-ns and the $values values, crr-system is still named"
  missing="$(unlabelled "$out")"
  [[ -z $missing ]] || { echo "$missing" >&2; failed "objects without the standard labels ($values values)"; }
  ! grep -qx 'kind: Namespace' <<<"$out" || failed "the $values values render a Namespace (Helm creates it: --create-namespace)"
done
out="$(template --set createNamespace=true --show-only templates/namespace.yaml 2>&1)"
grep -q '^    helm.sh/resource-policy: keep$' <<<"$out" && grep -q '^    pod-security.kubernetes.io/enforce: privileged$' <<<"$out" ||
  { echo "$out" >&2; failed "createNamespace=true renders no kept, privileged Namespace"; }
# What users set on pods: pull secrets, a digest, labels, annotations, spread constraints.
out="$(template --set-json 'imagePullSecrets=[{"name":"regcred"}]' --set podLabels.team=infra \
  --set podAnnotations.note=x --set images.operator.digest=sha256:$(printf '0%.0s' {1..64}) \
  --set-json 'webhook.topologySpreadConstraints=[{"maxSkew":1,"topologyKey":"topology.kubernetes.io/zone","whenUnsatisfiable":"ScheduleAnyway"}]' 2>&1)"
for expected in '^      imagePullSecrets:$' '^      - name: regcred$' '^        team: infra$' '^        note: x$' \
    "image: crr-operator:0.1.0@sha256:$(printf '0%.0s' {1..64})$" '^      topologySpreadConstraints:$' \
    '^      priorityClassName: system-cluster-critical$'; do
  [[ $(grep -cE -- "$expected" <<<"$out") -ge 1 ]] || failed "pod values: nothing renders /$expected/"
done
[[ $(grep -c '^      - name: regcred$' <<<"$out") -ge 3 ]] || failed "imagePullSecrets is not on every crr pod"
# The old namespace value, when it names another namespace than the release's, is refused.
if out="$(template --set namespace=elsewhere 2>&1)"; then failed "namespace=elsewhere renders beside -n crr-system"
else grep -qF "differs from the release's namespace crr-system" <<<"$out" || { echo "$out" | head -3 >&2; failed "namespace=elsewhere fails without saying why"; }; fi

# Each bad value: the --set arguments, then a piece of the error message expected.
bad=(
  "operator.replicas=-1|/operator/replicas': minimum: got -1, want 1"
  "webhook.replicas=0|/webhook/replicas': minimum: got 0, want 1"
  "logFormat=xml|/logFormat': value must be one of 'json', 'text'"
  "images.pullPolicy=Sometimes|/images/pullPolicy': value must be one of"
  "operator.replicaz=2|/operator': additional properties 'replicaz' not allowed"
  "nodeDeamon.metricsPort=10221|additional properties 'nodeDeamon' not allowed"
  "operator.resources.limit.memory=1Gi|/operator/resources': additional properties 'limit' not allowed"
  "nodeDaemon.metricsPort=0|/nodeDaemon/metricsPort': minimum: got 0, want 1"
  "nodeDaemon.metricsPort=65536|/nodeDaemon/metricsPort': maximum"
  "webhook.timeoutSeconds=31|/webhook/timeoutSeconds': maximum: got 31, want 30"
  "webhook.timeoutSeconds=5|/webhook/timeoutSeconds': minimum: got 5, want 9"
  "webhook.networkPolicy.enabled=true|needs webhook.networkPolicy.from"
  "nodeDaemon.criSocketGroup=0|/nodeDaemon/criSocketGroup': minimum: got 0, want 1"
  "nodeDaemon.maxGracePeriodSeconds=0|/nodeDaemon/maxGracePeriodSeconds': minimum: got 0, want 1"
  "nodeDaemon.tolerations[0].operator=Maybe|/nodeDaemon/tolerations/0/operator': value must be one of"
  "metrics.serviceMonitor.interval=soon|/metrics/serviceMonitor/interval'"
  "namespace=Crr_System|/namespace'"
  "images.webhook.digest=latest|/images/webhook/digest'"
  "imagePullSecrets[0].nam=regcred|/imagePullSecrets/0'"
  "tests.timeoutSeconds=2|/tests/timeoutSeconds': minimum: got 2, want 10"
  "metrics.serviceMonitor.enabled=true,metrics.podMonitor.enabled=true,metrics.podMonitor.allComponents=true|both scrape the operator and the webhook"
)
for case in "${bad[@]}"; do
  set_args="${case%%|*}" expected="${case#*|}"
  if out="$(template --set "$set_args" 2>&1)"; then
    failed "--set $set_args renders; the chart should refuse it"
  elif ! grep -qF -- "$expected" <<<"$out"; then
    echo "$out" | head -5 >&2
    failed "--set $set_args fails without saying: $expected"
  fi
done
(( status == 0 )) && echo "check-chart: default, all-on and minimal values lint and render (in -n other-ns too, standard labels on every object), pod values render, ${#bad[@]} bad values refused" >&2
exit $status
