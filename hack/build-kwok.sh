#!/usr/bin/env bash
# Builds the pinned kwok (sigs.k8s.io/kwok: simulated nodes and pod lifecycles for the API
# server, as SIG Scalability uses it) from its Go module into $KWOK_BIN, once per version.
# bench/scale.sh (make bench-scale) runs it against the local test bed's API server.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/versions.sh"
if [[ -x "$KWOK_BIN/kwok" ]]; then exit 0; fi
echo "build-kwok: building kwok $KWOK_VERSION (about 2 min cold)" >&2
GOTOOLCHAIN=local GOFLAGS= GOBIN="$KWOK_BIN.partial" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
rm -rf "$KWOK_BIN"; mv "$KWOK_BIN.partial" "$KWOK_BIN"
echo "build-kwok: $("$KWOK_BIN/kwok" --version 2>&1 | head -1)" >&2
