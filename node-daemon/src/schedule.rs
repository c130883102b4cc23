//! Which of a pod's requests the daemon works on next, as a function of the requests: one per
//! pod at a time, Recreating first, then oldest; the others that have no phase yet are to be
//! shown Pending. No I/O here: `worker` reads the requests and writes the Pending phases.
//!
//! And how the daemon's slots (`--max-parallel-pods`) are shared between namespaces, so that
//! no tenant starves another ([`Slots`]): waiting pods start round-robin across namespaces, the
//! namespace with the fewest running first, none beyond its fair share (`fair_share`: the slots
//! split evenly between the namespaces that run, wait, or rest between two looks at a recreate
//! in flight); a lone namespace may use every slot. A namespace that holds more than its share
//! when another comes (it had the node to itself) gives the excess back by preemption of the
//! rounds it started last (`Slots::to_preempt`): only a waiting preStop hook yields.
//!
//! It does not decide what a request's round does (`recreate`, `round`).

use std::collections::{BTreeMap, BTreeSet};

use crr_crds::v1beta1::{ContainerRecreateRequest, Phase};

use crate::round::must_leave_alone;

/// What a pod's next round works on.
#[derive(Debug, PartialEq)]
pub struct PodTurn {
    /// The request whose round runs now.
    pub next: ContainerRecreateRequest,
    /// Requests that wait behind it and have no phase yet: to be marked Pending.
    pub to_mark_pending: Vec<ContainerRecreateRequest>,
}

/// The order a pod's active requests are served in: Recreating first, then oldest first (by
/// creation time, a request without one first), then by name.
pub fn order(requests: &mut [ContainerRecreateRequest]) {
    requests.sort_by_key(|crr| {
        (
            crr.phase() != Some(Phase::Recreating),
            crr.metadata.creation_timestamp.as_ref().map(|time| time.0),
            crr.metadata.name.clone(),
        )
    });
}

/// The pod's next turn, from its requests as the daemon currently knows them; `None` when every
/// one is finished (completed or being deleted).
pub fn next_turn(requests: impl IntoIterator<Item = ContainerRecreateRequest>) -> Option<PodTurn> {
    let mut candidates: Vec<ContainerRecreateRequest> = requests
        .into_iter()
        .filter(|crr| !must_leave_alone(crr))
        .collect();
    order(&mut candidates);
    let mut candidates = candidates.into_iter();
    let next = candidates.next()?;
    let to_mark_pending = candidates.filter(|crr| crr.phase().is_none()).collect();
    Some(PodTurn {
        next,
        to_mark_pending,
    })
}

/// The namespace of a work key (`namespace/podName`).
pub fn namespace_of(key: &str) -> &str {
    key.split_once('/').map_or(key, |(namespace, _)| namespace)
}

/// How many slots one namespace may hold while others want some: `limit` split evenly between
/// the `namespaces` that run or wait, rounded up, at least 1.
pub fn fair_share(limit: usize, namespaces: usize) -> usize {
    limit.div_ceil(namespaces.max(1)).max(1)
}

/// The keys of every running round, by namespace, in the order they started.
pub type Running = BTreeMap<String, Vec<String>>;

/// The daemon's slots and who wants them.
#[derive(Clone, Copy, Debug)]
pub struct Slots<'a> {
    /// `--max-parallel-pods`.
    pub limit: usize,
    pub running: &'a Running,
    /// Keys waiting for a slot, in the order they came.
    pub waiting: &'a [String],
    /// Keys whose last round asked to be looked at again later (a recreate in flight polls the
    /// runtime, a grace period runs): they want no slot now, but their namespace is active, so
    /// its share is kept for it rather than handed to another namespace and taken back by
    /// preemption at its next look.
    pub resting: &'a BTreeSet<String>,
}

impl Slots<'_> {
    /// The namespaces that run, wait or rest.
    fn active_namespaces(&self) -> BTreeSet<&str> {
        self.running
            .iter()
            .filter(|(_, keys)| !keys.is_empty())
            .map(|(namespace, _)| namespace.as_str())
            .chain(self.waiting.iter().map(|key| namespace_of(key)))
            .chain(self.resting.iter().map(|key| namespace_of(key)))
            .collect()
    }

    /// Each active namespace's fair share of the slots.
    pub fn share(&self) -> usize {
        fair_share(self.limit, self.active_namespaces().len())
    }

    fn running_in(&self, namespace: &str) -> usize {
        self.running.get(namespace).map_or(0, Vec::len)
    }

    fn free(&self) -> usize {
        self.limit
            .saturating_sub(self.running.values().map(Vec::len).sum())
    }

    /// Which waiting keys start now, in order: round-robin across namespaces, the namespace with
    /// the fewest running first (by name on a tie), none beyond its fair share. A lone active
    /// namespace's share is every slot.
    pub fn to_start(&self) -> Vec<String> {
        let share = self.share();
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        let mut queues: BTreeMap<&str, std::collections::VecDeque<&String>> = BTreeMap::new();
        for key in self.waiting {
            let namespace = namespace_of(key);
            queues.entry(namespace).or_default().push_back(key);
            counts.insert(namespace, self.running_in(namespace));
        }
        let mut free = self.free();
        let mut started = vec![];
        while free > 0 {
            let next = queues
                .iter()
                .filter(|(_, queue)| !queue.is_empty())
                .map(|(namespace, _)| (counts.get(namespace).copied().unwrap_or(0), *namespace))
                .filter(|(count, _)| *count < share)
                .min();
            let Some((_, namespace)) = next else {
                break;
            };
            if let Some(key) = queues
                .get_mut(namespace)
                .and_then(|queue| queue.pop_front())
            {
                started.push(key.clone());
                *counts.entry(namespace).or_default() += 1;
                free -= 1;
            }
        }
        started
    }

    /// Which running keys must give their slot back, so that the namespaces waiting below their
    /// fair share get one: as many as they could start and free slots do not cover, taken from
    /// the namespaces furthest above their share, the last started first. Empty when nobody
    /// waits below its share.
    pub fn to_preempt(&self) -> Vec<String> {
        let share = self.share();
        let mut waiting_by_namespace: BTreeMap<&str, usize> = BTreeMap::new();
        for key in self.waiting {
            *waiting_by_namespace.entry(namespace_of(key)).or_default() += 1;
        }
        let wanted: usize = waiting_by_namespace
            .iter()
            .map(|(namespace, waiting)| {
                (*waiting).min(share.saturating_sub(self.running_in(namespace)))
            })
            .sum();
        let mut needed = wanted.saturating_sub(self.free());
        let mut excess: BTreeMap<&str, Vec<&String>> = self
            .running
            .iter()
            .filter(|(_, keys)| keys.len() > share)
            .map(|(namespace, keys)| (namespace.as_str(), keys[share..].iter().collect()))
            .collect();
        let mut preempted = vec![];
        while needed > 0 {
            let Some((_, namespace)) = excess
                .iter()
                .filter(|(_, keys)| !keys.is_empty())
                .map(|(namespace, keys)| (std::cmp::Reverse(keys.len()), *namespace))
                .min()
            else {
                break;
            };
            if let Some(key) = excess.get_mut(namespace).and_then(Vec::pop) {
                preempted.push(key.clone());
                needed -= 1;
            }
        }
        preempted
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crr_crds::v1beta1::ContainerRecreateRequestStatus;

    /// A request of the pod named `name`, created at `second`, in `phase`.
    fn request(name: &str, second: i64, phase: Option<Phase>) -> ContainerRecreateRequest {
        let mut crr = crate::recreate::admitted_request(&["app"], Default::default());
        crr.metadata.name = Some(name.into());
        crr.metadata.creation_timestamp = Some(Time(
            jiff::Timestamp::from_second(second).expect("a valid time"),
        ));
        crr.status = Some(ContainerRecreateRequestStatus {
            phase,
            ..Default::default()
        });
        crr
    }

    fn name(crr: &ContainerRecreateRequest) -> &str {
        crr.metadata.name.as_deref().unwrap_or_default()
    }

    fn names(requests: &[ContainerRecreateRequest]) -> Vec<&str> {
        requests.iter().map(name).collect()
    }

    #[test]
    fn requests_of_a_pod_are_served_recreating_first_then_oldest() {
        let mut requests = vec![
            request("new", 30, None),
            request("old", 10, Some(Phase::Pending)),
            request("busy", 20, Some(Phase::Recreating)),
        ];
        order(&mut requests);
        assert_eq!(names(&requests), ["busy", "old", "new"]);
    }

    #[test]
    fn the_recreating_request_goes_on_before_older_ones() {
        let turn = next_turn([
            request("old", 10, Some(Phase::Pending)),
            request("busy", 20, Some(Phase::Recreating)),
        ])
        .expect("a turn");
        assert_eq!(name(&turn.next), "busy");
    }

    #[test]
    fn without_a_recreating_request_the_oldest_goes() {
        let turn = next_turn([
            request("new", 30, None),
            request("old", 10, None),
            request("middle", 20, Some(Phase::Pending)),
        ])
        .expect("a turn");
        assert_eq!(name(&turn.next), "old");
    }

    #[test]
    fn requests_created_in_the_same_second_go_by_name() {
        let turn = next_turn([request("b", 10, None), request("a", 10, None)]).expect("a turn");
        assert_eq!(name(&turn.next), "a");
    }

    #[test]
    fn a_request_without_a_creation_time_goes_first() {
        let mut unknown = request("unknown", 0, None);
        unknown.metadata.creation_timestamp = None;
        let turn = next_turn([request("old", 10, None), unknown]).expect("a turn");
        assert_eq!(name(&turn.next), "unknown");
    }

    #[test]
    fn finished_requests_are_passed_over() {
        let mut deleting = request("deleting", 5, Some(Phase::Recreating));
        deleting.metadata.deletion_timestamp = deleting.metadata.creation_timestamp.clone();
        let turn = next_turn([
            request("completed", 1, Some(Phase::Completed)),
            deleting,
            request("open", 30, None),
        ])
        .expect("a turn");
        assert_eq!(name(&turn.next), "open");
        assert!(turn.to_mark_pending.is_empty());
    }

    #[test]
    fn a_pod_whose_requests_are_all_finished_has_no_turn() {
        assert_eq!(
            next_turn([request("done", 1, Some(Phase::Completed))]),
            None
        );
        assert_eq!(next_turn([]), None);
    }

    #[test]
    fn only_waiting_requests_without_a_phase_are_marked_pending() {
        let turn = next_turn([
            request("busy", 20, Some(Phase::Recreating)),
            request("fresh", 30, None),
            request("shown", 10, Some(Phase::Pending)),
            request("newest", 40, None),
        ])
        .expect("a turn");
        assert_eq!(name(&turn.next), "busy");
        assert_eq!(
            names(&turn.to_mark_pending),
            ["fresh", "newest"],
            "in serving order, the one already Pending left alone"
        );
    }

    #[test]
    fn the_next_request_is_never_marked_pending_itself() {
        let turn = next_turn([request("only", 10, None)]).expect("a turn");
        assert_eq!(name(&turn.next), "only");
        assert!(turn.to_mark_pending.is_empty());
    }

    fn keys(keys: &[&str]) -> Vec<String> {
        keys.iter().map(|key| (*key).to_owned()).collect()
    }

    /// `to_start` and `to_preempt` of `limit` slots, nothing resting.
    fn to_start(limit: usize, running: &Running, waiting: &[String]) -> Vec<String> {
        let resting = BTreeSet::new();
        Slots {
            limit,
            running,
            waiting,
            resting: &resting,
        }
        .to_start()
    }

    fn to_preempt(limit: usize, running: &Running, waiting: &[String]) -> Vec<String> {
        let resting = BTreeSet::new();
        Slots {
            limit,
            running,
            waiting,
            resting: &resting,
        }
        .to_preempt()
    }

    fn running(rounds: &[&str]) -> Running {
        let mut running = Running::new();
        for key in rounds {
            running
                .entry(namespace_of(key).to_owned())
                .or_default()
                .push((*key).to_owned());
        }
        running
    }

    #[test]
    fn the_fair_share_is_the_limit_split_evenly_rounded_up() {
        assert_eq!(fair_share(16, 1), 16);
        assert_eq!(fair_share(16, 3), 6);
        assert_eq!(fair_share(2, 2), 1);
        assert_eq!(fair_share(2, 5), 1, "at least one");
        assert_eq!(fair_share(0, 0), 1);
    }

    #[test]
    fn a_lone_namespace_may_use_every_slot() {
        let waiting = keys(&["a/1", "a/2", "a/3"]);
        assert_eq!(
            to_start(2, &Running::new(), &waiting),
            keys(&["a/1", "a/2"])
        );
    }

    #[test]
    fn waiting_namespaces_start_round_robin() {
        let waiting = keys(&["a/1", "a/2", "a/3", "a/4", "b/1", "c/1"]);
        assert_eq!(
            to_start(4, &Running::new(), &waiting),
            keys(&["a/1", "b/1", "c/1", "a/2"])
        );
    }

    #[test]
    fn a_namespace_at_its_share_waits_while_another_is_below_it() {
        let waiting = keys(&["a/3", "b/1"]);
        assert_eq!(
            to_start(3, &running(&["a/1", "a/2"]), &waiting),
            keys(&["b/1"]),
            "a holds 2 of 3 and the share of two namespaces is 2"
        );
    }

    #[test]
    fn a_namespace_between_two_looks_keeps_its_share() {
        let waiting = keys(&["a/2", "a/3", "a/4"]);
        let held = running(&["a/1"]);
        let resting: BTreeSet<String> = ["b/1".to_owned()].into();
        let slots = Slots {
            limit: 2,
            running: &held,
            waiting: &waiting,
            resting: &resting,
        };
        assert!(
            slots.to_start().is_empty(),
            "b polls its recreate: its slot is kept, not lent to a and preempted back"
        );
        assert_eq!(
            to_start(2, &held, &waiting),
            keys(&["a/2"]),
            "b gone: a takes it"
        );
    }

    #[test]
    fn nothing_starts_when_every_slot_is_taken() {
        assert!(to_start(2, &running(&["a/1", "a/2"]), &keys(&["b/1"])).is_empty());
    }

    #[test]
    fn a_namespace_holding_every_slot_gives_one_back_to_a_newcomer() {
        let held = running(&["a/1", "a/2"]);
        assert_eq!(to_preempt(2, &held, &keys(&["b/1"])), keys(&["a/2"]));
        assert_eq!(
            to_preempt(2, &held, &keys(&["a/3"])),
            Vec::<String>::new(),
            "its own waiting pods preempt nothing"
        );
        assert!(to_preempt(2, &held, &[]).is_empty());
    }

    #[test]
    fn preemption_takes_only_what_free_slots_do_not_cover() {
        let held = running(&["a/1", "a/2", "a/3"]);
        assert!(
            to_preempt(4, &held, &keys(&["b/1"])).is_empty(),
            "a free slot is enough"
        );
        assert_eq!(to_preempt(4, &held, &keys(&["b/1", "b/2"])), keys(&["a/3"]));
    }

    #[test]
    fn preemption_takes_from_the_namespace_furthest_above_its_share_last_started_first() {
        let held = running(&["a/1", "a/2", "a/3", "a/4", "b/1", "b/2"]);
        // Three namespaces: share 2 of 6. c wants 2; a is 2 above, b at its share.
        assert_eq!(
            to_preempt(6, &held, &keys(&["c/1", "c/2", "c/3"])),
            keys(&["a/4", "a/3"])
        );
    }

    #[test]
    fn what_is_preempted_is_what_then_starts_the_waiting_namespace() {
        let limit = 2;
        let mut held = running(&["a/1", "a/2"]);
        let waiting = keys(&["a/3", "b/1"]);
        for key in to_preempt(limit, &held, &waiting) {
            held.values_mut()
                .for_each(|keys| keys.retain(|held| *held != key));
        }
        assert_eq!(to_start(limit, &held, &waiting), keys(&["b/1"]));
    }
}
