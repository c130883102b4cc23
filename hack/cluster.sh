#!/usr/bin/env bash
# The project's local Kubernetes test bed: upstream etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubelet and kube-proxy (built by
# hack/build-kube.sh), Debian's containerd and runc, one node, all inside the
# network namespace crr-node. See hack/README.md for the design and its why.
#
#   hack/cluster.sh up       build what is missing, start everything, wait for a Ready node
#   hack/cluster.sh down     stop everything and remove every trace (mounts, netns, cgroups)
#   hack/cluster.sh status   what runs, and the node
#   hack/cluster.sh restart NAME   stop one daemon and start it again, the rest left running
#   hack/cluster.sh stop NAME | start NAME   the two halves of restart (a fault held open)
#   hack/cluster.sh env      prints `export KUBECONFIG=...` for eval
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/versions.sh"
. "$here/cluster-env.sh"

PKI="$CLUSTER_DIR/pki"
LOGS="$CLUSTER_DIR/logs"
PIDS="$CLUSTER_DIR/pids"
CNI_CONF_DIR="$CLUSTER_DIR/cni/net.d"
CNI_BIN_DIR=/usr/lib/cni
# Order matters: `down` stops them in reverse.
DAEMONS=(etcd containerd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy)

log() { echo "cluster: $*" >&2; }
die() { log "error: $*"; exit 1; }
kubectl() { "$KUBE_BIN/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" "$@"; }
in_netns() { nsenter --net="/run/netns/$CLUSTER_NETNS" -- "$@"; }

# ---------------------------------------------------------------- checks

preflight() {
  [[ $(id -u) == 0 ]] || die "the test bed needs root (network namespace, mounts, cgroups)"
  local cmd
  for cmd in containerd containerd-shim-runc-v2 runc ctr ip nsenter iptables openssl conntrack; do
    command -v "$cmd" >/dev/null || die "$cmd not found: run hack/install-deps.sh"
  done
  [[ -x "$CNI_BIN_DIR/bridge" ]] || die "CNI plugins missing in $CNI_BIN_DIR: run hack/install-deps.sh"
  [[ -d /sys/fs/cgroup/memory || -f /sys/fs/cgroup/cgroup.controllers ]] || die "no memory cgroup controller"
}

# ---------------------------------------------------------------- network

network_up() {
  if ! ip netns list | grep -qw "$CLUSTER_NETNS"; then
    ip netns add "$CLUSTER_NETNS"
  fi
  if ! ip link show crr-host >/dev/null 2>&1; then
    ip link add crr-host type veth peer name crr-eth0
    ip link set crr-eth0 netns "$CLUSTER_NETNS"
    ip addr add "$HOST_IP/24" dev crr-host
    ip link set crr-host up
    in_netns ip addr add "$NODE_IP/24" dev crr-eth0
    in_netns ip link set crr-eth0 up
  fi
  in_netns ip link set lo up
  # Host-network pods (the node daemon) reach Services from the node's own stack, which routes
  # before kube-proxy's OUTPUT rules rewrite the address: give the Service range a route, onto
  # loopback, so nothing unanswered ever leaves the namespace.
  in_netns ip route replace "$SERVICE_CIDR" dev lo
  # No default route on purpose: pods reach the node, the root namespace's
  # end of the veth, and nothing else. Forwarding only inside the namespace.
  in_netns sysctl -qw net.ipv4.ip_forward=1
  in_netns sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null || true
}

network_down() {
  ip link del crr-host 2>/dev/null || true
  ip netns del "$CLUSTER_NETNS" 2>/dev/null || true
}

# ---------------------------------------------------------------- certificates

# cert NAME CN [O] [SAN]: a key and a certificate signed by the cluster CA.
cert() {
  local name="$1" cn="$2" org="${3:-}" san="${4:-}" subj="/CN=$2" ext
  [[ -f "$PKI/$name.crt" ]] && return
  [[ -n "$org" ]] && subj="/O=$org/CN=$cn"
  ext="$PKI/$name.ext"
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    if [[ -n "$san" ]]; then
      echo "extendedKeyUsage=serverAuth,clientAuth"
      echo "subjectAltName=$san"
    else
      echo "extendedKeyUsage=clientAuth"
    fi
  } > "$ext"
  openssl req -new -newkey rsa:2048 -nodes -keyout "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
    -days 365 -extfile "$ext" -out "$PKI/$name.crt" 2>/dev/null
  rm -f "$PKI/$name.csr" "$ext"
}

kubeconfig() {
  local name="$1" user="$2"
  cat > "$CLUSTER_DIR/$name.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: crr
  cluster:
    server: $APISERVER
    certificate-authority: $PKI/ca.crt
users:
- name: $user
  user:
    client-certificate: $PKI/$user.crt
    client-key: $PKI/$user.key
contexts:
- name: crr
  context: {cluster: crr, user: $user}
current-context: crr
EOF
}

pki() {
  mkdir -p "$PKI"
  if [[ ! -f "$PKI/ca.crt" ]]; then
    openssl req -x509 -new -newkey rsa:2048 -nodes -keyout "$PKI/ca.key" -subj "/CN=crr-test-bed-ca" \
      -days 3650 -out "$PKI/ca.crt" 2>/dev/null
  fi
  [[ -f "$PKI/sa.key" ]] || { openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null; openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null; }
  local svc_ip=10.0.0.1
  cert apiserver kube-apiserver "" \
    "IP:$NODE_IP,IP:$svc_ip,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost"
  cert kubelet-serving "system:node:$CLUSTER_NODE" system:nodes "IP:$NODE_IP,DNS:$CLUSTER_NODE"
  cert admin admin system:masters
  cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
  cert controller-manager system:kube-controller-manager
  cert scheduler system:kube-scheduler
  cert kubelet "system:node:$CLUSTER_NODE" system:nodes
  cert kube-proxy system:kube-proxy
  kubeconfig admin admin
  kubeconfig controller-manager controller-manager
  kubeconfig scheduler scheduler
  kubeconfig kubelet kubelet
  kubeconfig kube-proxy kube-proxy
}

# ---------------------------------------------------------------- config files

configs() {
  mkdir -p "$CNI_CONF_DIR" "$CLUSTER_DIR/containerd" "$CLUSTER_DIR/kubelet"
  cat > "$CNI_CONF_DIR/10-crr.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "crr",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$CLUSTER_DIR/cni/ipam",
              "ranges": [[{"subnet": "$POD_SUBNET"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  cat > "$CLUSTER_DIR/containerd/config.toml" <<EOF
version = 2
root = "$CLUSTER_DIR/containerd/root"
state = "$CLUSTER_DIR/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "$CONTAINERD_SOCK"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "crr.local/pause:3.10"
  stream_server_address = "127.0.0.1"
  enable_selinux = false
  # Sandboxes like ours may lack CAP_SYS_RESOURCE, so lowering a process's
  # oom_score_adj below our own (-998 for sandboxes, -997 for Guaranteed pods)
  # is refused and runc fails; clamp instead, as rootless setups do.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN_DIR"
    conf_dir = "$CNI_CONF_DIR"
EOF
  cat > "$CLUSTER_DIR/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $PKI/kubelet-serving.crt
tlsPrivateKeyFile: $PKI/kubelet-serving.key
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
cgroupDriver: cgroupfs
failSwapOn: false
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
serializeImagePulls: false
# The bench holds 100 idle pods, or a burst's pods while the previous ones terminate, beside
# crr's own: more than the default 110. The pod range (10.244.0.0/24) has 253 addresses.
maxPods: 250
# A development machine's disk is often fuller than a cluster node's:
# never evict or taint the node for it.
evictionHard: {memory.available: "100Mi", nodefs.available: "0%", imagefs.available: "0%", nodefs.inodesFree: "0%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
nodeStatusUpdateFrequency: 4s
syncFrequency: 10s
fileCheckFrequency: 10s
EOF
  cat > "$CLUSTER_DIR/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $CLUSTER_DIR/kube-proxy.kubeconfig}
hostnameOverride: $CLUSTER_NODE
bindAddress: $NODE_IP
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
mode: iptables
clusterCIDR: 10.244.0.0/16
iptables: {masqueradeAll: true}
# Leave the conntrack sysctls alone: they are not this namespace's to change.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
}

# ---------------------------------------------------------------- processes

# daemon_running NAME: the pid in NAME's pidfile is a live process running NAME. `kill -0` alone
# is not enough: it succeeds on a zombie (the daemons are reparented to a PID 1 that may not
# reap them) and on a pid the kernel has since given to another program.
daemon_running() {
  local name="$1" pid state exe
  pid="$(cat "$PIDS/$name.pid" 2>/dev/null)" || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  state="$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" || return 1
  [[ -n "$state" && "$state" != Z && "$state" != X ]] || return 1
  exe="$(tr '\0' '\n' < "/proc/$pid/cmdline" 2>/dev/null | head -n 1)" || return 1
  [[ "$(basename "$exe")" == "$name" ]]
}

start() {
  local name="$1"; shift
  local pidfile="$PIDS/$name.pid"
  if daemon_running "$name"; then
    return
  fi
  # A stale pidfile would be read before the new process writes its own, and its dead pid
  # taken for a crash of the daemon just started.
  rm -f "$pidfile"
  # The daemon gets its own session (no signal from our terminal) and keeps
  # the pid written here: bash execs nsenter, which execs the daemon.
  setsid bash -c 'echo $$ > "$0"; exec nsenter --net="$1" -- "${@:2}"' \
    "$pidfile" "/run/netns/$CLUSTER_NETNS" "$@" >>"$LOGS/$name.log" 2>&1 < /dev/null &
  local i
  for i in $(seq 1 50); do [[ -s "$pidfile" ]] && break; sleep 0.1; done
}

# wait_for WHAT SECONDS COMMAND...: polls until COMMAND succeeds.
wait_for() {
  local what="$1" timeout="$2"; shift 2
  local deadline=$(( $(date +%s) + timeout ))
  until "$@" >/dev/null 2>&1; do
    if (( $(date +%s) >= deadline )); then
      log "timed out after ${timeout}s waiting for $what; last log lines:"
      local f; for f in "$LOGS"/*.log; do echo "--- $f"; tail -n 15 "$f"; done >&2
      exit 1
    fi
    check_alive
    sleep 1
  done
  log "$what: ok ($(( $(date +%s) - started ))s)"
}

check_alive() {
  local name pidfile
  for name in "${DAEMONS[@]}"; do
    pidfile="$PIDS/$name.pid"
    if [[ -f "$pidfile" ]] && ! daemon_running "$name"; then
      log "$name exited; its log ends with:"
      tail -n 30 "$LOGS/$name.log" >&2
      exit 1
    fi
  done
}

node_ready() {
  [[ "$(kubectl get node "$CLUSTER_NODE" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')" == True ]]
}

# ---------------------------------------------------------------- the daemons

# daemon_command NAME: sets DAEMON_CMD to NAME's command line. The one definition `up` and
# `restart` both use, so a restarted daemon runs exactly as it was first started.
daemon_command() {
  case "$1" in
    etcd) DAEMON_CMD=("$KUBE_BIN/etcd" --name crr --data-dir "$CLUSTER_DIR/etcd"
      --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379
      --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380
      --initial-cluster crr=http://127.0.0.1:2380 --listen-metrics-urls http://127.0.0.1:2381
      --quota-backend-bytes 2147483648) ;;
    containerd) DAEMON_CMD=(containerd --config "$CLUSTER_DIR/containerd/config.toml") ;;
    kube-apiserver) DAEMON_CMD=("$KUBE_BIN/kube-apiserver"
      --etcd-servers http://127.0.0.1:2379
      --bind-address "$NODE_IP" --advertise-address "$NODE_IP" --secure-port 6443
      --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key"
      --client-ca-file "$PKI/ca.crt"
      --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt"
      --kubelet-client-key "$PKI/apiserver-kubelet-client.key"
      --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key"
      --service-account-issuer https://kubernetes.default.svc.cluster.local
      --service-cluster-ip-range "$SERVICE_CIDR"
      --authorization-mode Node,RBAC --allow-privileged=true
      --enable-aggregator-routing=true
      --kubelet-preferred-address-types InternalIP
      --endpoint-reconciler-type lease) ;;
    kube-controller-manager) DAEMON_CMD=("$KUBE_BIN/kube-controller-manager"
      --kubeconfig "$CLUSTER_DIR/controller-manager.kubeconfig"
      --authentication-kubeconfig "$CLUSTER_DIR/controller-manager.kubeconfig"
      --authorization-kubeconfig "$CLUSTER_DIR/controller-manager.kubeconfig"
      --bind-address 127.0.0.1 --leader-elect=false
      --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt"
      --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key"
      --use-service-account-credentials=true --allocate-node-cidrs=false
      --service-cluster-ip-range "$SERVICE_CIDR") ;;
    kube-scheduler) DAEMON_CMD=("$KUBE_BIN/kube-scheduler"
      --kubeconfig "$CLUSTER_DIR/scheduler.kubeconfig"
      --authentication-kubeconfig "$CLUSTER_DIR/scheduler.kubeconfig"
      --authorization-kubeconfig "$CLUSTER_DIR/scheduler.kubeconfig"
      --bind-address 127.0.0.1 --leader-elect=false) ;;
    kubelet) DAEMON_CMD=("$KUBE_BIN/kubelet" --config "$CLUSTER_DIR/kubelet/config.yaml"
      --kubeconfig "$CLUSTER_DIR/kubelet.kubeconfig"
      --root-dir "$CLUSTER_DIR/kubelet/root"
      --hostname-override "$CLUSTER_NODE" --node-ip "$NODE_IP"
      --pod-infra-container-image crr.local/pause:3.10) ;;
    kube-proxy) DAEMON_CMD=("$KUBE_BIN/kube-proxy" --config "$CLUSTER_DIR/kube-proxy.yaml") ;;
    *) die "no daemon $1 (one of: ${DAEMONS[*]})" ;;
  esac
}

start_daemon() {
  local DAEMON_CMD
  daemon_command "$1"
  start "$1" "${DAEMON_CMD[@]}"
}

# The node keeps its Ready condition for a while after the kubelet stops: the kubelet's own
# /healthz first, then the node.
kubelet_healthy() { http_ok 10248 /healthz && node_ready; }
proxy_healthy() { http_ok 10256 /healthz; }
# These two serve /healthz over TLS only: a listening port is as far as bash goes.
controller_manager_healthy() { in_netns bash -c 'exec 3<>/dev/tcp/127.0.0.1/10257'; }
scheduler_healthy() { in_netns bash -c 'exec 3<>/dev/tcp/127.0.0.1/10259'; }

# http_ok PORT PATH: a plain-HTTP GET on the namespace's loopback answers 200 (bash, no curl).
http_ok() {
  in_netns bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$0" && printf "GET %s HTTP/1.0\r\n\r\n" "$1" >&3 &&
    head -n 1 <&3 | grep -q " 200 "' "$1" "$2"
}

# wait_healthy NAME: waits until NAME serves: etcd its client port, containerd `ctr version` on
# its socket, the apiserver /readyz, the kubelet a Ready node, the others their /healthz.
wait_healthy() {
  case "$1" in
    etcd) wait_for "etcd health" 60 in_netns bash -c 'exec 3<>/dev/tcp/127.0.0.1/2379' ;;
    containerd) wait_for "containerd" 60 ctr --address "$CONTAINERD_SOCK" version ;;
    kube-apiserver) wait_for "kube-apiserver /readyz" 120 kubectl get --raw /readyz ;;
    kube-controller-manager) wait_for "kube-controller-manager /healthz" 60 controller_manager_healthy ;;
    kube-scheduler) wait_for "kube-scheduler /healthz" 60 scheduler_healthy ;;
    kubelet) wait_for "kubelet /healthz and node $CLUSTER_NODE Ready" 180 kubelet_healthy ;;
    kube-proxy) wait_for "kube-proxy /healthz" 60 proxy_healthy ;;
  esac
}

# One daemon is stopped or started alone only in a test bed `up` made (network namespace, pki,
# configs); NAME must be one of DAEMONS.
require_up() {
  [[ -d "$PIDS" ]] && ip netns list | grep -qw "$CLUSTER_NETNS" ||
    die "no test bed in $CLUSTER_DIR: run hack/cluster.sh up"
  daemon_command "$1"  # dies on an unknown name
}

# Stops one daemon: SIGTERM, SIGKILL if it still runs 10 s (CRR_STOP_SECONDS) later. Its pidfile goes with it, so
# `up` afterwards starts just the missing daemon instead of taking it for a killed test bed.
stop_one() {
  local name="$1" DAEMON_CMD
  require_up "$name"
  started=$(date +%s)
  stop_daemon "$name"
  log "$name stopped ($(( $(date +%s) - started ))s)"
}

start_one() {
  local name="$1" DAEMON_CMD
  require_up "$name"
  started=$(date +%s)
  start_daemon "$name"
  wait_healthy "$name"
}

# Restarts one daemon in place: everything else, the pods' containers included (their shims
# outlive containerd), keeps running.
restart_one() {
  local name="$1" DAEMON_CMD begun
  require_up "$name"
  begun=$(date +%s)
  stop_one "$name"
  start_one "$name"
  log "$name restarted in $(( $(date +%s) - begun ))s"
}

# True when some daemon has a pidfile but no process: a test bed whose processes were killed
# (a session that ended, a reboot) without `down`. Its pods, mounts and netns are stale.
remains_of_killed_cluster() {
  local name pidfile
  for name in "${DAEMONS[@]}"; do
    pidfile="$PIDS/$name.pid"
    if [[ -f "$pidfile" ]] && ! daemon_running "$name"; then
      return 0
    fi
  done
  return 1
}

up() {
  preflight
  "$here/build-kube.sh"
  if remains_of_killed_cluster; then
    log "found the remains of a test bed whose daemons were killed: cleaning up first"
    down
  fi
  started=$(date +%s)
  mkdir -p "$CLUSTER_DIR" "$LOGS" "$PIDS"
  network_up
  pki
  configs

  start_daemon etcd
  start_daemon containerd
  wait_healthy etcd
  start_daemon kube-apiserver
  wait_healthy kube-apiserver
  start_daemon kube-controller-manager
  start_daemon kube-scheduler
  wait_healthy containerd
  "$here/images.sh" base
  start_daemon kubelet
  start_daemon kube-proxy

  wait_healthy kubelet
  wait_for "default service account" 60 kubectl -n default get serviceaccount default
  echo "$KUBE_VERSION" > "$CLUSTER_DIR/version"
  log "up in $(( $(date +%s) - started ))s: export KUBECONFIG=$KUBECONFIG_ADMIN"
}

# ---------------------------------------------------------------- teardown

# stop_daemon NAME: SIGTERM, then SIGKILL if it still runs CRR_STOP_SECONDS (10) later. The
# apiserver stops listening at once but then waits out its open watches; the bound cuts that.
stop_daemon() {
  local name="$1" pid i
  if daemon_running "$name"; then
    pid="$(cat "$PIDS/$name.pid")"
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 $(( ${CRR_STOP_SECONDS:-10} * 5 ))); do daemon_running "$name" || break; sleep 0.2; done
    daemon_running "$name" && kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$PIDS/$name.pid"
}

# Every process left in the pods' cgroups, and the shims of our containerd.
kill_containers() {
  local procs
  pkill -KILL -f "containerd-shim-runc-v2 .*-address $CONTAINERD_SOCK" 2>/dev/null || true
  procs="$(find /sys/fs/cgroup -path '*kubepods*' -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u || true)"
  [[ -n "$procs" ]] && kill -KILL $procs 2>/dev/null || true
  sleep 0.5
}

remove_cgroups() {
  local dir
  # Deepest first: a cgroup can only be removed once its children are.
  find /sys/fs/cgroup -depth -type d -name '*kubepods*' 2>/dev/null | while read -r dir; do
    find "$dir" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done
}

unmount_under() {
  local root="$1" m
  # Longest paths first so nested mounts go before their parents.
  { awk '{print $2}' /proc/self/mounts | grep -F "$root" || true; } | awk '{print length, $0}' | sort -rn | cut -d' ' -f2- |
    while read -r m; do umount -l "$m" 2>/dev/null || true; done
}

down() {
  local i name
  for (( i=${#DAEMONS[@]}-1; i>=0; i-- )); do
    name="${DAEMONS[$i]}"
    [[ $name == containerd ]] && kill_containers
    stop_daemon "$name"
  done
  kill_containers
  # The pods' network namespaces: containerd 1.6 names them cni-<uuid> under
  # /run/netns, and nothing else on a test machine does.
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep '^cni-' || true); do
    ip netns del "$ns" 2>/dev/null || true
  done
  unmount_under "$CLUSTER_DIR"
  unmount_under /run/containerd/io.containerd.grpc.v1.cri
  remove_cgroups
  network_down
  if [[ "${1:-}" == --keep-data ]]; then
    log "down (data kept in $CLUSTER_DIR)"
  else
    rm -rf "$CLUSTER_DIR"
    log "down"
  fi
}

status() {
  local name pidfile
  for name in "${DAEMONS[@]}"; do
    pidfile="$PIDS/$name.pid"
    if daemon_running "$name"; then
      printf '%-24s running (pid %s)\n' "$name" "$(cat "$pidfile")"
    else
      printf '%-24s stopped\n' "$name"
    fi
  done
  kubectl get nodes -o wide 2>/dev/null || true
}

case "${1:-}" in
  up) up ;;
  down) shift; down "$@" ;;
  status) status ;;
  restart) [[ $# == 2 ]] || die "usage: $0 restart NAME"; restart_one "$2" ;;
  stop) [[ $# == 2 ]] || die "usage: $0 stop NAME"; stop_one "$2" ;;
  start) [[ $# == 2 ]] || die "usage: $0 start NAME"; start_one "$2" ;;
  env) echo "export KUBECONFIG=$KUBECONFIG_ADMIN" ;;
  *) echo "usage: $0 up|down [--keep-data]|status|env|restart NAME|stop NAME|start NAME" >&2; exit 2 ;;
esac
