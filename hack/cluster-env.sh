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
