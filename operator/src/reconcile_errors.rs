//! What the three wings share about a failed reconcile: the bounds of the retry backoff, which
//! API answers are refusals (retrying changes nothing), and the one counter of failures,
//! `crr_operator_reconcile_errors_total{controller, kind}`.
//!
//! Each wing keeps its own error type (`request::error`, `rollout::error`, `triggers::error`)
//! with a `kind()` and the list of its kinds; it counts through the [`ControllerErrors`] handle
//! that [`ReconcileErrors::controller`] gives it, so every series exists at 0 from the start.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// The first retry of a failed reconcile comes after about this, doubling per failure in a row.
pub const RETRY_BASE: Duration = Duration::from_millis(500);
/// A failing object is retried at least this often.
pub const RETRY_CAP: Duration = Duration::from_secs(60);

/// The API server's reason when it refused a call for good: 403 Forbidden (RBAC, an admission
/// policy) or 422 Invalid. Trying again changes nothing; `None` for any other error.
pub fn refusal(source: &kube::Error) -> Option<String> {
    match source {
        kube::Error::Api(status) if status.code == 403 || status.code == 422 => Some(format!(
            "{} ({}): {}",
            status.reason, status.code, status.message
        )),
        _ => None,
    }
}

/// Labels of a failed reconcile.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// The wing: `request`, `rollout` or `triggers`.
    pub controller: &'static str,
    /// The error kind, one of the wing's error type's kinds.
    pub kind: &'static str,
}

/// `crr_operator_reconcile_errors_total`: failed reconciles by controller and kind.
#[derive(Clone, Debug, Default)]
pub struct ReconcileErrors {
    family: Family<ErrorLabels, Counter>,
}

impl ReconcileErrors {
    /// The counter, registered in `registry` (which carries the `crr_operator` prefix).
    pub fn register(registry: &mut Registry) -> Self {
        let errors = Self::default();
        registry.register(
            "reconcile_errors",
            "Failed reconciles by controller (request, rollout, triggers) and error kind",
            errors.family.clone(),
        );
        errors
    }

    /// The handle of one wing: each of its `kinds` starts at 0.
    pub fn controller(&self, controller: &'static str, kinds: &[&'static str]) -> ControllerErrors {
        crr_runtime::metrics::start_at_zero(
            &self.family,
            kinds.iter().map(|&kind| ErrorLabels { controller, kind }),
        );
        ControllerErrors {
            family: self.family.clone(),
            controller,
        }
    }
}

/// One wing's share of [`ReconcileErrors`].
#[derive(Clone, Debug)]
pub struct ControllerErrors {
    family: Family<ErrorLabels, Counter>,
    controller: &'static str,
}

impl ControllerErrors {
    /// A handle registered nowhere (unit tests).
    pub fn unregistered(controller: &'static str, kinds: &[&'static str]) -> Self {
        ReconcileErrors::default().controller(controller, kinds)
    }

    /// Counts one failure of `kind`.
    pub fn count(&self, kind: &'static str) {
        self.family
            .get_or_create(&ErrorLabels {
                controller: self.controller,
                kind,
            })
            .inc();
    }

    /// How many failures of `kind` were counted (tests and the error policy's logs).
    pub fn get(&self, kind: &'static str) -> u64 {
        self.family
            .get_or_create(&ErrorLabels {
                controller: self.controller,
                kind,
            })
            .get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_of_every_controller_is_exported_from_the_start() {
        let mut registry = Registry::with_prefix("crr_operator");
        let errors = ReconcileErrors::register(&mut registry);
        let request = errors.controller("request", &["read_pod", "write"]);
        errors.controller("rollout", &["read_world"]);
        request.count("write");
        let text = crr_runtime::metrics::encode(&registry).expect("encodes");
        for line in [
            r#"crr_operator_reconcile_errors_total{controller="request",kind="read_pod"} 0"#,
            r#"crr_operator_reconcile_errors_total{controller="request",kind="write"} 1"#,
            r#"crr_operator_reconcile_errors_total{controller="rollout",kind="read_world"} 0"#,
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
        assert_eq!(request.get("write"), 1);
    }

    #[test]
    fn only_forbidden_and_invalid_are_refusals() {
        let api = |code: u16| {
            kube::Error::Api(
                kube::core::Status::failure("no", "Reason")
                    .with_code(code)
                    .boxed(),
            )
        };
        assert_eq!(refusal(&api(403)).as_deref(), Some("Reason (403): no"));
        assert!(refusal(&api(422)).is_some());
        for code in [404, 409, 429, 500] {
            assert_eq!(refusal(&api(code)), None, "{code}");
        }
    }
}
