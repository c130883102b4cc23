//! Watching the runtime's socket: the daemon mounts the CRI socket alone (a `type: Socket`
//! hostPath), and a runtime that restarts (containerd does, in place) unlinks that socket and
//! binds a new one. The bind mount keeps the old inode, so every later connection is refused
//! although the runtime is back. Only a new container gets the new socket: when the runtime has
//! been unreachable for longer than a runtime restart takes, the daemon exits and the kubelet
//! starts it again with the socket as it is now. Work in flight is safe across that exit: the
//! next daemon finds the container the request's `statusContext` names stopped or replaced
//! (`recreate::container_states`), so it never kills the replacement.
//!
//! [`SocketHealth`] decides (pure, in `Instant`s); [`watch`] asks the runtime its version every
//! `PROBE_INTERVAL` and returns when it gives up.

use std::time::{Duration, Instant};

use crate::cri::Runtime;

/// How often the runtime is asked.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(2);

/// What one probe's answer means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Reachable,
    /// Unreachable since this long ago (the first failed probe), within the budget.
    Unreachable(Duration),
    /// Unreachable for longer than the budget: exit so the socket is mounted again.
    GiveUp(Duration),
}

/// The runtime's reachability over time, measured on the monotonic clock.
#[derive(Debug, Clone)]
pub struct SocketHealth {
    budget: Duration,
    down_since: Option<Instant>,
}

impl SocketHealth {
    pub fn new(budget: Duration) -> Self {
        Self {
            budget,
            down_since: None,
        }
    }

    /// Records one probe's answer at `now`.
    pub fn observe(&mut self, reachable: bool, now: Instant) -> Verdict {
        if reachable {
            self.down_since = None;
            return Verdict::Reachable;
        }
        let since = *self.down_since.get_or_insert(now);
        let down = now.saturating_duration_since(since);
        if down >= self.budget {
            Verdict::GiveUp(down)
        } else {
            Verdict::Unreachable(down)
        }
    }
}

/// Probes until the runtime has been unreachable for `budget`; returns how long it was down.
/// `on_change(reachable)` is told each time reachability flips (for `/readyz`).
pub async fn watch(runtime: Runtime, budget: Duration, on_change: impl Fn(bool)) -> Duration {
    let mut health = SocketHealth::new(budget);
    let mut was_reachable = true;
    let mut ticks = tokio::time::interval(PROBE_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let answer = runtime.version_probe(PROBE_INTERVAL).await;
        let reachable = answer.is_ok();
        if reachable != was_reachable {
            match &answer {
                Ok(()) => tracing::info!("the container runtime answers again"),
                Err(error) => {
                    tracing::warn!(%error, budget_seconds = budget.as_secs(), "the container runtime does not answer; the daemon exits if this lasts")
                }
            }
            on_change(reachable);
            was_reachable = reachable;
        }
        if let Verdict::GiveUp(down) = health.observe(reachable, Instant::now()) {
            return down;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gives_up_only_after_the_budget_of_continuous_failure() {
        let start = Instant::now();
        let at = |seconds: u64| start + Duration::from_secs(seconds);
        let mut health = SocketHealth::new(Duration::from_secs(20));
        assert_eq!(health.observe(true, at(0)), Verdict::Reachable);
        assert_eq!(
            health.observe(false, at(2)),
            Verdict::Unreachable(Duration::ZERO)
        );
        assert_eq!(
            health.observe(false, at(12)),
            Verdict::Unreachable(Duration::from_secs(10))
        );
        // One answer in between starts the count again: a runtime restart of a few seconds
        // never makes the daemon exit.
        assert_eq!(health.observe(true, at(14)), Verdict::Reachable);
        assert_eq!(
            health.observe(false, at(16)),
            Verdict::Unreachable(Duration::ZERO)
        );
        assert_eq!(
            health.observe(false, at(35)),
            Verdict::Unreachable(Duration::from_secs(19))
        );
        assert_eq!(
            health.observe(false, at(36)),
            Verdict::GiveUp(Duration::from_secs(20))
        );
    }

    #[tokio::test]
    async fn watch_returns_when_the_socket_stays_dead_and_not_while_it_answers() {
        let fake = crate::fake_runtime::FakeRuntime::with_containers(&["app"]);
        let runtime = fake.serve().await;
        let flips = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let recorded = flips.clone();
        let watching = tokio::spawn(watch(runtime, Duration::from_secs(3), move |reachable| {
            recorded.lock().expect("lock").push(reachable)
        }));
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(!watching.is_finished(), "a reachable runtime is watched on");
        fake.lock().away = true;
        let down = tokio::time::timeout(Duration::from_secs(20), watching)
            .await
            .expect("gives up within its budget and a few probes")
            .expect("task");
        assert!(down >= Duration::from_secs(3), "{down:?}");
        assert_eq!(*flips.lock().expect("lock"), vec![false]);
    }
}
