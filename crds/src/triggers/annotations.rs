//! What a workload's annotations ask of the triggers.
//!
//! | annotation | meaning |
//! |---|---|
//! | `crr.dev/recreate-on-config-change: "true"` | a data change of a ConfigMap or Secret the template uses restarts the containers that use it |
//! | `crr.dev/recreate-max-unavailable` | the rollouts' `maxUnavailable` (a count or a percent; default 1) |
//! | `crr.dev/recreate-schedule` | a cron schedule (five fields, as a CronJob's) of rollouts |
//! | `crr.dev/recreate-schedule-timezone` | its IANA time zone (default UTC), also the window's |
//! | `crr.dev/recreate-window` | when either trigger may start a rollout (`window`): `Mon-Fri 01:00-05:00` |
//! | `crr.dev/recreate-containers` | the containers a scheduled or requested rollout recreates (default: every regular container) |
//! | `crr.dev/restart-requested-at` | any new value restarts those containers in place, once per value (a timestamp committed to Git, say) |
//!
//! With Reloader's annotations honoured (the chart's `triggers.reloaderAnnotations`),
//! `reloader.stakater.com/auto: "true"` is the config-change trigger, and
//! `configmap.reloader.stakater.com/reload` / `secret.reloader.stakater.com/reload` (comma-separated
//! names) are the config-change trigger limited to the objects listed.
//!
//! A value that cannot be read turns that trigger off and is reported (a Warning Event on the
//! workload), never guessed at. A window that cannot be read (or its time zone) turns both
//! triggers off: crr does not know when it may restart.

use std::collections::{BTreeMap, BTreeSet};

use crate::keys;
use crate::rollout::Limit;
use jiff::tz::TimeZone;

use super::refs::ConfigRef;
use super::window::Window;

/// Where a config-change trigger came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// `crr.dev/recreate-on-config-change`.
    Crr,
    /// Reloader's annotations.
    Reloader,
}

/// The config-change trigger of a workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigChange {
    /// Which annotation asked for it.
    pub source: Source,
    /// Only these objects count (Reloader's explicit lists); `None`: every object the template
    /// uses.
    pub only: Option<BTreeSet<ConfigRef>>,
}

/// The schedule trigger of a workload.
#[derive(Clone, Debug)]
pub struct Schedule {
    /// The schedule as written.
    pub expression: String,
    /// The parsed schedule.
    pub cron: croner::Cron,
    /// Its time zone.
    pub time_zone: TimeZone,
    /// The containers to recreate; `None`: every regular container.
    pub containers: Option<Vec<String>>,
}

impl Schedule {
    /// The first tick after `now`; `None` when the schedule never fires again.
    pub fn next_after(&self, now: jiff::Timestamp) -> Option<jiff::Timestamp> {
        let zoned = now.to_zoned(self.time_zone.clone());
        self.cron
            .find_next_occurrence(&zoned, false)
            .ok()
            .map(|tick| tick.timestamp())
    }

    /// The latest tick at or before `now`.
    pub fn latest_at(&self, now: jiff::Timestamp) -> Option<jiff::Timestamp> {
        let zoned = now.to_zoned(self.time_zone.clone());
        self.cron
            .find_previous_occurrence(&zoned, true)
            .ok()
            .map(|tick| tick.timestamp())
    }
}

impl PartialEq for Schedule {
    fn eq(&self, other: &Self) -> bool {
        self.expression == other.expression
            && self.time_zone.iana_name() == other.time_zone.iana_name()
            && self.containers == other.containers
    }
}

/// A restart asked for by `crr.dev/restart-requested-at`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestartRequest {
    /// The value: a restart runs once per value.
    pub value: String,
    /// The containers to recreate; `None`: every regular container.
    pub containers: Option<Vec<String>>,
}

/// The longest `crr.dev/restart-requested-at` value: the record keeps it.
pub const MAX_RESTART_VALUE: usize = 256;

/// Everything a workload's annotations ask for.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Triggers {
    /// The config-change trigger, if any.
    pub config_change: Option<ConfigChange>,
    /// The schedule trigger, if any.
    pub schedule: Option<Schedule>,
    /// The rollouts' `maxUnavailable`.
    pub max_unavailable: Option<Limit>,
    /// When the triggers may start rollouts; `None`: at any time. A requested restart does not
    /// wait for it.
    pub window: Option<Window>,
    /// The restart asked for, if any.
    pub restart: Option<RestartRequest>,
}

impl Triggers {
    /// Whether any trigger is on.
    pub fn any(&self) -> bool {
        self.config_change.is_some() || self.schedule.is_some() || self.restart.is_some()
    }

    /// The rollouts' `maxUnavailable`: the annotation's, else 1.
    pub fn max_unavailable(&self) -> Limit {
        self.max_unavailable.unwrap_or(Limit::Count(1))
    }
}

/// An annotation whose value cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("annotation {annotation}: {problem}")]
pub struct BadAnnotation {
    /// The annotation.
    pub annotation: &'static str,
    /// What is wrong with its value.
    pub problem: String,
}

/// Whether any annotation a trigger reads is on the workload (the operator keeps only such
/// workloads in its cache).
pub fn has_trigger_annotations(annotations: &BTreeMap<String, String>, reloader: bool) -> bool {
    let ours = [
        keys::ANNOTATION_RECREATE_ON_CONFIG_CHANGE,
        keys::ANNOTATION_RECREATE_SCHEDULE,
        keys::ANNOTATION_RESTART_REQUESTED_AT,
    ];
    let reloaders = [
        keys::RELOADER_AUTO,
        keys::RELOADER_CONFIGMAPS,
        keys::RELOADER_SECRETS,
    ];
    ours.iter().any(|key| annotations.contains_key(*key))
        || (reloader && reloaders.iter().any(|key| annotations.contains_key(*key)))
        || !reloader_not_read(annotations, reloader).is_empty()
}

/// Reloader's annotations on the workload that crr does not read (`keys::RELOADER_NOT_READ`), in
/// that order; none when Reloader's annotations are not honoured at all (`reloader`).
pub fn reloader_not_read(
    annotations: &BTreeMap<String, String>,
    reloader: bool,
) -> Vec<&'static str> {
    if !reloader {
        return Vec::new();
    }
    keys::RELOADER_NOT_READ
        .into_iter()
        .filter(|key| annotations.contains_key(*key))
        .collect()
}

/// Reads the triggers of a workload from its annotations; `reloader`: whether Reloader's
/// annotations are honoured.
pub fn parse(
    annotations: &BTreeMap<String, String>,
    reloader: bool,
) -> (Triggers, Vec<BadAnnotation>) {
    let mut problems = Vec::new();
    let get = |key: &str| annotations.get(key).map(|value| value.trim());
    let mut triggers = Triggers::default();

    match get(keys::ANNOTATION_RECREATE_ON_CONFIG_CHANGE).map(parse_bool) {
        Some(Ok(true)) => {
            triggers.config_change = Some(ConfigChange {
                source: Source::Crr,
                only: None,
            });
        }
        Some(Ok(false)) | None => {}
        Some(Err(problem)) => problems.push(BadAnnotation {
            annotation: keys::ANNOTATION_RECREATE_ON_CONFIG_CHANGE,
            problem,
        }),
    }
    if reloader && triggers.config_change.is_none() {
        triggers.config_change = reloader_trigger(&get, &mut problems);
    }

    if let Some(value) = get(keys::ANNOTATION_RECREATE_MAX_UNAVAILABLE) {
        match value.parse::<Limit>() {
            Ok(limit) => triggers.max_unavailable = Some(limit),
            Err(problem) => problems.push(BadAnnotation {
                annotation: keys::ANNOTATION_RECREATE_MAX_UNAVAILABLE,
                problem,
            }),
        }
    }

    if let Some(value) =
        get(keys::ANNOTATION_RESTART_REQUESTED_AT).filter(|value| !value.is_empty())
    {
        if value.len() > MAX_RESTART_VALUE {
            problems.push(BadAnnotation {
                annotation: keys::ANNOTATION_RESTART_REQUESTED_AT,
                problem: format!(
                    "{} characters, more than {MAX_RESTART_VALUE}: use a short value, as a timestamp",
                    value.len()
                ),
            });
        } else {
            triggers.restart = Some(RestartRequest {
                value: value.to_owned(),
                containers: get(keys::ANNOTATION_RECREATE_CONTAINERS).and_then(names),
            });
        }
    }

    let schedule_text = get(keys::ANNOTATION_RECREATE_SCHEDULE);
    let window_text = get(keys::ANNOTATION_RECREATE_WINDOW);
    // Read once, for the schedule and the window; reported once.
    let zone = (schedule_text.is_some() || window_text.is_some())
        .then(|| time_zone(get(keys::ANNOTATION_RECREATE_SCHEDULE_TIMEZONE)));
    if let Some(Err(problem)) = &zone {
        problems.push(problem.clone());
    }
    let zone = zone.and_then(Result::ok);

    if let (Some(expression), Some(zone)) = (schedule_text, &zone) {
        match schedule(
            expression,
            zone.clone(),
            get(keys::ANNOTATION_RECREATE_CONTAINERS),
        ) {
            Ok(schedule) => triggers.schedule = Some(schedule),
            Err(problem) => problems.push(problem),
        }
    }
    if let Some(value) = window_text {
        let window = zone.map(|zone| {
            Window::parse(value, zone).map_err(|problem| BadAnnotation {
                annotation: keys::ANNOTATION_RECREATE_WINDOW,
                problem,
            })
        });
        match window {
            Some(Ok(window)) => triggers.window = Some(window),
            Some(Err(problem)) => {
                problems.push(problem);
                triggers.config_change = None;
                triggers.schedule = None;
            }
            // The time zone's problem is reported above.
            None => {
                triggers.config_change = None;
                triggers.schedule = None;
            }
        }
    }
    (triggers, problems)
}

/// The triggers' time zone (`crr.dev/recreate-schedule-timezone`): UTC when not set.
fn time_zone(name: Option<&str>) -> Result<TimeZone, BadAnnotation> {
    match name {
        None | Some("") => Ok(TimeZone::UTC),
        Some(name) => TimeZone::get(name).map_err(|error| BadAnnotation {
            annotation: keys::ANNOTATION_RECREATE_SCHEDULE_TIMEZONE,
            problem: format!("{name:?} is not a known IANA time zone: {error}"),
        }),
    }
}

fn parse_bool(value: &str) -> Result<bool, String> {
    match value.to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(format!("{value:?} is neither \"true\" nor \"false\"")),
    }
}

/// Comma-separated names, blanks dropped; `None` when there are none.
fn names(value: &str) -> Option<Vec<String>> {
    let names: Vec<String> = value
        .split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(str::to_owned)
        .collect();
    (!names.is_empty()).then_some(names)
}

fn reloader_trigger<'a>(
    get: &impl Fn(&str) -> Option<&'a str>,
    problems: &mut Vec<BadAnnotation>,
) -> Option<ConfigChange> {
    let mut only = BTreeSet::new();
    if let Some(list) = get(keys::RELOADER_CONFIGMAPS).and_then(names) {
        only.extend(list.into_iter().map(ConfigRef::config_map));
    }
    if let Some(list) = get(keys::RELOADER_SECRETS).and_then(names) {
        only.extend(list.into_iter().map(ConfigRef::secret));
    }
    if !only.is_empty() {
        return Some(ConfigChange {
            source: Source::Reloader,
            only: Some(only),
        });
    }
    match get(keys::RELOADER_AUTO).map(parse_bool) {
        Some(Ok(true)) => Some(ConfigChange {
            source: Source::Reloader,
            only: None,
        }),
        Some(Ok(false)) | None => None,
        Some(Err(problem)) => {
            problems.push(BadAnnotation {
                annotation: keys::RELOADER_AUTO,
                problem,
            });
            None
        }
    }
}

fn schedule(
    expression: &str,
    time_zone: TimeZone,
    containers: Option<&str>,
) -> Result<Schedule, BadAnnotation> {
    let cron = croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Disallowed)
        .build()
        .parse(expression)
        .map_err(|error| BadAnnotation {
            annotation: keys::ANNOTATION_RECREATE_SCHEDULE,
            problem: format!("{expression:?} is not a cron schedule of five fields: {error}"),
        })?;
    if !fires_on_some_day(&cron) {
        return Err(BadAnnotation {
            annotation: keys::ANNOTATION_RECREATE_SCHEDULE,
            problem: format!(
                "{expression:?} never fires: no month it allows has a day it names (as February 30)"
            ),
        });
    }
    Ok(Schedule {
        expression: expression.to_owned(),
        cron,
        time_zone,
        containers: containers.and_then(names),
    })
}

/// Whether `cron` matches some day. A day of the month no allowed month has (`0 0 30 2 *`,
/// `0 0 31 4,6,9,11 *`) never matches, and a search for its next tick would walk every day up
/// to the year 5000 on each evaluation. The Gregorian calendar's dates and weekdays repeat every
/// 28 years from 1901 to 2099, so the days of 2000 (a leap year) to 2027 include every day a
/// schedule can match: about 10,000 days checked, once, when the annotation is read.
fn fires_on_some_day(cron: &croner::Cron) -> bool {
    let first = jiff::civil::date(2000, 1, 1);
    let weekday = |day: jiff::civil::Date| match day.weekday() {
        jiff::civil::Weekday::Sunday => croner::Weekday::Sunday,
        jiff::civil::Weekday::Monday => croner::Weekday::Monday,
        jiff::civil::Weekday::Tuesday => croner::Weekday::Tuesday,
        jiff::civil::Weekday::Wednesday => croner::Weekday::Wednesday,
        jiff::civil::Weekday::Thursday => croner::Weekday::Thursday,
        jiff::civil::Weekday::Friday => croner::Weekday::Friday,
        jiff::civil::Weekday::Saturday => croner::Weekday::Saturday,
    };
    first
        .series(jiff::Span::new().days(1))
        .take_while(|day| day.year() < 2028)
        .any(|day| {
            let (year, month, date) = (
                i32::from(day.year()),
                u32::try_from(day.month()).unwrap_or_default(),
                u32::try_from(day.day()).unwrap_or_default(),
            );
            cron.pattern.month_match(month).unwrap_or(false)
                && cron
                    .pattern
                    .day_match(year, month, date, weekday(day))
                    .unwrap_or(false)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
            .collect()
    }

    #[test]
    fn the_config_change_annotation_turns_the_trigger_on() {
        let (triggers, problems) = parse(
            &annotations(&[
                (keys::ANNOTATION_RECREATE_ON_CONFIG_CHANGE, "true"),
                (keys::ANNOTATION_RECREATE_MAX_UNAVAILABLE, "25%"),
            ]),
            false,
        );
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(
            triggers.config_change,
            Some(ConfigChange {
                source: Source::Crr,
                only: None
            })
        );
        assert_eq!(triggers.max_unavailable(), Limit::Percent(25));
        assert!(triggers.any());
    }

    #[test]
    fn without_annotations_nothing_is_on_and_max_unavailable_is_one() {
        let (triggers, problems) = parse(&annotations(&[("other", "x")]), true);
        assert!(problems.is_empty());
        assert!(!triggers.any());
        assert_eq!(triggers.max_unavailable(), Limit::Count(1));
    }

    #[test]
    fn bad_values_are_reported_and_turn_only_their_trigger_off() {
        let (triggers, problems) = parse(
            &annotations(&[
                (keys::ANNOTATION_RECREATE_ON_CONFIG_CHANGE, "yes"),
                (keys::ANNOTATION_RECREATE_MAX_UNAVAILABLE, "0"),
                (keys::ANNOTATION_RECREATE_SCHEDULE, "0 3 * * *"),
                (keys::ANNOTATION_RECREATE_SCHEDULE_TIMEZONE, "Mars/Olympus"),
            ]),
            false,
        );
        let annotations: Vec<&str> = problems.iter().map(|problem| problem.annotation).collect();
        assert_eq!(
            annotations,
            [
                keys::ANNOTATION_RECREATE_ON_CONFIG_CHANGE,
                keys::ANNOTATION_RECREATE_MAX_UNAVAILABLE,
                keys::ANNOTATION_RECREATE_SCHEDULE_TIMEZONE,
            ]
        );
        assert!(
            problems[2].to_string().contains("Mars/Olympus"),
            "{}",
            problems[2]
        );
        assert!(!triggers.any());
    }

    #[test]
    fn a_restart_request_is_its_value_with_the_containers() {
        let (triggers, problems) = parse(
            &annotations(&[
                (
                    keys::ANNOTATION_RESTART_REQUESTED_AT,
                    " 2026-11-29T20:00:00Z ",
                ),
                (keys::ANNOTATION_RECREATE_CONTAINERS, "app, sidecar"),
            ]),
            false,
        );
        assert_eq!(problems, []);
        assert_eq!(
            triggers.restart,
            Some(RestartRequest {
                value: "2026-11-29T20:00:00Z".to_owned(),
                containers: Some(vec!["app".to_owned(), "sidecar".to_owned()]),
            })
        );
        assert!(triggers.any());
        let long = "x".repeat(MAX_RESTART_VALUE + 1);
        let (triggers, problems) = parse(
            &annotations(&[(keys::ANNOTATION_RESTART_REQUESTED_AT, &long)]),
            false,
        );
        assert_eq!(triggers.restart, None);
        assert_eq!(problems.len(), 1);
        let (triggers, _) = parse(
            &annotations(&[(keys::ANNOTATION_RESTART_REQUESTED_AT, "")]),
            false,
        );
        assert_eq!(triggers.restart, None, "an empty value asks for nothing");
    }

    #[test]
    fn reloaders_annotations_crr_does_not_read_are_named_when_reloaders_count() {
        let with = annotations(&[
            ("reloader.stakater.com/search", "true"),
            ("secret.reloader.stakater.com/auto", "true"),
            (keys::RELOADER_AUTO, "true"),
        ]);
        assert_eq!(
            reloader_not_read(&with, true),
            [
                "reloader.stakater.com/search",
                "secret.reloader.stakater.com/auto"
            ]
        );
        assert!(reloader_not_read(&with, false).is_empty());
        // A workload with only such an annotation is kept, to be told.
        let alone = annotations(&[("reloader.stakater.com/search", "true")]);
        assert!(has_trigger_annotations(&alone, true));
        assert!(!has_trigger_annotations(&alone, false));
    }

    #[test]
    fn a_window_is_read_in_the_triggers_time_zone() {
        let (triggers, problems) = parse(
            &annotations(&[
                (keys::ANNOTATION_RECREATE_ON_CONFIG_CHANGE, "true"),
                (keys::ANNOTATION_RECREATE_WINDOW, "Mon-Fri 01:00-05:00"),
                (keys::ANNOTATION_RECREATE_SCHEDULE_TIMEZONE, "Europe/Berlin"),
            ]),
            false,
        );
        assert_eq!(problems, []);
        let window = triggers.window.expect("a window");
        assert_eq!(window.to_string(), "Mon-Fri 01:00-05:00 (Europe/Berlin)");
        assert!(triggers.config_change.is_some());
    }

    #[test]
    fn a_window_that_cannot_be_read_turns_both_triggers_off() {
        for (window, zone) in [("weekends", "UTC"), ("Mon 01:00-02:00", "Mars/Olympus")] {
            let (triggers, problems) = parse(
                &annotations(&[
                    (keys::ANNOTATION_RECREATE_ON_CONFIG_CHANGE, "true"),
                    (keys::ANNOTATION_RECREATE_SCHEDULE, "0 3 * * *"),
                    (keys::ANNOTATION_RECREATE_WINDOW, window),
                    (keys::ANNOTATION_RECREATE_SCHEDULE_TIMEZONE, zone),
                ]),
                false,
            );
            assert!(!triggers.any(), "{window} {zone}");
            assert_eq!(problems.len(), 1, "reported once: {problems:?}");
        }
    }

    #[test]
    fn a_schedule_is_five_fields_in_its_time_zone_with_its_containers() {
        let (triggers, problems) = parse(
            &annotations(&[
                (keys::ANNOTATION_RECREATE_SCHEDULE, "0 3 * * 1-5"),
                (keys::ANNOTATION_RECREATE_SCHEDULE_TIMEZONE, "Europe/Berlin"),
                (keys::ANNOTATION_RECREATE_CONTAINERS, "app, sidecar ,"),
            ]),
            false,
        );
        assert!(problems.is_empty(), "{problems:?}");
        let schedule = triggers.schedule.expect("a schedule");
        assert_eq!(schedule.time_zone.iana_name(), Some("Europe/Berlin"));
        assert_eq!(
            schedule.containers,
            Some(vec!["app".to_owned(), "sidecar".to_owned()])
        );
        let (_, problems) = parse(
            &annotations(&[(keys::ANNOTATION_RECREATE_SCHEDULE, "0 0 3 * * *")]),
            false,
        );
        assert_eq!(
            problems.first().map(|problem| problem.annotation),
            Some(keys::ANNOTATION_RECREATE_SCHEDULE),
            "six fields (seconds) are refused"
        );
    }

    #[test]
    fn a_schedule_that_never_fires_is_refused() {
        let problem = |expression: &str| {
            let (triggers, problems) = parse(
                &annotations(&[(keys::ANNOTATION_RECREATE_SCHEDULE, expression)]),
                false,
            );
            assert!(triggers.schedule.is_none() || problems.is_empty());
            problems.first().map(|problem| problem.problem.clone())
        };
        for never in ["0 0 30 2 *", "0 0 31 4,6,9,11 *", "15 3 30-31 2 *"] {
            let problem = problem(never).unwrap_or_else(|| panic!("{never} is refused"));
            assert!(problem.contains("never fires"), "{problem}");
        }
        // Rare is not never: a leap day, the 31st of the months that have it, a day of the
        // month or a weekday (cron's "or" when both are named), the last day of February.
        for rare in [
            "0 0 29 2 *",
            "0 0 31 * *",
            "0 0 30 2 1",
            "0 0 L 2 *",
            "0 0 * * 5#5",
        ] {
            assert_eq!(problem(rare), None, "{rare} fires");
        }
    }

    #[test]
    fn reloader_annotations_count_only_when_honoured() {
        let auto = annotations(&[(keys::RELOADER_AUTO, "true")]);
        assert!(!parse(&auto, false).0.any());
        assert!(!has_trigger_annotations(&auto, false));
        assert!(has_trigger_annotations(&auto, true));
        assert_eq!(
            parse(&auto, true).0.config_change,
            Some(ConfigChange {
                source: Source::Reloader,
                only: None
            })
        );
        let listed = annotations(&[
            (keys::RELOADER_CONFIGMAPS, "a,b"),
            (keys::RELOADER_SECRETS, "tls"),
            (keys::RELOADER_AUTO, "true"),
        ]);
        assert_eq!(
            parse(&listed, true).0.config_change,
            Some(ConfigChange {
                source: Source::Reloader,
                only: Some(BTreeSet::from([
                    ConfigRef::config_map("a"),
                    ConfigRef::config_map("b"),
                    ConfigRef::secret("tls"),
                ])),
            }),
            "explicit lists win over auto, as in Reloader"
        );
    }
}
