//! The `KruisePodReady` readiness gate as a shared lock: which holders keep a pod not-ready.
//!
//! Several writers (CRRs, and other OpenKruise-style components) share one pod condition. Its
//! `message` is a JSON list of `{"userAgent","key"}` holders, sorted by userAgent then key; the
//! condition is `False` while any holder remains and `True` once the list is empty. This module
//! decides the new conditions for a pod from the pod as read; it does not write anything (the
//! caller patches pod status with a resourceVersion precondition and retries on conflict, so two
//! CRRs sharing a pod cannot lose each other's entries).
//!
//! Differences from upstream: the condition is created with status `False`, never an empty status;
//! a holder list that is not valid JSON is never overwritten on acquire (another component owns
//! it), and on release it is treated as "our entry is not there" so a deleted CRR is never stuck.

use crr_crds::keys;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Serialize};

/// The pod's own `Ready` condition type (owned by the kubelet).
const POD_CONDITION_READY: &str = "Ready";
/// Reason the kubelet gives when a readiness gate keeps the pod not Ready.
const REASON_READINESS_GATES_NOT_READY: &str = "ReadinessGatesNotReady";

/// One entry of the `KruisePodReady` holder list.
///
/// Field order matters twice: it is the serialized key order (`userAgent` first, as upstream
/// writes it) and the derived ordering (by userAgent, then key).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "camelCase")]
pub struct Holder {
    /// The kind of component holding the pod not-ready.
    pub user_agent: String,
    /// Which object of that component holds it.
    pub key: String,
}

impl Holder {
    /// The entry of the CRR `<namespace>/<name>`.
    pub fn for_crr(namespace: &str, name: &str) -> Self {
        Self {
            user_agent: keys::READINESS_USER_AGENT.to_owned(),
            key: format!("{namespace}/{name}"),
        }
    }
}

/// The `KruisePodReady` message cannot be read as a holder list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the {condition} condition's message is not a JSON list of holders: {reason}")]
pub struct UnreadableHolders {
    /// The condition type.
    pub condition: &'static str,
    /// Why decoding failed.
    pub reason: String,
}

/// Reads a holder list; an absent or empty message is the empty list.
pub fn parse_holders(message: Option<&str>) -> Result<Vec<Holder>, UnreadableHolders> {
    let message = message.map(str::trim).unwrap_or_default();
    if message.is_empty() || message == "null" {
        return Ok(Vec::new());
    }
    serde_json::from_str(message).map_err(|error| UnreadableHolders {
        condition: keys::POD_CONDITION_KRUISE_POD_READY,
        reason: error.to_string(),
    })
}

/// Writes a holder list in the canonical form: sorted, without duplicates, `[]` when empty.
pub fn format_holders(holders: &[Holder]) -> String {
    let mut sorted = holders.to_vec();
    sorted.sort();
    sorted.dedup();
    // Serializing a list of plain string structs cannot fail.
    serde_json::to_string(&sorted).unwrap_or_else(|_| "[]".to_owned())
}

/// The one write of pod conditions the operator makes (the readiness holders, the gate's
/// initial condition): a strategic-merge patch of `status.conditions`, which merges by condition
/// type and leaves the other conditions alone, preconditioned on the resourceVersion of the pod
/// the conditions were decided on, so a holder added meanwhile makes it fail with a conflict
/// instead of being lost.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct PodConditionsPatch {
    metadata: PatchMetadata,
    status: PatchStatus,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
struct PatchMetadata {
    resource_version: Option<String>,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
struct PatchStatus {
    conditions: Vec<PodCondition>,
}

impl PodConditionsPatch {
    /// Sets `conditions` on `pod` as it was read.
    pub fn new(pod: &Pod, conditions: Vec<PodCondition>) -> Self {
        Self {
            metadata: PatchMetadata {
                resource_version: pod.metadata.resource_version.clone(),
            },
            status: PatchStatus { conditions },
        }
    }
}

/// Whether the pod declares the `KruisePodReady` readiness gate, without which the condition
/// does not affect the pod's readiness.
pub fn has_readiness_gate(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|spec| spec.readiness_gates.as_ref())
        .is_some_and(|gates| {
            gates
                .iter()
                .any(|gate| gate.condition_type == keys::POD_CONDITION_KRUISE_POD_READY)
        })
}

fn pod_condition<'a>(pod: &'a Pod, condition_type: &str) -> Option<&'a PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|condition| condition.type_ == condition_type)
}

/// The holders currently recorded on the pod.
pub fn holders(pod: &Pod) -> Result<Vec<Holder>, UnreadableHolders> {
    parse_holders(
        pod_condition(pod, keys::POD_CONDITION_KRUISE_POD_READY)
            .and_then(|condition| condition.message.as_deref()),
    )
}

/// The `KruisePodReady` condition a gated pod starts with: True, no holders. `None` when the pod
/// has no gate or already has the condition (whatever its status: a holder may own it). Without
/// it the kubelet would never report the pod Ready.
pub fn initial(pod: &Pod, now: Timestamp) -> Option<PodCondition> {
    if !has_readiness_gate(pod)
        || pod_condition(pod, keys::POD_CONDITION_KRUISE_POD_READY).is_some()
    {
        return None;
    }
    Some(PodCondition {
        type_: keys::POD_CONDITION_KRUISE_POD_READY.to_owned(),
        status: "True".to_owned(),
        message: Some(format_holders(&[])),
        last_transition_time: Some(Time(now)),
        ..PodCondition::default()
    })
}

/// The pod conditions to write so that `holder` keeps the pod not-ready, or `None` when the pod
/// already says so. Besides `KruisePodReady=False`, the pod's `Ready` condition is turned False
/// the way the kubelet would, so endpoints drop the pod now rather than at the next kubelet sync.
pub fn acquire(
    pod: &Pod,
    holder: &Holder,
    now: Timestamp,
) -> Result<Option<Vec<PodCondition>>, UnreadableHolders> {
    let existing = pod_condition(pod, keys::POD_CONDITION_KRUISE_POD_READY);
    let mut holders = parse_holders(existing.and_then(|condition| condition.message.as_deref()))?;
    let already_false = existing.is_some_and(|condition| condition.status == "False");
    if already_false && holders.contains(holder) {
        return Ok(None);
    }
    holders.push(holder.clone());
    let last_transition_time = match existing {
        Some(condition) if already_false => condition.last_transition_time.clone(),
        _ => Some(Time(now)),
    };
    let mut changes = vec![PodCondition {
        type_: keys::POD_CONDITION_KRUISE_POD_READY.to_owned(),
        status: "False".to_owned(),
        message: Some(format_holders(&holders)),
        last_transition_time,
        ..existing.cloned().unwrap_or_default()
    }];
    if let Some(ready) = pod_condition(pod, POD_CONDITION_READY)
        && ready.status == "True"
    {
        changes.push(PodCondition {
            type_: POD_CONDITION_READY.to_owned(),
            status: "False".to_owned(),
            reason: Some(REASON_READINESS_GATES_NOT_READY.to_owned()),
            message: Some(format!(
                "the status of pod readiness gate \"{}\" is not \"True\", but False",
                keys::POD_CONDITION_KRUISE_POD_READY
            )),
            last_transition_time: Some(Time(now)),
            ..ready.clone()
        });
    }
    Ok(Some(changes))
}

/// The `KruisePodReady` condition to write once `holder` lets go, or `None` when the holder is
/// not recorded. The condition turns True when no holder remains; the pod's `Ready` condition is
/// left to the kubelet, which recomputes it from the gates.
pub fn release(
    pod: &Pod,
    holder: &Holder,
    now: Timestamp,
) -> Result<Option<PodCondition>, UnreadableHolders> {
    let Some(existing) = pod_condition(pod, keys::POD_CONDITION_KRUISE_POD_READY) else {
        return Ok(None);
    };
    let mut holders = parse_holders(existing.message.as_deref())?;
    if !holders.contains(holder) {
        return Ok(None);
    }
    holders.retain(|entry| entry != holder);
    let status = if holders.is_empty() { "True" } else { "False" };
    let last_transition_time = if existing.status == status {
        existing.last_transition_time.clone()
    } else {
        Some(Time(now))
    };
    Ok(Some(PodCondition {
        status: status.to_owned(),
        message: Some(format_holders(&holders)),
        last_transition_time,
        ..existing.clone()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodReadinessGate, PodSpec, PodStatus};

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + seconds).unwrap()
    }

    fn pod(gate: bool, conditions: Vec<PodCondition>) -> Pod {
        Pod {
            spec: Some(PodSpec {
                readiness_gates: gate.then(|| {
                    vec![PodReadinessGate {
                        condition_type: keys::POD_CONDITION_KRUISE_POD_READY.to_owned(),
                    }]
                }),
                ..PodSpec::default()
            }),
            status: Some(PodStatus {
                conditions: Some(conditions),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
    }

    fn condition(type_: &str, status: &str, message: Option<&str>, since: i64) -> PodCondition {
        PodCondition {
            type_: type_.to_owned(),
            status: status.to_owned(),
            message: message.map(str::to_owned),
            last_transition_time: Some(Time(at(since))),
            ..PodCondition::default()
        }
    }

    fn gate_condition(status: &str, message: Option<&str>, since: i64) -> PodCondition {
        condition(keys::POD_CONDITION_KRUISE_POD_READY, status, message, since)
    }

    const A: &str = r#"{"userAgent":"ContainerRecreateRequest","key":"ns/crr-a"}"#;
    const B: &str = r#"{"userAgent":"ContainerRecreateRequest","key":"ns/crr-b"}"#;

    #[test]
    fn the_pod_conditions_patch_carries_the_conditions_and_the_version_read() {
        let mut pod = pod(true, vec![]);
        pod.metadata.resource_version = Some("17".to_owned());
        let condition = initial(&pod, at(0)).expect("a gated pod starts");
        let patch = serde_json::to_value(PodConditionsPatch::new(&pod, vec![condition])).unwrap();
        assert_eq!(
            patch,
            serde_json::json!({
                "metadata": {"resourceVersion": "17"},
                "status": {"conditions": [{
                    "type": "KruisePodReady", "status": "True", "message": "[]",
                    "lastTransitionTime": "2023-11-14T22:13:20Z",
                }]},
            })
        );
    }

    #[test]
    fn crr_holder_entry_is_user_agent_and_namespaced_name() {
        let holder = Holder::for_crr("ns", "crr-a");
        assert_eq!(serde_json::to_string(&holder).unwrap(), A);
    }

    #[test]
    fn holder_list_is_sorted_by_user_agent_then_key_and_deduplicated() {
        let list = vec![
            Holder::for_crr("ns", "crr-b"),
            Holder {
                user_agent: "Alpha".to_owned(),
                key: "z".to_owned(),
            },
            Holder::for_crr("ns", "crr-a"),
            Holder::for_crr("ns", "crr-b"),
        ];
        assert_eq!(
            format_holders(&list),
            format!(r#"[{{"userAgent":"Alpha","key":"z"}},{A},{B}]"#)
        );
        assert_eq!(format_holders(&[]), "[]");
    }

    #[test]
    fn empty_or_missing_message_is_no_holders_and_garbage_is_an_error() {
        assert_eq!(parse_holders(None), Ok(vec![]));
        assert_eq!(parse_holders(Some("")), Ok(vec![]));
        assert_eq!(parse_holders(Some("null")), Ok(vec![]));
        assert_eq!(parse_holders(Some("[]")), Ok(vec![]));
        assert!(parse_holders(Some("not json")).is_err());
        let round_trip = parse_holders(Some(&format!("[{A},{B}]"))).unwrap();
        assert_eq!(round_trip.len(), 2);
    }

    #[test]
    fn readiness_gate_is_detected_only_when_declared() {
        assert!(has_readiness_gate(&pod(true, vec![])));
        assert!(!has_readiness_gate(&pod(false, vec![])));
        assert!(!has_readiness_gate(&Pod::default()));
    }

    #[test]
    fn gated_pod_without_the_condition_starts_ready_with_no_holders() {
        let condition = initial(&pod(true, vec![]), at(1)).unwrap();
        assert_eq!(condition.type_, keys::POD_CONDITION_KRUISE_POD_READY);
        assert_eq!(condition.status, "True");
        assert_eq!(condition.message.as_deref(), Some("[]"));
        assert_eq!(condition.last_transition_time, Some(Time(at(1))));
    }

    #[test]
    fn initial_condition_never_overrides_an_existing_one_or_touches_ungated_pods() {
        let held = pod(
            true,
            vec![gate_condition("False", Some(&format!("[{A}]")), 0)],
        );
        assert_eq!(initial(&held, at(1)), None);
        assert_eq!(initial(&pod(false, vec![]), at(1)), None);
    }

    #[test]
    fn acquire_creates_a_false_condition_never_an_empty_status() {
        let changes = acquire(&pod(true, vec![]), &Holder::for_crr("ns", "crr-a"), at(10))
            .unwrap()
            .unwrap();
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].type_, keys::POD_CONDITION_KRUISE_POD_READY);
        assert_eq!(changes[0].status, "False");
        assert_eq!(
            changes[0].message.as_deref(),
            Some(format!("[{A}]").as_str())
        );
        assert_eq!(changes[0].last_transition_time, Some(Time(at(10))));
    }

    #[test]
    fn acquire_flips_a_true_condition_and_the_pod_ready_condition() {
        let pod = pod(
            true,
            vec![
                gate_condition("True", Some("[]"), 0),
                condition("Ready", "True", None, 0),
            ],
        );
        let changes = acquire(&pod, &Holder::for_crr("ns", "crr-a"), at(10))
            .unwrap()
            .unwrap();
        assert_eq!(changes[0].status, "False");
        assert_eq!(changes[0].last_transition_time, Some(Time(at(10))));
        assert_eq!(changes[1].type_, "Ready");
        assert_eq!(changes[1].status, "False");
        assert_eq!(
            changes[1].reason.as_deref(),
            Some(REASON_READINESS_GATES_NOT_READY)
        );
    }

    #[test]
    fn acquire_is_a_no_op_when_already_held() {
        let pod = pod(
            true,
            vec![gate_condition("False", Some(&format!("[{A}]")), 0)],
        );
        assert_eq!(
            acquire(&pod, &Holder::for_crr("ns", "crr-a"), at(10)),
            Ok(None)
        );
    }

    #[test]
    fn acquire_repairs_an_empty_status_left_by_upstream() {
        let pod = pod(true, vec![gate_condition("", Some(&format!("[{A}]")), 0)]);
        let changes = acquire(&pod, &Holder::for_crr("ns", "crr-a"), at(10))
            .unwrap()
            .unwrap();
        assert_eq!(changes[0].status, "False");
        assert_eq!(
            changes[0].message.as_deref(),
            Some(format!("[{A}]").as_str())
        );
    }

    #[test]
    fn second_crr_on_the_same_pod_joins_the_list_without_moving_the_transition_time() {
        let pod = pod(
            true,
            vec![gate_condition("False", Some(&format!("[{B}]")), 5)],
        );
        let changes = acquire(&pod, &Holder::for_crr("ns", "crr-a"), at(10))
            .unwrap()
            .unwrap();
        assert_eq!(changes.len(), 1);
        assert_eq!(
            changes[0].message.as_deref(),
            Some(format!("[{A},{B}]").as_str())
        );
        assert_eq!(changes[0].last_transition_time, Some(Time(at(5))));
    }

    #[test]
    fn acquire_refuses_to_overwrite_an_unreadable_holder_list() {
        let pod = pod(true, vec![gate_condition("False", Some("oops"), 0)]);
        assert!(acquire(&pod, &Holder::for_crr("ns", "crr-a"), at(10)).is_err());
    }

    #[test]
    fn release_of_the_last_holder_turns_the_condition_true() {
        let pod = pod(
            true,
            vec![gate_condition("False", Some(&format!("[{A}]")), 0)],
        );
        let condition = release(&pod, &Holder::for_crr("ns", "crr-a"), at(10))
            .unwrap()
            .unwrap();
        assert_eq!(condition.status, "True");
        assert_eq!(condition.message.as_deref(), Some("[]"));
        assert_eq!(condition.last_transition_time, Some(Time(at(10))));
    }

    #[test]
    fn release_keeps_the_pod_not_ready_while_another_crr_holds_it() {
        let pod = pod(
            true,
            vec![gate_condition("False", Some(&format!("[{A},{B}]")), 3)],
        );
        let condition = release(&pod, &Holder::for_crr("ns", "crr-a"), at(10))
            .unwrap()
            .unwrap();
        assert_eq!(condition.status, "False");
        assert_eq!(
            condition.message.as_deref(),
            Some(format!("[{B}]").as_str())
        );
        assert_eq!(condition.last_transition_time, Some(Time(at(3))));
        // Then the other one lets go as well.
        let pod = self::pod(true, vec![condition]);
        let condition = release(&pod, &Holder::for_crr("ns", "crr-b"), at(20))
            .unwrap()
            .unwrap();
        assert_eq!(condition.status, "True");
    }

    fn apply(pod: &mut Pod, changes: Vec<PodCondition>) {
        let conditions = pod
            .status
            .get_or_insert_default()
            .conditions
            .get_or_insert_default();
        for change in changes {
            match conditions.iter_mut().find(|c| c.type_ == change.type_) {
                Some(existing) => *existing = change,
                None => conditions.push(change),
            }
        }
    }

    proptest::proptest! {
        /// Any number of requests sharing a pod, acquiring and releasing in any order: the list
        /// is always exactly the current holders, sorted, and the pod is Ready again at the end.
        #[test]
        fn shared_pod_holders_stay_consistent_in_any_order(
            names in proptest::collection::btree_set("[a-e]{1,3}", 1..6),
            acquire_order in proptest::collection::vec(proptest::prelude::any::<proptest::sample::Index>(), 6),
            release_order in proptest::collection::vec(proptest::prelude::any::<proptest::sample::Index>(), 6),
        ) {
            let shuffle = |order: &[proptest::sample::Index]| {
                let mut pool: Vec<String> = names.iter().cloned().collect();
                let mut out = Vec::new();
                for index in order {
                    if pool.is_empty() { break; }
                    out.push(pool.remove(index.index(pool.len())));
                }
                out.extend(pool);
                out
            };
            let mut pod = pod(true, vec![gate_condition("True", Some("[]"), 0)]);
            let mut held: Vec<Holder> = Vec::new();
            for (step, name) in shuffle(&acquire_order).into_iter().enumerate() {
                let holder = Holder::for_crr("ns", &name);
                let changes = acquire(&pod, &holder, at(step as i64)).unwrap().unwrap();
                apply(&mut pod, changes);
                held.push(holder);
                held.sort();
                proptest::prop_assert_eq!(holders(&pod).unwrap(), held.clone());
                proptest::prop_assert_eq!(acquire(&pod, &held[0], at(99)).unwrap(), None);
            }
            for name in shuffle(&release_order) {
                let holder = Holder::for_crr("ns", &name);
                let condition = release(&pod, &holder, at(100)).unwrap().unwrap();
                held.retain(|entry| entry != &holder);
                let expected = if held.is_empty() { "True" } else { "False" };
                proptest::prop_assert_eq!(condition.status.as_str(), expected);
                apply(&mut pod, vec![condition]);
                proptest::prop_assert_eq!(holders(&pod).unwrap(), held.clone());
            }
        }
    }

    #[test]
    fn release_is_a_no_op_when_not_held_or_no_condition() {
        let holder = Holder::for_crr("ns", "crr-a");
        assert_eq!(release(&pod(true, vec![]), &holder, at(1)), Ok(None));
        let pod = pod(
            true,
            vec![gate_condition("False", Some(&format!("[{B}]")), 0)],
        );
        assert_eq!(release(&pod, &holder, at(1)), Ok(None));
    }
}
