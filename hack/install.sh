#!/usr/bin/env bash
# Builds crr's three binaries, turns them into images in the test bed's containerd, installs
# everything with `kubectl apply -k manifests/overlays/local-client-auth` (the local overlay, with the webhook requiring the API server's client certificate) and waits until the operator,
# the webhook and the node daemon are ready and the webhook has published its CA. Refuses, before
# building anything, while another admission webhook for ContainerRecreateRequests (OpenKruise's)
# is registered.
#   CRR_PROFILE=release hack/install.sh   (default: dev, the build the tests already made)
#   CRR_PROFILE=release CRR_FEATURES=crr-operator/mimalloc hack/install.sh   (cargo features; release only)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/versions.sh"
. "$here/cluster-env.sh"
. "$here/cargo-env.sh"
root="$here/.."
started=$(date +%s)
step() { echo "install: $* ($(( $(date +%s) - started ))s)" >&2; }

# Another admission webhook for ContainerRecreateRequests (OpenKruise's) would answer every
# request beside ours: refuse, naming it (the chart's templates/preflight.yaml does the same).
foreign_crr_webhooks() {
  local kind template
  # shellcheck disable=SC2016 # a Go template, not shell
  template='{{range .items}}{{$config := .metadata.name}}{{if ne $config "crr-webhook"}}{{range .webhooks}}{{$webhook := .name}}{{range .rules}}{{$rule := .}}{{range .apiGroups}}{{if eq . "apps.kruise.io"}}{{range $rule.resources}}{{if or (eq . "containerrecreaterequests") (eq . "*")}}{{$config}} (webhook {{$webhook}}){{"\n"}}{{end}}{{end}}{{end}}{{end}}{{end}}{{end}}{{end}}{{end}}'
  for kind in MutatingWebhookConfiguration ValidatingWebhookConfiguration; do
    kubectl get "$kind" -o go-template="$template" | sort -u | sed "s/^/$kind /"
  done
}
foreign=$(foreign_crr_webhooks)
if [[ -n $foreign ]]; then
  echo "install: refusing to install crr beside another ContainerRecreateRequest admission webhook:" >&2
  echo "$foreign" | sed 's/^/  /' >&2
  echo "install: is OpenKruise still installed? Remove it first (docs/migrating-from-openkruise.md)." >&2
  exit 1
fi

profile="${CRR_PROFILE:-dev}"
dir=debug; [[ $profile == dev ]] || dir="$profile"
bins=(crr-operator crr-webhook crr-node-daemon)
step "building ${bins[*]} ($profile)"
if [[ $profile == dev ]]; then
  # The same feature set as `cargo test --workspace`, so the test run's build is reused.
  (cd "$root" && cargo test -q --workspace --no-run)
else
  # CRR_FEATURES: cargo features of this build (benches compare them, e.g. crr-operator/mimalloc).
  (cd "$root" && cargo build -q --profile "$profile" ${CRR_FEATURES:+--features "$CRR_FEATURES"} \
    -p crr-operator -p crr-webhook -p crr-node-daemon)
fi
step "images"
"$here/images.sh" crr "${bins[@]/#/${CARGO_TARGET_DIR:-$root/target}/$dir/}"

# The local-client-auth overlay has the webhook require the API server's client certificate
# (hack/cluster.sh: webhook_client_pki); its CA goes in this ConfigMap.
step "the API server's webhook client CA"
kubectl create namespace crr-system --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl -n crr-system create configmap apiserver-webhook-client-ca \
  --from-file=ca.crt="$CLUSTER_DIR/pki/webhook-client-ca.crt" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
step "applying manifests/overlays/local-client-auth"
kubectl apply --server-side --force-conflicts -k "$root/manifests/overlays/local-client-auth" >/dev/null
# Left by releases before the TriggerRecord: the operator patches no workload any more.
kubectl delete validatingadmissionpolicybinding,validatingadmissionpolicy \
  crr-operator-trigger-annotations-only --ignore-not-found >/dev/null
# Same tag, new image: restart so the pods run what was just built.
kubectl -n crr-system rollout restart deployment/crr-operator deployment/crr-webhook daemonset/crr-node-daemon >/dev/null
for workload in deployment/crr-webhook deployment/crr-operator daemonset/crr-node-daemon; do
  kubectl -n crr-system rollout status "$workload" --timeout=180s >/dev/null ||
    { kubectl -n crr-system get pods -o wide >&2; kubectl -n crr-system logs "$workload" --tail=30 >&2 || true; exit 1; }
  step "$workload ready"
done

# Old pods keep answering until they are gone (the API server may hold connections to them).
old_pods_gone() {
  [[ -z "$(kubectl -n crr-system get pods -o 'jsonpath={range .items[?(@.metadata.deletionTimestamp)]}{.metadata.name}{" "}{end}')" ]]
}
deadline=$(( $(date +%s) + 90 ))
until old_pods_gone; do
  (( $(date +%s) < deadline )) || { echo "install: old crr pods still terminating after 90s" >&2; exit 1; }
  sleep 1
done
step "previous pods gone"

ca_published() {
  [[ -n "$(kubectl get mutatingwebhookconfiguration crr-webhook -o 'jsonpath={.webhooks[0].clientConfig.caBundle}')" ]] &&
  [[ -n "$(kubectl get validatingwebhookconfiguration crr-webhook -o 'jsonpath={.webhooks[0].clientConfig.caBundle}')" ]] &&
  [[ -n "$(kubectl get crd containerrecreaterequests.apps.kruise.io -o 'jsonpath={.spec.conversion.webhook.clientConfig.caBundle}')" ]]
}
deadline=$(( $(date +%s) + 60 ))
until ca_published; do
  (( $(date +%s) < deadline )) || { echo "install: the webhook did not publish its CA within 60s" >&2; exit 1; }
  sleep 1
done
step "webhook CA published; crr is installed"
