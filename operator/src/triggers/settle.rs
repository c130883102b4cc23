//! A follow-up config change waits for its objects to settle.
//!
//! The first change of a workload's ConfigMaps and Secrets is rolled out at once (after the
//! debounce). A change that comes soon after a trigger rollout of the workload ended, or while
//! one ran, is different: the kubelet holds a container restarted again within ten minutes in
//! its back-off (10 s, 20 s, 40 s, ...), so every further restart takes longer, while the
//! objects may still be changing (a script, a controller, a chain of GitOps syncs). Rolling out
//! each state as soon as the last rollout ends restarts the pods once per back-off step, and each
//! restart reads data that is already stale. So a follow-up waits until the workload's objects
//! have been quiet for [`QUIET`], but never longer than [`MOST_HELD`] after the last rollout
//! ended: a ConfigMap changed every 2 s for 30 s restarts the pods twice (the first change, then
//! the last state), not once per back-off step; one changed forever restarts them about once a
//! minute.
//!
//! Pure: [`hold`] decides from the times; the trigger context keeps when each workload's
//! objects last changed ([`ChangeTimes`]), in memory (after an operator restart a follow-up is
//! held only by [`MOST_HELD`]).

use std::collections::HashMap;
use std::time::Duration;

use jiff::Timestamp;

use super::index::WorkloadKey;

/// How long a follow-up change waits for the workload's objects to stop changing.
pub const QUIET: Duration = Duration::from_secs(5);
/// The longest a follow-up is held after the last trigger rollout of the workload ended.
pub const MOST_HELD: Duration = Duration::from_secs(60);
/// A change this long after the last trigger rollout ended is not a follow-up: the kubelet's
/// back-off has forgotten that restart (it resets after twice its 5-minute cap).
pub const FOLLOW_UP_WINDOW: Duration = Duration::from_secs(600);

/// Whether a config-change rollout may start now, or how long it waits first.
///
/// `last_ended`: when the workload's last trigger rollout ended (`None`: none is kept);
/// `last_change`: when the operator last saw one of the workload's objects change (`None`: not
/// since it started).
pub fn hold(
    last_ended: Option<Timestamp>,
    last_change: Option<Timestamp>,
    now: Timestamp,
) -> Option<Duration> {
    let last_ended = last_ended?;
    let since_end = elapsed(last_ended, now);
    if since_end >= FOLLOW_UP_WINDOW {
        return None;
    }
    let until_cap = MOST_HELD.saturating_sub(since_end);
    let until_quiet = last_change.map_or(Duration::ZERO, |changed| {
        QUIET.saturating_sub(elapsed(changed, now))
    });
    Some(until_cap.min(until_quiet)).filter(|wait| !wait.is_zero())
}

/// How long a rollout of a change that reaches a container through a volume still waits for the
/// kubelets to write it there: until `volume_sync` (the operator's `--trigger-volume-sync-seconds`)
/// after the last change seen. The kubelet writes a ConfigMap or Secret volume when it syncs the
/// pod, every `syncFrequency` (and up to half as much again), not when a container restarts: a
/// container restarted sooner starts with the data of before, while its rollout says it was
/// restarted for the new data.
pub fn volume_hold(
    last_change: Timestamp,
    volume_sync: Duration,
    now: Timestamp,
) -> Option<Duration> {
    Some(volume_sync.saturating_sub(elapsed(last_change, now))).filter(|wait| !wait.is_zero())
}

/// The time from `then` to `now`, zero when `then` is later.
fn elapsed(then: Timestamp, now: Timestamp) -> Duration {
    Duration::try_from(now.duration_since(then)).unwrap_or(Duration::ZERO)
}

/// When each workload's ConfigMaps and Secrets were last seen to change.
#[derive(Debug, Default)]
pub struct ChangeTimes {
    changed: HashMap<WorkloadKey, Timestamp>,
}

impl ChangeTimes {
    /// One of `workload`'s objects changed at `at`.
    pub fn changed(&mut self, workload: WorkloadKey, at: Timestamp) {
        self.changed.insert(workload, at);
    }

    /// When one of `workload`'s objects last changed.
    pub fn last(&self, workload: &WorkloadKey) -> Option<Timestamp> {
        self.changed.get(workload).copied()
    }

    /// Forgets `workload` (it went, or has no triggers any more).
    pub fn forget(&mut self, workload: &WorkloadKey) {
        self.changed.remove(workload);
    }

    /// Keeps only the workloads `live` says exist.
    pub fn retain(&mut self, live: impl Fn(&WorkloadKey) -> bool) {
        self.changed.retain(|key, _| live(key));
    }

    /// How many workloads are kept.
    pub fn len(&self) -> usize {
        self.changed.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.changed.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    fn secs(seconds: u64) -> Option<Duration> {
        Some(Duration::from_secs(seconds))
    }

    #[test]
    fn a_first_change_is_not_held() {
        assert_eq!(hold(None, Some(at(0)), at(0)), None);
        assert_eq!(hold(None, None, at(0)), None);
    }

    #[test]
    fn a_change_long_after_the_last_rollout_is_not_held() {
        assert_eq!(hold(Some(at(0)), Some(at(600)), at(600)), None);
    }

    #[test]
    fn a_follow_up_waits_for_quiet() {
        // The last rollout ended at 3; the objects changed at 10.
        assert_eq!(hold(Some(at(3)), Some(at(10)), at(10)), secs(5));
        assert_eq!(hold(Some(at(3)), Some(at(10)), at(13)), secs(2));
        assert_eq!(hold(Some(at(3)), Some(at(10)), at(15)), None);
    }

    #[test]
    fn a_follow_up_is_held_at_most_a_minute_after_the_last_rollout() {
        // Changing every 2 s: quiet never comes, the cap does.
        assert_eq!(hold(Some(at(0)), Some(at(58)), at(58)), secs(2));
        assert_eq!(hold(Some(at(0)), Some(at(60)), at(60)), None);
    }

    #[test]
    fn after_an_operator_restart_only_the_cap_holds() {
        assert_eq!(hold(Some(at(0)), None, at(20)), None);
    }

    #[test]
    fn fifteen_changes_two_seconds_apart_make_one_follow_up_with_the_last_data() {
        // The first rollout ends at 3 s; changes come at 2, 4, ..., 28 s. An evaluation after
        // each change (and after each hold) starts the follow-up only once, after the last.
        let ended = Some(at(3));
        let mut started = Vec::new();
        let mut now = 4;
        let mut last_change = 2;
        while now <= 60 {
            if now % 2 == 0 && now <= 28 {
                last_change = now;
            }
            if hold(ended, Some(at(last_change)), at(now)).is_none() {
                started.push(now);
                break;
            }
            now += 1;
        }
        assert_eq!(started, [33]);
    }

    #[test]
    fn a_change_through_a_volume_waits_for_the_kubelets_sync_after_the_last_change() {
        let sync = Duration::from_secs(95);
        assert_eq!(volume_hold(at(10), sync, at(11)), secs(94));
        assert_eq!(volume_hold(at(10), sync, at(105)), None);
        assert_eq!(
            volume_hold(at(10), Duration::ZERO, at(10)),
            None,
            "turned off"
        );
    }

    #[test]
    fn change_times_are_kept_per_workload_and_pruned() {
        let key = |name: &str| WorkloadKey {
            kind: "Deployment",
            namespace: "shop".to_owned(),
            name: name.to_owned(),
        };
        let mut times = ChangeTimes::default();
        times.changed(key("web"), at(1));
        times.changed(key("web"), at(2));
        times.changed(key("api"), at(3));
        times.changed(key("db"), at(4));
        assert_eq!(times.last(&key("web")), Some(at(2)));
        times.forget(&key("db"));
        assert_eq!(times.last(&key("db")), None);
        times.retain(|workload| workload.name == "api");
        assert_eq!((times.len(), times.last(&key("web"))), (1, None));
        assert!(!times.is_empty());
    }
}
