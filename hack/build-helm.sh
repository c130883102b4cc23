#!/usr/bin/env bash
# Builds the pinned Helm from its Go module into $HELM_BIN (once per version).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/versions.sh"
if [[ -x "$HELM_BIN/helm" ]]; then exit 0; fi
echo "build-helm: building helm $HELM_VERSION (about 2 min cold)" >&2
GOTOOLCHAIN=local GOFLAGS= GOBIN="$HELM_BIN.partial" go install -trimpath -ldflags "-s -w" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
rm -rf "$HELM_BIN"; mv "$HELM_BIN.partial" "$HELM_BIN"
echo "build-helm: $("$HELM_BIN/helm" version --short)" >&2
