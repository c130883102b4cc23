//! The serving certificate: generated (a CA and a leaf for the Service's DNS names, with
//! rcgen), kept in one Secret that every replica shares, renewed and its CA rolled over there
//! (what is due is `rotation::plan`; this module generates, reads and writes), and published as
//! `caBundle` in the webhook configurations and the CRD's conversion; or read from files
//! (cert-manager style, never rotated here). Either way the current key pair sits behind
//! [`CertResolver`], swapped without a restart.

use std::fmt;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crr_runtime::events::EventPublisher;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ObjectMeta, Patch, PostParams};
use kube::{Client, Resource as _};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use serde_json::json;

use crate::metrics::{CertificateExpiry, CertificateRenewals};
use crate::rotation::{self, Facts, Policy, RotationStep, Serving, Validity};

/// Keys of the Secret, as cert-manager names them: the serving certificate and key, and the CAs
/// to trust (published as `caBundle`; two of them during a CA rollover).
pub const TLS_CERT: &str = "tls.crt";
pub const TLS_KEY: &str = "tls.key";
pub const CA_CERT: &str = "ca.crt";
/// Keys crr adds (cert-manager and its consumers ignore them): the key of the CA that signs the
/// serving certificate, that CA's certificate (one of `ca.crt`), and a new CA staged during a
/// rollover, with its key. An old CA kept after a rollover needs no key: it stays in `ca.crt`.
pub const CA_KEY: &str = "ca.key";
pub const SIGNING_CA_CERT: &str = "signing-ca.crt";
pub const NEXT_CA_CERT: &str = "next-ca.crt";
pub const NEXT_CA_KEY: &str = "next-ca.key";
/// Unix seconds when the bundle with the staged CA was found in every caBundle.
pub const ANNOTATION_NEXT_CA_PUBLISHED: &str = "crr.apps.kruise.io/next-ca-published-at";
/// Unix seconds since when the CAs of `ca.crt` other than the signing one are the previous CA of
/// a rollover (they leave `ca.crt` an overlap later).
pub const ANNOTATION_PREVIOUS_CA_SINCE: &str = "crr.apps.kruise.io/previous-ca-since";

#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("generating the certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("the certificate or key is not valid PEM: {0}")]
    Pem(String),
    #[error("the key cannot sign with this TLS provider: {0}")]
    Key(rustls::Error),
    #[error("the Secret {0} lacks {1}")]
    SecretIncomplete(String, &'static str),
    #[error("the CA certificate cannot be read: {0}")]
    CaUnreadable(#[from] crate::x509::ExpiryError),
    #[error("the time {0} is out of range")]
    TimeOutOfRange(i64),
    #[error("{0} needs a CA that the Secret does not hold")]
    NoCaFor(RotationStep),
    #[error("talking to the API server: {0}")]
    Api(#[from] kube::Error),
}

/// PEM texts of a serving certificate, its key and the CAs to trust.
#[derive(Clone, PartialEq, Eq)]
pub struct Bundle {
    pub cert_pem: String,
    pub key_pem: String,
    pub ca_pem: String,
}

impl fmt::Debug for Bundle {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.debug_struct("Bundle").finish_non_exhaustive()
    }
}

/// The DNS names a Service `namespace/name` is called by.
pub fn service_dns_names(namespace: &str, name: &str) -> Vec<String> {
    vec![
        name.to_owned(),
        format!("{name}.{namespace}"),
        format!("{name}.{namespace}.svc"),
        format!("{name}.{namespace}.svc.cluster.local"),
    ]
}

/// A CA's certificate and private key (PEM).
#[derive(Clone, PartialEq, Eq)]
pub struct CaPair {
    pub cert_pem: String,
    pub key_pem: String,
}

impl fmt::Debug for CaPair {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.debug_struct("CaPair").finish_non_exhaustive()
    }
}

/// The subject of a CA crr made: unique per CA (two CAs sit in one bundle during a rollover),
/// and derived from the certificate's own notBefore, so that the issuer of a new serving
/// certificate can be rebuilt from the stored certificate without an X.509 parser. Kubernetes
/// names its self-signed CAs the same way (`<host>-ca@<unix seconds>`).
fn ca_common_name(not_before: i64) -> String {
    format!("crr-webhook-ca@{not_before}")
}

fn offset_time(unix: i64) -> Result<time::OffsetDateTime, CertError> {
    time::OffsetDateTime::from_unix_timestamp(unix).map_err(|_| CertError::TimeOutOfRange(unix))
}

/// The parameters of a crr CA valid from `not_before` to `not_after`.
fn ca_params(not_before: i64, not_after: i64) -> Result<rcgen::CertificateParams, CertError> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyUsagePurpose};
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params
        .distinguished_name
        .push(DnType::CommonName, ca_common_name(not_before));
    // Path length 0: the CA signs serving certificates only, never another CA.
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params.not_before = offset_time(not_before)?;
    params.not_after = offset_time(not_after)?;
    Ok(params)
}

/// A new CA, valid for `validity` seconds from `now` (backdated, see [`Policy::backdate`]).
pub fn new_ca(now: i64, validity: i64) -> Result<CaPair, CertError> {
    let key = rcgen::KeyPair::generate()?;
    let params = ca_params(now - Policy::backdate(validity), now + validity)?;
    let cert = params.self_signed(&key)?;
    Ok(CaPair {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

fn first_der(pem: &str) -> Option<CertificateDer<'static>> {
    CertificateDer::pem_slice_iter(pem.as_bytes()).find_map(Result::ok)
}

/// A serving certificate for `dns_names` (and 127.0.0.1) signed by `ca`, valid for `validity`
/// seconds from `now` but never beyond the CA; returns its PEM and its key's PEM.
pub fn issue_serving(
    ca: &CaPair,
    dns_names: &[String],
    now: i64,
    validity: i64,
) -> Result<(String, String), CertError> {
    use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, KeyPair, KeyUsagePurpose};
    let ca_der =
        first_der(&ca.cert_pem).ok_or_else(|| CertError::Pem("no CA certificate".into()))?;
    let (ca_not_before, ca_not_after) = crate::x509::validity(&ca_der)?;
    let ca_key = KeyPair::from_pem(&ca.key_pem)?;
    let issuer = rcgen::Issuer::new(ca_params(ca_not_before, ca_not_after)?, ca_key);

    let leaf_key = KeyPair::generate()?;
    let mut names = dns_names.to_vec();
    names.push("127.0.0.1".to_owned());
    let mut params = CertificateParams::new(names)?;
    params.distinguished_name.push(
        DnType::CommonName,
        dns_names.first().cloned().unwrap_or_default(),
    );
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.not_before = offset_time((now - Policy::backdate(validity)).max(ca_not_before))?;
    params.not_after = offset_time((now + validity).min(ca_not_after))?;
    let leaf = params.signed_by(&leaf_key, &issuer)?;
    Ok((leaf.pem(), leaf_key.serialize_pem()))
}

/// A new CA and a serving certificate it signs for `dns_names` (and 127.0.0.1), with the
/// lifetimes of [`Policy::DEFAULT`].
pub fn generate(dns_names: &[String]) -> Result<Bundle, CertError> {
    Ok(Stored::generate(dns_names, unix_now(), &Policy::DEFAULT)?.bundle())
}

/// Now, in Unix seconds.
pub fn unix_now() -> i64 {
    time_now().unix_timestamp()
}

fn time_now() -> time::OffsetDateTime {
    time::OffsetDateTime::now_utc()
}

/// The rustls form of a bundle.
pub fn certified_key(bundle: &Bundle) -> Result<CertifiedKey, CertError> {
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(bundle.cert_pem.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(|error| CertError::Pem(error.to_string()))?;
    if chain.is_empty() {
        return Err(CertError::Pem("no certificate".into()));
    }
    let key = PrivateKeyDer::from_pem_slice(bundle.key_pem.as_bytes())
        .map_err(|error| CertError::Pem(error.to_string()))?;
    let provider = rustls::crypto::CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()));
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(CertError::Key)?;
    Ok(CertifiedKey::new(chain, signing))
}

/// When the certificates of a bundle expire (`notAfter`, Unix seconds): `None` for a
/// certificate that is absent or unreadable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Expiry {
    /// The serving certificate (the first of `tls.crt`).
    pub serving: Option<i64>,
    /// The CA: of the certificates in `ca.crt`, the one that expires last (while two CAs are
    /// bundled during a rollover, the new one is the one that matters).
    pub ca: Option<i64>,
}

/// Reads the expiry of `bundle`'s certificates; what cannot be read is logged and left `None`.
pub fn expiry(bundle: &Bundle) -> Expiry {
    let read = |what: &str, pem: &str| -> Vec<i64> {
        CertificateDer::pem_slice_iter(pem.as_bytes())
            .filter_map(|der| {
                let result = der
                    .map_err(|error| error.to_string())
                    .and_then(|der| crate::x509::not_after(&der).map_err(|error| error.to_string()));
                result
                    .inspect_err(|error| tracing::warn!(certificate = what, %error, "reading the certificate's expiry"))
                    .ok()
            })
            .collect()
    };
    Expiry {
        serving: read("serving", &bundle.cert_pem).first().copied(),
        ca: read("ca", &bundle.ca_pem).into_iter().max(),
    }
}

/// Hands rustls the current key pair; [`CertResolver::set`] swaps it for new connections. Each
/// bundle it takes (the first and every swap) sets the certificate expiry metric.
#[derive(Debug)]
pub struct CertResolver {
    current: RwLock<(Arc<CertifiedKey>, Bundle)>,
    expiry: CertificateExpiry,
}

impl CertResolver {
    /// A resolver whose certificates' expiry is reported nowhere (tests).
    pub fn new(bundle: Bundle) -> Result<Arc<Self>, CertError> {
        Self::reporting(bundle, CertificateExpiry::default())
    }

    /// A resolver that reports the expiry of the certificates in use to `expiry`.
    pub fn reporting(bundle: Bundle, expiry: CertificateExpiry) -> Result<Arc<Self>, CertError> {
        let key = Arc::new(certified_key(&bundle)?);
        expiry.set(crate::certs::expiry(&bundle));
        Ok(Arc::new(Self {
            current: RwLock::new((key, bundle)),
            expiry,
        }))
    }

    /// Installs `bundle` when it differs from the current one; returns whether it did.
    pub fn set(&self, bundle: Bundle) -> Result<bool, CertError> {
        if self.bundle() == bundle {
            return Ok(false);
        }
        let key = Arc::new(certified_key(&bundle)?);
        let expiry = expiry(&bundle);
        let mut current = self
            .current
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *current = (key, bundle);
        drop(current);
        self.expiry.set(expiry);
        Ok(true)
    }

    pub fn bundle(&self) -> Bundle {
        self.current
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .1
            .clone()
    }
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .0
                .clone(),
        )
    }
}

fn bundle_from_secret(secret: &Secret) -> Result<Bundle, CertError> {
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
fn ders(pem: &str) -> Vec<CertificateDer<'static>> {
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
fn verifies(
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
        let ca = new_ca(now, policy.ca_validity)?;
        let (serving_cert, serving_key) =
            issue_serving(&ca, dns_names, now, policy.serving_validity)?;
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
        field_manager: Some(crate::run::FIELD_MANAGER.to_owned()),
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

/// Reads `tls.crt`, `tls.key` and `ca.crt` from a folder (a mounted Secret).
pub fn read_dir(dir: &std::path::Path) -> Result<Bundle, CertError> {
    let read = |file: &str| {
        std::fs::read_to_string(dir.join(file))
            .map_err(|error| CertError::Pem(format!("{}: {error}", dir.join(file).display())))
    };
    Ok(Bundle {
        cert_pem: read(TLS_CERT)?,
        key_pem: read(TLS_KEY)?,
        ca_pem: read(CA_CERT).unwrap_or_default(),
    })
}

/// The JSON patch that sets `caBundle` on every webhook (in order) whose client config does not
/// hold `ca_pem` yet; `None` when all do.
pub fn ca_bundle_patch<'a>(
    configs: impl Iterator<Item = &'a WebhookClientConfig>,
    ca_pem: &str,
) -> Option<json_patch::Patch> {
    let bundle = serde_json::to_value(ByteString(ca_pem.as_bytes().to_vec())).ok()?;
    let operations: Vec<_> = configs
        .enumerate()
        .filter(|(_, config)| config.ca_bundle.as_ref().map(|b| b.0.as_slice()) != Some(ca_pem.as_bytes()))
        .map(|(index, _)| json!({"op": "add", "path": format!("/webhooks/{index}/clientConfig/caBundle"), "value": bundle}))
        .collect();
    if operations.is_empty() {
        return None;
    }
    serde_json::from_value(json!(operations)).ok()
}

/// Where the CA must be published.
#[derive(Clone, Debug)]
pub struct CaTargets {
    /// MutatingWebhookConfiguration name.
    pub mutating: Option<String>,
    /// ValidatingWebhookConfiguration name.
    pub validating: Option<String>,
    /// CustomResourceDefinition name (its conversion webhook).
    pub crd: Option<String>,
}

/// Puts `ca_pem` into every webhook of the named configurations and into the CRD's conversion,
/// where it is not there yet. Missing objects are skipped (installed later, or not by us).
/// Returns how many objects were patched.
pub async fn publish_ca(
    client: &Client,
    targets: &CaTargets,
    ca_pem: &str,
) -> Result<usize, CertError> {
    let bundle = serde_json::to_value(ByteString(ca_pem.as_bytes().to_vec())).unwrap_or_default();
    let mut patched = 0;
    let params = crr_runtime::client::patch_params(crate::run::FIELD_MANAGER);
    if let Some(name) = &targets.mutating {
        let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
        if let Some(config) = mutating.get_opt(name).await? {
            let configs = config
                .webhooks
                .iter()
                .flatten()
                .map(|hook| &hook.client_config);
            if let Some(patch) = ca_bundle_patch(configs, ca_pem) {
                mutating
                    .patch(name, &params, &Patch::<()>::Json(patch))
                    .await?;
                patched += 1;
            }
        }
    }
    if let Some(name) = &targets.validating {
        let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
        if let Some(config) = validating.get_opt(name).await? {
            let configs = config
                .webhooks
                .iter()
                .flatten()
                .map(|hook| &hook.client_config);
            if let Some(patch) = ca_bundle_patch(configs, ca_pem) {
                validating
                    .patch(name, &params, &Patch::<()>::Json(patch))
                    .await?;
                patched += 1;
            }
        }
    }
    if let Some(name) = &targets.crd {
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        if let Some(crd) = crds.get_opt(name).await? {
            let current = crd
                .spec
                .conversion
                .as_ref()
                .and_then(|conversion| conversion.webhook.as_ref())
                .and_then(|webhook| webhook.client_config.as_ref());
            if let Some(config) = current
                && config.ca_bundle.as_ref().map(|b| b.0.as_slice()) != Some(ca_pem.as_bytes())
            {
                let patch = json!({"spec": {"conversion": {"webhook": {"clientConfig": {"caBundle": bundle}}}}});
                crds.patch(name, &params, &Patch::Merge(&patch)).await?;
                patched += 1;
            }
        }
    }
    Ok(patched)
}

/// Where the serving certificate comes from.
#[derive(Clone, Debug)]
pub enum CertSource {
    /// Files in a folder (a mounted Secret, cert-manager style), re-read on change.
    Dir(std::path::PathBuf),
    /// The self-managed Secret `namespace/name`, created at start when absent.
    Secret { namespace: String, name: String },
}

impl CertSource {
    /// Reads the current bundle.
    pub async fn read(&self, client: &Client) -> Result<Bundle, CertError> {
        match self {
            Self::Dir(dir) => read_dir(dir),
            Self::Secret { namespace, name } => read_secret(client, namespace, name).await,
        }
    }

    /// The bundle to start with: the folder's, or the Secret's (created for `dns_names` with
    /// the lifetimes of `policy` when absent).
    pub async fn first(
        &self,
        client: &Client,
        dns_names: &[String],
        policy: &Policy,
    ) -> Result<Bundle, CertError> {
        match self {
            Self::Dir(dir) => read_dir(dir),
            Self::Secret { namespace, name } => {
                ensure_secret(client, namespace, name, dns_names, policy).await
            }
        }
    }
}

/// What the upkeep of the self-managed Secret needs to rotate it.
#[derive(Clone)]
pub struct Rotation {
    pub policy: Policy,
    /// The names the serving certificate is for.
    pub dns_names: Vec<String>,
    /// Where renewals are told as Events (about the Secret); `None`: logs only.
    pub events: Option<EventPublisher>,
    pub renewals: CertificateRenewals,
}

/// Certificate upkeep, every `interval`, forever. From files: reloads the serving certificate
/// when they changed and keeps their CA published in `targets` (a re-applied manifest has none);
/// nothing is rotated. From the self-managed Secret: the same, then the step of the rotation
/// that is due ([`rotation::plan`]), written with the resourceVersion it was decided on.
pub async fn keep_up(
    client: Client,
    resolver: Arc<CertResolver>,
    source: CertSource,
    targets: CaTargets,
    interval: std::time::Duration,
    rotation: Rotation,
) {
    loop {
        match &source {
            CertSource::Dir(dir) => {
                reload(&resolver, read_dir(dir));
                publish(&client, &targets, &resolver.bundle().ca_pem).await;
            }
            CertSource::Secret { namespace, name } => {
                rotate(&client, &resolver, namespace, name, &targets, &rotation).await;
            }
        }
        tokio::time::sleep(interval).await;
    }
}

fn reload(resolver: &CertResolver, bundle: Result<Bundle, CertError>) {
    match bundle.and_then(|bundle| resolver.set(bundle)) {
        Ok(true) => tracing::info!("serving certificate reloaded"),
        Ok(false) => {}
        Err(error) => tracing::warn!(%error, "certificate reload"),
    }
}

/// Puts `ca` into every caBundle of `targets`; whether all of them hold it now.
async fn publish(client: &Client, targets: &CaTargets, ca: &str) -> bool {
    if ca.is_empty() {
        return false;
    }
    match publish_ca(client, targets, ca).await {
        Ok(0) => true,
        Ok(count) => {
            tracing::info!(objects = count, "published caBundle");
            true
        }
        Err(error) => {
            tracing::warn!(%error, "publishing caBundle");
            false
        }
    }
}

/// One pass over the self-managed Secret: read it fresh, serve and publish what it holds, then
/// take the rotation step that is due. Of replicas taking the same step, the first write wins
/// (resourceVersion precondition); the others get a conflict and read the winner's Secret on
/// their next pass, where the step is no longer due.
async fn rotate(
    client: &Client,
    resolver: &CertResolver,
    namespace: &str,
    name: &str,
    targets: &CaTargets,
    rotation: &Rotation,
) {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let secret = match secrets.get_opt(name).await {
        Ok(Some(secret)) => secret,
        Ok(None) => {
            let bundle = ensure_secret(
                client,
                namespace,
                name,
                &rotation.dns_names,
                &rotation.policy,
            )
            .await;
            reload(resolver, bundle);
            return;
        }
        Err(error) => {
            tracing::warn!(%error, "reading the certificate Secret");
            return;
        }
    };
    let stored = Stored::from_secret(&secret);
    reload(resolver, bundle_from_secret(&secret));
    let published = publish(client, targets, &stored.ca_bundle).await;
    let now = unix_now();
    let facts = stored.facts(now, &rotation.dns_names, published);
    let step = rotation::plan(&facts, now, &rotation.policy);
    if step == RotationStep::Idle {
        return;
    }
    let changed = match stored.apply(step, now, &rotation.policy, &rotation.dns_names) {
        Ok(changed) => changed,
        Err(error) => {
            tracing::warn!(%error, %step, "certificate rotation");
            return;
        }
    };
    let mut updated = secret;
    // Left out, the server keeps them; the resourceVersion read above stays: the precondition.
    updated.metadata.managed_fields = None;
    changed.write_into(&mut updated);
    let params = PostParams {
        field_manager: Some(crate::run::FIELD_MANAGER.to_owned()),
        ..PostParams::default()
    };
    match secrets.replace(name, &params, &updated).await {
        Ok(written) => {
            reload(resolver, Ok(changed.bundle()));
            if changed.ca_bundle != stored.ca_bundle {
                publish(client, targets, &changed.ca_bundle).await;
            }
            announce(rotation, &written, step, &changed, now).await;
        }
        Err(kube::Error::Api(status)) if status.code == 409 => {
            tracing::info!(%step, "another replica changed the certificate Secret first; reading it again on the next pass");
        }
        Err(error) => tracing::warn!(%error, %step, "writing the certificate Secret"),
    }
}

/// Unix seconds as RFC 3339, for people.
fn rfc3339(unix: Option<i64>) -> String {
    unix.and_then(|unix| k8s_openapi::jiff::Timestamp::from_second(unix).ok())
        .map_or_else(|| "?".to_owned(), |at| at.to_string())
}

/// Logs `step`, counts it and publishes an Event about the Secret.
async fn announce(
    rotation: &Rotation,
    secret: &Secret,
    step: RotationStep,
    stored: &Stored,
    now: i64,
) {
    let serving_until = rfc3339(expiry(&stored.bundle()).serving);
    let ca_until = |pair: Option<&CaPair>| {
        rfc3339(
            pair.and_then(|pair| first_der(&pair.cert_pem))
                .and_then(|der| crate::x509::not_after(&der).ok()),
        )
    };
    let overlap = rotation.policy.ca_overlap;
    let (reason, note, renewed): (&str, String, &[&'static str]) = match step {
        RotationStep::Idle => return,
        RotationStep::Regenerate => (
            "CertificatesRegenerated",
            format!(
                "nothing usable in the Secret: a new CA (until {}) and serving certificate (until {serving_until})",
                ca_until(stored.signing.as_ref())
            ),
            &["ca", "serving"],
        ),
        RotationStep::RenewServing => (
            "ServingCertificateRenewed",
            format!("serving certificate renewed, valid until {serving_until}"),
            &["serving"],
        ),
        RotationStep::StageCa => (
            "CARolloverStarted",
            format!(
                "new CA (until {}) added to caBundle beside the current one; it signs {overlap}s after it is in every caBundle",
                ca_until(stored.next.as_ref())
            ),
            &["ca"],
        ),
        RotationStep::MarkPublished => (
            "CABundlePublished",
            format!(
                "both CAs are in every caBundle; the new CA signs from {}",
                rfc3339(Some(now + overlap))
            ),
            &[],
        ),
        RotationStep::SwitchCa => (
            "CARolloverSwitched",
            format!(
                "the new CA (until {}) signs; serving certificate renewed from it, valid until {serving_until}; the old CA stays in caBundle until {}",
                ca_until(stored.signing.as_ref()),
                rfc3339(Some(now + overlap))
            ),
            &["serving"],
        ),
        RotationStep::RetireCa => ("CARetired", "the old CA left caBundle".to_owned(), &[]),
    };
    for certificate in renewed {
        rotation.renewals.inc(certificate);
    }
    tracing::info!(secret = ?secret.metadata.name, %step, reason, "{note}");
    if let Some(events) = &rotation.events {
        events.normal(&secret.object_ref(&()), reason, &note).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_bundle_loads_and_names_the_service() {
        crr_runtime::tls::install_crypto_provider();
        let names = service_dns_names("crr-system", "crr-webhook");
        assert!(names.contains(&"crr-webhook.crr-system.svc".to_owned()));
        let bundle = generate(&names).expect("generate");
        assert!(bundle.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(bundle.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert_ne!(bundle.cert_pem, bundle.ca_pem);
        let key = certified_key(&bundle).expect("loads into rustls");
        assert_eq!(key.cert.len(), 1);
    }

    #[test]
    fn resolver_swaps_only_on_change() {
        crr_runtime::tls::install_crypto_provider();
        let first = generate(&["a".to_owned()]).expect("generate");
        let second = generate(&["b".to_owned()]).expect("generate");
        let resolver = CertResolver::new(first.clone()).expect("resolver");
        assert!(!resolver.set(first).expect("same"));
        assert!(resolver.set(second.clone()).expect("new"));
        assert!(resolver.bundle() == second);
    }

    #[test]
    fn ca_bundle_patch_touches_only_webhooks_without_the_ca() {
        let with = |ca: Option<&str>| WebhookClientConfig {
            ca_bundle: ca.map(|ca| ByteString(ca.as_bytes().to_vec())),
            ..Default::default()
        };
        let configs = [with(Some("CA")), with(None), with(Some("old"))];
        let patch = ca_bundle_patch(configs.iter(), "CA").expect("two are stale");
        let paths: Vec<String> = patch
            .0
            .iter()
            .map(|op| match op {
                json_patch::PatchOperation::Add(add) => add.path.to_string(),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(
            paths,
            [
                "/webhooks/1/clientConfig/caBundle",
                "/webhooks/2/clientConfig/caBundle"
            ]
        );
        assert!(ca_bundle_patch([with(Some("CA"))].iter(), "CA").is_none());
    }

    #[test]
    fn expiry_reads_both_certificates_of_a_generated_bundle() {
        let before = time_now().unix_timestamp();
        let bundle = generate(&["a".to_owned()]).expect("generate");
        let expiry = expiry(&bundle);
        for (at, lifetime) in [
            (expiry.serving, Policy::DEFAULT.serving_validity),
            (expiry.ca, Policy::DEFAULT.ca_validity),
        ] {
            let at = at.expect("read");
            assert!(
                (before + lifetime..=before + lifetime + 5).contains(&at),
                "{at}"
            );
        }
    }

    const NOW: i64 = 1_800_000_000;

    fn names() -> Vec<String> {
        service_dns_names("crr-system", "crr-webhook")
    }

    /// The test bed's policy (tests/cluster.rs): CA 40 s, serving 15 s, overlap 4 s, resync 1 s.
    fn short() -> Policy {
        Policy::new(40, None, 15, None, 4, 1).expect("a valid policy")
    }

    /// Whether a client that trusts exactly `bundle` accepts `serving` at `now` for every name
    /// of the Service (and 127.0.0.1, which the cluster test calls).
    fn trusted(serving: &str, bundle: &str, now: i64) -> bool {
        let mut names = names();
        names.push("127.0.0.1".to_owned());
        first_der(serving).is_some_and(|leaf| verifies(&leaf, &ders(bundle), now, &names))
    }

    /// Runs the rotation pass by pass (one a second, every bundle published at once) from
    /// `stored` at `from` to `to`; checks at every pass that the serving certificate is trusted
    /// by the bundle in the Secret and by the bundle of the pass before (an API server one step
    /// behind). Returns the steps taken, with their times, and the last contents.
    fn run(
        mut stored: Stored,
        from: i64,
        to: i64,
        policy: &Policy,
    ) -> (Vec<(i64, RotationStep)>, Stored) {
        crr_runtime::tls::install_crypto_provider();
        let mut steps = Vec::new();
        for now in from..to {
            let facts = stored.facts(now, &names(), true);
            let step = rotation::plan(&facts, now, policy);
            if step == RotationStep::Idle {
                continue;
            }
            let next = stored.apply(step, now, policy, &names()).expect("apply");
            assert!(
                trusted(&next.serving_cert, &next.ca_bundle, now),
                "{step} at {now}: the new Secret is consistent"
            );
            assert!(
                trusted(&next.serving_cert, &stored.ca_bundle, now),
                "{step} at {now}: an API server with the bundle before the step still trusts what is served"
            );
            assert!(
                trusted(&stored.serving_cert, &next.ca_bundle, now),
                "{step} at {now}: a replica that has not re-read the Secret is still trusted"
            );
            assert_ne!(next, stored, "{step} at {now} changed nothing");
            steps.push((now, step));
            stored = next;
        }
        (steps, stored)
    }

    #[test]
    fn rotation_renews_serving_and_rolls_the_ca_over_without_an_untrusted_moment() {
        let policy = short();
        let first = Stored::generate(&names(), NOW, &policy).expect("generate");
        let first_ca = first.signing.clone().expect("a signing CA");
        let (steps, last) = run(first, NOW, NOW + 40, &policy);
        let names: Vec<RotationStep> = steps.iter().map(|(_, step)| *step).collect();
        assert_eq!(
            names,
            [
                RotationStep::RenewServing,
                RotationStep::RenewServing,
                RotationStep::StageCa,
                RotationStep::MarkPublished,
                RotationStep::RenewServing,
                RotationStep::SwitchCa,
                RotationStep::RetireCa,
            ],
            "{steps:?}"
        );
        let at = |wanted: RotationStep| {
            steps
                .iter()
                .find(|(_, step)| *step == wanted)
                .map(|(at, _)| at - NOW)
        };
        assert_eq!(
            at(RotationStep::RenewServing),
            Some(10),
            "two thirds of 15 s"
        );
        assert_eq!(
            at(RotationStep::StageCa),
            Some(27),
            "13 s before the CA's 40 s are up"
        );
        assert_eq!(
            at(RotationStep::SwitchCa),
            Some(32),
            "the overlap after publication"
        );
        assert_eq!(
            at(RotationStep::RetireCa),
            Some(36),
            "the overlap after the switch"
        );
        let signing = last.signing.expect("a signing CA");
        assert_ne!(signing, first_ca, "a new CA signs");
        assert_eq!(
            ders(&last.ca_bundle),
            ders(&signing.cert_pem),
            "the old CA has left the bundle"
        );
        assert!(
            last.next.is_none()
                && last.previous_since.is_none()
                && last.next_published_at.is_none()
        );
    }

    #[test]
    fn both_cas_are_in_the_bundle_between_stage_and_retire() {
        let policy = short();
        let first = Stored::generate(&names(), NOW, &policy).expect("generate");
        let (_, staged) = run(first, NOW, NOW + 28, &policy);
        assert_eq!(ders(&staged.ca_bundle).len(), 2);
        assert!(staged.next.is_some());
        let (_, switched) = run(staged, NOW + 28, NOW + 33, &policy);
        assert_eq!(
            ders(&switched.ca_bundle).len(),
            2,
            "the old CA stays after the switch"
        );
        assert_eq!(switched.previous_since, Some(NOW + 32));
    }

    #[test]
    fn the_secret_keeps_the_cert_manager_keys_and_round_trips() {
        let policy = short();
        let first = Stored::generate(&names(), NOW, &policy).expect("generate");
        let (_, staged) = run(first, NOW, NOW + 29, &policy);
        let mut secret = Secret::default();
        staged.write_into(&mut secret);
        let data = secret.data.clone().unwrap_or_default();
        for key in [
            TLS_CERT,
            TLS_KEY,
            CA_CERT,
            CA_KEY,
            SIGNING_CA_CERT,
            NEXT_CA_CERT,
            NEXT_CA_KEY,
        ] {
            assert!(data.contains_key(key), "{key}");
        }
        assert_eq!(Stored::from_secret(&secret), staged);
        assert_eq!(
            bundle_from_secret(&secret).expect("a bundle"),
            staged.bundle()
        );
        let (_, retired) = run(staged, NOW + 29, NOW + 40, &policy);
        retired.write_into(&mut secret);
        let data = secret.data.clone().unwrap_or_default();
        assert!(!data.contains_key(NEXT_CA_CERT) && !data.contains_key(NEXT_CA_KEY));
        assert!(
            secret
                .metadata
                .annotations
                .clone()
                .unwrap_or_default()
                .is_empty()
        );
        assert_eq!(Stored::from_secret(&secret), retired);
    }

    #[test]
    fn a_secret_without_the_ca_key_is_migrated_by_a_rollover() {
        // What crr wrote before it kept CA keys: tls.crt, tls.key, ca.crt only.
        let policy = short();
        let legacy = Stored::generate(&names(), NOW, &Policy::DEFAULT).expect("generate");
        let legacy = Stored {
            signing: None,
            ..legacy
        };
        let facts = legacy.facts(NOW, &names(), true);
        assert_eq!(facts.signing_ca, None);
        assert!(facts.other_cas && facts.serving.is_some());
        let (steps, last) = run(legacy.clone(), NOW, NOW + 20, &policy);
        let names: Vec<RotationStep> = steps.iter().map(|(_, step)| *step).collect();
        assert_eq!(
            names[..4],
            [
                RotationStep::StageCa,
                RotationStep::MarkPublished,
                RotationStep::SwitchCa,
                RotationStep::RetireCa
            ],
            "{steps:?}"
        );
        assert!(
            !ders(&last.ca_bundle)
                .iter()
                .any(|ca| ders(&legacy.ca_bundle).contains(ca))
        );
        assert!(last.signing.is_some());
    }

    #[test]
    fn a_ca_key_that_does_not_belong_to_a_ca_of_the_bundle_does_not_sign() {
        // Someone replaced tls.crt, tls.key and ca.crt by hand and left crr's keys behind.
        let policy = short();
        let ours = Stored::generate(&names(), NOW, &policy).expect("generate");
        let theirs = Stored::generate(&names(), NOW, &policy).expect("generate");
        let mixed = Stored {
            signing: ours.signing.clone(),
            ..theirs.clone()
        };
        let facts = mixed.facts(NOW, &names(), true);
        assert_eq!(facts.signing_ca, None);
        assert!(facts.serving.is_some_and(|s| !s.from_signing_ca));
        assert_eq!(rotation::plan(&facts, NOW, &policy), RotationStep::StageCa);
        let wrong_key = Stored {
            signing: Some(CaPair {
                cert_pem: theirs.signing.clone().expect("a CA").cert_pem,
                key_pem: ours.signing.clone().expect("a CA").key_pem,
            }),
            ..theirs
        };
        assert_eq!(wrong_key.facts(NOW, &names(), true).signing_ca, None);
    }

    #[test]
    fn an_unusable_secret_is_regenerated() {
        crr_runtime::tls::install_crypto_provider();
        let policy = short();
        let empty = Stored::default();
        let facts = empty.facts(NOW, &names(), true);
        assert_eq!(
            rotation::plan(&facts, NOW, &policy),
            RotationStep::Regenerate
        );
        let fresh = empty
            .apply(RotationStep::Regenerate, NOW, &policy, &names())
            .expect("apply");
        assert!(trusted(&fresh.serving_cert, &fresh.ca_bundle, NOW));
        let for_other_names =
            Stored::generate(&["elsewhere".to_owned()], NOW, &policy).expect("generate");
        let facts = for_other_names.facts(NOW, &names(), true);
        assert_eq!(
            facts.serving, None,
            "a certificate for other names is not usable"
        );
        assert_eq!(
            rotation::plan(&facts, NOW, &policy),
            RotationStep::RenewServing
        );
    }

    #[test]
    fn event_times_are_rfc_3339() {
        assert_eq!(rfc3339(Some(1_800_000_000)), "2027-01-15T08:00:00Z");
        assert_eq!(rfc3339(None), "?");
    }

    #[test]
    fn a_serving_certificate_never_outlives_its_ca() {
        let policy = short();
        let stored = Stored::generate(&names(), NOW, &policy).expect("generate");
        let ca = stored.signing.expect("a CA");
        let (cert, _) = issue_serving(&ca, &names(), NOW + 35, 15).expect("issue");
        let leaf = first_der(&cert).expect("a certificate");
        let ca_der = first_der(&ca.cert_pem).expect("a certificate");
        assert_eq!(
            crate::x509::not_after(&leaf).expect("read"),
            crate::x509::not_after(&ca_der).expect("read")
        );
    }

    #[test]
    fn expiry_takes_the_ca_that_lasts_longest_and_skips_what_it_cannot_read() {
        let older = generate(&["a".to_owned()]).expect("generate");
        let mut bundle = generate(&["b".to_owned()]).expect("generate");
        let newest = expiry(&bundle).ca;
        bundle.ca_pem = format!("{}{}", bundle.ca_pem, older.ca_pem);
        assert_eq!(expiry(&bundle).ca, newest);
        bundle.ca_pem = String::new();
        bundle.cert_pem = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".into();
        assert_eq!(expiry(&bundle), Expiry::default());
    }

    #[test]
    fn resolver_reports_the_expiry_of_the_bundle_in_use() {
        crr_runtime::tls::install_crypto_provider();
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = crate::metrics::Metrics::register(&mut registry);
        let first = generate(&["a".to_owned()]).expect("generate");
        let resolver = CertResolver::reporting(first.clone(), metrics.certificate_expiry.clone())
            .expect("resolver");
        let text = crr_runtime::metrics::encode(&registry).expect("encode");
        let serving = expiry(&first).serving.expect("serving");
        assert!(
            text.contains(&format!(
                "crr_webhook_certificate_expiry_timestamp_seconds{{certificate=\"serving\"}} {serving}"
            )),
            "{text}"
        );
        let mut second = first.clone();
        second.ca_pem = String::new();
        assert!(resolver.set(second).expect("swap"));
        let text = crr_runtime::metrics::encode(&registry).expect("encode");
        assert!(
            !text.contains("crr_webhook_certificate_expiry_timestamp_seconds{certificate=\"ca\"}"),
            "a bundle without CA: {text}"
        );
    }

    #[test]
    fn garbage_pem_is_an_error_not_a_panic() {
        let bundle = Bundle {
            cert_pem: "nope".into(),
            key_pem: "nope".into(),
            ca_pem: String::new(),
        };
        assert!(certified_key(&bundle).is_err());
    }
}
