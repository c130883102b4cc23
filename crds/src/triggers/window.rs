//! A restart window (`crr.dev/recreate-window`): when a workload's triggers may start rollouts.
//!
//! The value is the days the window starts on and its hours, in the time zone of
//! `crr.dev/recreate-schedule-timezone` (UTC by default):
//!
//! | value | open |
//! |---|---|
//! | `Mon-Fri 01:00-05:00` | 01:00 to 05:00 on weekdays |
//! | `Sat,Sun 00:00-24:00` | all weekend |
//! | `Fri-Sun 22:00-02:00` | from 22:00 on Friday, Saturday and Sunday to 02:00 the next morning |
//! | `02:00-04:00` | 02:00 to 04:00 every day |
//!
//! Days are `Mon` to `Sun` (any case; full names too), single or in ranges (`Fri-Mon` wraps
//! around the week), separated by commas. A window whose end is before its start ends on the
//! next day; it belongs to the day it starts on. The start is included, the end is not.
//! A window gates the start of a rollout only: one that started inside it runs to its end.

use std::collections::BTreeSet;
use std::fmt;

use jiff::Timestamp;
use jiff::civil::{Time, Weekday};
use jiff::tz::TimeZone;

/// A restart window.
#[derive(Clone, Debug)]
pub struct Window {
    /// The value as written.
    pub expression: String,
    /// The days it starts on.
    days: BTreeSet<u8>,
    /// Minutes after midnight it opens.
    start: u16,
    /// Minutes after midnight it closes (up to 24 * 60); before `start`: on the next day.
    end: u16,
    /// Its time zone.
    pub time_zone: TimeZone,
}

impl PartialEq for Window {
    fn eq(&self, other: &Self) -> bool {
        self.expression == other.expression
            && self.time_zone.iana_name() == other.time_zone.iana_name()
    }
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({})",
            self.expression,
            self.time_zone.iana_name().unwrap_or("UTC")
        )
    }
}

const DAY_NAMES: [&str; 7] = [
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
];

/// Monday is 0.
fn day_number(name: &str) -> Result<u8, String> {
    let lower = name.to_ascii_lowercase();
    DAY_NAMES
        .iter()
        .position(|day| lower.len() >= 3 && day.starts_with(&lower))
        .and_then(|index| u8::try_from(index).ok())
        .ok_or_else(|| format!("{name:?} is not a day (Mon to Sun)"))
}

fn weekday_number(day: Weekday) -> u8 {
    u8::try_from(day.to_monday_zero_offset()).unwrap_or_default()
}

/// `HH:MM` as minutes after midnight; `24:00` only when `end`.
fn minutes(text: &str, end: bool) -> Result<u16, String> {
    let bad = || format!("{text:?} is not a time of day (HH:MM)");
    let (hours, mins) = text.split_once(':').ok_or_else(bad)?;
    if hours.is_empty() || hours.len() > 2 || mins.len() != 2 {
        return Err(bad());
    }
    let hours: u16 = hours.parse().map_err(|_| bad())?;
    let mins: u16 = mins.parse().map_err(|_| bad())?;
    if mins >= 60 || hours > 24 || (hours == 24 && (mins != 0 || !end)) {
        return Err(bad());
    }
    Ok(hours * 60 + mins)
}

impl Window {
    /// Reads a window in `time_zone`.
    pub fn parse(value: &str, time_zone: TimeZone) -> Result<Self, String> {
        let value = value.trim();
        let (days_text, hours_text) = match value.rsplit_once(char::is_whitespace) {
            Some((days, hours)) => (Some(days.trim()), hours),
            None => (None, value),
        };
        let days = match days_text {
            None => (0..7).collect(),
            Some(text) => {
                let mut days = BTreeSet::new();
                for item in text.split(',').map(str::trim) {
                    match item.split_once('-') {
                        Some((from, to)) => {
                            let (from, to) = (day_number(from.trim())?, day_number(to.trim())?);
                            let mut day = from;
                            days.insert(day);
                            while day != to {
                                day = (day + 1) % 7;
                                days.insert(day);
                            }
                        }
                        None => {
                            days.insert(day_number(item)?);
                        }
                    }
                }
                days
            }
        };
        let not_a_window =
            || format!("{value:?} is not a window: days and hours, as \"Mon-Fri 01:00-05:00\"");
        if !hours_text.contains(':') {
            return Err(not_a_window());
        }
        let (start, end) = hours_text.split_once('-').ok_or_else(not_a_window)?;
        let (start, end) = (minutes(start, false)?, minutes(end, true)?);
        if start == end {
            return Err(format!("{value:?} opens and closes at the same time"));
        }
        Ok(Self {
            expression: value.to_owned(),
            days,
            start,
            end,
            time_zone,
        })
    }

    /// How long the window stays open once it opens, in minutes.
    fn length(&self) -> i64 {
        let (start, end) = (i64::from(self.start), i64::from(self.end));
        if end > start {
            end - start
        } else {
            end + 24 * 60 - start
        }
    }

    /// When the window that starts on `date` (a day it starts on) opens. A time the clocks skip
    /// (a change to summer time) opens at the first instant after it.
    fn opening(&self, date: jiff::civil::Date) -> Option<Timestamp> {
        let time = Time::new(
            i8::try_from(self.start / 60).ok()?,
            i8::try_from(self.start % 60).ok()?,
            0,
            0,
        )
        .ok()?;
        date.to_datetime(time)
            .to_zoned(self.time_zone.clone())
            .ok()
            .map(|zoned| zoned.timestamp())
    }

    /// The windows that open from the day before `now`'s to a week after it, in order.
    fn openings_around(&self, now: Timestamp) -> impl Iterator<Item = Timestamp> + '_ {
        let today = now.to_zoned(self.time_zone.clone()).date();
        (-1..=7)
            .filter_map(move |offset| today.checked_add(jiff::Span::new().days(offset)).ok())
            .filter(|date| self.days.contains(&weekday_number(date.weekday())))
            .filter_map(|date| self.opening(date))
    }

    /// Whether the window is open at `now`.
    pub fn is_open(&self, now: Timestamp) -> bool {
        let length = jiff::SignedDuration::from_mins(self.length());
        self.openings_around(now)
            .any(|opens| opens <= now && now < opens + length)
    }

    /// `now` when the window is open; else when it next opens (within a week, always, as it
    /// opens on at least one day of the week).
    pub fn next_open(&self, now: Timestamp) -> Option<Timestamp> {
        if self.is_open(now) {
            return Some(now);
        }
        self.openings_around(now).find(|opens| *opens > now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(text: &str) -> Window {
        Window::parse(text, TimeZone::UTC).expect("a window")
    }

    /// 2026-11-30 is a Monday.
    fn at(text: &str) -> Timestamp {
        text.parse().expect("a timestamp")
    }

    #[test]
    fn weekdays_at_night_are_open_only_then() {
        let window = utc("Mon-Fri 01:00-05:00");
        assert!(
            window.is_open(at("2026-11-30T01:00:00Z")),
            "the start is in"
        );
        assert!(window.is_open(at("2026-11-30T04:59:59Z")));
        assert!(
            !window.is_open(at("2026-11-30T05:00:00Z")),
            "the end is out"
        );
        assert!(!window.is_open(at("2026-11-29T02:00:00Z")), "a Sunday");
        assert_eq!(
            window.next_open(at("2026-11-30T05:00:00Z")),
            Some(at("2026-12-01T01:00:00Z"))
        );
        // From Friday's close to Monday's open.
        assert_eq!(
            window.next_open(at("2026-12-04T06:00:00Z")),
            Some(at("2026-12-07T01:00:00Z"))
        );
        assert_eq!(
            window.next_open(at("2026-11-30T03:00:00Z")),
            Some(at("2026-11-30T03:00:00Z")),
            "open now"
        );
    }

    #[test]
    fn a_window_past_midnight_belongs_to_the_day_it_starts() {
        let window = utc("Fri-Sun 22:00-02:00");
        assert!(window.is_open(at("2026-12-04T23:00:00Z")), "Friday night");
        assert!(
            window.is_open(at("2026-12-05T01:00:00Z")),
            "Saturday morning"
        );
        assert!(
            window.is_open(at("2026-12-07T01:59:00Z")),
            "Monday morning, from Sunday"
        );
        assert!(
            !window.is_open(at("2026-12-04T01:00:00Z")),
            "Friday morning: Thursday has none"
        );
        assert_eq!(
            window.next_open(at("2026-12-07T02:00:00Z")),
            Some(at("2026-12-11T22:00:00Z"))
        );
    }

    #[test]
    fn days_read_in_any_case_in_lists_and_wrapping_ranges() {
        let window = utc("sat, Sunday 00:00-24:00");
        assert!(window.is_open(at("2026-12-05T00:00:00Z")));
        assert!(window.is_open(at("2026-12-06T23:59:59Z")));
        assert!(!window.is_open(at("2026-12-07T00:00:00Z")));
        let wrapping = utc("Sat-Mon 10:00-11:00");
        assert!(wrapping.is_open(at("2026-11-30T10:30:00Z")), "Monday");
        assert!(!wrapping.is_open(at("2026-12-01T10:30:00Z")), "Tuesday");
        let daily = utc("02:00-04:00");
        assert!(daily.is_open(at("2026-12-02T03:00:00Z")));
    }

    #[test]
    fn hours_follow_the_time_zone_and_its_summer_time() {
        let berlin = TimeZone::get("Europe/Berlin").expect("tzdb");
        let window = Window::parse("Mon-Fri 01:00-05:00", berlin).expect("a window");
        // Winter: UTC+1.
        assert!(window.is_open(at("2026-11-30T00:30:00Z")));
        assert!(!window.is_open(at("2026-11-30T04:30:00Z")));
        // Summer: UTC+2.
        assert!(
            window.is_open(at("2026-06-01T23:30:00Z")),
            "Tuesday 01:30 there"
        );
        assert_eq!(window.to_string(), "Mon-Fri 01:00-05:00 (Europe/Berlin)");
    }

    #[test]
    fn what_is_not_a_window_says_why() {
        for (value, why) in [
            ("Mon-Fri", "is not a window"),
            ("Funday 01:00-02:00", "is not a day"),
            ("Mon 1:00-25:00", "is not a time of day"),
            ("Mon 24:00-02:00", "is not a time of day"),
            ("Mon 01:60-02:00", "is not a time of day"),
            ("Mon 03:00-03:00", "opens and closes at the same time"),
            ("Mo 01:00-02:00", "is not a day"),
        ] {
            let error = Window::parse(value, TimeZone::UTC).expect_err(value);
            assert!(error.contains(why), "{value}: {error}");
        }
    }
}
