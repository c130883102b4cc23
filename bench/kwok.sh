# Sourced by the benches that run pods on simulated nodes (bench/scale.sh, bench/triggers.sh):
# builds the pinned kwok (hack/build-kwok.sh) and starts it against the test bed's API server.
# kwok plays the kubelet of the nodes annotated kwok.x-k8s.io/node=fake (the benches create them):
# leases, node status, pod phases. Its own server listens on loopback only; the nodes' address is
# a loopback one and their pods' addresses are never routed.
#   kwok_start    starts it in the background (log: $CLUSTER_DIR/logs/kwok.log)
#   kwok_stop     removes the kwok nodes and stops it
# The caller has sourced hack/versions.sh and hack/cluster-env.sh and defines log().
kwok_pid=""
kwok_start() {
  "$root/hack/build-kwok.sh"
  local kwok_log="$CLUSTER_DIR/logs/kwok.log"
  log "starting kwok $KWOK_VERSION (log: $kwok_log)"
  "$KWOK_BIN/kwok" --kubeconfig "$KUBECONFIG_ADMIN" \
    --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
    --cidr=10.250.0.1/16 --node-ip=127.0.0.2 --server-address=127.0.0.1:10247 \
    --node-lease-duration-seconds=40 -v=WARN -c "$root/bench/kwok-stages.yaml" >"$kwok_log" 2>&1 &
  kwok_pid=$!
  sleep 2
  kill -0 "$kwok_pid" 2>/dev/null || { tail -20 "$kwok_log" >&2; log "kwok did not start"; exit 1; }
}
kwok_stop() {
  kubectl delete nodes -l type=kwok --wait=false >/dev/null 2>&1 || true
  if [[ -n "$kwok_pid" ]]; then kill "$kwok_pid" 2>/dev/null || true; wait "$kwok_pid" 2>/dev/null || true; fi
  kwok_pid=""
}
