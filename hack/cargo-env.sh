# Sourced by the scripts that run cargo and may themselves be run by a test (hack/install.sh and
# hack/previous-release.sh, from the upgrade and migration suites): it removes the variables cargo
# sets for a test process (CARGO_MANIFEST_DIR, CARGO_PKG_NAME, ...). Left in place, a nested cargo
# sees them in its own environment, and build scripts that declared them with
# rerun-if-env-changed (ring's does) count as changed: ring, rustls, kube and everything above
# them were compiled again inside the upgrade suite (4 minutes) and once more by the next suite.
# CARGO_HOME, CARGO_TARGET_DIR, CARGO_INCREMENTAL and the other settings a user gives stay (and so
# do CARGO_BIN_EXE_<name-with-dashes>, which no shell can unset and no build script reads).
while read -r variable; do
  unset "$variable"
done < <(compgen -e | grep -E '^(CARGO|CARGO_(PKG_[A-Z_]+|MANIFEST_[A-Z_]+|CRATE_NAME|BIN_NAME|BIN_EXE_.*|PRIMARY_PACKAGE|TARGET_TMPDIR|RUSTC_CURRENT_DIR))$')
