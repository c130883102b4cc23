//! When the self-managed certificates change: renew the serving certificate, roll the CA over,
//! retire the old CA. [`plan`] is a function of what the Secret holds ([`Facts`], plain values),
//! the time and the [`Policy`]; it returns one [`RotationStep`]. It generates no key and talks to
//! no API server: `certs` turns the step into a new Secret and writes it with a resourceVersion
//! precondition, so of several replicas deciding the same step only one write wins and the
//! others read its result on their next pass.
//!
//! A CA rollover without an admission outage goes through four states of the Secret:
//!
//! 1. **Stage** (the signing CA is due): a new CA is created and added to `ca.crt` beside the
//!    current one; the serving certificate is still the old CA's. Every replica publishes the
//!    two-CA bundle as `caBundle`.
//! 2. **Published**: a replica that found the two-CA bundle in every `caBundle` records when.
//! 3. **Switch** (`overlap` after that, so every API server has picked the bundle up): the new CA
//!    signs; a serving certificate from it is issued; the old CA stays in `ca.crt`, since replicas
//!    that have not re-read the Secret yet still serve the old CA's certificate.
//! 4. **Retire** (`overlap` after the switch, so every replica has re-read the Secret): the old
//!    CA leaves `ca.crt`.
//!
//! Serving renewals happen in every state, always from the signing CA, and never outlive it.
//! A Secret that holds a CA without its key (written by crr before it kept CA keys, or by hand)
//! is migrated by the same rollover. Only a Secret with nothing usable in it (no serving
//! certificate that verifies, no CA that can sign) is regenerated at once: there is no admission
//! to keep up then.

use std::fmt;

/// Seconds in a day.
const DAY: i64 = 24 * 3600;

/// The validity of a certificate, Unix seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Validity {
    pub not_before: i64,
    pub not_after: i64,
}

/// Lifetimes and overlaps of the self-managed certificates, in seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// How long a new CA is valid.
    pub ca_validity: i64,
    /// A rollover starts when the signing CA has this much left or less.
    pub ca_renew_before: i64,
    /// How long a new serving certificate is valid (never beyond its CA).
    pub serving_validity: i64,
    /// The serving certificate is renewed when it has this much left or less.
    pub serving_renew_before: i64,
    /// How long a new CA is published before it signs, and how long the old CA stays published
    /// after the switch.
    pub ca_overlap: i64,
}

/// Why a policy cannot work.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("{0} must be positive")]
    NotPositive(&'static str),
    #[error(
        "{renew_before} ({renew_before_value}s) must be less than {validity} ({validity_value}s)"
    )]
    RenewAfterExpiry {
        renew_before: &'static str,
        renew_before_value: i64,
        validity: &'static str,
        validity_value: i64,
    },
    #[error(
        "--ca-overlap-seconds ({overlap}s) must be at least twice --cert-resync-seconds ({resync}s): every replica re-reads the Secret within the overlap"
    )]
    OverlapBelowResync { overlap: i64, resync: i64 },
    #[error(
        "--ca-renew-before-seconds ({renew_before}s) must be more than twice --ca-overlap-seconds ({overlap}s): the old CA must outlive the rollover"
    )]
    RolloverTooShort { renew_before: i64, overlap: i64 },
    #[error(
        "--serving-renew-before-seconds ({renew_before}s) must be at least twice --cert-resync-seconds ({resync}s)"
    )]
    RenewalBelowResync { renew_before: i64, resync: i64 },
}

impl Policy {
    /// A CA for a year, rolled over a third of its life (about four months) before it expires;
    /// a serving certificate for 90 days, renewed at two thirds of its life (30 days left, well
    /// before the 14-day expiry alert); an hour of overlap on either side of the CA switch
    /// (API servers pick up a webhook configuration within seconds, replicas re-read the Secret
    /// every `--cert-resync-seconds`).
    pub const DEFAULT: Self = Self {
        ca_validity: 365 * DAY,
        ca_renew_before: 365 * DAY / 3,
        serving_validity: 90 * DAY,
        serving_renew_before: 30 * DAY,
        ca_overlap: 3600,
    };

    /// A policy from its parts; a renew-before left out is a third of the validity. `resync` is
    /// how often replicas re-read the Secret.
    pub fn new(
        ca_validity: i64,
        ca_renew_before: Option<i64>,
        serving_validity: i64,
        serving_renew_before: Option<i64>,
        ca_overlap: i64,
        resync: i64,
    ) -> Result<Self, PolicyError> {
        let policy = Self {
            ca_validity,
            ca_renew_before: ca_renew_before.unwrap_or(ca_validity / 3),
            serving_validity,
            serving_renew_before: serving_renew_before.unwrap_or(serving_validity / 3),
            ca_overlap,
        };
        for (name, value) in [
            ("--ca-validity-seconds", policy.ca_validity),
            ("--ca-renew-before-seconds", policy.ca_renew_before),
            ("--serving-validity-seconds", policy.serving_validity),
            (
                "--serving-renew-before-seconds",
                policy.serving_renew_before,
            ),
            ("--ca-overlap-seconds", policy.ca_overlap),
        ] {
            if value <= 0 {
                return Err(PolicyError::NotPositive(name));
            }
        }
        for (renew_before, renew_before_value, validity, validity_value) in [
            (
                "--ca-renew-before-seconds",
                policy.ca_renew_before,
                "--ca-validity-seconds",
                policy.ca_validity,
            ),
            (
                "--serving-renew-before-seconds",
                policy.serving_renew_before,
                "--serving-validity-seconds",
                policy.serving_validity,
            ),
        ] {
            if renew_before_value >= validity_value {
                return Err(PolicyError::RenewAfterExpiry {
                    renew_before,
                    renew_before_value,
                    validity,
                    validity_value,
                });
            }
        }
        if policy.ca_overlap < 2 * resync {
            return Err(PolicyError::OverlapBelowResync {
                overlap: policy.ca_overlap,
                resync,
            });
        }
        if policy.ca_renew_before <= 2 * policy.ca_overlap {
            return Err(PolicyError::RolloverTooShort {
                renew_before: policy.ca_renew_before,
                overlap: policy.ca_overlap,
            });
        }
        if policy.serving_renew_before < 2 * resync {
            return Err(PolicyError::RenewalBelowResync {
                renew_before: policy.serving_renew_before,
                resync,
            });
        }
        Ok(policy)
    }

    /// How far before "now" a new certificate's notBefore is put, so that an API server whose
    /// clock is a little behind accepts it: a tenth of its validity, at most an hour.
    pub fn backdate(validity: i64) -> i64 {
        (validity / 10).clamp(0, 3600)
    }
}

impl Default for Policy {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The serving certificate, when it is usable: it verifies against a CA of the bundle at the
/// time of the decision and names the Service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Serving {
    pub validity: Validity,
    /// Whether the signing CA issued it (not an older or foreign CA of the bundle).
    pub from_signing_ca: bool,
}

/// What the Secret holds, as far as the decision goes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Facts {
    /// The CA that signs serving certificates: its certificate is in the bundle and its key
    /// belongs to it. `None` when there is none (a Secret without `ca.key`).
    pub signing_ca: Option<Validity>,
    /// A new CA staged in the bundle (with its key), not signing yet.
    pub next_ca: Option<Validity>,
    /// When the bundle with the staged CA was found in every caBundle.
    pub next_ca_published_at: Option<i64>,
    /// The bundle holds CAs other than the signing and the staged one.
    pub other_cas: bool,
    /// Since when those other CAs are the previous CA of a switch (`None`: they are foreign, or
    /// from crr before it kept CA keys; they stay until a switch makes them previous).
    pub previous_ca_since: Option<i64>,
    /// The serving certificate, if usable.
    pub serving: Option<Serving>,
    /// This pass found the bundle in every caBundle it keeps.
    pub bundle_published: bool,
}

/// What to change in the Secret now (one step per pass; the next pass decides again).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RotationStep {
    /// Nothing is due.
    Idle,
    /// Nothing usable to roll over from: a new CA, a serving certificate, a bundle of that CA.
    Regenerate,
    /// A new serving certificate from the signing CA.
    RenewServing,
    /// A new CA, added to the bundle; it does not sign yet.
    StageCa,
    /// Record that the bundle with the staged CA is in every caBundle (the overlap starts).
    MarkPublished,
    /// The staged CA signs from now on: a serving certificate from it; the old CAs stay in the
    /// bundle as previous.
    SwitchCa,
    /// The previous CAs leave the bundle.
    RetireCa,
}

impl fmt::Display for RotationStep {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(match self {
            Self::Idle => "Idle",
            Self::Regenerate => "Regenerate",
            Self::RenewServing => "RenewServing",
            Self::StageCa => "StageCa",
            Self::MarkPublished => "MarkPublished",
            Self::SwitchCa => "SwitchCa",
            Self::RetireCa => "RetireCa",
        })
    }
}

/// The step due at `now` (Unix seconds).
pub fn plan(facts: &Facts, now: i64, policy: &Policy) -> RotationStep {
    let signing = facts.signing_ca.filter(|ca| ca.not_after > now);
    let next = facts.next_ca.filter(|ca| ca.not_after > now);
    let Some(serving) = facts.serving.filter(|s| s.validity.not_after > now) else {
        // Admission is already failing: fix it now, overlap or not.
        return if signing.is_some() {
            RotationStep::RenewServing
        } else if next.is_some() {
            RotationStep::SwitchCa
        } else {
            RotationStep::Regenerate
        };
    };
    let serving_due = signing.is_some_and(|ca| {
        !serving.from_signing_ca
            || serving.validity.not_after > now + policy.serving_validity
            || (serving.validity.not_after - now <= policy.serving_renew_before
                && serving.validity.not_after < ca.not_after)
    });
    if serving_due {
        return RotationStep::RenewServing;
    }
    if facts.next_ca.is_some() {
        return match facts.next_ca_published_at {
            None if facts.bundle_published => RotationStep::MarkPublished,
            Some(at) if now >= at + policy.ca_overlap => RotationStep::SwitchCa,
            _ => RotationStep::Idle,
        };
    }
    if facts.other_cas
        && let Some(since) = facts.previous_ca_since
    {
        return if now >= since + policy.ca_overlap {
            RotationStep::RetireCa
        } else {
            RotationStep::Idle
        };
    }
    let ca_due = signing.is_none_or(|ca| {
        ca.not_after - now <= policy.ca_renew_before || ca.not_after > now + policy.ca_validity
    });
    if ca_due {
        return RotationStep::StageCa;
    }
    RotationStep::Idle
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test bed's policy (webhook/tests/cluster.rs): CA 40 s, serving 15 s, overlap 4 s.
    fn short() -> Policy {
        Policy::new(40, None, 15, None, 4, 1).expect("a valid policy")
    }

    fn valid(not_before: i64, not_after: i64) -> Validity {
        Validity {
            not_before,
            not_after,
        }
    }

    /// A Secret in steady state at time 0: CA [0, 40], serving [0, 15] from it, published.
    fn steady() -> Facts {
        Facts {
            signing_ca: Some(valid(0, 40)),
            serving: Some(Serving {
                validity: valid(0, 15),
                from_signing_ca: true,
            }),
            bundle_published: true,
            ..Facts::default()
        }
    }

    #[test]
    fn defaults_are_a_year_of_ca_and_ninety_days_of_serving_renewed_at_two_thirds() {
        let policy = Policy::new(365 * DAY, None, 90 * DAY, None, 3600, 10).expect("valid");
        assert_eq!(policy, Policy::DEFAULT);
        assert_eq!(policy.serving_renew_before, 30 * DAY);
        assert!(policy.ca_renew_before > 30 * DAY);
    }

    #[test]
    fn rejects_policies_that_cannot_work() {
        let cases = [
            (
                Policy::new(0, None, 15, None, 4, 1),
                "--ca-validity-seconds must be positive",
            ),
            (
                Policy::new(40, Some(40), 15, None, 4, 1),
                "must be less than --ca-validity-seconds",
            ),
            (
                Policy::new(40, None, 15, Some(20), 4, 1),
                "must be less than --serving-validity-seconds",
            ),
            (
                Policy::new(40, None, 15, None, 1, 1),
                "at least twice --cert-resync-seconds",
            ),
            (
                Policy::new(40, None, 15, None, 7, 1),
                "more than twice --ca-overlap-seconds",
            ),
            (
                Policy::new(40, None, 15, Some(1), 4, 1),
                "--serving-renew-before-seconds (1s) must be at least twice",
            ),
        ];
        for (result, message) in cases {
            let error = result.expect_err(message).to_string();
            assert!(error.contains(message), "{error:?} lacks {message:?}");
        }
    }

    #[test]
    fn backdate_is_a_tenth_of_the_validity_at_most_an_hour() {
        assert_eq!(Policy::backdate(40), 4);
        assert_eq!(Policy::backdate(15), 1);
        assert_eq!(Policy::backdate(90 * DAY), 3600);
    }

    #[test]
    fn steady_state_is_idle_until_the_serving_certificate_has_a_third_left() {
        let policy = short();
        assert_eq!(plan(&steady(), 0, &policy), RotationStep::Idle);
        assert_eq!(plan(&steady(), 9, &policy), RotationStep::Idle);
        assert_eq!(plan(&steady(), 10, &policy), RotationStep::RenewServing);
        assert_eq!(plan(&steady(), 14, &policy), RotationStep::RenewServing);
    }

    #[test]
    fn a_serving_certificate_from_another_ca_or_too_long_is_renewed() {
        let policy = short();
        let mut foreign = steady();
        foreign.serving = Some(Serving {
            validity: valid(0, 15),
            from_signing_ca: false,
        });
        assert_eq!(plan(&foreign, 1, &policy), RotationStep::RenewServing);
        let mut too_long = steady();
        too_long.serving = Some(Serving {
            validity: valid(0, 3650 * DAY),
            from_signing_ca: true,
        });
        too_long.signing_ca = Some(valid(0, 3650 * DAY));
        assert_eq!(plan(&too_long, 1, &policy), RotationStep::RenewServing);
    }

    #[test]
    fn a_serving_certificate_that_lasts_as_long_as_its_ca_is_not_renewed_over_and_over() {
        // During a rollover the old CA may have less left than the renewal margin: a new
        // certificate could not last longer, so none is issued.
        let policy = short();
        let mut facts = steady();
        facts.signing_ca = Some(valid(0, 40));
        facts.next_ca = Some(valid(27, 67));
        facts.serving = Some(Serving {
            validity: valid(30, 40),
            from_signing_ca: true,
        });
        assert_eq!(plan(&facts, 37, &policy), RotationStep::MarkPublished);
    }

    #[test]
    fn the_ca_rolls_over_through_stage_publish_switch_and_retire() {
        let policy = short();
        let mut facts = steady();
        facts.serving = Some(Serving {
            validity: valid(20, 35),
            from_signing_ca: true,
        });
        assert_eq!(plan(&facts, 26, &policy), RotationStep::Idle);
        assert_eq!(
            plan(&facts, 27, &policy),
            RotationStep::StageCa,
            "13 s left: a third of 40"
        );

        facts.next_ca = Some(valid(23, 67));
        facts.bundle_published = false;
        assert_eq!(
            plan(&facts, 27, &policy),
            RotationStep::Idle,
            "not in every caBundle yet"
        );
        facts.bundle_published = true;
        assert_eq!(plan(&facts, 28, &policy), RotationStep::MarkPublished);

        facts.next_ca_published_at = Some(28);
        facts.serving = Some(Serving {
            validity: valid(30, 40),
            from_signing_ca: true,
        });
        assert_eq!(
            plan(&facts, 31, &policy),
            RotationStep::Idle,
            "inside the overlap"
        );
        assert_eq!(plan(&facts, 32, &policy), RotationStep::SwitchCa);

        facts.signing_ca = facts.next_ca.take();
        facts.next_ca_published_at = None;
        facts.other_cas = true;
        facts.previous_ca_since = Some(32);
        facts.serving = Some(Serving {
            validity: valid(31, 47),
            from_signing_ca: true,
        });
        assert_eq!(
            plan(&facts, 35, &policy),
            RotationStep::Idle,
            "old replicas may still serve the old CA's"
        );
        assert_eq!(plan(&facts, 36, &policy), RotationStep::RetireCa);

        facts.other_cas = false;
        facts.previous_ca_since = None;
        assert_eq!(plan(&facts, 36, &policy), RotationStep::Idle);
    }

    #[test]
    fn serving_renewal_goes_first_during_a_rollover() {
        let policy = short();
        let mut facts = steady();
        facts.serving = Some(Serving {
            validity: valid(18, 33),
            from_signing_ca: true,
        });
        facts.next_ca = Some(valid(23, 67));
        facts.next_ca_published_at = Some(20);
        assert_eq!(
            plan(&facts, 30, &policy),
            RotationStep::RenewServing,
            "from the old CA, capped at its expiry"
        );
        facts.serving = Some(Serving {
            validity: valid(30, 40),
            from_signing_ca: true,
        });
        assert_eq!(plan(&facts, 30, &policy), RotationStep::SwitchCa);
    }

    #[test]
    fn no_new_ca_is_staged_while_the_previous_one_is_still_published() {
        let policy = short();
        let mut facts = steady();
        facts.other_cas = true;
        facts.previous_ca_since = Some(0);
        facts.signing_ca = Some(valid(0, 10));
        facts.serving = Some(Serving {
            validity: valid(0, 10),
            from_signing_ca: true,
        });
        assert_eq!(plan(&facts, 2, &policy), RotationStep::Idle);
        assert_eq!(plan(&facts, 4, &policy), RotationStep::RetireCa);
    }

    #[test]
    fn a_ca_without_its_key_is_migrated_by_a_rollover_not_replaced() {
        // crr before this change: a ten-year CA whose key was thrown away.
        let policy = Policy::DEFAULT;
        let facts = Facts {
            other_cas: true,
            serving: Some(Serving {
                validity: valid(0, 3650 * DAY),
                from_signing_ca: false,
            }),
            bundle_published: true,
            ..Facts::default()
        };
        assert_eq!(plan(&facts, 100, &policy), RotationStep::StageCa);
        let staged = Facts {
            next_ca: Some(valid(100, 100 + 365 * DAY)),
            ..facts
        };
        assert_eq!(plan(&staged, 101, &policy), RotationStep::MarkPublished);
        let published = Facts {
            next_ca_published_at: Some(101),
            ..staged
        };
        assert_eq!(plan(&published, 101 + 3599, &policy), RotationStep::Idle);
        assert_eq!(
            plan(&published, 101 + 3600, &policy),
            RotationStep::SwitchCa
        );
    }

    #[test]
    fn a_ca_valid_longer_than_the_policy_allows_is_rolled_over() {
        let policy = Policy::DEFAULT;
        let facts = Facts {
            signing_ca: Some(valid(0, 3650 * DAY)),
            serving: Some(Serving {
                validity: valid(0, 90 * DAY),
                from_signing_ca: true,
            }),
            bundle_published: true,
            ..Facts::default()
        };
        assert_eq!(plan(&facts, 1, &policy), RotationStep::StageCa);
    }

    #[test]
    fn nothing_usable_is_fixed_at_once() {
        let policy = short();
        assert_eq!(
            plan(&Facts::default(), 0, &policy),
            RotationStep::Regenerate
        );
        let mut expired = steady();
        assert_eq!(
            plan(&expired, 15, &policy),
            RotationStep::RenewServing,
            "the CA can still sign"
        );
        expired.signing_ca = Some(valid(0, 15));
        assert_eq!(plan(&expired, 15, &policy), RotationStep::Regenerate);
        expired.next_ca = Some(valid(10, 50));
        assert_eq!(
            plan(&expired, 15, &policy),
            RotationStep::SwitchCa,
            "no overlap to wait for"
        );
    }

    #[test]
    fn a_retry_after_a_lost_race_decides_nothing_new() {
        // The winner's Secret, read by the loser: the step is done, nothing is repeated.
        let policy = short();
        let mut facts = steady();
        facts.serving = Some(Serving {
            validity: valid(9, 25),
            from_signing_ca: true,
        });
        assert_eq!(plan(&facts, 10, &policy), RotationStep::Idle);
    }
}
