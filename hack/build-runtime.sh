#!/usr/bin/env bash
# Builds the stack's container runtime (hack/versions.sh: CONTAINERD_VERSION, RUNC_VERSION) from
# its own Go modules into $RUNTIME_BIN: containerd, its runc shim and ctr, and runc. Each is built
# with `go install module/cmd@version`, so the module's own go.mod and go.sum pin everything it
# links (the checksum database vouches for the module itself). A second run finds the binaries
# and does nothing.
#   - containerd without btrfs (`no_btrfs`: its snapshotter needs libbtrfs headers; the test bed
#     uses overlayfs), as containerd's own release builds do where btrfs is absent.
#   - runc with seccomp (libseccomp-dev, hack/install-deps.sh), as runc's release builds are: a pod
#     asking for the RuntimeDefault profile must get it.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/versions.sh"

programs=(containerd containerd-shim-runc-v2 ctr runc)
missing=0
for p in "${programs[@]}"; do [[ -x "$RUNTIME_BIN/$p" ]] || missing=1; done
if [[ $missing == 0 ]]; then
  echo "build-runtime: containerd $CONTAINERD_VERSION and runc $RUNC_VERSION already built in $RUNTIME_BIN"
  exit 0
fi
command -v go >/dev/null || { echo "build-runtime: go not found on PATH" >&2; exit 1; }
rm -rf "$RUNTIME_BIN.partial"; mkdir -p "$RUNTIME_BIN.partial"
export GOTOOLCHAIN=local GOBIN="$RUNTIME_BIN.partial" GOFLAGS=-trimpath
start=$(date +%s)
echo "build-runtime: building containerd $CONTAINERD_VERSION and runc $RUNC_VERSION (cold: about 2 min on 2 cores)"
cpkg="github.com/containerd/containerd/v2"
cldflags="-s -w -X $cpkg/version.Version=$CONTAINERD_VERSION -X $cpkg/version.Package=$cpkg -X $cpkg/version.Revision=$CONTAINERD_VERSION"
for p in containerd containerd-shim-runc-v2 ctr; do
  echo "build-runtime: $p ($(( $(date +%s) - start ))s)"
  # The shim is static, as containerd builds it, so that it never depends on the host's libc.
  if [[ $p == containerd-shim-runc-v2 ]]; then cgo=0; else cgo=1; fi
  CGO_ENABLED=$cgo go install -tags no_btrfs -ldflags "$cldflags" "$cpkg/cmd/$p@$CONTAINERD_VERSION"
done
echo "build-runtime: runc ($(( $(date +%s) - start ))s)"
CGO_ENABLED=1 go install -tags "seccomp urfave_cli_no_docs" \
  -ldflags "-s -w -X main.version=${RUNC_VERSION#v} -X main.gitCommit=$RUNC_VERSION" \
  "github.com/opencontainers/runc@$RUNC_VERSION"
rm -rf "$RUNTIME_BIN"
mv "$RUNTIME_BIN.partial" "$RUNTIME_BIN"
"$RUNTIME_BIN/containerd" --version
# sed, not head: head exits after three lines and a fourth write would end runc (and, under
# pipefail, this script) with SIGPIPE.
"$RUNTIME_BIN/runc" --version | sed -n 1,3p
echo "build-runtime: done in $(( $(date +%s) - start ))s; binaries in $RUNTIME_BIN"
