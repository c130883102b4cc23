//! The webhook's command line: every flag with an environment fallback, turned into
//! [`Settings`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use crr_runtime::args::{AdminArgs, AdminFlagNames};

use crate::certs::publish::CaTargets;
use crate::certs::upkeep::CertSource;
use crate::rotation::Policy;
use crate::run::Settings;

/// Admission and conversion webhook for ContainerRecreateRequests.
#[derive(Parser, Debug)]
#[command(version)]
pub struct Args {
    /// HTTPS address the API server calls.
    #[arg(long, env = "CRR_WEBHOOK_LISTEN", default_value = "0.0.0.0:9443")]
    pub listen: SocketAddr,

    /// `--admin-listen` and `--log-format`.
    #[command(flatten)]
    pub admin: AdminArgs<WebhookFlagNames>,

    /// Whether the node daemon runs (upstream's KruiseDaemon feature gate). When false, new
    /// ContainerRecreateRequests are refused with a message saying why.
    #[arg(long, env = "CRR_WEBHOOK_NODE_DAEMON_ENABLED", default_value_t = true, action = clap::ArgAction::Set)]
    pub node_daemon_enabled: bool,

    /// Folder with tls.crt, tls.key (and ca.crt) to serve instead of a self-managed certificate
    /// (cert-manager style); re-read when the files change.
    #[arg(long, env = "CRR_WEBHOOK_CERT_DIR")]
    pub cert_dir: Option<PathBuf>,

    /// PEM file of the CA that signs the API server's client certificate for webhooks (its
    /// `--admission-control-config-file` kubeconfig). Set, admission calls without a certificate
    /// it verifies are refused with 403 before any lookup; conversion calls (for which the API
    /// server presents none) are served as before.
    #[arg(long, env = "CRR_WEBHOOK_CLIENT_CA_FILE")]
    pub client_ca_file: Option<PathBuf>,

    /// Secret `namespace/name` holding the self-managed CA and serving certificate.
    #[arg(
        long,
        env = "CRR_WEBHOOK_CERT_SECRET",
        default_value = "crr-system/crr-webhook-certs"
    )]
    pub cert_secret: String,

    /// Service `namespace/name` the API server calls; the certificate is made for its DNS names.
    #[arg(
        long,
        env = "CRR_WEBHOOK_SERVICE",
        default_value = "crr-system/crr-webhook"
    )]
    pub service: String,

    /// Name of the Mutating- and ValidatingWebhookConfiguration whose caBundle we keep (empty:
    /// none).
    #[arg(long, env = "CRR_WEBHOOK_CONFIGURATION", default_value = "crr-webhook")]
    pub webhook_configuration: String,

    /// MutatingWebhookConfiguration whose caBundle we keep, when it is not named
    /// --webhook-configuration.
    #[arg(long, env = "CRR_WEBHOOK_MUTATING_CONFIGURATION")]
    pub mutating_webhook_configuration: Option<String>,

    /// ValidatingWebhookConfiguration whose caBundle we keep, when it is not named
    /// --webhook-configuration.
    #[arg(long, env = "CRR_WEBHOOK_VALIDATING_CONFIGURATION")]
    pub validating_webhook_configuration: Option<String>,

    /// Pod label that opts a pod into the KruisePodReady readiness gate (value "true"). Must
    /// match the objectSelector of the pod webhook and the operator's --readiness-gate-selector.
    #[arg(long, env = "CRR_WEBHOOK_READINESS_GATE_LABEL", default_value = crr_crds::keys::LABEL_READINESS_GATE)]
    pub readiness_gate_label: String,

    /// Seconds to let in-flight requests finish after SIGTERM (a second signal exits at once).
    #[arg(long, env = "CRR_WEBHOOK_DRAIN_SECONDS", default_value_t = 20)]
    pub drain_seconds: u64,

    /// CRD whose conversion caBundle we keep (empty: none).
    #[arg(long, env = "CRR_WEBHOOK_CRD", default_value = crr_crds::keys::CRD_NAME)]
    pub crd: String,

    /// Seconds between checks of the certificate source and of the published caBundles (and,
    /// for the self-managed certificate, of what is due in its rotation).
    #[arg(long, env = "CRR_WEBHOOK_CERT_RESYNC_SECONDS", default_value_t = 10)]
    pub cert_resync_seconds: u64,

    /// Self-managed certificate: seconds a new CA is valid (default 365 days).
    #[arg(long, env = "CRR_WEBHOOK_CA_VALIDITY_SECONDS", default_value_t = Policy::DEFAULT.ca_validity)]
    pub ca_validity_seconds: i64,

    /// Self-managed certificate: the CA rolls over (a new CA is published beside it) when it has
    /// this many seconds left or fewer. Default: a third of --ca-validity-seconds.
    #[arg(long, env = "CRR_WEBHOOK_CA_RENEW_BEFORE_SECONDS")]
    pub ca_renew_before_seconds: Option<i64>,

    /// Self-managed certificate: seconds a new serving certificate is valid (default 90 days;
    /// never beyond its CA).
    #[arg(long, env = "CRR_WEBHOOK_SERVING_VALIDITY_SECONDS", default_value_t = Policy::DEFAULT.serving_validity)]
    pub serving_validity_seconds: i64,

    /// Self-managed certificate: the serving certificate is renewed when it has this many
    /// seconds left or fewer. Default: a third of --serving-validity-seconds.
    #[arg(long, env = "CRR_WEBHOOK_SERVING_RENEW_BEFORE_SECONDS")]
    pub serving_renew_before_seconds: Option<i64>,

    /// Self-managed certificate: seconds a new CA sits in every caBundle before it signs, and
    /// the old CA stays there after the switch (so that every API server and every replica has
    /// caught up). At least twice --cert-resync-seconds.
    #[arg(long, env = "CRR_WEBHOOK_CA_OVERLAP_SECONDS", default_value_t = Policy::DEFAULT.ca_overlap)]
    pub ca_overlap_seconds: i64,
}

/// The webhook's spelling of the shared flags.
#[derive(Debug)]
pub enum WebhookFlagNames {}

impl AdminFlagNames for WebhookFlagNames {
    const ADDRESS_ENV: &'static str = "CRR_WEBHOOK_ADMIN_LISTEN";
    const LOG_FORMAT_ENV: &'static str = "CRR_WEBHOOK_LOG_FORMAT";
}

fn split(value: &str, what: &str) -> anyhow::Result<(String, String)> {
    value
        .split_once('/')
        .map(|(namespace, name)| (namespace.to_owned(), name.to_owned()))
        .with_context(|| format!("{what} must be namespace/name, got {value:?}"))
}

impl Args {
    /// The settings these flags describe.
    pub fn settings(self) -> anyhow::Result<Settings> {
        let (service_namespace, service_name) = split(&self.service, "--service")?;
        let named = |name: Option<&String>| {
            Some(name.unwrap_or(&self.webhook_configuration).clone())
                .filter(|name| !name.is_empty())
        };
        let cert_source = match &self.cert_dir {
            Some(dir) => CertSource::Dir(dir.clone()),
            None => {
                let (namespace, name) = split(&self.cert_secret, "--cert-secret")?;
                CertSource::Secret { namespace, name }
            }
        };
        let cert_resync = self.cert_resync_seconds.max(1);
        let cert_policy = Policy::new(
            self.ca_validity_seconds,
            self.ca_renew_before_seconds,
            self.serving_validity_seconds,
            self.serving_renew_before_seconds,
            self.ca_overlap_seconds,
            i64::try_from(cert_resync).unwrap_or(i64::MAX),
        )
        .context("certificate lifetimes")?;
        Ok(Settings {
            listen: self.listen,
            admin_listen: self.admin.address,
            node_daemon_enabled: self.node_daemon_enabled,
            cert_source,
            client_ca_file: self.client_ca_file.clone(),
            service_namespace,
            service_name,
            ca_targets: CaTargets {
                mutating: named(self.mutating_webhook_configuration.as_ref()),
                validating: named(self.validating_webhook_configuration.as_ref()),
                crd: Some(self.crd.clone()).filter(|name| !name.is_empty()),
            },
            readiness_gate_label: self.readiness_gate_label.clone(),
            drain: Duration::from_secs(self.drain_seconds),
            cert_resync: Duration::from_secs(cert_resync),
            cert_policy,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_name_the_chart_objects() {
        let settings = Args::parse_from(["crr-webhook"]).settings().unwrap();
        assert_eq!(settings.service_name, "crr-webhook");
        assert_eq!(settings.ca_targets.mutating.as_deref(), Some("crr-webhook"));
        assert!(
            matches!(settings.cert_source, CertSource::Secret { ref name, .. } if name == "crr-webhook-certs")
        );
    }

    #[test]
    fn certificate_lifetimes_default_to_the_policy_and_short_ones_can_be_asked_for() {
        let settings = Args::parse_from(["crr-webhook"]).settings().unwrap();
        assert_eq!(settings.cert_policy, Policy::DEFAULT);
        let settings = Args::parse_from([
            "crr-webhook",
            "--cert-resync-seconds=1",
            "--ca-validity-seconds=40",
            "--serving-validity-seconds=15",
            "--ca-overlap-seconds=4",
        ])
        .settings()
        .unwrap();
        assert_eq!(
            (
                settings.cert_policy.ca_renew_before,
                settings.cert_policy.serving_renew_before
            ),
            (13, 5)
        );
    }

    #[test]
    fn an_overlap_shorter_than_the_resync_is_a_clear_error() {
        let error = Args::parse_from(["crr-webhook", "--ca-overlap-seconds=5"])
            .settings()
            .unwrap_err();
        assert!(
            format!("{error:#}").contains("--ca-overlap-seconds (5s) must be at least twice"),
            "{error:#}"
        );
    }

    #[test]
    fn a_service_without_a_namespace_is_a_clear_error() {
        let error = Args::parse_from(["crr-webhook", "--service", "web"])
            .settings()
            .unwrap_err();
        assert!(
            error
                .to_string()
                .contains("--service must be namespace/name"),
            "{error}"
        );
    }
}
