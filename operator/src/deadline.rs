//! Deadline and TTL arithmetic, and the requeue time that follows from them.
//!
//! All times are API-server or operator-clock timestamps passed in by the caller (`now` is a
//! parameter, never read from a global clock here). A deadline that cannot be represented (an
//! absurdly large number of seconds) is treated as "never", not as an error.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

pub use crr_crds::status::DAEMON_RESPONSE_TIMEOUT_SECONDS;

/// While containers are recreated, reconcile at least this often, in case a pod event is missed.
pub const RECREATING_RESYNC: Duration = Duration::from_secs(3);

/// `start` plus `seconds`, or `None` when that is not a representable time.
pub fn after(start: Timestamp, seconds: i64) -> Option<Timestamp> {
    start.checked_add(SignedDuration::from_secs(seconds)).ok()
}

/// When a request the daemon never picked up is given up.
pub fn daemon_response_deadline(created: Timestamp) -> Option<Timestamp> {
    after(created, DAEMON_RESPONSE_TIMEOUT_SECONDS)
}

/// When `activeDeadlineSeconds` (counted from creation) runs out, if set.
pub fn active_deadline(
    created: Timestamp,
    active_deadline_seconds: Option<i64>,
) -> Option<Timestamp> {
    after(created, active_deadline_seconds?)
}

/// When a finished request is deleted, if `ttlSecondsAfterFinished` is set.
pub fn ttl_expiry(
    completed: Timestamp,
    ttl_seconds_after_finished: Option<i32>,
) -> Option<Timestamp> {
    after(completed, i64::from(ttl_seconds_after_finished?))
}

/// Whether `deadline` has been reached at `now`.
pub fn has_passed(deadline: Timestamp, now: Timestamp) -> bool {
    deadline <= now
}

/// How long from `now` until `at`; zero when `at` is not in the future.
pub fn until(at: Timestamp, now: Timestamp) -> Duration {
    Duration::try_from(at.duration_since(now)).unwrap_or(Duration::ZERO)
}

/// The wait from `now` until the earliest of `wake_ups`, or `None` when there is nothing to wait for.
pub fn requeue_after(
    now: Timestamp,
    wake_ups: impl IntoIterator<Item = Timestamp>,
) -> Option<Duration> {
    wake_ups.into_iter().min().map(|at| until(at, now))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + seconds).unwrap()
    }

    #[test]
    fn daemon_has_one_minute_from_creation() {
        assert_eq!(daemon_response_deadline(at(0)), Some(at(60)));
    }

    #[test]
    fn active_deadline_counts_from_creation_and_is_optional() {
        assert_eq!(active_deadline(at(10), Some(3)), Some(at(13)));
        assert_eq!(active_deadline(at(10), None), None);
    }

    #[test]
    fn ttl_counts_from_completion_and_zero_means_at_once() {
        assert_eq!(ttl_expiry(at(100), Some(3)), Some(at(103)));
        assert_eq!(ttl_expiry(at(100), Some(0)), Some(at(100)));
        assert_eq!(ttl_expiry(at(100), None), None);
    }

    #[test]
    fn unrepresentable_deadline_is_never() {
        assert_eq!(active_deadline(at(0), Some(i64::MAX)), None);
    }

    #[test]
    fn deadline_passes_exactly_at_its_time() {
        assert!(!has_passed(at(10), at(9)));
        assert!(has_passed(at(10), at(10)));
        assert!(has_passed(at(10), at(11)));
    }

    #[test]
    fn wait_is_the_remaining_time_and_never_negative() {
        assert_eq!(until(at(13), at(10)), Duration::from_secs(3));
        assert_eq!(until(at(10), at(13)), Duration::ZERO);
        let half = at(10)
            .checked_add(SignedDuration::from_millis(500))
            .unwrap();
        assert_eq!(until(half, at(10)), Duration::from_millis(500));
    }

    #[test]
    fn requeue_picks_the_earliest_wake_up() {
        let wake_ups = [at(50), at(3), at(7)];
        assert_eq!(requeue_after(at(0), wake_ups), Some(Duration::from_secs(3)));
        assert_eq!(requeue_after(at(0), []), None);
    }
}
