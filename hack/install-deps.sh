#!/usr/bin/env bash
# Installs the Debian packages the local test bed and the build need.
# Idempotent: packages already present are not reinstalled.
set -euo pipefail
packages=(
  containernetworking-plugins                   # the pod network (CNI bridge, host-local, portmap)
  libseccomp-dev pkg-config                     # runc's seccomp, built from its Go module (build-runtime.sh)
  iptables iproute2 conntrack util-linux        # kube-proxy, netns/veth, nsenter
  openssl                                       # the cluster's certificates
  buildah busybox-static curl                   # local images, imported into containerd
  protobuf-compiler                             # CRI bindings of the node daemon
  gcc libc6-dev                                 # the static pause program
  prometheus                                    # the test bed's Prometheus and promtool (monitoring/)
  lua5.1                                        # Argo CD's health checks (manifests/gitops), Argo's Lua is 5.1
  jq                                            # hack/capture-gitops-fixtures.sh
  tmux                                          # the plugin's live output in an 80-column terminal (kubectl-crr/tests)
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if (( ${#missing[@]} )); then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""; [[ $(id -u) == 0 ]] || SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "install-deps: ok"
