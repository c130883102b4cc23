//! Whether a pod declares the `KruisePodReady` readiness gate
//! ([`keys::POD_CONDITION_KRUISE_POD_READY`]) in its `spec.readinessGates`: without the gate,
//! the condition a request flips changes nothing in the pod's readiness. The one answer the
//! operator (which starts and holds the condition), the webhook (which adds the gate or the
//! opt-in label) and the plugin (which warns before a rollout) all use.
//!
//! This module reads the declaration only; what the condition's holders mean is the operator's
//! `readiness` module.

use k8s_openapi::api::core::v1::{PodReadinessGate, PodSpec};

use crate::keys;

/// Whether `gates`, a pod's `spec.readinessGates` as read (absent or a list), include
/// `KruisePodReady`. For slim pod types that keep only the gates.
pub fn lists_kruise_pod_ready(gates: Option<&[PodReadinessGate]>) -> bool {
    gates.is_some_and(|gates| {
        gates
            .iter()
            .any(|gate| gate.condition_type == keys::POD_CONDITION_KRUISE_POD_READY)
    })
}

/// Whether a pod's (or a pod template's) `spec` declares the `KruisePodReady` readiness gate;
/// no spec declares nothing.
pub fn declares_kruise_pod_ready(spec: Option<&PodSpec>) -> bool {
    lists_kruise_pod_ready(spec.and_then(|spec| spec.readiness_gates.as_deref()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(condition_type: &str) -> PodReadinessGate {
        PodReadinessGate {
            condition_type: condition_type.to_owned(),
        }
    }

    #[test]
    fn the_gate_is_found_among_other_gates() {
        let gates = [gate("example.com/other"), gate("KruisePodReady")];
        assert!(lists_kruise_pod_ready(Some(&gates)));
    }

    #[test]
    fn no_list_an_empty_list_or_only_other_gates_declare_nothing() {
        assert!(!lists_kruise_pod_ready(None));
        assert!(!lists_kruise_pod_ready(Some(&[])));
        assert!(!lists_kruise_pod_ready(Some(&[gate("example.com/other")])));
    }

    #[test]
    fn the_condition_type_is_matched_exactly() {
        assert!(!lists_kruise_pod_ready(Some(&[gate("kruisepodready")])));
        assert!(!lists_kruise_pod_ready(Some(&[gate("KruisePodReady ")])));
    }

    #[test]
    fn a_spec_declares_the_gate_only_when_its_list_has_it() {
        let gated = PodSpec {
            readiness_gates: Some(vec![gate("KruisePodReady")]),
            ..PodSpec::default()
        };
        assert!(declares_kruise_pod_ready(Some(&gated)));
        assert!(!declares_kruise_pod_ready(Some(&PodSpec::default())));
        assert!(!declares_kruise_pod_ready(None));
    }
}
