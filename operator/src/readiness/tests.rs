use super::*;
use k8s_openapi::api::core::v1::{PodReadinessGate, PodSpec, PodStatus};

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + seconds).unwrap()
}

fn pod(gate: bool, conditions: Vec<PodCondition>) -> Pod {
    Pod {
        spec: Some(PodSpec {
            node_name: Some("node-a".to_owned()),
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
fn a_gated_pod_no_node_has_taken_yet_starts_nothing_until_it_is_bound() {
    let mut queued = pod(true, vec![]);
    for unbound in [None, Some(String::new())] {
        queued.spec.as_mut().unwrap().node_name = unbound;
        assert_eq!(initial(&queued, at(1)), None);
    }
    queued.spec.as_mut().unwrap().node_name = Some("node-a".to_owned());
    assert!(initial(&queued, at(1)).is_some());
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
