#!/usr/bin/env bash
# The dependency policy (deny.toml): licenses, banned crates, sources. `make deny`, part of
# `make test`. Installs the pinned cargo-deny (hack/versions.sh) with cargo into the cache on
# first use (a few minutes of build, once per machine).
#
# Advisories are not checked here: `cargo deny check advisories` fetches the advisory database
# from its repository, which the test machines cannot reach. Run it where it is reachable.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/versions.sh"
deny="$("$here/cargo-tool.sh" cargo-deny "$CARGO_DENY_VERSION" "$CARGO_DENY_ROOT" cargo-deny)"
cd "$here/.."
"$deny" --version >&2
exec "$deny" check --hide-inclusion-graph licenses bans sources
