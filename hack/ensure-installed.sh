#!/usr/bin/env bash
# Starts the local test bed if none runs and installs crr if it is not installed (both left
# running): what `make chaos`, `make migration` and `make upgrade` need before their suite.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/versions.sh"
. "$here/cluster-env.sh"
if ! kubectl get --raw /readyz >/dev/null 2>&1; then
  "$here/cluster.sh" up
fi
if ! kubectl -n crr-system get deployment crr-operator >/dev/null 2>&1; then
  "$here/install.sh"
fi
