//! The upkeep loop: reloads the serving certificate, keeps the CA published and takes the step
//! of the rotation that is due, every interval.

use std::sync::Arc;

use crr_runtime::events::EventPublisher;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use kube::{Client, Resource as _};
use tokio::sync::Notify;

use super::bundle::{Bundle, CertError, read_dir};
use super::follow::{Followed, follow};
use super::generate::{CaPair, first_der, unix_now};
use super::publish::{CaTargets, Watched, publish_ca};
use super::resolver::CertResolver;
use super::secret::{Stored, bundle_from_secret, ensure_secret, read_secret};
use crate::metrics::CertificateRenewals;
use crate::rotation::{self, Policy, RotationStep};

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

/// Certificate upkeep, every `interval` and whenever a watched object changes, forever. From
/// files: reloads the serving certificate when they changed and keeps their CA published in
/// `targets` (a re-applied manifest has none); nothing is rotated. From the self-managed Secret:
/// the same, then the step of the rotation that is due ([`rotation::plan`]), written with the
/// resourceVersion it was decided on. The Secret and the targets are read from watches by name
/// (`follow`), so a pass with nothing to do makes no API call.
pub async fn keep_up(
    client: Client,
    resolver: Arc<CertResolver>,
    source: CertSource,
    targets: CaTargets,
    interval: std::time::Duration,
    rotation: Rotation,
) {
    let changes = Arc::new(Notify::new());
    let watched = Watched::start(&client, &targets, &changes);
    let secret = match &source {
        CertSource::Secret { namespace, name } => Some(follow(
            Api::<Secret>::namespaced(client.clone(), namespace),
            name,
            std::convert::identity,
            changes.clone(),
        )),
        CertSource::Dir(_) => None,
    };
    loop {
        match &source {
            CertSource::Dir(dir) => {
                reload(&resolver, read_dir(dir));
                publish(&client, &targets, &watched, &resolver.bundle().ca_pem).await;
            }
            CertSource::Secret { namespace, name } => {
                let pass = Pass {
                    client: &client,
                    resolver: &resolver,
                    targets: &targets,
                    watched: &watched,
                    secret: secret.as_ref(),
                };
                pass.rotate(namespace, name, &rotation).await;
            }
        }
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            () = changes.notified() => {}
        }
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
async fn publish(client: &Client, targets: &CaTargets, watched: &Watched, ca: &str) -> bool {
    if ca.is_empty() {
        return false;
    }
    match publish_ca(client, targets, watched, ca).await {
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

/// What one pass over the self-managed Secret works with.
#[derive(Clone, Copy)]
struct Pass<'a> {
    client: &'a Client,
    resolver: &'a CertResolver,
    targets: &'a CaTargets,
    watched: &'a Watched,
    /// The Secret as its watch shows it.
    secret: Option<&'a Followed<Secret>>,
}

impl Pass<'_> {
    /// One pass over the self-managed Secret: read it as last seen (by GET while its watch has
    /// not listed it), serve and publish what it holds, then take the rotation step that is
    /// due. Of replicas taking the same step, the first write wins (resourceVersion
    /// precondition); the others get a conflict and see the winner's Secret on their next
    /// pass, where the step is no longer due.
    async fn rotate(&self, namespace: &str, name: &str, rotation: &Rotation) {
        let Self {
            client,
            resolver,
            targets,
            watched,
            secret: followed,
        } = *self;
        let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
        let secret = match Followed::or_get(followed, &secrets, name, std::convert::identity).await
        {
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
        let published = publish(client, targets, watched, &stored.ca_bundle).await;
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
            field_manager: Some(crate::FIELD_MANAGER.to_owned()),
            ..PostParams::default()
        };
        match secrets.replace(name, &params, &updated).await {
            Ok(written) => {
                reload(resolver, Ok(changed.bundle()));
                if changed.ca_bundle != stored.ca_bundle {
                    publish(client, targets, watched, &changed.ca_bundle).await;
                }
                announce(rotation, &written, step, &changed, now).await;
            }
            Err(kube::Error::Api(status)) if status.code == 409 => {
                tracing::info!(%step, "another replica changed the certificate Secret first; reading it again on the next pass");
            }
            Err(error) => tracing::warn!(%error, %step, "writing the certificate Secret"),
        }
    }
}

/// Unix seconds as RFC 3339, for people.
pub(super) fn rfc3339(unix: Option<i64>) -> String {
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
    let serving_until = rfc3339(stored.bundle().expiry().serving);
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
