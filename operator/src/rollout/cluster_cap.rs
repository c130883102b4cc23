//! The cluster-wide cap on rollouts running at once (`--max-running-rollouts`, chart value
//! `operator.maxRunningRollouts`, 10 by default), and each namespace's share of it
//! (`--max-running-rollouts-per-namespace`, a quarter of the cap by default, at least 1).
//!
//! One shared ConfigMap or trust bundle may be used by hundreds of workloads: a change would
//! start hundreds of trigger rollouts, each within its own budgets, and together restart much
//! of the cluster at once. So at most the cap run at once; a rollout that has not started waits
//! with reason `WaitingForClusterCap`. A running rollout is never held back.
//!
//! The cap is shared between tenants: only a rollout that runs holds a slot (started, phase
//! `Progressing`, not paused, not ended). A paused rollout gives its slot back and starts nothing
//! (it is admitted at once, and shows no start time until it starts); resumed, it waits for a
//! slot as a new one does. The waiting rollouts start as slots free, namespaces taking turns (the
//! oldest of the namespace whose turn it is first), and a namespace that holds its share already
//! goes after every other namespace's waiting rollouts: one namespace's rollouts cannot keep
//! another's waiting while slots free. (A namespace may run more than its share while no other
//! waits; rollouts that cannot progress end at their progress deadline and give the slot back.)
//!
//! Pure: the controller gives the rollout cache's view ([`CapView::of`]) and the [`Cap`].

use std::collections::{BTreeMap, VecDeque};

use crr_crds::rollout::ContainerRecreateRollout;
use jiff::Timestamp;
use kube::ResourceExt as _;
use kube::runtime::watcher;

/// The most rollouts that run at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cap {
    /// In the cluster.
    pub total: usize,
    /// In one namespace, while rollouts of other namespaces wait.
    pub per_namespace: usize,
}

impl Cap {
    /// The cap of `total`, each namespace's share `per_namespace` (`None`: a quarter of `total`,
    /// at least 1).
    pub fn new(total: usize, per_namespace: Option<usize>) -> Self {
        Self {
            total,
            per_namespace: per_namespace.unwrap_or(total / 4).max(1),
        }
    }
}

/// What the cap reads of a rollout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CapView {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Its creation time.
    pub created: Timestamp,
    /// It runs: started (its status has a start time), phase `Progressing` and not waiting
    /// under the cap (a resumed rollout waits again).
    pub running: bool,
    /// It ended, or is being deleted.
    pub over: bool,
    /// `spec.paused`.
    pub paused: bool,
}

impl CapView {
    /// The cap's view of `rollout`.
    pub fn of(rollout: &ContainerRecreateRollout) -> Self {
        Self {
            namespace: rollout.namespace().unwrap_or_default(),
            name: rollout.name_any(),
            created: rollout.created().unwrap_or(Timestamp::UNIX_EPOCH),
            running: rollout.status.as_ref().is_some_and(super::status::runs),
            over: rollout.metadata.deletion_timestamp.is_some()
                || rollout.phase().is_some_and(|phase| phase.is_finished()),
            paused: rollout.spec.paused,
        }
    }

    /// Whether it holds a slot.
    fn holds(&self) -> bool {
        self.running && !self.over && !self.paused
    }

    fn waits(&self) -> bool {
        !self.holds() && !self.over && !self.paused
    }
}

/// Whether a rollout watch event frees a slot under the cap: a rollout that ended (or is being
/// deleted) or paused, or one deleted while it ran. The waiting rollouts are then looked at at
/// once ([`waiting`]), not at their next poll. A relist's events free none (nothing changed).
pub fn frees_a_slot(event: &watcher::Event<ContainerRecreateRollout>) -> bool {
    match event {
        watcher::Event::Apply(rollout) => {
            let view = CapView::of(rollout);
            view.over || view.paused
        }
        watcher::Event::Delete(rollout) => CapView::of(rollout).holds(),
        watcher::Event::Init | watcher::Event::InitApply(_) | watcher::Event::InitDone => false,
    }
}

/// The rollouts that wait under the cap: not running, not ended, not paused.
pub fn waiting(rollouts: &[CapView]) -> impl Iterator<Item = &CapView> {
    rollouts.iter().filter(|view| view.waits())
}

/// Whether a rollout may start under the cap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// It may start (or runs already, or is paused and starts nothing).
    Start,
    /// It waits: `running` rollouts run, the cap is `cap`, and `ahead` waiting rollouts start
    /// before it.
    Wait {
        /// Rollouts running in the cluster.
        running: usize,
        /// The cap.
        cap: usize,
        /// Waiting rollouts that start before it.
        ahead: usize,
    },
}

/// Whether the rollout `namespace/name` may start, among `rollouts` (every rollout of the
/// cluster, it included), under `cap`.
pub fn admission(rollouts: &[CapView], namespace: &str, name: &str, cap: Cap) -> Admission {
    let Some(me) = rollouts
        .iter()
        .find(|view| view.namespace == namespace && view.name == name)
    else {
        return Admission::Start;
    };
    if !me.waits() {
        return Admission::Start;
    }
    let running = rollouts.iter().filter(|view| view.holds()).count();
    let free = cap.total.saturating_sub(running);
    let order = fair_order(rollouts, cap.per_namespace);
    let ahead = order
        .iter()
        .position(|view| view.namespace == namespace && view.name == name)
        .unwrap_or(order.len());
    if ahead < free {
        Admission::Start
    } else {
        Admission::Wait {
            running,
            cap: cap.total,
            ahead,
        }
    }
}

/// The waiting rollouts in the order they start: namespaces take turns, the namespace with the
/// oldest waiting rollout first, and within a namespace the oldest first; a rollout that would
/// take its namespace past `share` running goes after every one that would not.
fn fair_order(rollouts: &[CapView], share: usize) -> Vec<&CapView> {
    let mut held: BTreeMap<&str, usize> = BTreeMap::new();
    for view in rollouts.iter().filter(|view| view.holds()) {
        *held.entry(view.namespace.as_str()).or_default() += 1;
    }
    let mut lines: BTreeMap<&str, Vec<&CapView>> = BTreeMap::new();
    for view in rollouts.iter().filter(|view| view.waits()) {
        lines.entry(view.namespace.as_str()).or_default().push(view);
    }
    let mut lines: Vec<VecDeque<&CapView>> = lines
        .into_values()
        .map(|mut line| {
            line.sort_by(|a, b| (a.created, &a.name).cmp(&(b.created, &b.name)));
            VecDeque::from(line)
        })
        .collect();
    lines.sort_by_key(|line| {
        line.front()
            .map(|view| (view.created, view.namespace.clone()))
    });
    let mut within_share = Vec::new();
    let mut beyond_share = Vec::new();
    while lines.iter().any(|line| !line.is_empty()) {
        for line in &mut lines {
            if let Some(view) = line.pop_front() {
                let count = held.entry(view.namespace.as_str()).or_default();
                if *count < share {
                    *count += 1;
                    within_share.push(view);
                } else {
                    beyond_share.push(view);
                }
            }
        }
    }
    within_share.extend(beyond_share);
    within_share
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(namespace: &str, name: &str, created: i64) -> CapView {
        CapView {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            created: Timestamp::from_second(created).unwrap(),
            running: false,
            over: false,
            paused: false,
        }
    }

    fn running(namespace: &str, name: &str) -> CapView {
        CapView {
            running: true,
            ..view(namespace, name, 0)
        }
    }

    /// A cap of `total` without a namespace share.
    fn cap(total: usize) -> Cap {
        Cap {
            total,
            per_namespace: usize::MAX,
        }
    }

    #[test]
    fn below_the_cap_a_rollout_starts_and_a_started_one_always_runs() {
        let rollouts = [running("a", "r1"), view("a", "new", 10)];
        assert_eq!(admission(&rollouts, "a", "new", cap(2)), Admission::Start);
        assert_eq!(
            admission(&rollouts, "a", "new", cap(1)),
            Admission::Wait {
                running: 1,
                cap: 1,
                ahead: 0
            }
        );
        // Over the cap already (it was lowered): a started rollout runs on.
        assert_eq!(admission(&rollouts, "a", "r1", cap(0)), Admission::Start);
        // Not in the cache yet: nothing to count it against.
        assert_eq!(
            admission(&rollouts, "a", "unknown", cap(0)),
            Admission::Start
        );
    }

    #[test]
    fn finished_deleted_and_paused_rollouts_take_no_slot_and_no_turn() {
        let mut done = running("a", "done");
        done.over = true;
        let mut paused = view("a", "paused", 1);
        paused.paused = true;
        let rollouts = [done, paused, view("b", "next", 5)];
        assert_eq!(admission(&rollouts, "b", "next", cap(1)), Admission::Start);
        // Paused, it starts nothing: admitted, it takes no slot.
        assert_eq!(
            admission(&rollouts, "a", "paused", cap(0)),
            Admission::Start
        );
    }

    #[test]
    fn ten_paused_rollouts_of_one_tenant_hold_no_slot_of_another() {
        let mut rollouts: Vec<CapView> = (0..10)
            .map(|index| {
                let mut paused = running("a", &format!("p{index}"));
                paused.paused = true;
                paused
            })
            .collect();
        rollouts.push(view("b", "theirs", 50));
        assert_eq!(
            admission(&rollouts, "b", "theirs", Cap::new(10, None)),
            Admission::Start
        );
        // Resumed, one waits for a slot as a new rollout does: it is not running yet.
        rollouts[0].paused = false;
        rollouts[0].running = false;
        assert!(matches!(
            admission(&rollouts, "a", "p0", cap(0)),
            Admission::Wait { ahead: 0, .. }
        ));
        assert_eq!(admission(&rollouts, "a", "p0", cap(1)), Admission::Start);
    }

    #[test]
    fn a_namespace_at_its_share_goes_after_other_namespaces() {
        // Namespace a runs one and waits with an older one; b's newer one is first to start.
        let rollouts = [running("a", "r"), view("a", "w1", 1), view("b", "one", 9)];
        let shared = Cap {
            total: 2,
            per_namespace: 1,
        };
        assert_eq!(admission(&rollouts, "b", "one", shared), Admission::Start);
        assert_eq!(
            admission(&rollouts, "a", "w1", shared),
            Admission::Wait {
                running: 1,
                cap: 2,
                ahead: 1
            }
        );
        // Without a share, the oldest (a's) goes first.
        assert_eq!(admission(&rollouts, "a", "w1", cap(2)), Admission::Start);
        // Nobody else waits: a may run past its share up to the cap.
        let alone = [running("a", "r"), view("a", "w1", 1)];
        assert_eq!(admission(&alone, "a", "w1", shared), Admission::Start);
    }

    #[test]
    fn the_share_is_a_quarter_of_the_cap_at_least_one() {
        assert_eq!(Cap::new(10, None).per_namespace, 2);
        assert_eq!(Cap::new(3, None).per_namespace, 1);
        assert_eq!(Cap::new(10, Some(5)).per_namespace, 5);
    }

    #[test]
    fn only_a_started_progressing_rollout_not_waiting_under_the_cap_runs() {
        use crr_crds::keys;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
        let runs = rollout("runs", true, Some("Progressing"));
        assert!(CapView::of(&runs).running);
        assert!(!CapView::of(&rollout("paused", true, Some("Paused"))).running);
        assert!(!CapView::of(&rollout("new", false, Some("Progressing"))).running);
        let mut resumed_waits = rollout("resumed", true, Some("Progressing"));
        resumed_waits.status.as_mut().unwrap().conditions = vec![Condition {
            type_: keys::CONDITION_ROLLOUT_PROGRESSING.to_owned(),
            status: "True".to_owned(),
            reason: super::super::status::REASON_WAITING_FOR_CLUSTER_CAP.to_owned(),
            message: String::new(),
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                Timestamp::UNIX_EPOCH,
            ),
            observed_generation: None,
        }];
        assert!(!CapView::of(&resumed_waits).running);
        // Pausing a rollout frees its slot at once.
        let mut pausing = runs;
        pausing.spec.paused = true;
        assert!(frees_a_slot(&watcher::Event::Apply(pausing)));
    }

    /// A rollout `name` of namespace `a`, started or not, in `phase`.
    fn rollout(name: &str, started: bool, phase: Option<&str>) -> ContainerRecreateRollout {
        let mut rollout = ContainerRecreateRollout::new(name, Default::default());
        rollout.metadata.namespace = Some("a".to_owned());
        rollout.status = Some(crr_crds::rollout::ContainerRecreateRolloutStatus {
            start_time: started.then_some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                Timestamp::UNIX_EPOCH,
            )),
            phase: phase.map(str::to_owned),
            ..Default::default()
        });
        rollout
    }

    #[test]
    fn an_ending_or_a_started_rollouts_deletion_frees_a_slot() {
        let done = rollout("done", true, Some("Failed"));
        let runs = rollout("runs", true, Some("Progressing"));
        let waits = rollout("waits", false, None);
        assert!(frees_a_slot(&watcher::Event::Apply(done.clone())));
        assert!(!frees_a_slot(&watcher::Event::Apply(runs.clone())));
        assert!(frees_a_slot(&watcher::Event::Delete(runs)));
        assert!(!frees_a_slot(&watcher::Event::Delete(waits.clone())));
        assert!(!frees_a_slot(&watcher::Event::InitApply(done)));
        let mut paused = CapView::of(&waits);
        paused.paused = true;
        let views = [CapView::of(&waits), paused, running("a", "r")];
        let names: Vec<&str> = waiting(&views).map(|view| view.name.as_str()).collect();
        assert_eq!(names, ["waits"]);
    }

    #[test]
    fn waiting_rollouts_start_with_namespaces_taking_turns() {
        let mut rollouts = vec![running("busy", "r0"), running("busy", "r1")];
        // The busy namespace's shared-ConfigMap change made five rollouts; a small one came later.
        for index in 0..5 {
            rollouts.push(view("busy", &format!("w{index}"), 10 + index));
        }
        rollouts.push(view("small", "one", 20));
        let ahead =
            |namespace: &str, name: &str| match admission(&rollouts, namespace, name, cap(2)) {
                Admission::Wait { ahead, .. } => ahead,
                Admission::Start => panic!("{namespace}/{name} starts over the cap"),
            };
        assert_eq!(ahead("busy", "w0"), 0);
        assert_eq!(ahead("small", "one"), 1, "second, not behind all five");
        assert_eq!(ahead("busy", "w1"), 2);
        assert_eq!(ahead("busy", "w4"), 5);
        // Two slots free: the first two of that order start.
        rollouts.drain(..2);
        assert_eq!(admission(&rollouts, "busy", "w0", cap(2)), Admission::Start);
        assert_eq!(
            admission(&rollouts, "small", "one", cap(2)),
            Admission::Start
        );
        assert!(matches!(
            admission(&rollouts, "busy", "w1", cap(2)),
            Admission::Wait { ahead: 2, .. }
        ));
    }
}
