//! Signals and the bounded drain.
//!
//! The first SIGTERM or SIGINT asks the process to stop: readiness turns false, servers stop
//! accepting, in-flight work finishes. A second signal exits at once. Draining has a bound
//! ([`drain`]): work that cannot finish (kube-runtime's controller runner never ends when it is
//! stopped before its cache synced) must not hold the process until the kubelet's SIGKILL.

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;

/// Exit status after a second signal (128 + SIGINT, as shells report it).
const SECOND_SIGNAL_EXIT: i32 = 130;

/// Whether shutdown has been asked for; cheap to clone and to wait on from many tasks.
#[derive(Clone, Debug)]
pub struct Shutdown {
    requested: watch::Receiver<bool>,
}

/// Asks a [`Shutdown`] to stop (tests, or a binary that stops for its own reasons).
#[derive(Debug)]
pub struct Trigger(watch::Sender<bool>);

impl Trigger {
    /// Requests shutdown.
    pub fn request(&self) {
        self.0.send_replace(true);
    }
}

impl Shutdown {
    /// A shutdown that only `Trigger::request` (or dropping the trigger) sets off.
    pub fn manual() -> (Trigger, Self) {
        let (sender, requested) = watch::channel(false);
        (Trigger(sender), Self { requested })
    }

    /// A shutdown set off by the first SIGTERM or SIGINT; the second exits the process at once.
    /// Must be called inside a tokio runtime.
    pub fn on_signals() -> Self {
        let (trigger, shutdown) = Self::manual();
        tokio::spawn(async move {
            wait_for_signal().await;
            tracing::info!("signal received: shutting down (a second signal exits at once)");
            trigger.request();
            wait_for_signal().await;
            tracing::warn!("second signal: exiting now");
            std::process::exit(SECOND_SIGNAL_EXIT);
        });
        shutdown
    }

    /// Shutdown has been asked for.
    pub fn is_requested(&self) -> bool {
        *self.requested.borrow()
    }

    /// Resolves once shutdown is asked for (at once if it already was, or if the trigger is
    /// gone).
    pub fn requested(&self) -> impl Future<Output = ()> + Send + Sync + 'static {
        let mut requested = self.requested.clone();
        async move {
            // An error means the trigger is gone, which also means stop.
            let _ = requested.wait_for(|requested| *requested).await;
        }
    }
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut terminate) => {
            tokio::select! {
                _ = terminate.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(error) => {
            tracing::warn!(%error, "cannot listen for SIGTERM; Ctrl+C only");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// How a drain ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Drain {
    /// The work ended by itself.
    Finished,
    /// Stop was requested and the work was still running `limit` later.
    Abandoned,
}

/// Runs `work` until it ends, or until `limit` has passed since `stop_requested` resolved.
pub async fn drain(
    work: impl Future<Output = ()>,
    stop_requested: impl Future<Output = ()>,
    limit: Duration,
) -> Drain {
    let deadline = async {
        stop_requested.await;
        tokio::time::sleep(limit).await;
    };
    tokio::select! {
        () = work => Drain::Finished,
        () = deadline => Drain::Abandoned,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: Duration = Duration::from_millis(50);

    #[tokio::test(start_paused = true)]
    async fn work_that_ends_after_stop_finishes() {
        let work = tokio::time::sleep(Duration::from_millis(10));
        assert_eq!(drain(work, async {}, LIMIT).await, Drain::Finished);
    }

    #[tokio::test(start_paused = true)]
    async fn work_that_never_ends_is_abandoned_a_limit_after_stop() {
        let started = tokio::time::Instant::now();
        let stop = tokio::time::sleep(Duration::from_millis(30));
        let outcome = drain(std::future::pending(), stop, LIMIT).await;
        assert_eq!(outcome, Drain::Abandoned);
        assert_eq!(started.elapsed(), Duration::from_millis(80));
    }

    #[tokio::test(start_paused = true)]
    async fn without_stop_the_work_runs_past_the_limit() {
        let work = tokio::time::sleep(LIMIT * 3);
        let outcome = drain(work, std::future::pending(), LIMIT).await;
        assert_eq!(outcome, Drain::Finished);
    }

    #[tokio::test]
    async fn every_waiter_sees_the_request_even_late_ones() {
        let (trigger, shutdown) = Shutdown::manual();
        let early = tokio::spawn(shutdown.requested());
        assert!(!shutdown.is_requested());
        trigger.request();
        early.await.unwrap();
        assert!(shutdown.is_requested());
        shutdown.requested().await;
    }

    #[tokio::test]
    async fn a_dropped_trigger_means_stop() {
        let (trigger, shutdown) = Shutdown::manual();
        drop(trigger);
        shutdown.requested().await;
    }
}
