//! The cluster-wide cap on rollouts running at once (`--max-running-rollouts`, chart value
//! `rollouts.maxRunning`, 10 by default).
//!
//! One shared ConfigMap or trust bundle may be used by hundreds of workloads: a change would
//! start hundreds of trigger rollouts, each within its own budgets, and together restart much
//! of the cluster at once. So at most the cap run at once; a rollout that has not started waits
//! with reason `WaitingForClusterCap`. A started rollout is never held back. The waiting ones
//! start as slots free, namespaces taking turns (the oldest of the namespace whose turn it is
//! first), so one namespace's hundred rollouts do not keep another's one waiting behind them.
//! A paused rollout that has not started waits without taking a turn.
//!
//! Pure: the controller gives the rollout cache's view ([`CapView::of`]) and the cap.

use std::collections::{BTreeMap, VecDeque};

use crr_crds::rollout::ContainerRecreateRollout;
use jiff::Timestamp;
use kube::ResourceExt as _;
use kube::runtime::watcher;

/// What the cap reads of a rollout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CapView {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Its creation time.
    pub created: Timestamp,
    /// It has started (its status has a start time).
    pub started: bool,
    /// It ended, or is being deleted.
    pub over: bool,
    /// `spec.paused`.
    pub paused: bool,
}

impl CapView {
    /// The cap's view of `rollout`.
    pub fn of(rollout: &ContainerRecreateRollout) -> Self {
        let status = rollout.status.as_ref();
        Self {
            namespace: rollout.namespace().unwrap_or_default(),
            name: rollout.name_any(),
            created: rollout
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(Timestamp::UNIX_EPOCH, |time| time.0),
            started: status.is_some_and(|status| status.start_time.is_some()),
            over: rollout.metadata.deletion_timestamp.is_some()
                || rollout.phase().is_some_and(|phase| phase.is_finished()),
            paused: rollout.spec.paused,
        }
    }

    fn runs(&self) -> bool {
        self.started && !self.over
    }

    fn waits(&self) -> bool {
        !self.started && !self.over && !self.paused
    }
}

/// Whether a rollout watch event frees a slot under the cap: a rollout that ended (or is being
/// deleted), or one deleted after it started. The waiting rollouts are then looked at at once
/// ([`waiting`]), not at their next poll. A relist's events free none (nothing changed).
pub fn frees_a_slot(event: &watcher::Event<ContainerRecreateRollout>) -> bool {
    match event {
        watcher::Event::Apply(rollout) => CapView::of(rollout).over,
        watcher::Event::Delete(rollout) => CapView::of(rollout).started,
        watcher::Event::Init | watcher::Event::InitApply(_) | watcher::Event::InitDone => false,
    }
}

/// The rollouts that wait under the cap: not started, not ended, not paused.
pub fn waiting(rollouts: &[CapView]) -> impl Iterator<Item = &CapView> {
    rollouts.iter().filter(|view| view.waits())
}

/// Whether a rollout may start under the cap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// It may start (or runs already).
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
/// cluster, it included), with at most `cap` running at once.
pub fn admission(rollouts: &[CapView], namespace: &str, name: &str, cap: usize) -> Admission {
    let Some(me) = rollouts
        .iter()
        .find(|view| view.namespace == namespace && view.name == name)
    else {
        return Admission::Start;
    };
    if me.started || me.over {
        return Admission::Start;
    }
    let running = rollouts.iter().filter(|view| view.runs()).count();
    let free = cap.saturating_sub(running);
    let order = fair_order(rollouts);
    let ahead = order
        .iter()
        .position(|view| view.namespace == namespace && view.name == name)
        .unwrap_or(order.len());
    if ahead < free {
        Admission::Start
    } else {
        Admission::Wait {
            running,
            cap,
            ahead,
        }
    }
}

/// The waiting rollouts in the order they start: namespaces take turns, the namespace with the
/// oldest waiting rollout first, and within a namespace the oldest first.
fn fair_order(rollouts: &[CapView]) -> Vec<&CapView> {
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
    let mut order = Vec::new();
    while lines.iter().any(|line| !line.is_empty()) {
        for line in &mut lines {
            if let Some(view) = line.pop_front() {
                order.push(view);
            }
        }
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(namespace: &str, name: &str, created: i64) -> CapView {
        CapView {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            created: Timestamp::from_second(created).unwrap(),
            started: false,
            over: false,
            paused: false,
        }
    }

    fn running(namespace: &str, name: &str) -> CapView {
        CapView {
            started: true,
            ..view(namespace, name, 0)
        }
    }

    #[test]
    fn below_the_cap_a_rollout_starts_and_a_started_one_always_runs() {
        let rollouts = [running("a", "r1"), view("a", "new", 10)];
        assert_eq!(admission(&rollouts, "a", "new", 2), Admission::Start);
        assert_eq!(
            admission(&rollouts, "a", "new", 1),
            Admission::Wait {
                running: 1,
                cap: 1,
                ahead: 0
            }
        );
        // Over the cap already (it was lowered): a started rollout runs on.
        assert_eq!(admission(&rollouts, "a", "r1", 0), Admission::Start);
        // Not in the cache yet: nothing to count it against.
        assert_eq!(admission(&rollouts, "a", "unknown", 0), Admission::Start);
    }

    #[test]
    fn finished_deleted_and_paused_rollouts_take_no_slot_and_no_turn() {
        let mut done = running("a", "done");
        done.over = true;
        let mut paused = view("a", "paused", 1);
        paused.paused = true;
        let rollouts = [done, paused, view("b", "next", 5)];
        assert_eq!(admission(&rollouts, "b", "next", 1), Admission::Start);
        assert!(matches!(
            admission(&rollouts, "a", "paused", 1),
            Admission::Wait { .. }
        ));
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
        let ahead = |namespace: &str, name: &str| match admission(&rollouts, namespace, name, 2) {
            Admission::Wait { ahead, .. } => ahead,
            Admission::Start => panic!("{namespace}/{name} starts over the cap"),
        };
        assert_eq!(ahead("busy", "w0"), 0);
        assert_eq!(ahead("small", "one"), 1, "second, not behind all five");
        assert_eq!(ahead("busy", "w1"), 2);
        assert_eq!(ahead("busy", "w4"), 5);
        // Two slots free: the first two of that order start.
        rollouts.drain(..2);
        assert_eq!(admission(&rollouts, "busy", "w0", 2), Admission::Start);
        assert_eq!(admission(&rollouts, "small", "one", 2), Admission::Start);
        assert!(matches!(
            admission(&rollouts, "busy", "w1", 2),
            Admission::Wait { ahead: 2, .. }
        ));
    }
}
