//! Leader election decisions on a `coordination.k8s.io/v1` Lease, as pure functions of the Lease
//! as read, what this replica observed of it, our identity and the time.
//!
//! A Lease is free when it has no holder, or when its holder has not renewed it for
//! `leaseDurationSeconds` **as this replica observed it**: the holder's record (holder, renew
//! time, ...) has not changed since this replica first saw it, `leaseDurationSeconds` ago on this
//! replica's own monotonic clock. The `renewTime` the holder wrote is never compared with our
//! clock: two nodes' clocks disagree, and a holder whose clock runs behind would look expired (two
//! leaders), one whose clock runs ahead would hold the Lease long after it died. client-go's
//! leader election does the same (`observedRecord`, `observedTime`). The cost: a replica that
//! starts while a dead holder's record stands waits one full duration before taking over.
//!
//! This module only decides; `elector` reads and writes the Lease (with a resourceVersion
//! precondition, so two candidates cannot both win one round) and keeps the [`Observation`].

use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

/// What a candidate should do with the Lease it just read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// No Lease exists: create it holding it.
    Create,
    /// We hold it: renew.
    Renew,
    /// It is free or expired: take it over (a leadership transition).
    Acquire,
    /// Someone else holds it until `expires_at` on our monotonic clock, unless they renew.
    Follow {
        /// The current holder.
        holder: String,
        /// When the holder's claim runs out unless its record changes before then.
        expires_at: Option<Instant>,
    },
}

/// A Lease record as this replica saw it, and when it first saw it on its own monotonic clock.
#[derive(Clone, Debug, PartialEq)]
pub struct Observation {
    /// The Lease spec as read (or as written by us).
    pub record: LeaseSpec,
    /// When this replica first saw `record`.
    pub observed_at: Instant,
}

/// The observation after reading `record` at `now`: the previous one while the record is
/// unchanged (its age is what expires the Lease), a new one from `now` when it changed.
pub fn observe(previous: Option<Observation>, record: &LeaseSpec, now: Instant) -> Observation {
    match previous {
        Some(previous) if previous.record == *record => previous,
        _ => Observation {
            record: record.clone(),
            observed_at: now,
        },
    }
}

/// How long a claim lasts: the Lease's own `leaseDurationSeconds` when it is positive, else
/// `default_duration`.
pub fn duration(spec: &LeaseSpec, default_duration: Duration) -> Duration {
    spec.lease_duration_seconds
        .and_then(|seconds| u64::try_from(seconds).ok())
        .filter(|seconds| *seconds > 0)
        .map_or(default_duration, Duration::from_secs)
}

/// When the holder's claim on `spec` runs out on our monotonic clock: one duration after we
/// first saw this very record. An `observation` of another record (or none) means the record
/// changed just now. `None`: not representable, so never.
pub fn expires_at(
    spec: &LeaseSpec,
    observation: Option<&Observation>,
    default_duration: Duration,
    now: Instant,
) -> Option<Instant> {
    let observed_at = observation
        .filter(|observation| observation.record == *spec)
        .map_or(now, |observation| observation.observed_at);
    observed_at.checked_add(duration(spec, default_duration))
}

/// Whether the holder's claim has run out at `now`.
pub fn is_expired(
    spec: &LeaseSpec,
    observation: Option<&Observation>,
    default_duration: Duration,
    now: Instant,
) -> bool {
    expires_at(spec, observation, default_duration, now).is_some_and(|expiry| now >= expiry)
}

/// Decides what `identity` does with `lease`, given what it observed of it, at `now`.
pub fn decide(
    lease: Option<&LeaseSpec>,
    identity: &str,
    lease_duration: Duration,
    observation: Option<&Observation>,
    now: Instant,
) -> Decision {
    let Some(spec) = lease else {
        return Decision::Create;
    };
    match spec.holder_identity.as_deref() {
        Some(holder) if holder == identity => Decision::Renew,
        None | Some("") => Decision::Acquire,
        Some(_) if is_expired(spec, observation, lease_duration, now) => Decision::Acquire,
        Some(holder) => Decision::Follow {
            holder: holder.to_owned(),
            expires_at: expires_at(spec, observation, lease_duration, now),
        },
    }
}

/// The Lease spec to write for a `Create`, `Renew` or `Acquire` decision; `None` for `Follow`.
/// `now` is our wall clock: the renew and acquire times are written for people and other tools to
/// read; no replica of ours decides anything from them.
pub fn claim(
    decision: &Decision,
    current: Option<&LeaseSpec>,
    identity: &str,
    lease_duration: Duration,
    now: Timestamp,
) -> Option<LeaseSpec> {
    let duration_seconds = i32::try_from(lease_duration.as_secs()).unwrap_or(i32::MAX);
    let base = current.cloned().unwrap_or_default();
    match decision {
        Decision::Follow { .. } => None,
        Decision::Renew => Some(LeaseSpec {
            holder_identity: Some(identity.to_owned()),
            lease_duration_seconds: Some(duration_seconds),
            renew_time: Some(MicroTime(now)),
            acquire_time: base.acquire_time.clone().or(Some(MicroTime(now))),
            ..base
        }),
        Decision::Create | Decision::Acquire => Some(LeaseSpec {
            holder_identity: Some(identity.to_owned()),
            lease_duration_seconds: Some(duration_seconds),
            renew_time: Some(MicroTime(now)),
            acquire_time: Some(MicroTime(now)),
            lease_transitions: Some(match decision {
                Decision::Create => 0,
                _ => base.lease_transitions.unwrap_or(0).saturating_add(1),
            }),
            ..base
        }),
    }
}

/// The Lease spec that gives the Lease up at shutdown, or `None` when we do not hold it. The
/// holder is cleared so a waiting replica can take over at once instead of after the duration.
pub fn release(current: &LeaseSpec, identity: &str) -> Option<LeaseSpec> {
    (current.holder_identity.as_deref() == Some(identity)).then(|| LeaseSpec {
        holder_identity: None,
        ..current.clone()
    })
}

/// Whether a leader whose last successful renewal was `since_renewal` ago must stop acting as
/// leader: after `renew_deadline` another replica may be about to take over.
pub fn must_step_down(since_renewal: Duration, renew_deadline: Duration) -> bool {
    since_renewal >= renew_deadline
}

#[cfg(test)]
mod tests {
    use super::*;

    const DURATION: Duration = Duration::from_secs(15);

    /// Wall-clock times, as a holder writes them.
    fn wall(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + seconds).unwrap()
    }

    /// A fixed origin on the monotonic clock, and seconds after it.
    fn clock() -> impl Fn(u64) -> Instant {
        let origin = Instant::now();
        move |seconds| origin + Duration::from_secs(seconds)
    }

    fn held_by(holder: &str, renewed: i64) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.to_owned()),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime(wall(renewed))),
            acquire_time: Some(MicroTime(wall(0))),
            lease_transitions: Some(2),
            ..Default::default()
        }
    }

    /// What `b` decides when it has watched `lease` unchanged since `first_seen`.
    fn decide_seen(lease: &LeaseSpec, first_seen: Instant, now: Instant) -> Decision {
        let observation = observe(None, lease, first_seen);
        decide(Some(lease), "b", DURATION, Some(&observation), now)
    }

    #[test]
    fn missing_lease_is_created() {
        let at = clock();
        assert_eq!(decide(None, "a", DURATION, None, at(0)), Decision::Create);
        let spec = claim(&Decision::Create, None, "a", DURATION, wall(0)).unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("a"));
        assert_eq!(spec.lease_transitions, Some(0));
        assert_eq!(spec.lease_duration_seconds, Some(15));
    }

    #[test]
    fn holder_renews_and_keeps_its_acquire_time() {
        let at = clock();
        let lease = held_by("a", 10);
        assert_eq!(
            decide(Some(&lease), "a", DURATION, None, at(0)),
            Decision::Renew
        );
        let spec = claim(&Decision::Renew, Some(&lease), "a", DURATION, wall(12)).unwrap();
        assert_eq!(spec.renew_time, Some(MicroTime(wall(12))));
        assert_eq!(spec.acquire_time, Some(MicroTime(wall(0))));
        assert_eq!(spec.lease_transitions, Some(2));
    }

    #[test]
    fn live_lease_of_another_holder_is_followed_for_a_duration_after_we_saw_it() {
        let at = clock();
        let lease = held_by("a", 10);
        let decision = decide_seen(&lease, at(100), at(114));
        assert_eq!(
            decision,
            Decision::Follow {
                holder: "a".to_owned(),
                expires_at: Some(at(115)),
            }
        );
        assert_eq!(
            claim(&decision, Some(&lease), "b", DURATION, wall(24)),
            None
        );
    }

    #[test]
    fn unchanged_lease_is_taken_over_a_duration_after_we_saw_it_with_a_transition() {
        let at = clock();
        let lease = held_by("a", 10);
        assert_eq!(decide_seen(&lease, at(100), at(115)), Decision::Acquire);
        let spec = claim(&Decision::Acquire, Some(&lease), "b", DURATION, wall(25)).unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("b"));
        assert_eq!(spec.acquire_time, Some(MicroTime(wall(25))));
        assert_eq!(spec.lease_transitions, Some(3));
    }

    #[test]
    fn a_renewal_restarts_the_count_whatever_time_it_carries() {
        let at = clock();
        let first = observe(None, &held_by("a", 10), at(100));
        // 14 s later the holder renews, its clock an hour behind ours: a new record all the same.
        let renewed = held_by("a", 10 - 3600);
        let second = observe(Some(first.clone()), &renewed, at(114));
        assert_eq!(second.observed_at, at(114));
        assert_eq!(
            decide(Some(&renewed), "b", DURATION, Some(&second), at(120)),
            Decision::Follow {
                holder: "a".to_owned(),
                expires_at: Some(at(129)),
            }
        );
        // The same record read again keeps its first sighting.
        assert_eq!(observe(Some(second.clone()), &renewed, at(120)), second);
    }

    #[test]
    fn remote_renew_time_far_from_our_clock_does_not_expire_a_lease_seen_changing_recently() {
        let at = clock();
        for skew in [-86_400 * 365, -3600, 3600, 86_400 * 365] {
            let lease = held_by("a", skew);
            // Seen changing 1 s ago: followed, however old or new its renewTime looks.
            assert!(
                matches!(
                    decide_seen(&lease, at(100), at(101)),
                    Decision::Follow { .. }
                ),
                "renewTime {skew} s from ours"
            );
            // Unchanged for a whole duration: expired, even with a renewTime in our future.
            assert_eq!(
                decide_seen(&lease, at(100), at(115)),
                Decision::Acquire,
                "renewTime {skew} s from ours"
            );
        }
    }

    #[test]
    fn a_lease_never_observed_before_is_followed_for_a_full_duration() {
        let at = clock();
        // A replica that just started reads a record renewed (by the wall clock) a day ago.
        let lease = held_by("a", -86_400);
        assert_eq!(
            decide(Some(&lease), "b", DURATION, None, at(0)),
            Decision::Follow {
                holder: "a".to_owned(),
                expires_at: Some(at(15)),
            }
        );
        // An observation of another record counts as none.
        let stale = observe(None, &held_by("a", -90_000), at(0));
        assert!(!is_expired(&lease, Some(&stale), DURATION, at(30)));
    }

    #[test]
    fn released_lease_is_free_at_once() {
        let at = clock();
        let lease = release(&held_by("a", 10), "a").unwrap();
        assert_eq!(lease.holder_identity, None);
        assert_eq!(
            decide(Some(&lease), "b", DURATION, None, at(0)),
            Decision::Acquire
        );
        let empty = LeaseSpec {
            holder_identity: Some(String::new()),
            ..held_by("a", 10)
        };
        assert_eq!(
            decide(Some(&empty), "b", DURATION, None, at(0)),
            Decision::Acquire
        );
    }

    #[test]
    fn only_the_holder_releases() {
        assert_eq!(release(&held_by("a", 10), "b"), None);
    }

    #[test]
    fn lease_duration_comes_from_the_lease_else_ours() {
        let at = clock();
        let short = LeaseSpec {
            lease_duration_seconds: Some(5),
            ..held_by("a", 10)
        };
        assert_eq!(decide_seen(&short, at(0), at(5)), Decision::Acquire);
        for unusable in [None, Some(0), Some(-1)] {
            let lease = LeaseSpec {
                lease_duration_seconds: unusable,
                ..held_by("a", 10)
            };
            assert_eq!(duration(&lease, DURATION), DURATION, "{unusable:?}");
            assert!(!is_expired(
                &lease,
                Some(&observe(None, &lease, at(0))),
                DURATION,
                at(14)
            ));
        }
        let huge = LeaseSpec {
            lease_duration_seconds: Some(i32::MAX),
            ..held_by("a", 10)
        };
        assert!(matches!(
            decide_seen(&huge, at(0), at(1_000)),
            Decision::Follow { .. }
        ));
    }

    #[test]
    fn leader_steps_down_after_the_renew_deadline() {
        let deadline = Duration::from_secs(10);
        assert!(!must_step_down(Duration::from_secs(9), deadline));
        assert!(must_step_down(Duration::from_secs(10), deadline));
    }
}
