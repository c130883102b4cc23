//! Leader election decisions on a `coordination.k8s.io/v1` Lease, as pure functions of the Lease
//! as read, our identity and the time.
//!
//! A Lease is free when it has no holder or when its holder has not renewed it within
//! `leaseDurationSeconds` (`renewTime + leaseDurationSeconds <= now`); then anyone may take it
//! over. The holder keeps it by renewing. This module only decides; `elector` reads and writes the
//! Lease (with a resourceVersion precondition, so two candidates cannot both win one round).

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

use crate::deadline;

/// What a candidate should do with the Lease it just read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// No Lease exists: create it holding it.
    Create,
    /// We hold it: renew.
    Renew,
    /// It is free or expired: take it over (a leadership transition).
    Acquire,
    /// Someone else holds it until `expires_at`.
    Follow {
        /// The current holder.
        holder: String,
        /// When the holder's claim runs out unless renewed.
        expires_at: Option<Timestamp>,
    },
}

/// When the holder's claim on the Lease runs out. A Lease without renew or acquire time has
/// already run out; one without a duration uses `default_duration`.
pub fn expires_at(spec: &LeaseSpec, default_duration: Duration) -> Option<Timestamp> {
    let renewed = spec.renew_time.as_ref().or(spec.acquire_time.as_ref())?.0;
    let seconds = spec
        .lease_duration_seconds
        .map(i64::from)
        .unwrap_or(default_duration.as_secs() as i64);
    deadline::after(renewed, seconds)
}

/// Whether the holder's claim has run out at `now`.
pub fn is_expired(spec: &LeaseSpec, default_duration: Duration, now: Timestamp) -> bool {
    match expires_at(spec, default_duration) {
        Some(expiry) => deadline::has_passed(expiry, now),
        None => true,
    }
}

/// Decides what `identity` does with `lease` at `now`.
pub fn decide(
    lease: Option<&LeaseSpec>,
    identity: &str,
    lease_duration: Duration,
    now: Timestamp,
) -> Decision {
    let Some(spec) = lease else {
        return Decision::Create;
    };
    match spec.holder_identity.as_deref() {
        Some(holder) if holder == identity => Decision::Renew,
        None | Some("") => Decision::Acquire,
        Some(_) if is_expired(spec, lease_duration, now) => Decision::Acquire,
        Some(holder) => Decision::Follow {
            holder: holder.to_owned(),
            expires_at: expires_at(spec, lease_duration),
        },
    }
}

/// The Lease spec to write for a `Create`, `Renew` or `Acquire` decision; `None` for `Follow`.
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

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + seconds).unwrap()
    }

    fn held_by(holder: &str, renewed: i64) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.to_owned()),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime(at(renewed))),
            acquire_time: Some(MicroTime(at(0))),
            lease_transitions: Some(2),
            ..Default::default()
        }
    }

    #[test]
    fn missing_lease_is_created() {
        assert_eq!(decide(None, "a", DURATION, at(0)), Decision::Create);
        let spec = claim(&Decision::Create, None, "a", DURATION, at(0)).unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("a"));
        assert_eq!(spec.lease_transitions, Some(0));
        assert_eq!(spec.lease_duration_seconds, Some(15));
    }

    #[test]
    fn holder_renews_and_keeps_its_acquire_time() {
        let lease = held_by("a", 10);
        assert_eq!(decide(Some(&lease), "a", DURATION, at(12)), Decision::Renew);
        let spec = claim(&Decision::Renew, Some(&lease), "a", DURATION, at(12)).unwrap();
        assert_eq!(spec.renew_time, Some(MicroTime(at(12))));
        assert_eq!(spec.acquire_time, Some(MicroTime(at(0))));
        assert_eq!(spec.lease_transitions, Some(2));
    }

    #[test]
    fn live_lease_of_another_holder_is_followed_until_it_expires() {
        let lease = held_by("a", 10);
        assert_eq!(
            decide(Some(&lease), "b", DURATION, at(24)),
            Decision::Follow {
                holder: "a".to_owned(),
                expires_at: Some(at(25)),
            }
        );
        assert_eq!(
            claim(
                &decide(Some(&lease), "b", DURATION, at(24)),
                Some(&lease),
                "b",
                DURATION,
                at(24)
            ),
            None
        );
    }

    #[test]
    fn expired_lease_is_taken_over_with_a_transition() {
        let lease = held_by("a", 10);
        assert_eq!(
            decide(Some(&lease), "b", DURATION, at(25)),
            Decision::Acquire
        );
        let spec = claim(&Decision::Acquire, Some(&lease), "b", DURATION, at(25)).unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("b"));
        assert_eq!(spec.acquire_time, Some(MicroTime(at(25))));
        assert_eq!(spec.lease_transitions, Some(3));
    }

    #[test]
    fn released_lease_is_free_at_once() {
        let lease = release(&held_by("a", 10), "a").unwrap();
        assert_eq!(lease.holder_identity, None);
        assert_eq!(
            decide(Some(&lease), "b", DURATION, at(11)),
            Decision::Acquire
        );
        let empty = LeaseSpec {
            holder_identity: Some(String::new()),
            ..held_by("a", 10)
        };
        assert_eq!(
            decide(Some(&empty), "b", DURATION, at(11)),
            Decision::Acquire
        );
    }

    #[test]
    fn only_the_holder_releases() {
        assert_eq!(release(&held_by("a", 10), "b"), None);
    }

    #[test]
    fn lease_without_times_is_expired_and_without_duration_uses_ours() {
        let no_times = LeaseSpec {
            holder_identity: Some("a".to_owned()),
            ..Default::default()
        };
        assert!(is_expired(&no_times, DURATION, at(0)));
        let no_duration = LeaseSpec {
            lease_duration_seconds: None,
            ..held_by("a", 10)
        };
        assert_eq!(expires_at(&no_duration, DURATION), Some(at(25)));
        assert!(!is_expired(&no_duration, DURATION, at(24)));
    }

    #[test]
    fn leader_steps_down_after_the_renew_deadline() {
        let deadline = Duration::from_secs(10);
        assert!(!must_step_down(Duration::from_secs(9), deadline));
        assert!(must_step_down(Duration::from_secs(10), deadline));
    }
}
