//! Where a request's time goes on this daemon, for `crr_node_daemon_phase_duration_seconds`:
//! per request, what was marked so far (on the monotonic clock), so that each phase is observed
//! once per request although rounds repeat (level-triggered).
//!
//! The phases, in order:
//! * `pick_up`: the request's creation to the first round of this daemon that finds nobody
//!   took it up yet (wall clocks: the API server's creation time, whole seconds, against this
//!   node's; the caller measures it);
//! * `unready_grace`: from when this daemon first saw the unready grace begin to the first
//!   round that finds it over;
//! * `pre_stop`: the time in the request's preStop hooks, summed over its containers;
//! * `kill`: the time in its StopContainer calls, summed;
//! * `restart`: the last kill done to the round that finds every container recreated (running
//!   and, with `minStartedSeconds`, started long enough), succeeded requests only;
//! * `complete`: that round to the completing status write.
//!
//! `pre_stop`, `kill`, `restart` and `complete` are observed when this daemon completes the
//! request, and only from what this process saw (a daemon restarted mid-request observes the
//! phases after its restart; a request the operator completes, deadline or pod gone, observes
//! none of them). It decides nothing about the request itself; it also remembers that a
//! request's passed deadline was logged, so that it is logged once.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// A phase of a request on this daemon (the `phase` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PhaseName {
    PickUp,
    UnreadyGrace,
    PreStop,
    Kill,
    Restart,
    Complete,
}

impl PhaseName {
    /// Every phase, in order.
    pub const ALL: [Self; 6] = [
        Self::PickUp,
        Self::UnreadyGrace,
        Self::PreStop,
        Self::Kill,
        Self::Restart,
        Self::Complete,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::PickUp => "pick_up",
            Self::UnreadyGrace => "unready_grace",
            Self::PreStop => "pre_stop",
            Self::Kill => "kill",
            Self::Restart => "restart",
            Self::Complete => "complete",
        }
    }
}

/// What one request has been through on this daemon.
#[derive(Debug, Default)]
struct Marks {
    seen: bool,
    picked_up: bool,
    grace_over: bool,
    /// Time in preStop hooks, if any ran.
    pre_stop: Option<Duration>,
    /// Time in StopContainer calls, if any was made.
    kill: Option<Duration>,
    last_kill_done: Option<Instant>,
    ready: Option<Instant>,
    completed: bool,
    /// The round found the deadline passed and left the request to the operator.
    past_deadline: bool,
}

/// The marks of every request this daemon works on, by key (the request's UID).
#[derive(Debug, Default)]
pub struct Timeline {
    marks: Mutex<HashMap<String, Marks>>,
}

impl Timeline {
    /// Whether this is the first time the daemon's watch delivers the request: `true` the first
    /// time only.
    pub fn seen(&self, key: &str) -> bool {
        self.with(key, |marks| !std::mem::replace(&mut marks.seen, true))
    }

    /// Whether the request's pick-up is to be observed now: `true` the first time only.
    pub fn pick_up(&self, key: &str) -> bool {
        self.with(key, |marks| !std::mem::replace(&mut marks.picked_up, true))
    }

    /// The unready grace, first seen at `seen`, is over at `now`: its length, the first time
    /// only.
    pub fn grace_over(&self, key: &str, seen: Instant, now: Instant) -> Option<Duration> {
        self.with(key, |marks| {
            (!std::mem::replace(&mut marks.grace_over, true))
                .then(|| now.saturating_duration_since(seen))
        })
    }

    /// A round found the request past its deadline (no kill; the operator completes it):
    /// `true` the first time only, so that the rounds each of the pod's changes brings until
    /// then say it once.
    pub fn past_deadline(&self, key: &str) -> bool {
        self.with(key, |marks| {
            !std::mem::replace(&mut marks.past_deadline, true)
        })
    }

    /// A preStop hook of the request ran for `took`.
    pub fn pre_stop(&self, key: &str, took: Duration) {
        self.with(key, |marks| {
            marks.pre_stop = Some(marks.pre_stop.unwrap_or_default().saturating_add(took));
        });
    }

    /// A StopContainer call for the request took `took` and returned at `now`.
    pub fn killed(&self, key: &str, took: Duration, now: Instant) {
        self.with(key, |marks| {
            marks.kill = Some(marks.kill.unwrap_or_default().saturating_add(took));
            marks.last_kill_done = Some(now);
        });
    }

    /// A round found every container done at `now` (the first such round counts).
    pub fn ready(&self, key: &str, now: Instant) {
        self.with(key, |marks| {
            marks.ready.get_or_insert(now);
        });
    }

    /// The daemon's completing write for the request returned at `now`: the phases to observe,
    /// the first time only (`restart` for a succeeded request only).
    pub fn completed(
        &self,
        key: &str,
        succeeded: bool,
        now: Instant,
    ) -> Vec<(PhaseName, Duration)> {
        self.with(key, |marks| {
            if std::mem::replace(&mut marks.completed, true) {
                return vec![];
            }
            let restart = match (marks.last_kill_done, marks.ready) {
                (Some(killed), Some(ready)) if succeeded => {
                    Some(ready.saturating_duration_since(killed))
                }
                _ => None,
            };
            let complete = marks
                .ready
                .map(|ready| now.saturating_duration_since(ready));
            [
                (PhaseName::PreStop, marks.pre_stop),
                (PhaseName::Kill, marks.kill),
                (PhaseName::Restart, restart),
                (PhaseName::Complete, complete),
            ]
            .into_iter()
            .filter_map(|(phase, took)| took.map(|took| (phase, took)))
            .collect()
        })
    }

    /// Forgets the request (it left the daemon's watch: finished, deleted, not active).
    pub fn forget(&self, key: &str) {
        self.marks().remove(key);
    }

    /// Keeps the marks of the requests whose key passes `keep` only.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.marks().retain(|key, _| keep(key));
    }

    /// How many requests have marks: one small entry per request in the daemon's watch.
    pub fn len(&self) -> usize {
        self.marks().len()
    }

    /// Whether no request has marks.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn with<T>(&self, key: &str, change: impl FnOnce(&mut Marks) -> T) -> T {
        change(self.marks().entry(key.to_owned()).or_default())
    }

    fn marks(&self) -> MutexGuard<'_, HashMap<String, Marks>> {
        // Every change under the lock is a small update of one entry: a panicked holder left
        // the map usable.
        self.marks.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(seconds: u64) -> Duration {
        Duration::from_secs(seconds)
    }

    #[test]
    fn a_request_is_seen_once_until_forgotten() {
        let timeline = Timeline::default();
        assert!(timeline.seen("uid-1"));
        assert!(
            !timeline.seen("uid-1"),
            "a later event of it is no first sight"
        );
        assert!(timeline.seen("uid-2"), "each request has its own");
        timeline.forget("uid-1");
        assert!(timeline.seen("uid-1"), "a request forgotten is seen anew");
    }

    #[test]
    fn a_recreate_observes_each_phase_once() {
        let timeline = Timeline::default();
        let start = Instant::now();
        assert!(timeline.pick_up("uid-1"));
        assert!(
            !timeline.pick_up("uid-1"),
            "a second round is no new pick-up"
        );
        assert_eq!(
            timeline.grace_over("uid-1", start, start + secs(5)),
            Some(secs(5))
        );
        assert_eq!(timeline.grace_over("uid-1", start, start + secs(6)), None);
        timeline.pre_stop("uid-1", secs(2));
        timeline.killed("uid-1", secs(1), start + secs(8));
        timeline.pre_stop("uid-1", secs(3));
        timeline.killed("uid-1", secs(1), start + secs(12));
        timeline.ready("uid-1", start + secs(15));
        timeline.ready("uid-1", start + secs(16));
        assert_eq!(
            timeline.completed("uid-1", true, start + secs(17)),
            [
                (PhaseName::PreStop, secs(5)),
                (PhaseName::Kill, secs(2)),
                (PhaseName::Restart, secs(3)),
                (PhaseName::Complete, secs(2)),
            ]
        );
        assert!(
            timeline
                .completed("uid-1", true, start + secs(18))
                .is_empty(),
            "a completion is observed once"
        );
        timeline.forget("uid-1");
        assert!(timeline.is_empty());
        timeline.ready("uid-2", start);
        timeline.ready("uid-3", start);
        timeline.retain(|key| key == "uid-3");
        assert_eq!(timeline.len(), 1);
    }

    #[test]
    fn a_passed_deadline_is_said_once_per_request() {
        let timeline = Timeline::default();
        assert!(timeline.past_deadline("uid-1"));
        assert!(!timeline.past_deadline("uid-1"));
        assert!(timeline.past_deadline("uid-2"));
        timeline.forget("uid-1");
        assert!(
            timeline.past_deadline("uid-1"),
            "a forgotten request starts afresh"
        );
    }

    #[test]
    fn phases_not_seen_here_are_not_observed() {
        let timeline = Timeline::default();
        let start = Instant::now();
        // Completed without preStop hooks, or by a daemon restarted after the kill.
        timeline.ready("uid-1", start);
        assert_eq!(
            timeline.completed("uid-1", true, start + secs(1)),
            [(PhaseName::Complete, secs(1))]
        );
        // A failed request: no restart to speak of.
        timeline.killed("uid-2", secs(1), start);
        timeline.ready("uid-2", start + secs(1));
        assert_eq!(
            timeline.completed("uid-2", false, start + secs(1)),
            [(PhaseName::Kill, secs(1)), (PhaseName::Complete, secs(0))]
        );
        // Completed before any container was looked at (no pod-uid label, say).
        assert!(timeline.completed("uid-3", false, start).is_empty());
    }
}
