//! Showing progress while following requests: a live display redrawn in place on a terminal,
//! plain lines (one per change) otherwise. Both are fed the same calls by the watch loop with
//! the time elapsed since the command started, so they are tested by feeding them values.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use crr_crds::v1beta1::Phase;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::progress::{Outcome, RequestProgress};

/// Receives what the watch loop sees.
pub trait Reporter {
    /// A request was seen (created or changed).
    fn request(&mut self, progress: &RequestProgress, now: Duration);
    /// Something worth a line of its own (a created request, a skipped pod, a failure).
    fn note(&mut self, message: &str, now: Duration);
    /// Time passed (for spinners and elapsed times); nothing changed.
    fn tick(&mut self, _now: Duration) {}
    /// Following is over.
    fn finish(&mut self, _now: Duration) {}
}

/// A reporter that shows nothing (for callers that only want the final report).
#[derive(Debug, Default)]
pub struct Silent;

impl Reporter for Silent {
    fn request(&mut self, _: &RequestProgress, _: Duration) {}
    fn note(&mut self, _: &str, _: Duration) {}
}

/// `5s`, `1m05s`, `1h02m`.
pub fn format_elapsed(elapsed: Duration) -> String {
    let seconds = elapsed.as_secs();
    match seconds {
        0..60 => format!("{seconds}s"),
        60..3600 => format!("{}m{:02}s", seconds / 60, seconds % 60),
        _ => format!("{}h{:02}m", seconds / 3600, seconds % 3600 / 60),
    }
}

fn outcome_text(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Running => "running".to_owned(),
        Outcome::Succeeded => "succeeded".to_owned(),
        Outcome::Failed(reason) => format!("failed: {reason}"),
    }
}

fn restarts_text(restarts: Option<i32>) -> String {
    restarts.map_or_else(|| "-".to_owned(), |count| count.to_string())
}

/// Per request: when it was first seen and when each container reached a final phase.
#[derive(Debug, Clone)]
struct Timing {
    started: Duration,
    finished: BTreeMap<String, Duration>,
}

impl Timing {
    fn update(&mut self, progress: &RequestProgress, now: Duration) {
        for container in &progress.containers {
            let final_phase = matches!(container.phase, Phase::Succeeded | Phase::Failed)
                || progress.outcome.is_finished();
            if final_phase {
                self.finished.entry(container.name.clone()).or_insert(now);
            }
        }
    }

    fn elapsed(&self, container: &str, now: Duration) -> Duration {
        self.finished
            .get(container)
            .copied()
            .unwrap_or(now)
            .saturating_sub(self.started)
    }
}

/// What a line was last written for, per (request, container): phase, restarts, message, the
/// kubelet's waiting reason.
type Shown = BTreeMap<(String, String), (Phase, Option<i32>, Option<String>, Option<String>)>;

/// The kubelet's waiting reason as a line ends with it: `  [kubelet: CrashLoopBackOff, ...]`.
fn waiting_text(waiting: Option<&str>) -> String {
    waiting
        .map(|waiting| format!("  [kubelet: {waiting}]"))
        .unwrap_or_default()
}

/// Plain lines, one per change: for logs, CI and pipes.
pub struct LineReporter<W: Write> {
    out: W,
    seen: Shown,
    outcomes: BTreeMap<String, Outcome>,
    timings: BTreeMap<String, Timing>,
}

impl<W: Write> LineReporter<W> {
    pub fn new(out: W) -> Self {
        Self {
            out,
            seen: BTreeMap::new(),
            outcomes: BTreeMap::new(),
            timings: BTreeMap::new(),
        }
    }

    /// The writer back (tests read what was written).
    pub fn into_inner(self) -> W {
        self.out
    }
}

impl<W: Write> Reporter for LineReporter<W> {
    fn request(&mut self, progress: &RequestProgress, now: Duration) {
        let timing = self
            .timings
            .entry(progress.name.clone())
            .or_insert_with(|| Timing {
                started: now,
                finished: BTreeMap::new(),
            });
        timing.update(progress, now);
        for container in &progress.containers {
            let key = (progress.name.clone(), container.name.clone());
            let value = (
                container.phase,
                container.restarts,
                container.message.clone(),
                container.waiting.clone(),
            );
            if self.seen.get(&key) == Some(&value) {
                continue;
            }
            let message = container
                .message
                .as_deref()
                .map(|message| format!(" ({message})"))
                .unwrap_or_default();
            let _ = writeln!(
                self.out,
                "{}/{} {}: {}{message}, restarts {}, {}{}",
                progress.pod,
                container.name,
                progress.name,
                container.phase.as_str(),
                restarts_text(container.restarts),
                format_elapsed(timing.elapsed(&container.name, now)),
                waiting_text(container.waiting.as_deref()),
            );
            self.seen.insert(key, value);
        }
        if progress.outcome.is_finished()
            && self.outcomes.get(&progress.name) != Some(&progress.outcome)
        {
            let _ = writeln!(
                self.out,
                "{} (pod {}) {} after {}",
                progress.name,
                progress.pod,
                outcome_text(&progress.outcome),
                format_elapsed(now.saturating_sub(timing.started)),
            );
            self.outcomes
                .insert(progress.name.clone(), progress.outcome.clone());
        }
    }

    fn note(&mut self, message: &str, _now: Duration) {
        let _ = writeln!(self.out, "{message}");
    }

    fn finish(&mut self, _now: Duration) {
        let _ = self.out.flush();
    }
}

const SPINNER: [&str; 4] = ["|", "/", "-", "\\"];

/// A live display redrawn in place: one line per container of each request. indicatif draws it:
/// it knows the terminal's width, so a line longer than the terminal (a long message) is redrawn
/// over every row it wrapped to, and notes are printed above the live area.
pub struct TerminalReporter {
    bar: ProgressBar,
    requests: Vec<(RequestProgress, Timing)>,
}

impl TerminalReporter {
    /// Draws on `target`: `ProgressDrawTarget::stdout()` for the terminal, an in-memory one in
    /// tests.
    pub fn new(target: ProgressDrawTarget) -> Self {
        let bar = ProgressBar::with_draw_target(None, target);
        bar.set_style(ProgressStyle::with_template("{msg}").expect("a fixed template"));
        Self {
            bar,
            requests: Vec::new(),
        }
    }

    /// The lines of the live area at `now`.
    pub fn frame(&self, now: Duration) -> Vec<String> {
        let spinner = SPINNER[(now.as_millis() / 250) as usize % SPINNER.len()];
        let width = self
            .requests
            .iter()
            .flat_map(|(progress, _)| {
                progress
                    .containers
                    .iter()
                    .map(|container| progress.pod.len() + 1 + container.name.len())
            })
            .max()
            .unwrap_or(0);
        let mut lines = Vec::new();
        for (progress, timing) in &self.requests {
            for container in &progress.containers {
                let symbol = match container.phase {
                    Phase::Succeeded => "✓",
                    Phase::Failed => "✗",
                    _ if progress.outcome.is_finished() => "✗",
                    Phase::Recreating => spinner,
                    _ => "·",
                };
                let target = format!("{}/{}", progress.pod, container.name);
                let message = container
                    .message
                    .as_deref()
                    .map(|message| format!("  {message}"))
                    .unwrap_or_default();
                lines.push(format!(
                    "{symbol} {target:<width$}  {:<10}  restarts {:<3}  {:>6}{message}{}",
                    container.phase.as_str(),
                    restarts_text(container.restarts),
                    format_elapsed(timing.elapsed(&container.name, now)),
                    waiting_text(container.waiting.as_deref()),
                ));
            }
            if let Outcome::Failed(reason) = &progress.outcome {
                lines.push(format!("  {} failed: {reason}", progress.name));
            }
        }
        lines
    }

    fn redraw(&mut self, now: Duration) {
        self.bar.set_message(self.frame(now).join("\n"));
    }
}

impl Reporter for TerminalReporter {
    fn request(&mut self, progress: &RequestProgress, now: Duration) {
        match self
            .requests
            .iter_mut()
            .find(|(known, _)| known.name == progress.name)
        {
            Some((known, timing)) => {
                timing.update(progress, now);
                *known = progress.clone();
            }
            None => {
                let mut timing = Timing {
                    started: now,
                    finished: BTreeMap::new(),
                };
                timing.update(progress, now);
                self.requests.push((progress.clone(), timing));
            }
        }
        self.redraw(now);
    }

    fn note(&mut self, message: &str, _now: Duration) {
        // Above the live area, which is drawn again below it.
        self.bar.println(message);
    }

    fn tick(&mut self, now: Duration) {
        if !self.requests.is_empty() {
            self.redraw(now);
        }
    }

    fn finish(&mut self, now: Duration) {
        self.redraw(now);
        self.bar.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::progress::ContainerProgress;

    fn request(phase: Phase, outcome: Outcome, restarts: i32) -> RequestProgress {
        RequestProgress {
            namespace: "prod".to_owned(),
            name: "web-0-x1".to_owned(),
            pod: "web-0".to_owned(),
            phase: Some(Phase::Recreating),
            containers: vec![ContainerProgress {
                name: "app".to_owned(),
                phase,
                restarts: Some(restarts),
                message: None,
                waiting: None,
            }],
            outcome,
        }
    }

    fn secs(seconds: u64) -> Duration {
        Duration::from_secs(seconds)
    }

    #[test]
    fn elapsed_reads_like_kubectl() {
        assert_eq!(format_elapsed(secs(5)), "5s");
        assert_eq!(format_elapsed(secs(65)), "1m05s");
        assert_eq!(format_elapsed(secs(3720)), "1h02m");
    }

    #[test]
    fn lines_are_written_only_on_change() {
        let mut reporter = LineReporter::new(Vec::new());
        reporter.request(&request(Phase::Pending, Outcome::Running, 0), secs(1));
        reporter.request(&request(Phase::Pending, Outcome::Running, 0), secs(2));
        reporter.request(&request(Phase::Recreating, Outcome::Running, 0), secs(3));
        reporter.request(&request(Phase::Succeeded, Outcome::Running, 1), secs(5));
        reporter.request(&request(Phase::Succeeded, Outcome::Succeeded, 1), secs(6));
        reporter.request(&request(Phase::Succeeded, Outcome::Succeeded, 1), secs(7));
        let text = String::from_utf8(reporter.into_inner()).unwrap();
        assert_eq!(
            text,
            "web-0/app web-0-x1: Pending, restarts 0, 0s\n\
             web-0/app web-0-x1: Recreating, restarts 0, 2s\n\
             web-0/app web-0-x1: Succeeded, restarts 1, 4s\n\
             web-0-x1 (pod web-0) succeeded after 5s\n"
        );
    }

    #[test]
    fn the_kubelets_waiting_reason_ends_the_line_and_its_change_is_a_new_line() {
        let mut reporter = LineReporter::new(Vec::new());
        let mut backing_off = request(Phase::Recreating, Outcome::Running, 3);
        backing_off.containers[0].waiting = Some("CrashLoopBackOff, back-off 40s".to_owned());
        reporter.request(&request(Phase::Recreating, Outcome::Running, 3), secs(1));
        reporter.request(&backing_off, secs(2));
        let mut terminal = TerminalReporter::new(ProgressDrawTarget::hidden());
        terminal.request(&backing_off, secs(2));
        let text = String::from_utf8(reporter.into_inner()).unwrap();
        assert_eq!(
            text,
            "web-0/app web-0-x1: Recreating, restarts 3, 0s\n\
             web-0/app web-0-x1: Recreating, restarts 3, 1s  [kubelet: CrashLoopBackOff, back-off 40s]\n"
        );
        let frame = terminal.frame(secs(3));
        assert!(
            frame[0].ends_with("1s  [kubelet: CrashLoopBackOff, back-off 40s]"),
            "{frame:?}"
        );
    }

    #[test]
    fn failure_line_carries_the_reason() {
        let mut reporter = LineReporter::new(Vec::new());
        reporter.request(
            &request(Phase::Failed, Outcome::Failed("pod has gone".to_owned()), 0),
            secs(0),
        );
        let text = String::from_utf8(reporter.into_inner()).unwrap();
        assert!(
            text.ends_with("web-0-x1 (pod web-0) failed: pod has gone after 0s\n"),
            "{text}"
        );
    }

    #[test]
    fn terminal_frame_has_a_line_per_container_with_frozen_elapsed_once_done() {
        let mut reporter = TerminalReporter::new(ProgressDrawTarget::hidden());
        reporter.request(&request(Phase::Recreating, Outcome::Running, 0), secs(1));
        let frame = reporter.frame(secs(4));
        assert_eq!(frame.len(), 1);
        assert!(
            frame[0].contains("web-0/app  Recreating  restarts 0"),
            "{frame:?}"
        );
        assert!(frame[0].ends_with("3s"), "{frame:?}");
        reporter.request(&request(Phase::Succeeded, Outcome::Succeeded, 1), secs(6));
        let frame = reporter.frame(secs(60));
        assert!(frame[0].starts_with("✓ web-0/app  Succeeded"), "{frame:?}");
        assert!(
            frame[0].ends_with("5s"),
            "elapsed stops when done: {frame:?}"
        );
    }

    /// Drawn into an 80-column terminal: a message longer than a row wraps, and the next frame
    /// (a shorter message) leaves no row of the longer one behind; notes stay above.
    #[test]
    fn terminal_redraws_wrapped_rows_without_leaving_any_behind() {
        let term = indicatif::InMemoryTerm::new(20, 80);
        let mut reporter = TerminalReporter::new(ProgressDrawTarget::term_like_with_hz(
            Box::new(term.clone()),
            250,
        ));
        let mut long = request(Phase::Recreating, Outcome::Running, 0);
        long.containers[0].message =
            Some(format!("stopping: {}", "preStop hook output ".repeat(8)));
        reporter.note("containerrecreaterequest/web-0-x1 created", secs(0));
        reporter.request(&long, secs(0));
        std::thread::sleep(Duration::from_millis(5));
        assert!(term.contents().lines().count() >= 3, "{}", term.contents());
        reporter.request(&request(Phase::Succeeded, Outcome::Succeeded, 1), secs(3));
        reporter.finish(secs(3));
        let screen = term.contents();
        let rows: Vec<&str> = screen
            .lines()
            .filter(|row| !row.trim().is_empty())
            .collect();
        assert_eq!(
            rows.len(),
            2,
            "the note and one row for the container: {screen}"
        );
        assert_eq!(rows[0], "containerrecreaterequest/web-0-x1 created");
        assert!(rows[1].starts_with("✓ web-0/app  Succeeded"), "{screen}");
        assert!(!screen.contains("preStop"), "a stale row is left: {screen}");
    }
}
