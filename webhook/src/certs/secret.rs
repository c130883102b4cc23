//! The self-managed Secret: its contents, typed ([`Stored`], what the rotation reads and
//! writes), and its reads and writes.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

use super::bundle::*;
use super::generate::{CaPair, first_der, issue_serving, new_ca, new_ca_and_serving, unix_now};
use crate::rotation::{Facts, Policy, RotationStep, Serving, Validity};

/// The bundle a Secret holds.
pub fn bundle_from_secret(secret: &Secret) -> Result<Bundle, CertError> {
    let name = secret.metadata.name.clone().unwrap_or_default();
    let data = secret.data.clone().unwrap_or_default();
    let field = |key: &'static str| {
        data.get(key)
            .map(|value| String::from_utf8_lossy(&value.0).into_owned())
            .ok_or_else(|| CertError::SecretIncomplete(name.clone(), key))
    };
    Ok(Bundle {
        cert_pem: field(TLS_CERT)?,
        key_pem: field(TLS_KEY)?,
        ca_pem: field(CA_CERT)?,
    })
}

/// The self-managed Secret's contents, typed: what the rotation reads and writes. Keys that are
/// absent or unreadable are empty or `None`: what they mean for the rotation is decided by
/// [`Stored::facts`], never by an error here.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Stored {
    pub serving_cert: String,
    pub serving_key: String,
    /// `ca.crt`: every CA to trust, oldest first.
    pub ca_bundle: String,
    /// The CA that signs the serving certificate.
    pub signing: Option<CaPair>,
    /// A new CA, in `ca_bundle` but not signing yet.
    pub next: Option<CaPair>,
    pub next_published_at: Option<i64>,
    pub previous_since: Option<i64>,
}

impl fmt::Debug for Stored {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("Stored")
            .field("signing", &self.signing.is_some())
            .field("next", &self.next.is_some())
            .field("next_published_at", &self.next_published_at)
            .field("previous_since", &self.previous_since)
            .finish_non_exhaustive()
    }
}

/// The PEM certificates of a text, in order; unreadable ones are left out.
pub(super) fn ders(pem: &str) -> Vec<CertificateDer<'static>> {
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .filter_map(Result::ok)
        .collect()
}

fn with_newline(pem: &str) -> String {
    if pem.is_empty() || pem.ends_with('\n') {
        pem.to_owned()
    } else {
        format!("{pem}\n")
    }
}

/// Whether `key_pem` is the private key of the certificate `der` (its SubjectPublicKeyInfo is
/// embedded verbatim in the certificate).
fn key_matches(der: &[u8], key_pem: &str) -> bool {
    use rcgen::PublicKeyData as _;
    let Ok(key) = rcgen::KeyPair::from_pem(key_pem) else {
        return false;
    };
    let spki = key.subject_public_key_info();
    !spki.is_empty()
        && der
            .windows(spki.len())
            .any(|window| window == spki.as_slice())
}

/// Whether `leaf` chains to one of `cas` at `now` and names every one of `dns_names`.
pub(super) fn verifies(
    leaf: &CertificateDer<'_>,
    cas: &[CertificateDer<'static>],
    now: i64,
    dns_names: &[String],
) -> bool {
    let mut roots = rustls::RootCertStore::empty();
    for ca in cas {
        if roots.add(ca.clone()).is_err() {
            tracing::debug!("a CA of the bundle is not a usable trust anchor");
        }
    }
    if roots.is_empty() {
        return false;
    }
    let Ok(parsed) = rustls::server::ParsedCertificate::try_from(leaf) else {
        return false;
    };
    let provider = rustls::crypto::CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()));
    let at = UnixTime::since_unix_epoch(Duration::from_secs(u64::try_from(now).unwrap_or(0)));
    rustls::client::verify_server_cert_signed_by_trust_anchor(
        &parsed,
        &roots,
        &[],
        at,
        provider.signature_verification_algorithms.all,
    )
    .is_ok()
        && dns_names.iter().all(|name| {
            ServerName::try_from(name.as_str())
                .is_ok_and(|name| rustls::client::verify_server_name(&parsed, &name).is_ok())
        })
}

fn validity_of(der: &[u8]) -> Option<Validity> {
    crate::x509::validity(der)
        .ok()
        .map(|(not_before, not_after)| Validity {
            not_before,
            not_after,
        })
}

impl Stored {
    /// A fresh start: a new CA, a serving certificate from it, a bundle of that CA.
    pub fn generate(dns_names: &[String], now: i64, policy: &Policy) -> Result<Self, CertError> {
        let (ca, serving_cert, serving_key) = new_ca_and_serving(dns_names, now, policy)?;
        Ok(Self {
            serving_cert,
            serving_key,
            ca_bundle: ca.cert_pem.clone(),
            signing: Some(ca),
            ..Self::default()
        })
    }

    /// What the server uses and publishes.
    pub fn bundle(&self) -> Bundle {
        Bundle {
            cert_pem: self.serving_cert.clone(),
            key_pem: self.serving_key.clone(),
            ca_pem: self.ca_bundle.clone(),
        }
    }

    /// Reads the Secret's keys and annotations.
    pub fn from_secret(secret: &Secret) -> Self {
        let data = secret.data.clone().unwrap_or_default();
        let field = |key: &str| {
            data.get(key)
                .map(|value| String::from_utf8_lossy(&value.0).into_owned())
                .unwrap_or_default()
        };
        let pair = |cert: &str, key: &str| {
            Some(CaPair {
                cert_pem: field(cert),
                key_pem: field(key),
            })
            .filter(|pair| !pair.cert_pem.is_empty() && !pair.key_pem.is_empty())
        };
        let annotation = |key: &str| {
            secret
                .metadata
                .annotations
                .as_ref()
                .and_then(|annotations| annotations.get(key))
                .and_then(|value| value.trim().parse::<i64>().ok())
        };
        Self {
            serving_cert: field(TLS_CERT),
            serving_key: field(TLS_KEY),
            ca_bundle: field(CA_CERT),
            signing: pair(SIGNING_CA_CERT, CA_KEY),
            next: pair(NEXT_CA_CERT, NEXT_CA_KEY),
            next_published_at: annotation(ANNOTATION_NEXT_CA_PUBLISHED),
            previous_since: annotation(ANNOTATION_PREVIOUS_CA_SINCE),
        }
    }

    /// Writes the contents into `secret` (its other keys, labels and annotations stay).
    pub fn write_into(&self, secret: &mut Secret) {
        let data = secret.data.get_or_insert_with(Default::default);
        let mut put = |key: &str, value: Option<&String>| match value {
            Some(value) => {
                data.insert(key.to_owned(), ByteString(value.clone().into_bytes()));
            }
            None => {
                data.remove(key);
            }
        };
        put(TLS_CERT, Some(&self.serving_cert));
        put(TLS_KEY, Some(&self.serving_key));
        put(CA_CERT, Some(&self.ca_bundle));
        put(
            SIGNING_CA_CERT,
            self.signing.as_ref().map(|ca| &ca.cert_pem),
        );
        put(CA_KEY, self.signing.as_ref().map(|ca| &ca.key_pem));
        put(NEXT_CA_CERT, self.next.as_ref().map(|ca| &ca.cert_pem));
        put(NEXT_CA_KEY, self.next.as_ref().map(|ca| &ca.key_pem));
        let annotations = secret
            .metadata
            .annotations
            .get_or_insert_with(Default::default);
        for (key, value) in [
            (ANNOTATION_NEXT_CA_PUBLISHED, self.next_published_at),
            (ANNOTATION_PREVIOUS_CA_SINCE, self.previous_since),
        ] {
            match value {
                Some(value) => {
                    annotations.insert(key.to_owned(), value.to_string());
                }
                None => {
                    annotations.remove(key);
                }
            }
        }
    }

    /// What the rotation needs to know at `now`; `bundle_published`: this pass found `ca.crt`
    /// in every caBundle.
    pub fn facts(&self, now: i64, dns_names: &[String], bundle_published: bool) -> Facts {
        let bundle = ders(&self.ca_bundle);
        // A CA counts only when its certificate is in the bundle and its key belongs to it.
        let usable = |pair: Option<&CaPair>| {
            let pair = pair?;
            let der = first_der(&pair.cert_pem)?;
            (bundle.contains(&der) && key_matches(&der, &pair.key_pem)).then_some(der)
        };
        let signing = usable(self.signing.as_ref());
        let next = usable(self.next.as_ref()).filter(|next| Some(next) != signing.as_ref());
        let other_cas = bundle
            .iter()
            .any(|ca| Some(ca) != signing.as_ref() && Some(ca) != next.as_ref());
        let serving = first_der(&self.serving_cert)
            .filter(|leaf| key_matches(leaf, &self.serving_key))
            .filter(|leaf| verifies(leaf, &bundle, now, dns_names))
            .and_then(|leaf| {
                Some(Serving {
                    validity: validity_of(&leaf)?,
                    from_signing_ca: signing
                        .as_ref()
                        .is_some_and(|ca| verifies(&leaf, std::slice::from_ref(ca), now, &[])),
                })
            });
        Facts {
            signing_ca: signing.as_deref().and_then(validity_of),
            next_ca: next.as_deref().and_then(validity_of),
            next_ca_published_at: next.as_ref().and(self.next_published_at),
            other_cas,
            previous_ca_since: self.previous_since,
            serving,
            bundle_published,
        }
    }

    /// The contents after `step` at `now`.
    pub fn apply(
        &self,
        step: RotationStep,
        now: i64,
        policy: &Policy,
        dns_names: &[String],
    ) -> Result<Self, CertError> {
        let mut next = self.clone();
        match step {
            RotationStep::Idle => {}
            RotationStep::Regenerate => next = Self::generate(dns_names, now, policy)?,
            RotationStep::RenewServing => {
                let ca = self.signing.as_ref().ok_or(CertError::NoCaFor(step))?;
                (next.serving_cert, next.serving_key) =
                    issue_serving(ca, dns_names, now, policy.serving_validity)?;
            }
            RotationStep::StageCa => {
                let ca = new_ca(now, policy.ca_validity)?;
                next.ca_bundle = format!("{}{}", with_newline(&self.ca_bundle), ca.cert_pem);
                next.next = Some(ca);
                next.next_published_at = None;
            }
            RotationStep::MarkPublished => next.next_published_at = Some(now),
            RotationStep::SwitchCa => {
                let ca = self.next.clone().ok_or(CertError::NoCaFor(step))?;
                (next.serving_cert, next.serving_key) =
                    issue_serving(&ca, dns_names, now, policy.serving_validity)?;
                let signing = first_der(&ca.cert_pem);
                let others = ders(&self.ca_bundle)
                    .into_iter()
                    .any(|der| Some(&der) != signing.as_ref());
                next.previous_since = others.then_some(now);
                next.signing = Some(ca);
                next.next = None;
                next.next_published_at = None;
            }
            RotationStep::RetireCa => {
                let ca = self.signing.as_ref().ok_or(CertError::NoCaFor(step))?;
                next.ca_bundle = with_newline(&ca.cert_pem);
                if let Some(staged) = &self.next {
                    next.ca_bundle.push_str(&with_newline(&staged.cert_pem));
                }
                next.previous_since = None;
            }
        }
        Ok(next)
    }
}

/// The shared bundle from the Secret, creating the Secret with a new CA and serving certificate
/// (lifetimes from `policy`) when absent. Two replicas starting together both try to create it;
/// the loser reads the winner's.
pub async fn ensure_secret(
    client: &Client,
    namespace: &str,
    name: &str,
    dns_names: &[String],
    policy: &Policy,
) -> Result<Bundle, CertError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    if let Some(secret) = secrets.get_opt(name).await? {
        return bundle_from_secret(&secret);
    }
    let stored = Stored::generate(dns_names, unix_now(), policy)?;
    let mut secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some([("app.kubernetes.io/part-of".to_owned(), "crr".to_owned())].into()),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".to_owned()),
        ..Default::default()
    };
    stored.write_into(&mut secret);
    let params = PostParams {
        field_manager: Some(crate::FIELD_MANAGER.to_owned()),
        ..PostParams::default()
    };
    match secrets.create(&params, &secret).await {
        Ok(_) => {
            tracing::info!(secret = %format!("{namespace}/{name}"), "generated a new CA and serving certificate");
            Ok(stored.bundle())
        }
        Err(kube::Error::Api(response)) if response.code == 409 => {
            bundle_from_secret(&secrets.get(name).await?)
        }
        Err(error) => Err(error.into()),
    }
}

/// Reads the Secret (for reloads).
pub async fn read_secret(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<Bundle, CertError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    bundle_from_secret(&secrets.get(name).await?)
}
