//! Graceful shutdown with a bound.
//!
//! kube-runtime's controller runner never ends when it is told to shut down before its cache has
//! synced: it holds its tasks until the cache is ready, and the watch that would make it ready
//! is the first thing shutdown stops. Nothing can be in flight then, yet waiting for the drain
//! would hang until the kubelet's SIGKILL, without ever releasing the Lease. So the drain gets a
//! bound; reconciles are idempotent and level-triggered, and the next leader redoes whatever
//! one cut short.

use std::future::Future;
use std::time::Duration;

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
    use std::time::Instant;

    const LIMIT: Duration = Duration::from_millis(50);

    #[tokio::test]
    async fn work_that_ends_after_stop_finishes() {
        let work = tokio::time::sleep(Duration::from_millis(10));
        assert_eq!(drain(work, async {}, LIMIT).await, Drain::Finished);
    }

    #[tokio::test]
    async fn work_that_never_ends_is_abandoned_a_limit_after_stop() {
        let started = Instant::now();
        let stop = tokio::time::sleep(Duration::from_millis(30));
        let outcome = drain(std::future::pending(), stop, LIMIT).await;
        assert_eq!(outcome, Drain::Abandoned);
        assert!(started.elapsed() >= Duration::from_millis(80));
    }

    #[tokio::test]
    async fn without_stop_the_work_runs_past_the_limit() {
        let work = tokio::time::sleep(LIMIT * 3);
        let outcome = drain(work, std::future::pending(), LIMIT).await;
        assert_eq!(outcome, Drain::Finished);
    }
}
