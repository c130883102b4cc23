use super::*;
use proptest::prelude::*;

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + seconds).expect("a valid time")
}

fn pod(name: &str, created: i64, ready: bool) -> PodView {
    PodView {
        name: name.to_owned(),
        uid: format!("uid-{name}"),
        created: at(created),
        ready,
        terminating: false,
        restartable: true,
        ordinal: None,
    }
}

fn settings(max_unavailable: usize) -> Settings {
    Settings {
        created: at(100),
        max_unavailable: Limit::Count(max_unavailable),
        respect_budgets: true,
        paused: false,
        aborted: false,
        only_pods: BTreeSet::new(),
        max_failed_pods: 0,
        target_exists: true,
        past_deadline: None,
    }
}

fn names(plan: &Plan) -> Vec<&str> {
    plan.start.iter().map(|pod| pod.name.as_str()).collect()
}

fn requests(states: &[(&str, RequestState)]) -> BTreeMap<String, RequestState> {
    states
        .iter()
        .map(|(name, state)| (format!("uid-{name}"), state.clone()))
        .collect()
}

fn budget(name: &str, allowed: i32, desired: i32, pods: &[&PodView]) -> BudgetView {
    BudgetView {
        name: name.to_owned(),
        disruptions_allowed: allowed,
        desired_healthy: desired,
        status_current: true,
        pods: pods
            .iter()
            .map(|pod| (pod.uid.clone(), pod.ready))
            .collect(),
        expected_pods: i32::try_from(pods.len()).unwrap(),
        disrupted: BTreeSet::new(),
        current_healthy: allowed + desired,
        resource_version: format!("rv-{name}"),
        released: BTreeSet::new(),
    }
}

fn failed(message: &str) -> RequestState {
    RequestState::Failed {
        container: Some("app".to_owned()),
        message: message.to_owned(),
    }
}

#[test]
fn starts_up_to_max_unavailable_oldest_first() {
    let pods = [pod("c", 3, true), pod("a", 1, true), pod("b", 2, true)];
    let plan = plan(&settings(2), &pods, &BTreeMap::new(), &[]);
    assert_eq!(names(&plan), ["a", "b"]);
    assert_eq!(plan.phase, RolloutPhase::Progressing);
    assert_eq!(
        plan.waiting,
        Waiting::ForUnavailable {
            unavailable: 2,
            limit: 2
        }
    );
    assert_eq!(
        plan.counts,
        Counts {
            target_pods: 3,
            recreated: 0,
            failed: 0,
            in_flight: 2,
            pending: 1,
            skipped: 0,
        }
    );
}

#[test]
fn in_flight_and_not_ready_pods_take_the_room() {
    let pods = [
        pod("a", 1, true),
        pod("b", 2, false), // just recreated, not Ready again yet
        pod("c", 3, true),
        pod("d", 4, true),
    ];
    let states = requests(&[
        ("a", RequestState::InFlight),
        ("b", RequestState::Succeeded),
    ]);
    let plan = plan(&settings(2), &pods, &states, &[]);
    assert!(plan.start.is_empty(), "{plan:?}");
    assert_eq!(
        plan.waiting,
        Waiting::ForUnavailable {
            unavailable: 2,
            limit: 2
        }
    );
    let plan = super::plan(&settings(3), &pods, &states, &[]);
    assert_eq!(names(&plan), ["c"]);
}

#[test]
fn pods_not_ready_go_first_and_cost_nothing() {
    let pods = [pod("a", 1, true), pod("b", 2, false), pod("c", 3, false)];
    let plan = plan(&settings(1), &pods, &BTreeMap::new(), &[]);
    // b and c are unavailable already (2 ≥ 1): they start, a waits.
    assert_eq!(names(&plan), ["b", "c"]);
    assert!(matches!(plan.waiting, Waiting::ForUnavailable { .. }));
}

#[test]
fn statefulset_pods_go_from_the_highest_ordinal() {
    let mut pods: Vec<PodView> = (0..4)
        .map(|ordinal| {
            let mut pod = pod(&format!("web-{ordinal}"), i64::from(ordinal), true);
            pod.ordinal = Some(ordinal);
            pod
        })
        .collect();
    pods.reverse();
    let plan = plan(&settings(4), &pods, &BTreeMap::new(), &[]);
    assert_eq!(names(&plan), ["web-3", "web-2", "web-1", "web-0"]);
}

#[test]
fn pods_created_after_the_rollout_or_terminating_are_not_its_target() {
    let mut leaving = pod("leaving", 2, true);
    leaving.terminating = true;
    let pods = [
        pod("old", 1, true),
        pod("same-second", 100, true),
        pod("scaled-up", 101, true),
        leaving,
    ];
    let plan = plan(&settings(5), &pods, &BTreeMap::new(), &[]);
    assert_eq!(names(&plan), ["old"]);
    assert_eq!(plan.counts.target_pods, 1);
}

#[test]
fn completes_when_every_target_pod_was_recreated() {
    let pods = [pod("a", 1, true), pod("b", 2, true), pod("new", 200, true)];
    let states = requests(&[
        ("a", RequestState::Succeeded),
        ("b", RequestState::Succeeded),
    ]);
    let plan = plan(&settings(1), &pods, &states, &[]);
    assert_eq!(plan.phase, RolloutPhase::Completed);
    assert_eq!(plan.counts.recreated, 2);
    assert_eq!(plan.counts.target_pods, 2);
    assert!(plan.start.is_empty());
}

#[test]
fn a_failure_over_the_limit_stops_new_starts_and_ends_failed_once_nothing_is_in_flight() {
    let pods = [pod("a", 1, true), pod("b", 2, true), pod("c", 3, true)];
    let in_flight = requests(&[
        ("a", failed("not restarted")),
        ("b", RequestState::InFlight),
    ]);
    let plan1 = plan(&settings(3), &pods, &in_flight, &[]);
    assert!(plan1.start.is_empty());
    assert_eq!(plan1.phase, RolloutPhase::Progressing);
    assert_eq!(plan1.waiting, Waiting::FailureLimit);
    let done = requests(&[
        ("a", failed("not restarted")),
        ("b", RequestState::Succeeded),
    ]);
    let plan2 = plan(&settings(3), &pods, &done, &[]);
    assert_eq!(plan2.phase, RolloutPhase::Failed);
    assert_eq!(plan2.failed_reason, Some(REASON_FAILURE_LIMIT));
    assert_eq!(
        plan2.failures,
        [RolloutFailure {
            pod: "a".into(),
            container: Some("app".into()),
            message: "not restarted".into()
        }]
    );
    // Within maxFailedPods the rollout goes on and completes.
    let mut tolerant = settings(3);
    tolerant.max_failed_pods = 1;
    let plan3 = plan(&tolerant, &pods, &done, &[]);
    assert_eq!(names(&plan3), ["c"]);
    let all = requests(&[
        ("a", failed("not restarted")),
        ("b", RequestState::Succeeded),
        ("c", RequestState::Succeeded),
    ]);
    assert_eq!(
        plan(&tolerant, &pods, &all, &[]).phase,
        RolloutPhase::Completed
    );
}

#[test]
fn paused_starts_nothing_and_says_so() {
    let pods = [pod("a", 1, true)];
    let mut paused = settings(1);
    paused.paused = true;
    let plan = plan(&paused, &pods, &BTreeMap::new(), &[]);
    assert!(plan.start.is_empty());
    assert_eq!(plan.phase, RolloutPhase::Paused);
    assert_eq!(plan.waiting, Waiting::Paused);
}

#[test]
fn a_gone_target_ends_failed_after_its_requests_in_flight() {
    let pods = [pod("a", 1, true), pod("b", 2, true)];
    let mut gone = settings(2);
    gone.target_exists = false;
    let in_flight = requests(&[("a", RequestState::InFlight)]);
    let plan1 = plan(&gone, &pods, &in_flight, &[]);
    assert!(plan1.start.is_empty());
    assert_eq!(plan1.phase, RolloutPhase::Progressing);
    let plan2 = plan(&gone, &[], &BTreeMap::new(), &[]);
    assert_eq!(plan2.phase, RolloutPhase::Failed);
    assert_eq!(plan2.failed_reason, Some(REASON_TARGET_GONE));
}

#[test]
fn a_budget_counts_requests_its_status_has_not_shown_yet() {
    // minAvailable 7 of 8: the PDB's status allows 1 and has not seen the request of a yet.
    let pods: Vec<PodView> = (0..8).map(|i| pod(&format!("p{i}"), i, true)).collect();
    let refs: Vec<&PodView> = pods.iter().collect();
    let pdb = budget("web", 1, 7, &refs);
    let states = requests(&[("p0", RequestState::InFlight)]);
    let plan = plan(&settings(2), &pods, &states, std::slice::from_ref(&pdb));
    assert!(plan.start.is_empty(), "{plan:?}");
    assert_eq!(
        plan.waiting,
        Waiting::ForBudget {
            budget: "web".into(),
            pod: "p1".into()
        }
    );
    // Nothing in flight: one starts, the second waits on the budget, not on maxUnavailable.
    let plan = super::plan(&settings(2), &pods, &BTreeMap::new(), &[pdb]);
    assert_eq!(names(&plan), ["p0"]);
    assert!(matches!(plan.waiting, Waiting::ForBudget { .. }));
}

#[test]
fn a_budget_whose_status_is_behind_its_spec_allows_nothing() {
    let pods = [pod("a", 1, true)];
    let mut pdb = budget("web", 5, 0, &[&pods[0]]);
    pdb.status_current = false;
    let plan = plan(&settings(1), &pods, &BTreeMap::new(), &[pdb]);
    assert!(plan.start.is_empty());
}

#[test]
fn a_budget_that_selects_other_pods_only_binds_the_pods_it_selects() {
    let pods = [pod("a", 1, true), pod("b", 2, true)];
    let pdb = budget("only-a", 0, 1, &[&pods[0]]);
    let plan = plan(
        &settings(2),
        &pods,
        &BTreeMap::new(),
        std::slice::from_ref(&pdb),
    );
    // a is first and blocked: the order is kept, b waits behind it.
    assert!(plan.start.is_empty());
    let mut ignoring = settings(2);
    ignoring.respect_budgets = false;
    assert_eq!(
        names(&super::plan(&ignoring, &pods, &BTreeMap::new(), &[pdb])),
        ["a", "b"]
    );
}

#[test]
fn failures_are_listed_by_pod_name_at_most_ten() {
    let pods: Vec<PodView> = (0..15).map(|i| pod(&format!("p{i:02}"), i, true)).collect();
    let states: BTreeMap<String, RequestState> = pods
        .iter()
        .map(|pod| (pod.uid.clone(), failed("boom")))
        .collect();
    let plan = plan(&settings(1), &pods, &states, &[]);
    assert_eq!(plan.failures.len(), MAX_LISTED_FAILURES);
    assert_eq!(plan.failures[0].pod, "p00");
    assert_eq!(plan.counts.failed, 15);
}

#[test]
fn percent_limits_resolve_against_the_target() {
    let pods: Vec<PodView> = (0..20).map(|i| pod(&format!("p{i:02}"), i, true)).collect();
    let mut ten_percent = settings(1);
    ten_percent.max_unavailable = Limit::Percent(10);
    assert_eq!(
        plan(&ten_percent, &pods, &BTreeMap::new(), &[]).start.len(),
        2
    );
}

// Properties over random worlds.

fn any_state() -> impl Strategy<Value = Option<RequestState>> {
    prop_oneof![
        3 => Just(None),
        1 => Just(Some(RequestState::InFlight)),
        1 => Just(Some(RequestState::Succeeded)),
        1 => Just(Some(RequestState::Failed { container: None, message: "x".into() })),
    ]
}

#[derive(Clone, Debug)]
struct World {
    pods: Vec<PodView>,
    requests: BTreeMap<String, RequestState>,
    budgets: Vec<BudgetView>,
    settings: Settings,
}

fn any_world() -> impl Strategy<Value = World> {
    let pods = prop::collection::vec(
        (
            0i64..200,
            any::<bool>(),
            prop::bool::weighted(0.1),
            prop::option::of(0u32..30),
            any_state(),
        ),
        0..30,
    );
    (
        pods,
        prop::collection::vec(
            (
                0i32..4,
                0i32..20,
                any::<bool>(),
                prop::collection::vec(any::<bool>(), 30),
            ),
            0..3,
        ),
        1usize..6,
        any::<bool>(),
        any::<bool>(),
        0usize..3,
    )
        .prop_map(|(pods, budgets, limit, respect, paused, max_failed)| {
            let mut views = Vec::new();
            let mut requests = BTreeMap::new();
            for (index, (created, ready, terminating, ordinal, state)) in
                pods.into_iter().enumerate()
            {
                let view = PodView {
                    name: format!("pod-{index}"),
                    uid: format!("uid-{index}"),
                    created: at(created),
                    ready,
                    terminating,
                    restartable: true,
                    ordinal,
                };
                if let Some(state) = state {
                    requests.insert(view.uid.clone(), state);
                }
                views.push(view);
            }
            let budgets = budgets
                .into_iter()
                .enumerate()
                .map(|(index, (allowed, desired, current, selects))| {
                    let pods: BTreeMap<String, bool> = views
                        .iter()
                        .zip(&selects)
                        .filter(|(_, selected)| **selected)
                        .map(|(pod, _)| (pod.uid.clone(), pod.ready))
                        .collect();
                    // The status counted the pods read, or (every third budget) one more.
                    let expected = pods.len() + usize::from(index % 3 == 2);
                    // Every other budget has its first selected pod evicted.
                    let disrupted = pods
                        .keys()
                        .take(usize::from(index % 2 == 1))
                        .cloned()
                        .collect();
                    // Every even budget held entries of this rollout's that it may release:
                    // its selected pods whose request succeeded (and were not evicted since).
                    let released: BTreeSet<String> = views
                        .iter()
                        .filter(|pod| {
                            index % 2 == 0
                                && pods.contains_key(&pod.uid)
                                && requests.get(&pod.uid) == Some(&RequestState::Succeeded)
                        })
                        .map(|pod| pod.name.clone())
                        .collect();
                    let current_healthy = allowed + desired;
                    BudgetView {
                        name: format!("pdb-{index}"),
                        disruptions_allowed: allowed,
                        desired_healthy: desired,
                        status_current: current,
                        pods,
                        expected_pods: i32::try_from(expected).unwrap(),
                        disrupted,
                        current_healthy,
                        resource_version: format!("rv-{index}"),
                        released,
                    }
                })
                .collect();
            World {
                pods: views,
                requests,
                budgets,
                settings: Settings {
                    created: at(100),
                    max_unavailable: Limit::Count(limit),
                    respect_budgets: respect,
                    paused,
                    aborted: false,
                    only_pods: BTreeSet::new(),
                    max_failed_pods: max_failed,
                    target_exists: true,
                    past_deadline: None,
                },
            }
        })
}

fn unavailable(world: &World, extra: &BTreeSet<&str>) -> usize {
    world
        .pods
        .iter()
        .filter(|pod| pod.created < world.settings.created && !pod.terminating)
        .filter(|pod| {
            !pod.ready
                || world.requests.get(&pod.uid) == Some(&RequestState::InFlight)
                || extra.contains(pod.uid.as_str())
        })
        .count()
}

proptest! {
    #[test]
    fn a_plan_never_starts_a_pod_twice_or_outside_its_target(world in any_world()) {
        let plan = plan(&world.settings, &world.pods, &world.requests, &world.budgets);
        let mut seen = BTreeSet::new();
        for started in &plan.start {
            prop_assert!(seen.insert(started.uid.clone()), "started twice: {started:?}");
            prop_assert!(!world.requests.contains_key(&started.uid), "has a request: {started:?}");
            let pod = world.pods.iter().find(|pod| pod.uid == started.uid).expect("a known pod");
            prop_assert!(pod.created < world.settings.created && !pod.terminating);
        }
    }

    #[test]
    fn a_plan_keeps_unavailable_pods_within_the_limit(world in any_world()) {
        let plan = plan(&world.settings, &world.pods, &world.requests, &world.budgets);
        let started: BTreeSet<&str> = plan.start.iter().map(|pod| pod.uid.as_str()).collect();
        let before = unavailable(&world, &BTreeSet::new());
        let after = unavailable(&world, &started);
        let limit = world.settings.max_unavailable.resolve(plan.counts.target_pods);
        // Starting not-Ready pods never adds to the unavailable; Ready ones only up to the limit.
        prop_assert!(after <= before.max(limit), "before {before}, after {after}, limit {limit}");
    }

    #[test]
    fn a_plan_never_takes_a_budget_below_what_it_allows(world in any_world()) {
        prop_assume!(world.settings.respect_budgets);
        let plan = plan(&world.settings, &world.pods, &world.requests, &world.budgets);
        let in_flight: BTreeSet<&str> = world
            .requests
            .iter()
            .filter(|(_, state)| **state == RequestState::InFlight)
            .map(|(uid, _)| uid.as_str())
            .collect();
        for budget in &world.budgets {
            let allowed = fresh_allowance(budget, &in_flight);
            // What the disruption controller allows once it has caught up, computed here apart:
            // healthy pods (Ready, not evicted) less the ones this plan and the in-flight
            // requests take, never below desiredHealthy.
            let healthy = budget
                .pods
                .iter()
                .filter(|(uid, ready)| {
                    **ready && !in_flight.contains(uid.as_str()) && !budget.disrupted.contains(*uid)
                })
                .count();
            let caught_up = i64::try_from(healthy).unwrap() - i64::from(budget.desired_healthy);
            let started_healthy = plan
                .start
                .iter()
                .filter(|pod| {
                    budget.pods.get(&pod.uid) == Some(&true) && !budget.disrupted.contains(&pod.uid)
                })
                .count();
            prop_assert!(
                !budget.status_current || i64::try_from(started_healthy).unwrap() <= caught_up.max(0),
                "{}: {started_healthy} healthy pods started, the caught-up PDB allows {caught_up}",
                budget.name
            );
            if i64::try_from(budget.pods.len()).unwrap() != i64::from(budget.expected_pods) {
                prop_assert!(
                    i64::try_from(started_healthy).unwrap() <= i64::from(budget.disruptions_allowed).max(0),
                    "{}: the status counted other pods; it allows {}", budget.name, budget.disruptions_allowed
                );
            }
            let taken = plan
                .start
                .iter()
                .filter(|pod| budget.pods.get(&pod.uid) == Some(&true))
                .count();
            prop_assert!(
                i64::try_from(taken).unwrap() <= allowed.max(0),
                "{} allows {allowed}, {taken} started", budget.name
            );
        }
    }

    #[test]
    fn budget_writes_reserve_every_ready_start_and_never_raise_an_allowance(world in any_world()) {
        let plan = plan(&world.settings, &world.pods, &world.requests, &world.budgets);
        if !world.settings.respect_budgets {
            prop_assert!(plan.budget_writes.is_empty());
            return Ok(());
        }
        let mut after = in_flight(&world.requests);
        after.extend(plan.start.iter().map(|pod| pod.uid.as_str()));
        for budget in &world.budgets {
            let reserve: Vec<String> = plan
                .start
                .iter()
                .filter(|pod| budget.pods.get(&pod.uid) == Some(&true))
                .map(|pod| pod.name.clone())
                .collect();
            let write = plan.budget_writes.iter().find(|write| write.budget == budget.name);
            if reserve.is_empty() && budget.released.is_empty() {
                prop_assert!(write.is_none(), "{}: nothing to write", budget.name);
                continue;
            }
            let write = write.expect("a write");
            prop_assert_eq!(&write.reserve, &reserve);
            prop_assert_eq!(write.release.iter().cloned().collect::<BTreeSet<_>>(), budget.released.clone());
            prop_assert_eq!(&write.resource_version, &budget.resource_version);
            let taken = i32::try_from(reserve.len()).unwrap();
            prop_assert!(write.disruptions_allowed >= 0 && write.current_healthy >= 0);
            // Never more than the status allowed, less what this plan takes: an eviction racing
            // the rollout reads no slot the rollout took.
            prop_assert!(write.disruptions_allowed <= (budget.disruptions_allowed - taken).max(0));
            prop_assert!(write.current_healthy <= (budget.current_healthy - taken).max(0));
            // Nor more than the pods as read allow after the starts.
            let allowed_after = healthy(budget, &after) - i64::from(budget.desired_healthy);
            prop_assert!(i64::from(write.disruptions_allowed) <= allowed_after.max(0));
            prop_assert!(i64::from(write.current_healthy) <= healthy(budget, &after));
        }
        prop_assert!(plan.budget_writes.len() <= world.budgets.len());
    }

    #[test]
    fn paused_failed_or_finished_rollouts_start_nothing(world in any_world()) {
        let plan = plan(&world.settings, &world.pods, &world.requests, &world.budgets);
        if world.settings.paused || plan.counts.failed > world.settings.max_failed_pods {
            prop_assert!(plan.start.is_empty());
        }
        if plan.phase.is_finished() {
            prop_assert!(plan.start.is_empty());
            prop_assert_eq!(plan.counts.in_flight, 0);
        }
    }

    #[test]
    fn a_plan_does_not_depend_on_the_order_pods_are_read_in(world in any_world(), seed in any::<u64>()) {
        let first = plan(&world.settings, &world.pods, &world.requests, &world.budgets);
        let mut shuffled = world.pods.clone();
        // A deterministic shuffle from the seed.
        let len = shuffled.len();
        if len > 1 {
            for index in 0..len {
                let other = usize::try_from(seed.wrapping_mul(index as u64 + 7) % len as u64).unwrap();
                shuffled.swap(index, other);
            }
        }
        let second = plan(&world.settings, &shuffled, &world.requests, &world.budgets);
        prop_assert_eq!(first, second);
    }

    #[test]
    fn counts_add_up_to_the_target(world in any_world()) {
        let plan = plan(&world.settings, &world.pods, &world.requests, &world.budgets);
        let counts = plan.counts;
        prop_assert_eq!(
            counts.recreated + counts.failed + counts.in_flight + counts.pending,
            counts.target_pods
        );
    }
}

#[test]
fn a_pod_turning_ready_frees_its_slot_before_the_budgets_status_shows_it() {
    // minAvailable 7 of 8: a pod was restarting, so the status still allows 0; it is Ready now.
    let pods: Vec<PodView> = (0..8).map(|i| pod(&format!("p{i}"), i, true)).collect();
    let refs: Vec<&PodView> = pods.iter().collect();
    let mut pdb = budget("web", 0, 7, &refs);
    let plan = super::plan(
        &settings(2),
        &pods,
        &BTreeMap::new(),
        std::slice::from_ref(&pdb),
    );
    assert_eq!(names(&plan), ["p0"], "{plan:?}");
    // A drain evicted p7 (still Ready, in disruptedPods): nothing is left to take.
    pdb.disrupted = BTreeSet::from(["uid-p7".to_owned()]);
    let plan = super::plan(
        &settings(2),
        &pods,
        &BTreeMap::new(),
        std::slice::from_ref(&pdb),
    );
    assert!(plan.start.is_empty(), "{plan:?}");
    // The status counted another set of pods (a replacement under way): it bounds the fresh count.
    pdb.disrupted.clear();
    pdb.expected_pods = 9;
    let plan = super::plan(
        &settings(2),
        &pods,
        &BTreeMap::new(),
        std::slice::from_ref(&pdb),
    );
    assert!(plan.start.is_empty(), "{plan:?}");
    pdb.disruptions_allowed = 1;
    let plan = super::plan(&settings(2), &pods, &BTreeMap::new(), &[pdb]);
    assert_eq!(names(&plan), ["p0"], "{plan:?}");
}

#[test]
fn a_finished_pods_released_entry_frees_its_slot_at_once_and_goes_with_the_next_reservation() {
    let (a, b, c) = (pod("a", 0, true), pod("b", 0, true), pod("c", 0, true));
    let mut web = budget("web", 0, 2, &[&a, &b, &c]);
    // a's request finished; its entry (this rollout's) is still in disruptedPods, so the
    // status allows nothing yet, but the slot is free.
    web.released = BTreeSet::from(["a".to_owned()]);
    web.current_healthy = 2;
    let plan = plan(
        &settings(1),
        &[a.clone(), b.clone(), c.clone()],
        &requests(&[("a", RequestState::Succeeded)]),
        &[web],
    );
    assert_eq!(names(&plan), ["b"]);
    assert_eq!(
        plan.budget_writes,
        [BudgetWrite {
            budget: "web".to_owned(),
            resource_version: "rv-web".to_owned(),
            reserve: vec!["b".to_owned()],
            release: vec!["a".to_owned()],
            disruptions_allowed: 0,
            current_healthy: 1,
        }]
    );
}

#[test]
fn a_rollout_that_ignores_budgets_writes_none() {
    let a = pod("a", 0, true);
    let web = budget("web", 1, 0, &[&a]);
    let plan = plan(
        &Settings {
            respect_budgets: false,
            ..settings(1)
        },
        std::slice::from_ref(&a),
        &BTreeMap::new(),
        &[web],
    );
    assert_eq!(names(&plan), ["a"]);
    assert!(plan.budget_writes.is_empty());
}

#[test]
fn an_aborted_rollout_starts_nothing_and_ends_aborted_once_nothing_is_under_way() {
    let pods = [pod("a", 1, true), pod("b", 2, true), pod("c", 3, true)];
    let aborted = Settings {
        aborted: true,
        max_failed_pods: 1,
        ..settings(3)
    };
    let running = requests(&[
        ("a", RequestState::Succeeded),
        ("b", RequestState::InFlight),
    ]);
    let plan_now = plan(&aborted, &pods, &running, &[]);
    assert!(plan_now.start.is_empty());
    assert_eq!(plan_now.phase, RolloutPhase::Progressing);
    assert_eq!(plan_now.waiting, Waiting::Aborting);
    assert_eq!((plan_now.counts.in_flight, plan_now.counts.pending), (1, 1));
    assert!(plan_now.cancel.is_empty());

    // A queued request goes; its pod counts as not started, and the rollout ends at once.
    let queued = RequestState::Queued {
        resource_version: "9".into(),
    };
    let waiting = requests(&[("a", RequestState::Succeeded), ("b", queued)]);
    let cancelled = plan(&aborted, &pods, &waiting, &[]);
    assert_eq!(
        cancelled.cancel,
        [Cancel {
            pod_uid: "uid-b".into(),
            resource_version: "9".into()
        }]
    );
    assert_eq!(cancelled.phase, RolloutPhase::Aborted);
    assert_eq!(
        (cancelled.counts.in_flight, cancelled.counts.pending),
        (0, 2)
    );

    let done = requests(&[("a", RequestState::Succeeded), ("b", failed("boom"))]);
    let ended = plan(&aborted, &pods, &done, &[]);
    assert_eq!(ended.phase, RolloutPhase::Aborted);
    assert!(ended.phase.is_finished());
    assert_eq!(
        (
            ended.counts.recreated,
            ended.counts.failed,
            ended.counts.pending
        ),
        (1, 1, 1)
    );

    // Every pod handled before the abort took effect: it ended on its own.
    let all = requests(&[
        ("a", RequestState::Succeeded),
        ("b", RequestState::Succeeded),
        ("c", RequestState::Succeeded),
    ]);
    assert_eq!(
        plan(&aborted, &pods, &all, &[]).phase,
        RolloutPhase::Completed
    );
}

#[test]
fn only_pods_narrows_the_target_to_those_names() {
    let pods = [pod("a", 1, true), pod("b", 2, true), pod("c", 3, true)];
    let retry = Settings {
        only_pods: ["c".to_owned(), "gone".to_owned()].into(),
        ..settings(3)
    };
    let plan_now = plan(&retry, &pods, &BTreeMap::new(), &[]);
    assert_eq!(names(&plan_now), ["c"]);
    assert_eq!(plan_now.counts.target_pods, 1);
}

#[test]
fn pods_that_cannot_be_restarted_are_skipped_and_the_rollout_still_ends() {
    let stuck = |name: &str| PodView {
        restartable: false,
        ready: false,
        ..pod(name, 2, false)
    };
    // One Running pod, one Pending (anti-affinity on one node), one evicted (Failed).
    let pods = [pod("running", 1, true), stuck("pending"), stuck("evicted")];
    let first = plan(&settings(2), &pods, &BTreeMap::new(), &[]);
    assert_eq!(names(&first), ["running"]);
    assert_eq!(
        (first.counts.target_pods, first.counts.skipped),
        (1, 2),
        "the two are skipped, not targets"
    );
    let done = plan(
        &settings(2),
        &pods,
        &requests(&[("running", RequestState::Succeeded)]),
        &[],
    );
    assert_eq!(done.phase, RolloutPhase::Completed);
    assert_eq!(
        (done.counts.recreated, done.counts.skipped),
        (1, 2),
        "completed with the Running pod recreated and the others skipped"
    );
    // A pod evicted while its request ran is counted by its request, not skipped.
    let evicted_late = plan(
        &settings(2),
        &pods,
        &requests(&[
            ("running", RequestState::Succeeded),
            ("evicted", failed("pod is gone")),
        ]),
        &[],
    );
    assert_eq!(
        (evicted_late.counts.failed, evicted_late.counts.skipped),
        (1, 1)
    );
}

#[test]
fn past_the_progress_deadline_without_progress_nothing_starts_and_the_rollout_fails() {
    let pods = [pod("a", 1, true), pod("b", 2, true)];
    let stalled = Settings {
        past_deadline: Some(Progress {
            recreated: 0,
            failed: 0,
            in_flight: 0,
        }),
        ..settings(1)
    };
    let failed = plan(&stalled, &pods, &BTreeMap::new(), &[]);
    assert!(failed.start.is_empty());
    assert_eq!(failed.phase, RolloutPhase::Failed);
    assert_eq!(failed.failed_reason, Some(REASON_PROGRESS_DEADLINE));
    // A request in flight finishes first; nothing new starts meanwhile.
    let in_flight = requests(&[("a", RequestState::InFlight)]);
    let holding = plan(
        &Settings {
            past_deadline: Some(Progress {
                recreated: 0,
                failed: 0,
                in_flight: 1,
            }),
            ..settings(2)
        },
        &pods,
        &in_flight,
        &[],
    );
    assert!(holding.start.is_empty());
    assert_eq!(holding.phase, RolloutPhase::Progressing);
    // Progress since the status was written (a pod recreated): the deadline does not apply.
    let moved = plan(
        &stalled,
        &pods,
        &requests(&[("a", RequestState::Succeeded)]),
        &[],
    );
    assert_eq!(names(&moved), ["b"]);
    // Paused: no deadline.
    let paused = plan(
        &Settings {
            paused: true,
            ..stalled.clone()
        },
        &pods,
        &BTreeMap::new(),
        &[],
    );
    assert_eq!(paused.phase, RolloutPhase::Paused);
}
