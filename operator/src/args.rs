//! The operator's command line: every flag with an environment fallback, turned into
//! [`Settings`].

use std::time::Duration;

use anyhow::bail;
use clap::Parser;
use crr_runtime::args::{AdminArgs, AdminFlagNames};

use crate::elector;
use crate::rollout::cluster_cap::Cap;
use crate::run::Settings;
use crate::triggers::controller::{SecretAccess, TriggerSettings};

/// Keeps ContainerRecreateRequests moving: takes pods out of endpoints before recreation,
/// snapshots container statuses for the node daemon, enforces deadlines and TTLs.
#[derive(Debug, Parser)]
#[command(version, about)]
pub struct Args {
    /// Namespace of the leader-election Lease.
    #[arg(
        long,
        env = "CRR_OPERATOR_LEASE_NAMESPACE",
        default_value = "crr-system"
    )]
    pub lease_namespace: String,

    /// Name of the leader-election Lease.
    #[arg(long, env = "CRR_OPERATOR_LEASE_NAME", default_value = "crr-operator")]
    pub lease_name: String,

    /// Identity of this replica in the Lease (unique per replica; defaults to the host name).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,

    /// Seconds a Lease claim lasts without renewal.
    #[arg(
        long,
        env = "CRR_OPERATOR_LEASE_DURATION_SECONDS",
        default_value_t = 15
    )]
    pub lease_duration_seconds: u64,

    /// Seconds a leader keeps acting without a successful renewal (less than the duration).
    #[arg(
        long,
        env = "CRR_OPERATOR_RENEW_DEADLINE_SECONDS",
        default_value_t = 10
    )]
    pub renew_deadline_seconds: u64,

    /// Seconds between Lease rounds.
    #[arg(long, env = "CRR_OPERATOR_RETRY_PERIOD_SECONDS", default_value_t = 2)]
    pub retry_period_seconds: u64,

    /// `--admin-addr` and `--log-format`.
    #[command(flatten)]
    pub admin: AdminArgs<OperatorFlagNames>,

    /// Only handle requests (and watch pods) in this namespace; all namespaces when unset.
    #[arg(long, env = "CRR_OPERATOR_WATCH_NAMESPACE")]
    pub watch_namespace: Option<String>,

    /// Label selector of pods whose `KruisePodReady` readiness gate the operator starts at True
    /// (the component injecting the gate labels them). Unset: no pod is initialised.
    #[arg(long, env = "CRR_OPERATOR_READINESS_GATE_SELECTOR")]
    pub readiness_gate_selector: Option<String>,

    /// Seconds between sweeps that start the `KruisePodReady` condition of every pod declaring
    /// the gate without the label (pods from before crr, or created while its webhook was away).
    #[arg(
        long,
        env = "CRR_OPERATOR_READINESS_GATE_SWEEP_SECONDS",
        default_value_t = 300
    )]
    pub readiness_gate_sweep_seconds: u64,

    /// Seconds in-flight reconciles get to finish after SIGTERM before the Lease is released
    /// anyway (keep it below the pod's terminationGracePeriodSeconds).
    #[arg(
        long,
        env = "CRR_OPERATOR_SHUTDOWN_DRAIN_SECONDS",
        default_value_t = 10
    )]
    pub shutdown_drain_seconds: u64,

    /// Reconciles running at once.
    #[arg(long, env = "CRR_OPERATOR_WORKERS", default_value_t = 3)]
    pub workers: u16,

    /// ContainerRecreateRollouts running at once in the cluster; more wait to start with reason
    /// WaitingForClusterCap, namespaces taking turns. A started rollout is never held back.
    #[arg(
        long,
        env = "CRR_OPERATOR_MAX_RUNNING_ROLLOUTS",
        default_value_t = 10,
        value_parser = clap::value_parser!(u16).range(1..)
    )]
    pub max_running_rollouts: u16,

    /// ContainerRecreateRollouts one namespace runs at once while rollouts of other namespaces
    /// wait under --max-running-rollouts (so that no tenant holds every slot); unset: a quarter
    /// of --max-running-rollouts, at least 1.
    #[arg(
        long,
        env = "CRR_OPERATOR_MAX_RUNNING_ROLLOUTS_PER_NAMESPACE",
        value_parser = clap::value_parser!(u16).range(1..)
    )]
    pub max_running_rollouts_per_namespace: Option<u16>,

    /// Watch workloads with trigger annotations (config changes, schedules) and start their
    /// rollouts; `false` turns the triggers and their watches off.
    #[arg(long, env = "CRR_OPERATOR_TRIGGERS", default_value_t = true, action = clap::ArgAction::Set)]
    pub triggers: bool,

    /// Let the config-change trigger read Secrets: `*` for every namespace, or namespaces,
    /// comma-separated. Without it, Secret references are ignored with an Event.
    #[arg(long, env = "CRR_OPERATOR_TRIGGER_SECRETS", value_delimiter = ',')]
    pub trigger_secrets: Vec<String>,

    /// Honour Reloader's annotations (`reloader.stakater.com/auto`, and the
    /// `configmap.reloader.stakater.com/reload` and `secret.reloader.stakater.com/reload` lists).
    #[arg(long, env = "CRR_OPERATOR_TRIGGER_RELOADER_ANNOTATIONS", default_value_t = false, action = clap::ArgAction::Set)]
    pub trigger_reloader_annotations: bool,

    /// A scheduled tick missed (an operator outage) by more than this is skipped.
    #[arg(
        long,
        env = "CRR_OPERATOR_SCHEDULE_STARTING_DEADLINE_SECONDS",
        default_value_t = 900
    )]
    pub schedule_starting_deadline_seconds: u64,

    /// Changes of a workload's ConfigMaps and Secrets within this many milliseconds of the first
    /// make one rollout, created this long after that first change.
    #[arg(
        long,
        env = "CRR_OPERATOR_TRIGGER_DEBOUNCE_MS",
        default_value_t = 1000,
        value_parser = clap::value_parser!(u64).range(0..=60_000)
    )]
    pub trigger_debounce_ms: u64,
    /// A config change that reaches a container through a volume is rolled out this long after
    /// the last change of the object: the kubelet writes it to the pod's volume only when it
    /// syncs the pod (every `syncFrequency`, and up to half as much again), and a container
    /// restarted before that starts with the data of before. 1.5 × the kubelets'
    /// `syncFrequency` (60 s by default) and a few seconds; 0 turns the wait off.
    #[arg(
        long,
        env = "CRR_OPERATOR_TRIGGER_VOLUME_SYNC_SECONDS",
        default_value_t = 95,
        value_parser = clap::value_parser!(u64).range(0..=3600)
    )]
    pub trigger_volume_sync_seconds: u64,
}

/// The operator's spelling of the shared flags: its address flag is `--admin-addr`.
#[derive(Debug)]
pub enum OperatorFlagNames {}

impl AdminFlagNames for OperatorFlagNames {
    const ADDRESS_FLAG: &'static str = "admin-addr";
    const ADDRESS_ENV: &'static str = "CRR_OPERATOR_ADMIN_ADDR";
    const LOG_FORMAT_ENV: &'static str = "CRR_OPERATOR_LOG_FORMAT";
}

impl Args {
    /// The settings these flags describe; `identity` defaults to `$HOSTNAME`.
    pub fn settings(self) -> anyhow::Result<Settings> {
        if self.renew_deadline_seconds >= self.lease_duration_seconds {
            bail!("--renew-deadline-seconds must be less than --lease-duration-seconds");
        }
        let identity = self
            .identity
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| format!("crr-operator-{}", std::process::id()));
        Ok(Settings {
            lease: elector::Settings {
                namespace: self.lease_namespace,
                name: self.lease_name,
                identity,
                lease_duration: Duration::from_secs(self.lease_duration_seconds),
                renew_deadline: Duration::from_secs(self.renew_deadline_seconds),
                retry_period: Duration::from_secs(self.retry_period_seconds),
            },
            admin_addr: self.admin.address,
            watch_namespace: self.watch_namespace,
            readiness_gate_selector: self.readiness_gate_selector,
            readiness_gate_sweep: Duration::from_secs(self.readiness_gate_sweep_seconds.max(1)),
            shutdown_drain: Duration::from_secs(self.shutdown_drain_seconds),
            workers: self.workers,
            rollout_cap: Cap::new(
                usize::from(self.max_running_rollouts),
                self.max_running_rollouts_per_namespace.map(usize::from),
            ),
            triggers: self.triggers.then(|| TriggerSettings {
                secrets: secret_access(&self.trigger_secrets),
                reloader_annotations: self.trigger_reloader_annotations,
                starting_deadline: Duration::from_secs(self.schedule_starting_deadline_seconds),
                debounce: Duration::from_millis(self.trigger_debounce_ms),
                volume_sync: Duration::from_secs(self.trigger_volume_sync_seconds),
            }),
        })
    }
}

/// `--trigger-secrets`: nothing, `*`, or namespaces.
fn secret_access(values: &[String]) -> SecretAccess {
    let namespaces: std::collections::BTreeSet<String> = values
        .iter()
        .map(|value| value.trim())
        .filter(|value| !value.is_empty())
        .map(str::to_owned)
        .collect();
    if namespaces.is_empty() {
        SecretAccess::Denied
    } else if namespaces.contains("*") {
        SecretAccess::All
    } else {
        SecretAccess::Namespaces(namespaces)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trigger_flags_read_into_settings() {
        let settings = Args::parse_from(["crr-operator"]).settings().unwrap();
        let triggers = settings.triggers.expect("on by default");
        assert_eq!(triggers.secrets, SecretAccess::Denied);
        assert!(!triggers.reloader_annotations);
        assert_eq!(triggers.starting_deadline, Duration::from_secs(900));
        assert_eq!(triggers.debounce, Duration::from_secs(1));
        assert_eq!(triggers.volume_sync, Duration::from_secs(95));
        let settings = Args::parse_from([
            "crr-operator",
            "--trigger-secrets",
            "team-a,team-b",
            "--trigger-reloader-annotations",
            "true",
            "--trigger-debounce-ms",
            "250",
        ])
        .settings()
        .unwrap();
        let triggers = settings.triggers.unwrap();
        assert_eq!(triggers.debounce, Duration::from_millis(250));
        assert_eq!(
            triggers.secrets,
            SecretAccess::Namespaces(["team-a".to_owned(), "team-b".to_owned()].into())
        );
        assert!(triggers.reloader_annotations);
        let all = Args::parse_from(["crr-operator", "--trigger-secrets=*"])
            .settings()
            .unwrap();
        assert_eq!(all.triggers.unwrap().secrets, SecretAccess::All);
        let off = Args::parse_from(["crr-operator", "--triggers", "false"])
            .settings()
            .unwrap();
        assert!(off.triggers.is_none());
        assert!(
            Args::try_parse_from(["crr-operator", "--trigger-debounce-ms", "60001"]).is_err(),
            "a debounce over a minute is refused"
        );
    }

    #[test]
    fn a_renew_deadline_not_below_the_lease_duration_is_refused() {
        let error = Args::parse_from([
            "crr-operator",
            "--lease-duration-seconds",
            "10",
            "--renew-deadline-seconds",
            "10",
        ])
        .settings()
        .unwrap_err();
        assert!(
            error.to_string().contains("--renew-deadline-seconds"),
            "{error}"
        );
    }

    #[test]
    fn an_explicit_identity_names_the_lease_holder() {
        let settings = Args::parse_from(["crr-operator", "--identity", "replica-a"])
            .settings()
            .unwrap();
        assert_eq!(settings.lease.identity, "replica-a");
        assert_eq!(settings.lease.name, "crr-operator");
    }
}
