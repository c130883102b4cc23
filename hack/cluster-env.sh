# Layout of the local test bed, sourced by hack/ scripts and usable by tests.
# Everything runs inside the network namespace $CLUSTER_NETNS, reached from the
# root namespace through a veth pair; nothing listens outside it or loopback.
CLUSTER_DIR="${CRR_CLUSTER_DIR:-/var/lib/crr-cluster}"
CLUSTER_NETNS=crr-node
CLUSTER_NODE=crr-node
HOST_IP=10.213.0.1        # root namespace end of the veth pair
NODE_IP=10.213.0.2        # the node: apiserver, kubelet, etcd's peers
POD_SUBNET=10.244.0.0/24  # bridge CNI inside the namespace
SERVICE_CIDR=10.0.0.0/24
APISERVER="https://$NODE_IP:6443"
CONTAINERD_SOCK="$CLUSTER_DIR/containerd/containerd.sock"
KUBECONFIG_ADMIN="$CLUSTER_DIR/admin.kubeconfig"

# More nodes (CRR_NODES=N at `hack/cluster.sh up`; 1 by default): node k (2..N) is crr-node-k,
# with its own network namespace of that name, IP 10.213.1.k on the bridge crr-br inside
# crr-node's namespace (crr-node is 10.213.1.1 there), pod range 10.244.(k-1).0/24, and its own
# containerd, kubelet and kube-proxy. Its files live in $CLUSTER_DIR/nodes/crr-node-k; inside
# its own mount namespace they also appear at crr-node's paths ($CLUSTER_DIR/containerd,
# $CLUSTER_DIR/kubelet), so a DaemonSet's hostPath names the same socket on every node.
CLUSTER_NODES_DIR="$CLUSTER_DIR/nodes"
# The extra nodes of the test bed, one name per line (none on a one-node test bed).
extra_nodes() { ls "$CLUSTER_NODES_DIR" 2>/dev/null | grep '^crr-node-[0-9]*$' | sort -t- -k3 -n || true; }
# The containerd socket of every node, as the root namespace reaches it.
node_sockets() {
  echo "$CONTAINERD_SOCK"
  local node
  for node in $(extra_nodes); do echo "$CLUSTER_NODES_DIR/$node/containerd/containerd.sock"; done
}
# kubectl (the stack's, from hack/versions.sh) as the test bed's admin: the one wrapper every
# script uses.
kubectl() { "$KUBE_BIN/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" "$@"; }
# ctr (the stack's, on PATH from hack/versions.sh) without the notice containerd ≥ 2.2 sends with
# every answer on a cgroup v1 host; its other errors still reach stderr.
ctr() { command ctr "$@" 2> >(grep -v 'support for cgroup v1 is deprecated' >&2); }
