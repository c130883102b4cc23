//! The serving certificate: generated (a CA and a leaf for the Service's DNS names, with
//! rcgen), kept in one Secret that every replica shares, and published as `caBundle` in the
//! webhook configurations and the CRD's conversion; or read from files (cert-manager style).
//! Either way the current key pair sits behind [`CertResolver`], swapped without a restart.

use std::fmt;
use std::sync::{Arc, RwLock};

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, ObjectMeta, Patch, PostParams};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use serde_json::json;

use crate::metrics::CertificateExpiry;

/// Keys of the Secret, as cert-manager names them.
pub const TLS_CERT: &str = "tls.crt";
pub const TLS_KEY: &str = "tls.key";
pub const CA_CERT: &str = "ca.crt";

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
    #[error("talking to the API server: {0}")]
    Api(#[from] kube::Error),
}

/// PEM texts of a serving certificate, its key and the CA that signed it.
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

/// A new CA (ten years) and a serving certificate it signs for `dns_names` (and 127.0.0.1).
pub fn generate(dns_names: &[String]) -> Result<Bundle, CertError> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
    let now = time_now();
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "crr-webhook-ca");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca_params.not_before = now;
    ca_params.not_after = now + rcgen_days(3650);
    let ca = ca_params.self_signed(&ca_key)?;
    let issuer = rcgen::Issuer::new(ca_params, ca_key);

    let leaf_key = KeyPair::generate()?;
    let mut names = dns_names.to_vec();
    names.push("127.0.0.1".to_owned());
    let mut leaf_params = CertificateParams::new(names)?;
    leaf_params.distinguished_name.push(
        DnType::CommonName,
        dns_names.first().cloned().unwrap_or_default(),
    );
    leaf_params.not_before = now;
    leaf_params.not_after = now + rcgen_days(3650);
    let leaf = leaf_params.signed_by(&leaf_key, &issuer)?;
    Ok(Bundle {
        cert_pem: leaf.pem(),
        key_pem: leaf_key.serialize_pem(),
        ca_pem: ca.pem(),
    })
}

fn time_now() -> time::OffsetDateTime {
    time::OffsetDateTime::now_utc()
}

fn rcgen_days(days: i64) -> time::Duration {
    time::Duration::days(days)
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

/// The shared bundle from the Secret, creating the Secret with a new bundle when absent. Two
/// replicas starting together both try to create it; the loser reads the winner's.
pub async fn ensure_secret(
    client: &Client,
    namespace: &str,
    name: &str,
    dns_names: &[String],
) -> Result<Bundle, CertError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    if let Some(secret) = secrets.get_opt(name).await? {
        return bundle_from_secret(&secret);
    }
    let bundle = generate(dns_names)?;
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some([("app.kubernetes.io/part-of".to_owned(), "crr".to_owned())].into()),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".to_owned()),
        data: Some(
            [
                (
                    TLS_CERT.to_owned(),
                    ByteString(bundle.cert_pem.clone().into_bytes()),
                ),
                (
                    TLS_KEY.to_owned(),
                    ByteString(bundle.key_pem.clone().into_bytes()),
                ),
                (
                    CA_CERT.to_owned(),
                    ByteString(bundle.ca_pem.clone().into_bytes()),
                ),
            ]
            .into(),
        ),
        ..Default::default()
    };
    let params = PostParams {
        field_manager: Some(crate::run::FIELD_MANAGER.to_owned()),
        ..PostParams::default()
    };
    match secrets.create(&params, &secret).await {
        Ok(_) => {
            tracing::info!(secret = %format!("{namespace}/{name}"), "generated a new serving certificate");
            Ok(bundle)
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

/// rustls settings: TLS 1.2+ (rustls offers nothing older), HTTP/1.1, the resolver's key pair.
pub fn tls_config(resolver: Arc<CertResolver>) -> rustls::ServerConfig {
    let mut config = rustls::ServerConfig::builder_with_protocol_versions(&[
        &rustls::version::TLS13,
        &rustls::version::TLS12,
    ])
    .with_no_client_auth()
    .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config
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

    /// The bundle to start with: the folder's, or the Secret's (created for `dns_names` when
    /// absent).
    pub async fn first(&self, client: &Client, dns_names: &[String]) -> Result<Bundle, CertError> {
        match self {
            Self::Dir(dir) => read_dir(dir),
            Self::Secret { namespace, name } => {
                ensure_secret(client, namespace, name, dns_names).await
            }
        }
    }
}

/// Certificate upkeep, every `interval`, forever: reloads the serving certificate when its
/// source changed, and keeps the CA published in `targets` (a re-applied manifest has none).
pub async fn keep_up(
    client: Client,
    resolver: Arc<CertResolver>,
    source: CertSource,
    targets: CaTargets,
    interval: std::time::Duration,
) {
    loop {
        match source
            .read(&client)
            .await
            .map(|bundle| resolver.set(bundle))
        {
            Ok(Ok(true)) => tracing::info!("serving certificate reloaded"),
            Ok(Ok(false)) => {}
            Ok(Err(error)) | Err(error) => tracing::warn!(%error, "certificate reload"),
        }
        let ca = resolver.bundle().ca_pem;
        if !ca.is_empty() {
            match publish_ca(&client, &targets, &ca).await {
                Ok(0) => {}
                Ok(count) => tracing::info!(objects = count, "published caBundle"),
                Err(error) => tracing::warn!(%error, "publishing caBundle"),
            }
        }
        tokio::time::sleep(interval).await;
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
        let ten_years = 3650 * 24 * 3600;
        for at in [expiry.serving, expiry.ca] {
            let at = at.expect("read");
            assert!(
                (before + ten_years..=before + ten_years + 5).contains(&at),
                "{at}"
            );
        }
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
            !text.contains("certificate=\"ca\""),
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
