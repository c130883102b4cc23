//! The hash of a ConfigMap's or Secret's data: what a config change compares. Only the data
//! counts (`data` and `binaryData`; a Secret's `data`), never labels or annotations; the hash is
//! all the operator keeps of it.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};

use super::config_change::Hashes;

/// The data of a ConfigMap, hashed.
pub fn config_map(config_map: &ConfigMap) -> String {
    let mut hasher = Hasher::default();
    hasher.entries(
        b'd',
        config_map
            .data
            .iter()
            .flatten()
            .map(|(key, value)| (key, value.as_bytes())),
    );
    hasher.entries(b'b', byte_entries(config_map.binary_data.as_ref()));
    hasher.finish()
}

/// The data of a Secret, hashed.
pub fn secret(secret: &Secret) -> String {
    let mut hasher = Hasher::default();
    hasher.entries(b'd', byte_entries(secret.data.as_ref()));
    hasher.finish()
}

fn byte_entries(
    data: Option<&BTreeMap<String, ByteString>>,
) -> impl Iterator<Item = (&String, &[u8])> {
    data.into_iter()
        .flatten()
        .map(|(key, value)| (key, value.0.as_slice()))
}

/// A short hash of a record of hashes (its JSON): names the rollout that rolls the record out.
pub fn record(record: &Hashes) -> String {
    let text = serde_json::to_string(record).unwrap_or_default();
    hex_prefix(
        ring::digest::digest(&ring::digest::SHA256, text.as_bytes()).as_ref(),
        8,
    )
}

/// A short hash of a requested restart's value: names the rollout of that value.
pub fn restart_value(value: &str) -> String {
    hex_prefix(
        ring::digest::digest(&ring::digest::SHA256, value.as_bytes()).as_ref(),
        8,
    )
}

/// The first `bytes` bytes of a digest, in hex.
fn hex_prefix(digest: &[u8], bytes: usize) -> String {
    digest[..bytes.min(digest.len())]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// SHA-256 over length-prefixed entries (keys come sorted from the `BTreeMap`s), so no two
/// different data hash alike by how their bytes run together.
struct Hasher(ring::digest::Context);

impl Default for Hasher {
    fn default() -> Self {
        Self(ring::digest::Context::new(&ring::digest::SHA256))
    }
}

impl Hasher {
    fn entries<'a>(&mut self, tag: u8, entries: impl Iterator<Item = (&'a String, &'a [u8])>) {
        for (key, value) in entries {
            self.0.update(&[tag]);
            for part in [key.as_bytes(), value] {
                self.0.update(&(part.len() as u64).to_be_bytes());
                self.0.update(part);
            }
        }
    }

    /// The first 16 bytes of the digest, in hex: plenty to tell versions of one object apart.
    fn finish(self) -> String {
        hex_prefix(self.0.finish().as_ref(), 16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn config(data: &[(&str, &str)]) -> ConfigMap {
        ConfigMap {
            data: Some(
                data.iter()
                    .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
                    .collect(),
            ),
            ..ConfigMap::default()
        }
    }

    #[test]
    fn only_the_data_counts() {
        let before = config(&[("a", "1"), ("b", "2")]);
        let mut relabelled = before.clone();
        relabelled.metadata = ObjectMeta {
            labels: Some([("new".to_owned(), "label".to_owned())].into()),
            annotations: Some([("note".to_owned(), "x".to_owned())].into()),
            resource_version: Some("99".to_owned()),
            ..ObjectMeta::default()
        };
        assert_eq!(config_map(&before), config_map(&relabelled));
        assert_ne!(
            config_map(&before),
            config_map(&config(&[("a", "1"), ("b", "3")]))
        );
        assert_eq!(config_map(&before).len(), 32);
    }

    #[test]
    fn how_bytes_run_together_does_not_collide() {
        assert_ne!(
            config_map(&config(&[("ab", "c")])),
            config_map(&config(&[("a", "bc")]))
        );
        let binary = ConfigMap {
            binary_data: Some([("a".to_owned(), ByteString(b"1".to_vec()))].into()),
            ..ConfigMap::default()
        };
        assert_ne!(config_map(&binary), config_map(&config(&[("a", "1")])));
    }

    #[test]
    fn a_secret_hashes_its_data() {
        let secret_of = |value: &[u8]| Secret {
            data: Some([("password".to_owned(), ByteString(value.to_vec()))].into()),
            ..Secret::default()
        };
        assert_eq!(secret(&secret_of(b"a")), secret(&secret_of(b"a")));
        assert_ne!(secret(&secret_of(b"a")), secret(&secret_of(b"b")));
    }
}
