use super::*;
use crr_crds::rollout::{ContainerRecreateRolloutStatus, RolloutPhase};

fn web() -> WorkloadView {
    WorkloadView {
        kind: "Deployment",
        namespace: "shop".to_owned(),
        name: "web".to_owned(),
        uid: "uid-web".to_owned(),
    }
}

/// `cause`'s rollout of `web` with the UID `uid`, in `phase` (`None`: no status yet).
fn of_workload_in_phase(
    uid: &str,
    cause: &Cause,
    phase: Option<RolloutPhase>,
) -> ContainerRecreateRollout {
    let mut view = web();
    view.uid = uid.to_owned();
    let mut rollout = trigger_rollout(&view, vec!["app".to_owned()], Limit::Count(1), cause);
    rollout.status = phase.map(|phase| ContainerRecreateRolloutStatus {
        phase: Some(phase.as_str().to_owned()),
        ..ContainerRecreateRolloutStatus::default()
    });
    rollout
}

/// The workload `uid` of namespace `shop`.
fn shop(uid: &str) -> WorkloadId<'_> {
    WorkloadId {
        namespace: "shop",
        uid,
    }
}

fn config_cause() -> Cause {
    Cause::ConfigChange {
        changed: vec![ConfigRef::config_map("app-config")],
        record: "0123456789abcdef".to_owned(),
    }
}

#[test]
fn a_config_rollout_targets_the_workload_with_its_containers_and_owner() {
    let rollout = trigger_rollout(
        &web(),
        vec!["app".to_owned()],
        Limit::Count(1),
        &config_cause(),
    );
    assert_eq!(rollout.name_any(), "web-config-0123456789");
    assert_eq!(rollout.namespace().as_deref(), Some("shop"));
    assert_eq!(rollout.spec.containers, ["app"]);
    let target = rollout
        .spec
        .target
        .workload_ref
        .as_ref()
        .expect("a workload target");
    assert_eq!(
        (target.kind.as_str(), target.name.as_str()),
        ("Deployment", "web")
    );
    assert_eq!(
        rollout.labels()[keys::LABEL_ROLLOUT_TRIGGER],
        "config-change"
    );
    assert_eq!(rollout.labels()[keys::LABEL_WORKLOAD_UID], "uid-web");
    assert_eq!(
        rollout.annotations()[keys::ANNOTATION_CAUSE],
        "changed: configmap/app-config"
    );
    assert_eq!(rollout.owner_references()[0].uid, "uid-web");
    assert_eq!(
        rollout.spec.ttl_seconds_after_finished, None,
        "kept by the workload's history limit, not for a time"
    );
    let strategy = rollout.spec.recreate_strategy.as_ref().expect("a strategy");
    assert_eq!(
        strategy.ttl_seconds_after_finished,
        Some(REQUEST_TTL_SECONDS),
        "its requests are deleted an hour after they finish"
    );
    crr_crds::rules::rollout::check_rollout(&rollout.name_any(), &rollout.spec)
        .expect("the webhook admits it");
}

#[test]
fn names_fit_in_a_label_and_name_the_cause() {
    let long = "a".repeat(80);
    let tick: Timestamp = "2026-11-27T03:00:00Z".parse().unwrap();
    let name = rollout_name(&long, &Cause::Schedule { tick });
    assert!(name.len() <= 63, "{name}");
    assert!(
        name.ends_with(&format!("-schedule-{}", tick.as_second())),
        "{name}"
    );
    assert_eq!(
        rollout_name("web-", &config_cause()),
        "web-config-0123456789"
    );
}

#[test]
fn later_tries_add_a_number_and_still_fit() {
    assert_eq!(
        rollout_name_try("web", &config_cause(), 1),
        "web-config-0123456789"
    );
    assert_eq!(
        rollout_name_try("web", &config_cause(), 2),
        "web-config-0123456789-2"
    );
    let long = "a".repeat(80);
    let name = rollout_name_try(&long, &config_cause(), MAX_NAME_TRIES);
    assert!(name.len() <= 63, "{name}");
    assert!(
        name.ends_with(&format!("-config-0123456789-{MAX_NAME_TRIES}")),
        "{name}"
    );
}

#[test]
fn the_same_causes_rollout_running_or_done_is_an_earlier_try() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    let with = |phase: Option<RolloutPhase>, uid: &str| {
        let mut rollout = of_workload_in_phase(uid, &config_cause(), phase);
        rollout.metadata.uid = Some("uid-first".to_owned());
        rollout.metadata.creation_timestamp = Some(Time(Timestamp::from_second(10).unwrap()));
        rollout
    };
    let taken = |rollout: &ContainerRecreateRollout| {
        name_taken(rollout, &[], &shop("uid-web"), Trigger::ConfigChange)
    };
    assert_eq!(taken(&with(None, "uid-web")), NameTaken::EarlierTry);
    assert_eq!(
        taken(&with(Some(RolloutPhase::Progressing), "uid-web")),
        NameTaken::EarlierTry
    );
    // Done, and the newest config-change rollout: this change, whose record write failed.
    let completed = with(Some(RolloutPhase::Completed), "uid-web");
    assert_eq!(taken(&completed), NameTaken::EarlierTry);
    assert_eq!(
        taken(&with(Some(RolloutPhase::Failed), "uid-web")),
        NameTaken::EarlierTry
    );
    // The config went back to data rolled out before: a later rollout followed that one.
    let mut later = of_workload_in_phase(
        "uid-web",
        &Cause::ConfigChange {
            changed: vec![ConfigRef::config_map("app-config")],
            record: "fedcba9876543210".to_owned(),
        },
        Some(RolloutPhase::Completed),
    );
    later.metadata.uid = Some("uid-later".to_owned());
    later.metadata.creation_timestamp = Some(Time(Timestamp::from_second(20).unwrap()));
    let cache = [Arc::new(completed.clone()), Arc::new(later)];
    assert_eq!(
        name_taken(&completed, &cache, &shop("uid-web"), Trigger::ConfigChange),
        NameTaken::Other
    );
    // A workload of the same name deleted and made again.
    assert_eq!(taken(&with(None, "uid-old-web")), NameTaken::Other);
    // Someone's own rollout of that name.
    let mut theirs = with(None, "uid-web");
    theirs.metadata.labels = None;
    assert_eq!(taken(&theirs), NameTaken::Other);
    let mut going = with(None, "uid-web");
    going.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
    assert_eq!(taken(&going), NameTaken::Other);
    assert_eq!(
        name_taken(
            &with(None, "uid-web"),
            &[],
            &shop("uid-web"),
            Trigger::Schedule
        ),
        NameTaken::Other
    );
}

#[test]
fn a_ticks_rollout_even_finished_is_that_tick_done() {
    let tick = Cause::Schedule {
        tick: Timestamp::UNIX_EPOCH,
    };
    let done = of_workload_in_phase("uid-web", &tick, Some(RolloutPhase::Completed));
    assert_eq!(
        name_taken(&done, &[], &shop("uid-web"), Trigger::Schedule),
        NameTaken::EarlierTry
    );
}

#[test]
fn a_restart_under_its_values_name_is_done_even_finished_but_not_another_workloads() {
    let cause = Cause::Restart {
        value: "v1".to_owned(),
        hash: "0123456789abcdef".to_owned(),
    };
    assert_eq!(rollout_name("web", &cause), "web-restart-0123456789");
    let taken = |phase: Option<RolloutPhase>, uid: &str| {
        name_taken(
            &of_workload_in_phase(uid, &cause, phase),
            &[],
            &shop("uid-web"),
            Trigger::Restart,
        )
    };
    assert_eq!(taken(None, "uid-web"), NameTaken::EarlierTry);
    assert_eq!(
        taken(Some(RolloutPhase::Completed), "uid-web"),
        NameTaken::EarlierTry
    );
    assert_eq!(
        taken(Some(RolloutPhase::Failed), "uid-web"),
        NameTaken::EarlierTry
    );
    assert_eq!(taken(None, "uid-old-web"), NameTaken::Other);
}

#[test]
fn a_workloads_finished_trigger_rollouts_beyond_the_newest_three_go() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    let at = |seconds: i64| Time(Timestamp::from_second(seconds).unwrap());
    let rollout = |name: &str, uid: &str, phase: RolloutPhase, completed: Option<i64>| {
        let mut rollout = of_workload_in_phase(uid, &config_cause(), Some(phase));
        rollout.metadata.name = Some(name.to_owned());
        rollout.metadata.uid = Some(format!("uid-of-{name}"));
        rollout.metadata.creation_timestamp = Some(at(0));
        if let Some(status) = rollout.status.as_mut() {
            status.completion_time = completed.map(at);
        }
        Arc::new(rollout)
    };
    let mut going = rollout("going", "uid-web", RolloutPhase::Completed, Some(1));
    Arc::make_mut(&mut going).metadata.deletion_timestamp = Some(at(50));
    let mut theirs = rollout("theirs", "uid-web", RolloutPhase::Completed, Some(2));
    Arc::make_mut(&mut theirs).metadata.labels =
        Some([(keys::LABEL_WORKLOAD_UID.to_owned(), "uid-web".to_owned())].into());
    let rollouts = [
        rollout("first", "uid-web", RolloutPhase::Completed, Some(10)),
        rollout("second", "uid-web", RolloutPhase::Failed, Some(20)),
        rollout("running", "uid-web", RolloutPhase::Progressing, None),
        rollout("third", "uid-web", RolloutPhase::Completed, Some(30)),
        rollout("fourth", "uid-web", RolloutPhase::Completed, Some(40)),
        rollout(
            "other-workload",
            "uid-other",
            RolloutPhase::Completed,
            Some(5),
        ),
        going,
        theirs,
    ];
    let doomed = |uid: &str, limit: usize| -> Vec<String> {
        beyond_history(&rollouts, &shop(uid), limit)
            .into_iter()
            .map(|doomed| doomed.name)
            .collect()
    };
    assert_eq!(doomed("uid-web", 3), ["first"]);
    assert_eq!(doomed("uid-web", 1), ["third", "second", "first"]);
    assert!(doomed("uid-web", 4).is_empty());
    assert_eq!(doomed("uid-other", 0), ["other-workload"]);
    // Deleted with the UID it was read with.
    assert_eq!(
        beyond_history(&rollouts, &shop("uid-web"), 3)[0].uid,
        "uid-of-first"
    );
    // The newest end of any trigger, never another workload's or a user's own rollout.
    assert_eq!(last_ended(&rollouts, &shop("uid-web")), Some(at(40).0));
    assert_eq!(last_ended(&rollouts, &shop("uid-other")), Some(at(5).0));
    assert_eq!(last_ended(&rollouts, &shop("uid-none")), None);
}

#[test]
fn only_an_unfinished_rollout_of_the_same_trigger_and_workload_runs() {
    let rollout = |phase: Option<RolloutPhase>, uid: &str, cause: &Cause| {
        Arc::new(of_workload_in_phase(uid, cause, phase))
    };
    let schedule = Cause::Schedule {
        tick: Timestamp::UNIX_EPOCH,
    };
    let rollouts = [
        rollout(Some(RolloutPhase::Completed), "uid-web", &config_cause()),
        rollout(None, "uid-other", &config_cause()),
        rollout(Some(RolloutPhase::Progressing), "uid-web", &schedule),
    ];
    assert_eq!(
        running(&rollouts, &shop("uid-web"), Trigger::ConfigChange),
        None
    );
    assert!(running(&rollouts, &shop("uid-web"), Trigger::Schedule).is_some());
    assert!(running(&rollouts, &shop("uid-other"), Trigger::ConfigChange).is_some());
}

/// What a tenant can write on its own rollouts: any labels, any owner reference.
#[test]
fn only_the_workloads_namespace_and_controller_uid_make_a_rollout_its_own() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    let finished = |name: &str| {
        let mut rollout =
            of_workload_in_phase("uid-web", &config_cause(), Some(RolloutPhase::Completed));
        rollout.metadata.name = Some(name.to_owned());
        if let Some(status) = rollout.status.as_mut() {
            status.completion_time = Some(Time(Timestamp::UNIX_EPOCH));
        }
        rollout
    };
    // Another namespace's rollouts, labelled and even owned with the workload's UID.
    let forged: Vec<Arc<ContainerRecreateRollout>> = ["nightly", "x1", "x2", "x3"]
        .into_iter()
        .map(|name| {
            let mut rollout = finished(name);
            rollout.metadata.namespace = Some("tenant-a".to_owned());
            Arc::new(rollout)
        })
        .collect();
    let mut running_there = of_workload_in_phase("uid-web", &config_cause(), None);
    running_there.metadata.namespace = Some("tenant-a".to_owned());
    // In the workload's namespace, labelled, but not controlled by it.
    let mut not_controller = finished("not-controller");
    not_controller.metadata.owner_references.as_mut().unwrap()[0].controller = Some(false);
    let mut unowned = finished("unowned");
    unowned.metadata.owner_references = None;
    let mut rollouts = forged;
    rollouts.extend([
        Arc::new(running_there),
        Arc::new(not_controller),
        Arc::new(unowned),
    ]);
    let web = shop("uid-web");
    assert!(beyond_history(&rollouts, &web, 0).is_empty());
    assert_eq!(last_ended(&rollouts, &web), None);
    assert_eq!(running(&rollouts, &web, Trigger::ConfigChange), None);
    assert_eq!(
        name_taken(&rollouts[4], &rollouts, &web, Trigger::ConfigChange),
        NameTaken::Other
    );
    // The workload's own, beside them, is found.
    rollouts.push(Arc::new(finished("own")));
    let own: Vec<String> = beyond_history(&rollouts, &web, 0)
        .into_iter()
        .map(|doomed| doomed.name)
        .collect();
    assert_eq!(own, ["own"]);
}
