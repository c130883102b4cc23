//! The krew plugin manifest (krew/crr.yaml): well formed, the version of this crate, one archive
//! per released platform, each installing the `kubectl-crr` binary. No cluster needed.

use serde_json::Value;

const MANIFEST: &str = include_str!("../krew/crr.yaml");

#[test]
fn the_krew_manifest_names_this_version_and_every_platform() {
    let manifest: Value = serde_saphyr::from_str(MANIFEST).expect("krew/crr.yaml parses");
    assert_eq!(
        manifest["apiVersion"],
        "krew.googlecontainertools.github.com/v1alpha2"
    );
    assert_eq!(manifest["kind"], "Plugin");
    assert_eq!(
        manifest["metadata"]["name"], "crr",
        "installed as `kubectl crr`"
    );
    let spec = &manifest["spec"];
    let version = format!("v{}", env!("CARGO_PKG_VERSION"));
    assert_eq!(
        spec["version"],
        version.as_str(),
        "krew's version is the crate's"
    );
    for field in ["homepage", "shortDescription", "description", "caveats"] {
        assert!(
            spec[field].as_str().is_some_and(|text| !text.is_empty()),
            "{field}"
        );
    }
    let mut platforms = Vec::new();
    for platform in spec["platforms"].as_array().expect("platforms") {
        let labels = &platform["selector"]["matchLabels"];
        let (os, arch) = (
            labels["os"].as_str().expect("os"),
            labels["arch"].as_str().expect("arch"),
        );
        platforms.push(format!("{os}/{arch}"));
        assert_eq!(platform["bin"], "kubectl-crr");
        let uri = platform["uri"].as_str().expect("uri");
        assert!(
            uri.starts_with("https://") && uri.ends_with(&format!("-{version}-{os}-{arch}.tar.gz")),
            "{uri}"
        );
        let sha256 = platform["sha256"].as_str().expect("sha256");
        assert!(
            sha256.len() == 64 && sha256.chars().all(|c| c.is_ascii_hexdigit()),
            "{os}/{arch}: sha256 {sha256:?}"
        );
    }
    assert_eq!(
        platforms,
        ["linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"]
    );
}
