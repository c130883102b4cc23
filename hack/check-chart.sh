#!/usr/bin/env bash
# Checks manifests/helm/crr beyond its default rendering (hack/render-manifests.sh --check calls
# this; no cluster needed):
#   - `helm lint --strict` (NOTES.txt included) and `helm template` pass with the default values,
#     with every optional piece on (Prometheus-operator objects, a managed certificate Secret) and
#     with the minimal install (no node daemon, no tests), each rendering the objects it should;
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
(( status == 0 )) && echo "check-chart: default, all-on and minimal values lint and render, ${#bad[@]} bad values refused" >&2
exit $status
