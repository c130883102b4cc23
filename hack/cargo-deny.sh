#!/usr/bin/env bash
# The dependency policy (deny.toml): licenses, banned crates, sources. `make deny`, part of
# `make test`. Installs the pinned cargo-deny (hack/versions.sh) with cargo into the cache on
# first use (hack/cargo-tool.sh: about 1.5 min of build, once per machine).
#   hack/cargo-deny.sh                  the check
#   hack/cargo-deny.sh --install-only   the tool alone (hack/test.sh builds it in the background)
#
# Advisories are not checked here: `cargo deny check advisories` fetches the advisory database
# from its repository, which the test machines cannot reach. Run it where it is reachable.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/versions.sh"
deny="$("$here/cargo-tool.sh" cargo-deny "$CARGO_DENY_VERSION" "$CARGO_DENY_ROOT" cargo-deny)"
[[ "${1:-}" == --install-only ]] && { echo "cargo-deny: $deny"; exit 0; }
cd "$here/.."
"$deny" --version >&2
exec "$deny" check --hide-inclusion-graph licenses bans sources
