//! The largest values the API accepts for the durations a user sets, as schema maximums (the
//! API server refuses anything larger before crr sees it).
//!
//! They keep every sum of a user's number and a timestamp far inside the time types' ranges,
//! and they are far above any real use: a container that needs a week to stop, a request that
//! stays active for a year. The components still use checked arithmetic: v1alpha1 objects keep
//! upstream's looser schema for `activeDeadlineSeconds` and `ttlSecondsAfterFinished`, and
//! objects stored before these maximums existed are read as they are.

/// `spec.activeDeadlineSeconds`: 365 days.
pub const MAX_ACTIVE_DEADLINE_SECONDS: i64 = 365 * DAY;
/// `spec.ttlSecondsAfterFinished`: 365 days.
pub const MAX_TTL_SECONDS_AFTER_FINISHED: i32 = 365 * DAY as i32;
/// `spec.strategy.terminationGracePeriodSeconds`: 7 days.
pub const MAX_TERMINATION_GRACE_PERIOD_SECONDS: i64 = 7 * DAY;
/// `spec.strategy.unreadyGracePeriodSeconds`: 1 day.
pub const MAX_UNREADY_GRACE_PERIOD_SECONDS: i64 = DAY;
/// `spec.strategy.minStartedSeconds`: 1 day.
pub const MAX_MIN_STARTED_SECONDS: i32 = DAY as i32;

const DAY: i64 = 24 * 60 * 60;
