//! Each step kind of a [`Decision`]: requests to create, the status write and its Events, the
//! budget wait, the deletion after the TTL, and when to look again.

use crr_crds::rollout::RolloutPhase;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::json;

use super::*;

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + seconds).expect("a valid time")
}

fn rollout(spec: serde_json::Value) -> ContainerRecreateRollout {
    let mut spec_json = json!({
        "target": {"workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}},
        "containers": ["app"],
    });
    spec_json
        .as_object_mut()
        .expect("an object")
        .extend(spec.as_object().expect("an object").clone());
    serde_json::from_value(json!({
        "apiVersion": "crr.dev/v1alpha1", "kind": "ContainerRecreateRollout",
        "metadata": {"name": "restart", "namespace": "ns", "uid": "rollout-uid",
                     "resourceVersion": "41", "generation": 1,
                     "creationTimestamp": at(100).to_string()},
        "spec": spec_json,
    }))
    .expect("a rollout")
}

fn pod(name: &str, ready: bool) -> PodView {
    PodView {
        name: name.to_owned(),
        uid: format!("uid-{name}"),
        created: at(0),
        ready,
        terminating: false,
        restartable: true,
        ordinal: None,
    }
}

fn world(pods: Vec<PodView>) -> World {
    World {
        pods,
        budgets: Vec::new(),
        target_exists: true,
    }
}

fn reading(rollout: &ContainerRecreateRollout) -> Reading {
    match before_reading(rollout, at(110)) {
        Stage::ReadWorld(reading) => reading,
        other => panic!("expected to read the world, got {other:?}"),
    }
}

fn reasons(decision: &Decision) -> Vec<&str> {
    decision.events.iter().map(|event| event.reason).collect()
}

#[test]
fn the_first_decision_creates_the_first_requests_and_writes_a_preconditioned_status() {
    let rollout = rollout(json!({}));
    let decision = decide(
        &rollout,
        &reading(&rollout),
        &world(vec![pod("a", true), pod("b", true)]),
        &BTreeMap::new(),
        at(110),
    )
    .expect("decided");
    let names: Vec<_> = decision
        .create
        .iter()
        .map(|crr| crr.metadata.name.clone().unwrap_or_default())
        .collect();
    assert_eq!(
        names,
        ["restart-uid-a"],
        "maxUnavailable 1: one pod at a time"
    );
    assert_eq!(decision.create[0].spec.pod_name, "a");
    let status = decision.status.as_ref().expect("a status to write");
    assert_eq!(status.resource_version(), "41");
    assert_eq!(status.status().phase.as_deref(), Some("Progressing"));
    assert_eq!(status.status().in_flight, 1);
    assert_eq!(reasons(&decision), ["Started"]);
    assert_eq!(decision.budget_wait, None);
    assert!(!decision.delete);
    assert_eq!(decision.next, Next::After(READY_POLL));
}

#[test]
fn an_unchanged_status_is_not_written_and_announces_nothing() {
    let mut rollout = rollout(json!({}));
    let requests = BTreeMap::from([("uid-a".to_owned(), RequestState::InFlight)]);
    let pods = world(vec![pod("a", false), pod("b", true)]);
    let first = decide(&rollout, &reading(&rollout), &pods, &requests, at(110)).expect("decided");
    rollout.status = Some(first.status.expect("written once").status().clone());
    let again = decide(&rollout, &reading(&rollout), &pods, &requests, at(120)).expect("decided");
    assert_eq!(again.status, None);
    assert!(again.events.is_empty(), "{:?}", again.events);
    assert!(again.create.is_empty());
    assert_eq!(again.next, Next::After(READY_POLL));
}

/// PDB `web-pdb` over pod `a` alone, allowing no disruption.
fn allowing_nothing_over_a() -> BudgetView {
    BudgetView {
        name: "web-pdb".to_owned(),
        disruptions_allowed: 0,
        desired_healthy: 1,
        status_current: true,
        pods: BTreeMap::from([("uid-a".to_owned(), true)]),
        expected_pods: 1,
        disrupted: Default::default(),
        current_healthy: 1,
        resource_version: "7".to_owned(),
        released: Default::default(),
    }
}

#[test]
fn a_budget_that_allows_nothing_is_a_wait_to_announce() {
    let rollout = rollout(json!({}));
    let mut pods = world(vec![pod("a", true)]);
    pods.budgets = vec![allowing_nothing_over_a()];
    let decision = decide(
        &rollout,
        &reading(&rollout),
        &pods,
        &BTreeMap::new(),
        at(110),
    )
    .expect("decided");
    assert!(decision.create.is_empty());
    assert_eq!(
        decision.budget_wait,
        Some(BudgetWait {
            budget: "web-pdb".to_owned(),
            pod: "a".to_owned()
        })
    );
    assert_eq!(decision.next, Next::After(BUDGET_POLL));
}

#[test]
fn only_pods_that_match_no_pod_are_a_warning_when_it_starts() {
    let retry = rollout(json!({"onlyPods": ["a", "gone", "typo"]}));
    let pods = world(vec![pod("a", true)]);
    let none = BTreeMap::new();
    let first = decide(&retry, &reading(&retry), &pods, &none, at(110)).expect("decided");
    assert_eq!(reasons(&first), ["Started", "OnlyPodsNotFound"]);
    let note = &first.events[1].note;
    assert!(first.events[1].warning);
    assert_eq!(
        note, "2 of onlyPods match no pod of the target, left out: gone, typo",
        "{note}"
    );
    // Every name found: no Warning.
    let found = rollout(json!({"onlyPods": ["a"]}));
    let decision = decide(&found, &reading(&found), &pods, &none, at(110)).expect("decided");
    assert_eq!(reasons(&decision), ["Started"]);
}

#[test]
fn a_rollout_without_progress_past_its_deadline_fails_and_says_why() {
    let mut rollout = rollout(json!({"progressDeadlineSeconds": 30}));
    let mut pods = world(vec![pod("a", true)]);
    pods.budgets = vec![allowing_nothing_over_a()];
    let none = BTreeMap::new();
    let first = decide(&rollout, &reading(&rollout), &pods, &none, at(110)).expect("decided");
    let status = first.status.expect("a first status").status().clone();
    assert_eq!(status.last_progress_time, Some(Time(at(110))));
    assert_eq!(
        first.next,
        Next::After(BUDGET_POLL),
        "the budget's poll is sooner than the deadline"
    );
    rollout.status = Some(status);
    // Still blocked within the deadline: nothing written, looked at again by the deadline.
    let within = decide(&rollout, &reading(&rollout), &pods, &none, at(138)).expect("decided");
    assert_eq!(within.status, None);
    assert_eq!(within.next, Next::After(Duration::from_secs(2)));
    // Past it: Failed, Stalled, with an Event.
    let past = decide(&rollout, &reading(&rollout), &pods, &none, at(141)).expect("decided");
    let status = past
        .status
        .as_ref()
        .expect("the ending status")
        .status()
        .clone();
    assert_eq!(status.phase.as_deref(), Some("Failed"));
    for type_ in ["Stalled", "Failed"] {
        let condition = status
            .conditions
            .iter()
            .find(|condition| condition.type_ == type_)
            .expect("the condition");
        assert_eq!(condition.reason, "ProgressDeadlineExceeded");
    }
    assert_eq!(reasons(&past), ["Failed"]);
    assert!(past.create.is_empty());
}

#[test]
fn the_ending_status_is_written_with_its_events_and_a_ttl_of_zero_deletes_at_once() {
    let rollout = rollout(json!({"ttlSecondsAfterFinished": 0}));
    let requests = BTreeMap::from([("uid-a".to_owned(), RequestState::Succeeded)]);
    let decision = decide(
        &rollout,
        &reading(&rollout),
        &world(vec![pod("a", true)]),
        &requests,
        at(110),
    )
    .expect("decided");
    let status = decision.status.as_ref().expect("the ending status");
    assert_eq!(status.status().phase.as_deref(), Some("Completed"));
    assert_eq!(reasons(&decision), ["Started", "Completed"]);
    assert!(
        decision.delete,
        "ttlSecondsAfterFinished 0: deleted once written"
    );
}

#[test]
fn the_ending_status_looks_again_when_its_ttl_runs_out() {
    let rollout = rollout(json!({"ttlSecondsAfterFinished": 30}));
    let requests = BTreeMap::from([("uid-a".to_owned(), RequestState::Succeeded)]);
    let decision = decide(
        &rollout,
        &reading(&rollout),
        &world(vec![pod("a", true)]),
        &requests,
        at(110),
    )
    .expect("decided");
    assert!(!decision.delete);
    assert_eq!(decision.next, Next::After(Duration::from_secs(30)));
}

#[test]
fn a_finished_rollout_is_deleted_after_its_ttl_and_waits_before() {
    let mut rollout = rollout(json!({"ttlSecondsAfterFinished": 60}));
    rollout.status = Some(crr_crds::rollout::ContainerRecreateRolloutStatus {
        observed_generation: Some(1),
        phase: Some(RolloutPhase::Completed.as_str().to_owned()),
        completion_time: Some(Time(at(200))),
        ..Default::default()
    });
    let Stage::Decided(waiting) = before_reading(&rollout, at(230)) else {
        panic!("a finished rollout reads nothing");
    };
    assert_eq!(
        *waiting,
        Decision {
            next: Next::After(Duration::from_secs(30)),
            ..Decision::idle()
        }
    );
    let Stage::Decided(expired) = before_reading(&rollout, at(260)) else {
        panic!("a finished rollout reads nothing");
    };
    assert_eq!(
        *expired,
        Decision {
            delete: true,
            ..Decision::idle()
        }
    );
    rollout.spec.ttl_seconds_after_finished = None;
    assert_eq!(
        before_reading(&rollout, at(100_000)),
        Stage::Decided(Box::new(Decision::idle())),
        "without a TTL it stays"
    );
}

#[test]
fn a_rollout_being_deleted_is_left_to_the_garbage_collector() {
    let mut rollout = rollout(json!({}));
    rollout.metadata.deletion_timestamp = Some(Time(at(105)));
    assert_eq!(
        before_reading(&rollout, at(110)),
        Stage::Decided(Box::new(Decision::idle()))
    );
}

#[test]
fn an_unreadable_max_unavailable_is_refused_and_reads_nothing() {
    let mut rollout = rollout(json!({}));
    rollout.spec.max_unavailable = Some(IntOrString::String("lots".to_owned()));
    let Stage::Refused(why) = before_reading(&rollout, at(110)) else {
        panic!("refused");
    };
    assert!(why.contains("maxUnavailable"), "{why}");
}

#[test]
fn a_paused_rollout_awaits_a_change() {
    let rollout = rollout(json!({"paused": true}));
    let decision = decide(
        &rollout,
        &reading(&rollout),
        &world(vec![pod("a", true)]),
        &BTreeMap::new(),
        at(110),
    )
    .expect("decided");
    assert!(decision.create.is_empty());
    assert_eq!(decision.next, Next::AwaitChange);
}

#[test]
fn a_rollout_never_stored_cannot_write_its_status() {
    let mut rollout = rollout(json!({}));
    rollout.metadata.resource_version = None;
    let error = decide(
        &rollout,
        &reading(&rollout),
        &world(vec![pod("a", true)]),
        &BTreeMap::new(),
        at(110),
    )
    .expect_err("nothing to precondition on");
    assert_eq!(error.kind, "ContainerRecreateRollout");
}

#[test]
fn a_rollout_over_the_cluster_cap_says_so_once_and_starts_nothing() {
    let mut rollout = rollout(json!({}));
    let waiting = wait_for_cluster_cap(&rollout, 10, 3, at(110)).expect("decided");
    assert!(waiting.create.is_empty() && waiting.budgets.is_empty());
    assert_eq!(reasons(&waiting), ["WaitingForClusterCap"]);
    assert!(
        waiting.events[0]
            .note
            .contains("3 waiting start before this one")
    );
    let status = waiting
        .status
        .as_ref()
        .expect("a status to write")
        .status()
        .clone();
    assert_eq!(status.phase.as_deref(), Some("Progressing"));
    assert_eq!(status.start_time, None, "not started: it takes no slot");
    let progressing = status
        .conditions
        .iter()
        .find(|condition| condition.type_ == crr_crds::keys::CONDITION_ROLLOUT_PROGRESSING)
        .expect("the Progressing condition");
    assert_eq!(progressing.reason, "WaitingForClusterCap");
    assert!(
        progressing.message.contains("at most 10 rollouts"),
        "{}",
        progressing.message
    );
    assert_eq!(waiting.next, Next::After(CLUSTER_CAP_POLL));
    // Still waiting, further back or further ahead: nothing written, nothing announced again.
    rollout.status = Some(status);
    let again = wait_for_cluster_cap(&rollout, 10, 1, at(130)).expect("decided");
    assert_eq!(again.status, None);
    assert!(again.events.is_empty());
    // Its turn: the first decision that starts it announces the start.
    let started = decide(
        &rollout,
        &reading(&rollout),
        &world(vec![pod("a", true)]),
        &BTreeMap::new(),
        at(140),
    )
    .expect("decided");
    assert_eq!(reasons(&started), ["Started"]);
    assert_eq!(started.create.len(), 1);
}

#[test]
fn a_finished_rollout_observes_a_later_spec_edit_and_nothing_else() {
    let mut rollout = rollout(json!({"paused": true}));
    rollout.metadata.generation = Some(2);
    rollout.status = Some(crr_crds::rollout::ContainerRecreateRolloutStatus {
        observed_generation: Some(1),
        phase: Some(RolloutPhase::Completed.as_str().to_owned()),
        completion_time: Some(Time(at(200))),
        recreated: 4,
        ..Default::default()
    });
    let Stage::Decided(decision) = before_reading(&rollout, at(300)) else {
        panic!("a finished rollout reads nothing");
    };
    let status = decision.status.as_ref().expect("a status write");
    let written = serde_json::to_value(status).expect("JSON");
    assert_eq!(written["status"]["observedGeneration"], 2, "{written}");
    assert_eq!(written["status"]["phase"], "Completed", "still Completed");
    assert_eq!(written["status"]["recreated"], 4, "the counts kept");
    assert!(decision.create.is_empty() && decision.events.is_empty());
    // Observed: nothing more to write.
    rollout.status.as_mut().unwrap().observed_generation = Some(2);
    assert_eq!(
        before_reading(&rollout, at(300)),
        Stage::Decided(Box::new(Decision::idle()))
    );
}

#[test]
fn an_aborted_rollout_deletes_its_queued_requests_by_name_and_version_then_ends() {
    let rollout = rollout(json!({"aborted": true}));
    let requests = BTreeMap::from([
        ("uid-a".to_owned(), RequestState::Succeeded),
        (
            "uid-b".to_owned(),
            RequestState::Queued {
                resource_version: "77".to_owned(),
            },
        ),
    ]);
    let pods = world(vec![pod("a", true), pod("b", false), pod("c", true)]);
    let decision =
        decide(&rollout, &reading(&rollout), &pods, &requests, at(110)).expect("decided");
    assert_eq!(
        decision.cancel,
        [RequestDeletion {
            name: "restart-uid-b".to_owned(),
            resource_version: "77".to_owned(),
        }]
    );
    assert!(decision.create.is_empty());
    let status = decision.status.as_ref().expect("a status to write");
    assert_eq!(status.status().phase.as_deref(), Some("Aborted"));
    assert_eq!((status.status().recreated, status.status().pending), (1, 2));
    assert_eq!(reasons(&decision), ["Started", "Aborted"]);
}
