#!/usr/bin/env bash
# The project's local Kubernetes test bed: upstream etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubelet and kube-proxy (built by
# hack/build-kube.sh), containerd and runc (hack/build-runtime.sh), one node, all inside the
# network namespace crr-node; with CRR_NODES=N, N-1 more nodes crr-node-2.. with their own
# network and mount namespaces, containerd, kubelet and kube-proxy (hack/cluster-env.sh). See
# hack/README.md for the design and its why.
#
#   hack/cluster.sh up       build what is missing, start everything, wait for Ready nodes
#                            (CRR_NODES=N: N nodes; on a running test bed, adds the missing ones)
#   hack/cluster.sh down     stop everything and remove every trace (mounts, netns, cgroups)
#   hack/cluster.sh status   what runs, and the node
#   hack/cluster.sh restart NAME   stop one daemon and start it again, the rest left running
#                                  (an extra node's: containerd@crr-node-2, kubelet@..., kube-proxy@...)
#   hack/cluster.sh stop NAME | start NAME   the two halves of restart (a fault held open)
#   hack/cluster.sh env      prints `export KUBECONFIG=... PATH=<the stack's kubectl>:$PATH` for eval
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
# What each extra node runs, as `<daemon>@<node>`.
NODE_DAEMONS=(containerd kubelet kube-proxy)

# Every daemon of the test bed: crr-node's and the control plane, then each extra node's.
all_daemons() {
  local node daemon
  printf '%s\n' "${DAEMONS[@]}"
  for node in $(extra_nodes); do
    for daemon in "${NODE_DAEMONS[@]}"; do echo "$daemon@$node"; done
  done
}

# node_env NODE: N_DIR, N_IP, N_SUBNET, N_CGROUP of extra node NODE (crr-node-K).
node_env() {
  local index="${1##*-}"
  [[ "$1" =~ ^crr-node-[0-9]+$ ]] && (( index >= 2 && index <= 250 )) || die "no node $1 (crr-node-2 .. crr-node-250)"
  N_DIR="$CLUSTER_NODES_DIR/$1"
  N_IP="10.213.1.$index"
  N_SUBNET="10.244.$(( index - 1 )).0/24"
  N_CGROUP="/$1"
}
# Runs a command in an extra node's network namespace.
in_node() { local node="$1"; shift; nsenter --net="/run/netns/$node" -- "$@"; }

log() { echo "cluster: $*" >&2; }
die() { log "error: $*"; exit 1; }
in_netns() { nsenter --net="/run/netns/$CLUSTER_NETNS" -- "$@"; }
BRIDGE=crr-br          # inside crr-node's namespace: the extra nodes' link to it and each other
BRIDGE_IP=10.213.1.1

# ---------------------------------------------------------------- checks

preflight() {
  [[ $(id -u) == 0 ]] || die "the test bed needs root (network namespace, mounts, cgroups)"
  local cmd
  for cmd in ip nsenter iptables openssl conntrack; do
    command -v "$cmd" >/dev/null || die "$cmd not found: run hack/install-deps.sh"
  done
  for cmd in containerd containerd-shim-runc-v2 runc ctr; do
    [[ -x "$RUNTIME_BIN/$cmd" ]] || die "$RUNTIME_BIN/$cmd missing: run hack/build-runtime.sh"
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

# The extra node NODE: its namespace, a veth into crr-node's bridge, and routes: to the control
# plane and the root namespace through crr-node, to every node's pod range through that node.
node_network_up() {
  local node="$1" N_DIR N_IP N_SUBNET N_CGROUP
  node_env "$node"
  if ! in_netns ip link show "$BRIDGE" >/dev/null 2>&1; then
    in_netns ip link add "$BRIDGE" type bridge
    in_netns ip addr add "$BRIDGE_IP/24" dev "$BRIDGE"
    in_netns ip link set "$BRIDGE" up
  fi
  ip netns list | grep -qw "$node" || ip netns add "$node"
  if ! in_node "$node" ip link show eth0 >/dev/null 2>&1; then
    ip -n "$CLUSTER_NETNS" link add "$node" type veth peer name eth0 netns "$node"
    ip -n "$CLUSTER_NETNS" link set "$node" master "$BRIDGE" up
    in_node "$node" ip addr add "$N_IP/24" dev eth0
    in_node "$node" ip link set eth0 up
  fi
  in_node "$node" ip link set lo up
  in_node "$node" ip route replace 10.213.0.0/24 via "$BRIDGE_IP"
  in_node "$node" ip route replace "$SERVICE_CIDR" dev lo
  in_node "$node" sysctl -qw net.ipv4.ip_forward=1
  in_node "$node" sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null || true
}

# Pod routes between every pair of nodes (after each node's network is up).
pod_routes() {
  local node other N_DIR N_IP N_SUBNET N_CGROUP
  for node in $(extra_nodes); do
    node_env "$node"
    in_netns ip route replace "$N_SUBNET" via "$N_IP"
    in_node "$node" ip route replace "$POD_SUBNET" via "$BRIDGE_IP"
    local subnet="$N_SUBNET" ip="$N_IP"
    for other in $(extra_nodes); do
      [[ $other == "$node" ]] && continue
      in_node "$other" ip route replace "$subnet" via "$ip"
    done
  done
}

network_down() {
  local node
  for node in $(extra_nodes); do ip netns del "$node" 2>/dev/null || true; done
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
  webhook_client_pki
  kubeconfig admin admin
  kubeconfig controller-manager controller-manager
  kubeconfig scheduler scheduler
  kubeconfig kubelet kubelet
  kubeconfig kube-proxy kube-proxy
}

# The client certificate the API server presents to webhooks (--admission-control-config-file),
# from a CA of its own: crr's webhook trusts that CA alone (install.sh gives it the CA), not the
# cluster CA that signs every node's and admin's certificate.
webhook_client_pki() {
  if [[ ! -f "$PKI/webhook-client-ca.crt" ]]; then
    openssl req -x509 -new -newkey rsa:2048 -nodes -keyout "$PKI/webhook-client-ca.key" \
      -subj "/CN=crr-test-bed-webhook-client-ca" -days 3650 -out "$PKI/webhook-client-ca.crt" 2>/dev/null
  fi
  [[ -f "$PKI/apiserver-webhook-client.crt" ]] && return
  printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' \
    > "$PKI/apiserver-webhook-client.ext"
  openssl req -new -newkey rsa:2048 -nodes -keyout "$PKI/apiserver-webhook-client.key" \
    -subj "/CN=kube-apiserver-webhook-client" -out "$PKI/apiserver-webhook-client.csr" 2>/dev/null
  openssl x509 -req -in "$PKI/apiserver-webhook-client.csr" -CA "$PKI/webhook-client-ca.crt" \
    -CAkey "$PKI/webhook-client-ca.key" -CAcreateserial -days 365 \
    -extfile "$PKI/apiserver-webhook-client.ext" -out "$PKI/apiserver-webhook-client.crt" 2>/dev/null
  rm -f "$PKI/apiserver-webhook-client.csr" "$PKI/apiserver-webhook-client.ext"
}

node_pki() {
  local node="$1" N_DIR N_IP N_SUBNET N_CGROUP
  node_env "$node"
  cert "kubelet-serving-$node" "system:node:$node" system:nodes "IP:$N_IP,DNS:$node"
  cert "kubelet-$node" "system:node:$node" system:nodes
  kubeconfig "kubelet-$node" "kubelet-$node"
}

# ---------------------------------------------------------------- config files

# The stack's feature gates (hack/versions.sh: KUBE_FEATURE_GATES) as KubeletConfiguration YAML.
kubelet_feature_gates() {
  [[ -n "$KUBE_FEATURE_GATES" ]] || return 0
  local gate
  echo "featureGates:"
  for gate in ${KUBE_FEATURE_GATES//,/ }; do echo "  ${gate%%=*}: ${gate#*=}"; done
}

# node_configs DIR NODE IP SUBNET CGROUP_ROOT: one node's CNI, containerd, kubelet and kube-proxy
# configuration under DIR (crr-node's: $CLUSTER_DIR). Every path written into them is the path
# the node's own daemons see: an extra node's containerd socket and kubelet directory appear at
# crr-node's paths inside its mount namespace.
node_configs() {
  local dir="$1" node="$2" ip="$3" subnet="$4" cgroup_root="$5" certs=""
  [[ $node == "$CLUSTER_NODE" ]] || certs="-$node"
  mkdir -p "$dir/cni/net.d" "$dir/containerd" "$dir/kubelet"
  cat > "$dir/cni/net.d/10-crr.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "crr",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$dir/cni/ipam",
              "ranges": [[{"subnet": "$subnet"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  # containerd 2.x's own configuration format (version 3): the CRI plugin is split into
  # images (io.containerd.cri.v1.images), runtime (io.containerd.cri.v1.runtime) and the gRPC
  # service (io.containerd.grpc.v1.cri). The sandbox image is containerd's to choose now: the
  # kubelet lost --pod-infra-container-image.
  cat > "$dir/containerd/config.toml" <<EOF
version = 3
root = "$dir/containerd/root"
state = "$dir/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.erofs"]
[grpc]
  address = "$CONTAINERD_SOCK"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "crr.local/pause:3.10"
[plugins.'io.containerd.cri.v1.runtime']
  enable_selinux = false
  # Sandboxes like ours may lack CAP_SYS_RESOURCE, so lowering a process's
  # oom_score_adj below our own (-998 for sandboxes, -997 for Guaranteed pods)
  # is refused and runc fails; clamp instead, as rootless setups do.
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "$RUNTIME_BIN/runc"
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["$CNI_BIN_DIR"]
    conf_dir = "$dir/cni/net.d"
[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
# Each node's NRI socket of its own: at the default /var/run/nri/nri.sock, shared by every node's
# mount namespace, two containerds starting together race (each removes the file, then binds it)
# and the loser exits with "bind: address already in use".
[plugins.'io.containerd.nri.v1.nri']
  socket_path = "$dir/containerd/nri.sock"
EOF
  cat > "$dir/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $ip
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $PKI/kubelet-serving$certs.crt
tlsPrivateKeyFile: $PKI/kubelet-serving$certs.key
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
cgroupDriver: cgroupfs
cgroupRoot: $cgroup_root
# Kubelets from v1.35 refuse to start on a cgroup v1 host unless told otherwise, and these test
# machines are cgroup v1 (hybrid: v2 only at /sys/fs/cgroup/unified). It is only a configuration
# check (pkg/kubelet/apis/config/validation/validation_linux.go); the kubelet then runs with a
# warning, as k0s and k3s document for cgroup v1 hosts. containerd 2.x still supports cgroup v1.
failCgroupV1: false
$(kubelet_feature_gates)
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
  cat > "$dir/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $CLUSTER_DIR/kube-proxy.kubeconfig}
hostnameOverride: $node
bindAddress: $ip
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
mode: iptables
clusterCIDR: 10.244.0.0/16
iptables: {masqueradeAll: true}
# Leave the conntrack sysctls alone: they are not this namespace's to change.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
}

configs() {
  node_configs "$CLUSTER_DIR" "$CLUSTER_NODE" "$NODE_IP" "$POD_SUBNET" /
  # Who asked the API server for what (bench/api-costs.sh): every request's metadata, once,
  # when it completes; Lease renewals left out (a heartbeat every few seconds from everyone).
  mkdir -p "$CLUSTER_DIR/audit"
  cat > "$CLUSTER_DIR/audit-policy.yaml" <<EOF
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: None
  resources: [{group: coordination.k8s.io, resources: [leases]}]
- level: Metadata
EOF
  # The API server authenticates to webhooks behind Services with its webhook client
  # certificate (crr's webhook refuses admission calls without it: install.sh).
  cat > "$CLUSTER_DIR/webhook-client.kubeconfig" <<EOF
apiVersion: v1
kind: Config
users:
- name: "*.svc"
  user:
    client-certificate: $PKI/apiserver-webhook-client.crt
    client-key: $PKI/apiserver-webhook-client.key
EOF
  cat > "$CLUSTER_DIR/admission-config.yaml" <<EOF
apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: ValidatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: $CLUSTER_DIR/webhook-client.kubeconfig
- name: MutatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: $CLUSTER_DIR/webhook-client.kubeconfig
EOF
}

# An extra node's files, its cgroup root and its mount namespace: a private view in which its
# own directories sit at crr-node's paths, and /run/containerd and the pod log directories are
# its own (two kubelets would collect each other's pod logs as orphans).
node_setup() {
  local node="$1" N_DIR N_IP N_SUBNET N_CGROUP hierarchy dir
  node_env "$node"
  node_configs "$N_DIR" "$node" "$N_IP" "$N_SUBNET" "$N_CGROUP"
  # runc's state of this node's containers, apart from crr-node's.
  sed -i "s|SystemdCgroup = false|SystemdCgroup = false\n        Root = \"$N_DIR/runc\"|" "$N_DIR/containerd/config.toml"
  mkdir -p "$N_DIR/run-containerd" "$N_DIR/log-pods" "$N_DIR/log-containers" "$N_DIR/runc" "$N_DIR/device-plugins" \
    /run/containerd /var/log/pods /var/log/containers /var/lib/kubelet/device-plugins
  if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
    mkdir -p "/sys/fs/cgroup$N_CGROUP"
  else
    for hierarchy in /sys/fs/cgroup/*/; do
      [[ $(basename "$hierarchy") == unified ]] && continue
      mkdir -p "$hierarchy${N_CGROUP#/}"
    done
    if [[ -d /sys/fs/cgroup/cpuset ]]; then
      cat /sys/fs/cgroup/cpuset/cpuset.cpus > "/sys/fs/cgroup/cpuset$N_CGROUP/cpuset.cpus"
      cat /sys/fs/cgroup/cpuset/cpuset.mems > "/sys/fs/cgroup/cpuset$N_CGROUP/cpuset.mems"
    fi
  fi
  # A mount namespace outlives its processes when bound to a file on a private mount.
  if ! grep -q " $CLUSTER_NODES_DIR " /proc/self/mounts; then
    mount --bind "$CLUSTER_NODES_DIR" "$CLUSTER_NODES_DIR"
    mount --make-private "$CLUSTER_NODES_DIR"
  fi
  if ! grep -q " $N_DIR/mnt " /proc/self/mounts; then
    touch "$N_DIR/mnt"
    unshare --mount="$N_DIR/mnt" --propagation private true
    for dir in containerd kubelet; do
      nsenter --mount="$N_DIR/mnt" -- mount --bind "$N_DIR/$dir" "$CLUSTER_DIR/$dir"
    done
    nsenter --mount="$N_DIR/mnt" -- mount --bind "$N_DIR/run-containerd" /run/containerd
    nsenter --mount="$N_DIR/mnt" -- mount --bind "$N_DIR/log-pods" /var/log/pods
    nsenter --mount="$N_DIR/mnt" -- mount --bind "$N_DIR/log-containers" /var/log/containers
    # The kubelet's device-plugin socket has a fixed path, not under --root-dir: two kubelets
    # starting together race on one file (each removes it, then binds it) and the loser exits.
    nsenter --mount="$N_DIR/mnt" -- mount --bind "$N_DIR/device-plugins" /var/lib/kubelet/device-plugins
  fi
}

# ---------------------------------------------------------------- processes

# daemon_running NAME: the pid in NAME's pidfile is a live process running NAME. `kill -0` alone
# is not enough: it succeeds on a zombie (the daemons are reparented to a PID 1 that may not
# reap them) and on a pid the kernel has since given to another program. The pidfile is written
# by `start`'s bash just before it execs nsenter, which execs the daemon: until then the command
# line is that bash's or nsenter's, with the daemon's path among its arguments, and counts too
# (a daemon still starting is not one that exited).
daemon_running() {
  local name="$1" pid state arg
  pid="$(cat "$PIDS/$name.pid" 2>/dev/null)" || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  state="$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" || return 1
  [[ -n "$state" && "$state" != Z && "$state" != X ]] || return 1
  local cmdline
  cmdline="$(tr '\0' '\n' < "/proc/$pid/cmdline" 2>/dev/null)" || return 1
  # A process inside execve (bash into nsenter, nsenter into the daemon) has no command line
  # until the kernel has mapped the new program, which on a cold page cache takes seconds: a
  # live process with an empty one is a daemon starting.
  [[ -n "$cmdline" ]] || return 0
  while IFS= read -r arg; do
    [[ "$(basename -- "$arg")" == "${name%@*}" ]] && return 0
  done <<< "$cmdline"
  return 1
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
  # An extra node's daemons run in its network and mount namespaces.
  local enter=(nsenter --net="/run/netns/$CLUSTER_NETNS")
  if [[ $name == *@* ]]; then
    enter=(nsenter --net="/run/netns/${name#*@}" --mount="$CLUSTER_NODES_DIR/${name#*@}/mnt")
  fi
  setsid bash -c 'echo $$ > "$0"; exec "$@"' \
    "$pidfile" "${enter[@]}" -- "$@" >>"$LOGS/$name.log" 2>&1 < /dev/null &
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
  for name in $(all_daemons); do
    pidfile="$PIDS/$name.pid"
    if [[ -f "$pidfile" ]] && ! daemon_running "$name"; then
      log "$name exited; its log ends with:"
      tail -n 30 "$LOGS/$name.log" >&2
      exit 1
    fi
  done
}

node_ready() {
  [[ "$(kubectl get node "${1:-$CLUSTER_NODE}" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')" == True ]]
}

# ---------------------------------------------------------------- the daemons

# daemon_command NAME: sets DAEMON_CMD to NAME's command line. The one definition `up` and
# `restart` both use, so a restarted daemon runs exactly as it was first started.
daemon_command() {
  if [[ $1 == *@* ]]; then
    node_daemon_command "${1%@*}" "${1#*@}"
    return
  fi
  case "$1" in
    etcd) DAEMON_CMD=("$KUBE_BIN/etcd" --name crr --data-dir "$CLUSTER_DIR/etcd"
      --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379
      --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380
      --initial-cluster crr=http://127.0.0.1:2380 --listen-metrics-urls http://127.0.0.1:2381
      --quota-backend-bytes 2147483648) ;;
    containerd) DAEMON_CMD=("$RUNTIME_BIN/containerd" --config "$CLUSTER_DIR/containerd/config.toml") ;;
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
      --endpoint-reconciler-type lease
      --audit-policy-file "$CLUSTER_DIR/audit-policy.yaml"
      --admission-control-config-file "$CLUSTER_DIR/admission-config.yaml"
      --audit-log-path "$CLUSTER_DIR/audit/audit.log" --audit-log-maxsize 200 --audit-log-maxbackup 1
      ${KUBE_FEATURE_GATES:+--feature-gates "$KUBE_FEATURE_GATES"}) ;;
    kube-controller-manager) DAEMON_CMD=("$KUBE_BIN/kube-controller-manager"
      --kubeconfig "$CLUSTER_DIR/controller-manager.kubeconfig"
      --authentication-kubeconfig "$CLUSTER_DIR/controller-manager.kubeconfig"
      --authorization-kubeconfig "$CLUSTER_DIR/controller-manager.kubeconfig"
      --bind-address 127.0.0.1 --leader-elect=false
      --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt"
      --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key"
      --use-service-account-credentials=true --allocate-node-cidrs=false
      --service-cluster-ip-range "$SERVICE_CIDR"
      ${KUBE_FEATURE_GATES:+--feature-gates "$KUBE_FEATURE_GATES"}) ;;
    kube-scheduler) DAEMON_CMD=("$KUBE_BIN/kube-scheduler"
      --kubeconfig "$CLUSTER_DIR/scheduler.kubeconfig"
      --authentication-kubeconfig "$CLUSTER_DIR/scheduler.kubeconfig"
      --authorization-kubeconfig "$CLUSTER_DIR/scheduler.kubeconfig"
      --bind-address 127.0.0.1 --leader-elect=false
      ${KUBE_FEATURE_GATES:+--feature-gates "$KUBE_FEATURE_GATES"}) ;;
    kubelet) DAEMON_CMD=("$KUBE_BIN/kubelet" --config "$CLUSTER_DIR/kubelet/config.yaml"
      --kubeconfig "$CLUSTER_DIR/kubelet.kubeconfig"
      --root-dir "$CLUSTER_DIR/kubelet/root"
      --hostname-override "$CLUSTER_NODE" --node-ip "$NODE_IP") ;;
    kube-proxy) DAEMON_CMD=("$KUBE_BIN/kube-proxy" --config "$CLUSTER_DIR/kube-proxy.yaml") ;;
    *) die "no daemon $1 (one of: ${DAEMONS[*]})" ;;
  esac
}

# node_daemon_command DAEMON NODE: an extra node's containerd, kubelet or kube-proxy. Inside the
# node's mount namespace its kubelet directory is at crr-node's path.
node_daemon_command() {
  local daemon="$1" node="$2" N_DIR N_IP N_SUBNET N_CGROUP
  node_env "$node"
  case "$daemon" in
    containerd) DAEMON_CMD=("$RUNTIME_BIN/containerd" --config "$N_DIR/containerd/config.toml") ;;
    kubelet) DAEMON_CMD=("$KUBE_BIN/kubelet" --config "$N_DIR/kubelet/config.yaml"
      --kubeconfig "$CLUSTER_DIR/kubelet-$node.kubeconfig"
      --root-dir "$CLUSTER_DIR/kubelet/root"
      --hostname-override "$node" --node-ip "$N_IP") ;;
    kube-proxy) DAEMON_CMD=("$KUBE_BIN/kube-proxy" --config "$N_DIR/kube-proxy.yaml") ;;
    *) die "no daemon $daemon on $node (one of: ${NODE_DAEMONS[*]})" ;;
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

# http_ok PORT PATH [NETNS]: a plain-HTTP GET on the namespace's loopback answers 200 (bash, no
# curl); crr-node's namespace unless NETNS is given.
http_ok() {
  nsenter --net="/run/netns/${3:-$CLUSTER_NETNS}" -- bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$0" && printf "GET %s HTTP/1.0\r\n\r\n" "$1" >&3 &&
    head -n 1 <&3 | grep -q " 200 "' "$1" "$2"
}
node_kubelet_healthy() { http_ok 10248 /healthz "$1" && node_ready "$1"; }

# wait_healthy NAME: waits until NAME serves: etcd its client port, containerd `ctr version` on
# its socket, the apiserver /readyz, the kubelet a Ready node, the others their /healthz.
wait_healthy() {
  if [[ $1 == *@* ]]; then
    local node="${1#*@}" N_DIR N_IP N_SUBNET N_CGROUP
    node_env "$node"
    case "${1%@*}" in
      containerd) wait_for "containerd of $node" 60 ctr --address "$N_DIR/containerd/containerd.sock" version ;;
      kubelet) wait_for "kubelet /healthz and node $node Ready" 180 node_kubelet_healthy "$node" ;;
      kube-proxy) wait_for "kube-proxy /healthz on $node" 60 http_ok 10256 /healthz "$node" ;;
    esac
    return
  fi
  case "$1" in
    etcd) wait_for "etcd health" 60 in_netns bash -c 'exec 3<>/dev/tcp/127.0.0.1/2379' ;;
    containerd) wait_for "containerd" 60 ctr --address "$CONTAINERD_SOCK" version ;;
    # A restart under load (a tenant's fat objects to list into the watch cache, a Kubernetes
    # build beside it) may take minutes: CRR_APISERVER_READY_SECONDS.
    kube-apiserver) wait_for "kube-apiserver /readyz" "${CRR_APISERVER_READY_SECONDS:-120}" kubectl get --raw /readyz ;;
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
  if [[ $1 == *@* ]] && ! extra_nodes | grep -qx "${1#*@}"; then
    die "no node ${1#*@} in this test bed (nodes: $CLUSTER_NODE $(extra_nodes | tr '\n' ' '))"
  fi
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
  for name in $(all_daemons); do
    pidfile="$PIDS/$name.pid"
    if [[ -f "$pidfile" ]] && ! daemon_running "$name"; then
      return 0
    fi
  done
  return 1
}

up() {
  "$here/build-kube.sh"
  "$here/build-runtime.sh"
  preflight
  if remains_of_killed_cluster; then
    log "found the remains of a test bed whose daemons were killed: cleaning up first"
    down
  fi
  # One test bed runs one stack (hack/versions.sh); later scripts read it from $CLUSTER_DIR/stack.
  local running_stack
  running_stack="$(cat "$CLUSTER_DIR/stack" 2>/dev/null || true)"
  if [[ -n "$running_stack" && "$running_stack" != "$CRR_STACK" && -d "$PIDS" ]]; then
    die "the test bed in $CLUSTER_DIR runs stack $running_stack, not CRR_STACK=$CRR_STACK: hack/cluster.sh down first"
  fi
  started=$(date +%s)
  mkdir -p "$CLUSTER_DIR" "$LOGS" "$PIDS"
  echo "$CRR_STACK" > "$CLUSTER_DIR/stack"
  network_up
  pki
  configs
  # Extra nodes: those of an earlier `up`, and up to CRR_NODES.
  local index node
  for (( index = 2; index <= ${CRR_NODES:-1}; index++ )); do mkdir -p "$CLUSTER_NODES_DIR/crr-node-$index"; done
  for node in $(extra_nodes); do
    node_network_up "$node"
    node_pki "$node"
    node_setup "$node"
  done
  pod_routes

  start_daemon etcd
  start_daemon containerd
  for node in $(extra_nodes); do start_daemon "containerd@$node"; done
  wait_healthy etcd
  start_daemon kube-apiserver
  wait_healthy kube-apiserver
  start_daemon kube-controller-manager
  start_daemon kube-scheduler
  wait_healthy containerd
  for node in $(extra_nodes); do wait_healthy "containerd@$node"; done
  "$here/images.sh" base
  # A node that joins a running test bed gets the images built before (crr's own, say).
  [[ -z "$(extra_nodes)" ]] || "$here/images.sh" sync
  start_daemon kubelet
  start_daemon kube-proxy
  for node in $(extra_nodes); do start_daemon "kubelet@$node"; start_daemon "kube-proxy@$node"; done

  wait_healthy kubelet
  for node in $(extra_nodes); do wait_healthy "kubelet@$node"; done
  wait_for "default service account" 60 kubectl -n default get serviceaccount default
  echo "$KUBE_VERSION" > "$CLUSTER_DIR/version"
  # The stack's client programs, for tests that do not source hack/versions.sh.
  mkdir -p "$CLUSTER_DIR/bin"
  ln -sfn "$KUBE_BIN/kubectl" "$CLUSTER_DIR/bin/kubectl"
  ln -sfn "$RUNTIME_BIN/ctr" "$CLUSTER_DIR/bin/ctr"
  log "stack $CRR_STACK: Kubernetes $KUBE_VERSION, containerd $CONTAINERD_VERSION, runc $RUNC_VERSION"
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
    # Not running is not gone: a multithreaded daemon's main thread shows Z while its other
    # threads still exit, holding its sockets. A kube-apiserver started again then found its port
    # taken ("bind: address already in use"), exited, and the test bed had no API server (CI, the
    # chaos fat-tenant restart under load). So wait, at most 30 s more, for its last thread.
    for i in $(seq 1 150); do process_gone "$pid" && break; sleep 0.2; done
    process_gone "$pid" || log "$name (pid $pid): threads still exiting after 30 s"
  fi
  rm -f "$PIDS/$name.pid"
}

# process_gone PID: no thread of PID is alive (none, or every one a zombie).
process_gone() {
  local pid="$1" task state
  [[ -d "/proc/$pid" ]] || return 0
  for task in "/proc/$pid/task"/*; do
    state="$(awk '{print $3}' "$task/stat" 2>/dev/null)" || continue
    [[ -z "$state" || "$state" == Z || "$state" == X ]] || return 1
  done
  return 0
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
  local i name names
  mapfile -t names < <(all_daemons)
  for (( i=${#names[@]}-1; i>=0; i-- )); do
    name="${names[$i]}"
    [[ $name == containerd* ]] && kill_containers
    stop_daemon "$name"
  done
  kill_containers
  # The pods' network namespaces: containerd names them cni-<uuid> under
  # /run/netns, and nothing else on a test machine does.
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep '^cni-' || true); do
    ip netns del "$ns" 2>/dev/null || true
  done
  unmount_under "$CLUSTER_DIR"
  unmount_under /run/containerd/io.containerd.grpc.v1.cri
  remove_cgroups
  network_down
  local node
  for node in $(extra_nodes); do
    find /sys/fs/cgroup -depth -type d -name "$node" -exec rmdir {} \; 2>/dev/null || true
  done
  if [[ "${1:-}" == --keep-data ]]; then
    log "down (data kept in $CLUSTER_DIR)"
  else
    rm -rf "$CLUSTER_DIR"
    log "down"
  fi
}

status() {
  local name pidfile
  for name in $(all_daemons); do
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
  # The running stack's kubectl (and ctr) first on PATH: another kubectl on the machine may be
  # versions away from the API server.
  env) echo "export KUBECONFIG=$KUBECONFIG_ADMIN PATH=$CLUSTER_DIR/bin:\$PATH" ;;
  *) echo "usage: $0 up|down [--keep-data]|status|env|restart NAME|stop NAME|start NAME" >&2; exit 2 ;;
esac
