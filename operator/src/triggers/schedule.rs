//! The schedule decision: given a workload's schedule, the tick it last acted on and the time,
//! whether a rollout starts now, a tick is skipped, or nothing happens until the next tick.
//!
//! As a CronJob with `startingDeadlineSeconds` and `concurrencyPolicy: Forbid`:
//! * ticks missed while no operator ran do not pile up: only the latest counts, and only within
//!   the starting deadline after it; an older one is skipped;
//! * a tick while the previous scheduled rollout still runs is skipped (an Event says so);
//! * a tick outside the workload's restart window is skipped (an Event says so);
//! * a workload seen for the first time records the time and waits for its next tick.

use std::time::Duration;

use jiff::Timestamp;

use super::annotations::Schedule;
use crr_crds::triggers::window::Window;

/// Why a tick was skipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Skipped {
    /// The previous scheduled rollout still runs.
    StillRunning,
    /// The tick is older than the starting deadline (an operator outage).
    TooLate,
    /// The workload's restart window is closed.
    OutsideWindow,
}

/// What to do now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing recorded yet: record `now` as the last tick, start nothing.
    Begin,
    /// Start a rollout for the tick `at` and record it.
    Run {
        /// The tick.
        at: Timestamp,
    },
    /// Record the tick `at` as done without a rollout.
    Skip {
        /// The tick.
        at: Timestamp,
        /// Why.
        why: Skipped,
    },
    /// Nothing until `until` (the next tick; `None`: the schedule never fires again).
    Wait {
        /// The next tick.
        until: Option<Timestamp>,
    },
}

/// The step for `schedule` with the last tick acted on `last` at `now`; `running`: whether a
/// rollout an earlier tick started is still running; `window`: the workload's restart window.
pub fn step(
    schedule: &Schedule,
    last: Option<Timestamp>,
    now: Timestamp,
    starting_deadline: Duration,
    running: bool,
    window: Option<&Window>,
) -> Step {
    let Some(last) = last else {
        return Step::Begin;
    };
    let latest = schedule.latest_at(now);
    match latest {
        Some(at) if at > last => {
            let late = now.duration_since(at);
            if late
                > jiff::SignedDuration::try_from(starting_deadline)
                    .unwrap_or(jiff::SignedDuration::MAX)
            {
                Step::Skip {
                    at,
                    why: Skipped::TooLate,
                }
            } else if window.is_some_and(|window| !window.is_open(now)) {
                Step::Skip {
                    at,
                    why: Skipped::OutsideWindow,
                }
            } else if running {
                Step::Skip {
                    at,
                    why: Skipped::StillRunning,
                }
            } else {
                Step::Run { at }
            }
        }
        _ => Step::Wait {
            until: schedule.next_after(now),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::triggers::annotations::parse;
    use crr_crds::keys;
    use std::collections::BTreeMap;

    fn schedule(expression: &str, time_zone: &str) -> Schedule {
        let annotations = BTreeMap::from([
            (
                keys::ANNOTATION_RECREATE_SCHEDULE.to_owned(),
                expression.to_owned(),
            ),
            (
                keys::ANNOTATION_RECREATE_SCHEDULE_TIMEZONE.to_owned(),
                time_zone.to_owned(),
            ),
        ]);
        let (triggers, problems) = parse(&annotations, false);
        assert!(problems.is_empty(), "{problems:?}");
        triggers.schedule.expect("a schedule")
    }

    fn at(text: &str) -> Timestamp {
        text.parse().expect("a timestamp")
    }

    const DEADLINE: Duration = Duration::from_secs(900);

    #[test]
    fn first_sight_begins_and_waits() {
        let nightly = schedule("0 3 * * *", "UTC");
        assert_eq!(
            step(
                &nightly,
                None,
                at("2026-11-27T10:00:00Z"),
                DEADLINE,
                false,
                None
            ),
            Step::Begin
        );
    }

    #[test]
    fn a_tick_past_runs_once_and_then_waits_for_the_next() {
        let nightly = schedule("0 3 * * *", "UTC");
        let last = at("2026-11-26T03:00:00Z");
        let now = at("2026-11-27T03:00:20Z");
        assert_eq!(
            step(&nightly, Some(last), now, DEADLINE, false, None),
            Step::Run {
                at: at("2026-11-27T03:00:00Z")
            }
        );
        assert_eq!(
            step(
                &nightly,
                Some(at("2026-11-27T03:00:00Z")),
                now,
                DEADLINE,
                false,
                None
            ),
            Step::Wait {
                until: Some(at("2026-11-28T03:00:00Z"))
            }
        );
    }

    #[test]
    fn a_tick_while_the_last_rollout_runs_is_skipped() {
        let every_minute = schedule("* * * * *", "UTC");
        assert_eq!(
            step(
                &every_minute,
                Some(at("2026-11-27T10:00:00Z")),
                at("2026-11-27T10:01:02Z"),
                DEADLINE,
                true,
                None
            ),
            Step::Skip {
                at: at("2026-11-27T10:01:00Z"),
                why: Skipped::StillRunning
            }
        );
    }

    #[test]
    fn a_tick_outside_the_restart_window_is_skipped() {
        let hourly = schedule("0 * * * *", "UTC");
        let nights = Window::parse("Mon-Fri 01:00-05:00", jiff::tz::TimeZone::UTC).expect("window");
        let last = at("2026-11-27T05:00:00Z");
        // Friday 06:00: closed.
        assert_eq!(
            step(
                &hourly,
                Some(last),
                at("2026-11-27T06:00:10Z"),
                DEADLINE,
                false,
                Some(&nights)
            ),
            Step::Skip {
                at: at("2026-11-27T06:00:00Z"),
                why: Skipped::OutsideWindow
            }
        );
        // Monday 02:00: open.
        assert_eq!(
            step(
                &hourly,
                Some(last),
                at("2026-11-30T02:00:10Z"),
                DEADLINE,
                false,
                Some(&nights)
            ),
            Step::Run {
                at: at("2026-11-30T02:00:00Z")
            }
        );
    }

    #[test]
    fn after_an_outage_only_the_latest_missed_tick_runs_within_the_deadline() {
        let hourly = schedule("0 * * * *", "UTC");
        let last = at("2026-11-27T01:00:00Z");
        // Down from 01:30 to 05:10: 02:00, 03:00, 04:00 and 05:00 were missed; one run, for 05:00.
        assert_eq!(
            step(
                &hourly,
                Some(last),
                at("2026-11-27T05:10:00Z"),
                DEADLINE,
                false,
                None
            ),
            Step::Run {
                at: at("2026-11-27T05:00:00Z")
            }
        );
        // Back at 05:20: 05:00 is 20 minutes late, past the deadline: skipped.
        assert_eq!(
            step(
                &hourly,
                Some(last),
                at("2026-11-27T05:20:00Z"),
                DEADLINE,
                false,
                None
            ),
            Step::Skip {
                at: at("2026-11-27T05:00:00Z"),
                why: Skipped::TooLate
            }
        );
    }

    #[test]
    fn the_time_zone_moves_the_ticks_with_daylight_saving() {
        let berlin = schedule("0 3 * * *", "Europe/Berlin");
        // 03:00 in Berlin is 02:00 UTC in winter and 01:00 UTC in summer.
        assert_eq!(
            berlin.next_after(at("2026-11-27T12:00:00Z")),
            Some(at("2026-11-28T02:00:00Z"))
        );
        assert_eq!(
            berlin.next_after(at("2026-07-01T12:00:00Z")),
            Some(at("2026-07-02T01:00:00Z"))
        );
    }

    #[test]
    fn the_day_of_week_counts_as_a_cronjob_counts_it() {
        // 1 is Monday (0 and 7 Sunday), as in a CronJob: 2026-11-30 is a Monday.
        let mondays = schedule("0 3 * * 1", "UTC");
        assert_eq!(
            mondays.next_after(at("2026-11-27T12:00:00Z")),
            Some(at("2026-11-30T03:00:00Z"))
        );
    }
}
