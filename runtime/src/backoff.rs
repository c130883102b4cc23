//! Retry delays, per key: exponential from a base, capped, with jitter, so that a failing
//! request is retried soon at first and then ever more rarely, and many failing at once do not
//! retry in step. A success forgets the key's failures.
//!
//! crr's watches back off the same way ([`WatchBackoffExt::watch_backoff`]), with one exception
//! kube's default backoff does not make: a watch answered `410 Gone` lists again at once.

use std::collections::HashMap;
use std::hash::{BuildHasher as _, RandomState};
use std::sync::Mutex;
use std::time::Duration;

/// Keys remembered at most; past it the oldest counts are dropped all at once (a key that fails
/// again starts over from the base delay, which is harmless).
const MAX_KEYS: usize = 50_000;

/// Failure counts per key, and the delays they give.
pub struct Backoff {
    base: Duration,
    cap: Duration,
    failures: Mutex<HashMap<String, u32>>,
    random: RandomState,
}

impl Backoff {
    /// Delays from `base` doubling per failure, never above `cap`.
    pub fn new(base: Duration, cap: Duration) -> Self {
        Self {
            base,
            cap,
            failures: Mutex::default(),
            random: RandomState::new(),
        }
    }

    /// Records a failure of `key`; returns how long to wait before trying it again.
    pub fn failed(&self, key: &str) -> Duration {
        let failures = {
            let mut counts = self
                .failures
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if counts.len() >= MAX_KEYS && !counts.contains_key(key) {
                counts.clear();
            }
            let count = counts.entry(key.to_owned()).or_insert(0);
            *count = count.saturating_add(1);
            *count
        };
        // A fresh random draw per call: RandomState's keys are random per instance and the
        // hash of (key, failures, now) differs each time.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let draw = self.random.hash_one((key, failures, now));
        let jitter = (draw >> 11) as f64 / (1u64 << 53) as f64;
        delay(self.base, self.cap, failures, jitter)
    }

    /// Forgets `key`'s failures: it succeeded, or it is gone.
    pub fn succeeded(&self, key: &str) {
        self.failures
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(key);
    }

    /// How many failures in a row `key` has now.
    pub fn failures(&self, key: &str) -> u32 {
        self.failures
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(key)
            .copied()
            .unwrap_or(0)
    }
}

/// The delay after `failures` failures in a row (1 for the first): `base · 2^(failures-1)`,
/// never above `cap`, of which the upper half is scaled by `jitter` (in `[0, 1)`): between half
/// the exponential delay and all of it.
pub fn delay(base: Duration, cap: Duration, failures: u32, jitter: f64) -> Duration {
    let exponent = failures.saturating_sub(1).min(31);
    let full = base.saturating_mul(1u32 << exponent).min(cap);
    let half = full / 2;
    half + half.mul_f64(jitter.clamp(0.0, 1.0))
}

/// The first delay of a failing watch.
pub const WATCH_BASE: Duration = Duration::from_millis(400);
/// The longest delay of a failing watch. kube's default is 30 s, and it only resets on an event:
/// a watch that failed a few times while the API server restarted stays primed for long
/// delays, and an idle watch sees no event to reset it. After a restart every watch is
/// answered `410 Gone` and must list again; with kube's default the node daemon listed again
/// 6 to 13 s after the API server was back, blind to new requests meanwhile.
pub const WATCH_CAP: Duration = Duration::from_secs(8);

/// Whether a watch error means "list again": the API server no longer has the version the
/// watch resumes from (`410 Gone`, reason `Expired`), as after its restart or a compaction.
/// Nothing is wrong with the server, so waiting helps nothing.
pub fn is_gone(error: &kube::runtime::watcher::Error) -> bool {
    use kube::runtime::watcher::Error;
    match error {
        Error::WatchError(status) => status.code == 410,
        Error::InitialListFailed(kube::Error::Api(status))
        | Error::WatchStartFailed(kube::Error::Api(status))
        | Error::WatchFailed(kube::Error::Api(status)) => status.code == 410,
        _ => false,
    }
}

/// What a watch does after an item: go on at once, or wait this long first.
fn pause_after<T>(
    item: &Result<T, kube::runtime::watcher::Error>,
    backoff: &Backoff,
    gone_before: bool,
) -> (Option<Duration>, bool) {
    const KEY: &str = "watch";
    match item {
        Ok(_) => {
            backoff.succeeded(KEY);
            (None, false)
        }
        // One list at once after a 410; a second 410 in a row waits like any failure.
        Err(error) if is_gone(error) && !gone_before => (None, true),
        Err(_) => (Some(backoff.failed(KEY)), false),
    }
}

/// Backoff for a watch stream (a `watcher`, or a reflector around one), used in place of kube's
/// `default_backoff`.
pub trait WatchBackoffExt<T>:
    futures::Stream<Item = Result<T, kube::runtime::watcher::Error>>
{
    /// After an error, waits [`WATCH_BASE`] doubling up to [`WATCH_CAP`] (jittered) before
    /// polling the watch again; any item resets it. A `410 Gone` lists again at once.
    fn watch_backoff(
        self,
    ) -> impl futures::Stream<Item = Result<T, kube::runtime::watcher::Error>> + Send
    where
        Self: Sized + Send + 'static,
        T: Send + 'static,
    {
        let start = (
            Box::pin(self),
            Backoff::new(WATCH_BASE, WATCH_CAP),
            None,
            false,
        );
        futures::stream::unfold(start, |(mut stream, backoff, pause, gone)| async move {
            if let Some(pause) = pause {
                tokio::time::sleep(pause).await;
            }
            let item = futures::StreamExt::next(&mut stream).await?;
            let (pause, gone) = pause_after(&item, &backoff, gone);
            Some((item, (stream, backoff, pause, gone)))
        })
    }
}

impl<S, T> WatchBackoffExt<T> for S where
    S: futures::Stream<Item = Result<T, kube::runtime::watcher::Error>>
{
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: Duration = Duration::from_millis(500);
    const CAP: Duration = Duration::from_secs(60);

    #[test]
    fn delays_double_from_the_base_and_stop_at_the_cap() {
        let at = |failures, jitter| delay(BASE, CAP, failures, jitter);
        assert_eq!(at(1, 0.0), Duration::from_millis(250));
        assert_eq!(at(1, 1.0), BASE);
        assert_eq!(at(2, 1.0), Duration::from_secs(1));
        assert_eq!(at(4, 1.0), Duration::from_secs(4));
        assert_eq!(at(8, 1.0), CAP, "64 s is over the cap");
        assert_eq!(at(u32::MAX, 1.0), CAP);
        assert_eq!(at(u32::MAX, 0.0), CAP / 2);
        assert_eq!(at(0, 1.0), BASE, "no failure counts as the first");
    }

    #[test]
    fn a_key_backs_off_until_it_succeeds_and_keys_are_counted_apart() {
        let backoff = Backoff::new(BASE, CAP);
        let first = backoff.failed("a");
        assert!((BASE / 2..=BASE).contains(&first), "{first:?}");
        for _ in 0..10 {
            backoff.failed("a");
        }
        let late = backoff.failed("a");
        assert!((CAP / 2..=CAP).contains(&late), "{late:?}");
        assert_eq!(backoff.failures("a"), 12);
        let other = backoff.failed("b");
        assert!(other <= BASE, "{other:?}");
        backoff.succeeded("a");
        assert_eq!(backoff.failures("a"), 0);
        assert!(backoff.failed("a") <= BASE);
    }

    #[test]
    fn jitter_spreads_retries() {
        let backoff = Backoff::new(BASE, CAP);
        let delays: std::collections::BTreeSet<Duration> = (0..20)
            .map(|index| {
                let key = format!("k{index}");
                backoff.failed(&key)
            })
            .collect();
        assert!(
            delays.len() > 10,
            "twenty first retries at {} moments",
            delays.len()
        );
    }

    fn status(code: u16) -> Box<kube::core::Status> {
        let mut status = kube::core::Status::failure("test", "Expired");
        status.code = code;
        status.boxed()
    }

    /// When each item of `items` came out of the backoff, in paused time from the start.
    async fn timed(
        items: Vec<Result<u32, kube::runtime::watcher::Error>>,
    ) -> Vec<(Duration, bool)> {
        use futures::StreamExt as _;
        let start = tokio::time::Instant::now();
        futures::stream::iter(items)
            .watch_backoff()
            .map(|item| (start.elapsed(), item.is_ok()))
            .collect()
            .await
    }

    #[tokio::test(start_paused = true)]
    async fn a_gone_watch_lists_again_at_once_and_a_failing_one_waits_ever_longer() {
        use kube::runtime::watcher::Error;
        let gone = || Error::WatchError(status(410));
        let refused = || Error::WatchStartFailed(kube::Error::Api(status(503)));
        let times = timed(vec![
            Err(refused()),
            Err(refused()),
            Err(refused()),
            Err(gone()),
            Ok(1),
            Err(gone()),
            Err(gone()),
            Ok(2),
        ])
        .await;
        let at: Vec<Duration> = times.iter().map(|(at, _)| *at).collect();
        // Three failures: 0.2-0.4 s, then 0.4-0.8 s, then 0.8-1.6 s before the next poll.
        assert_eq!(at[0], Duration::ZERO);
        let waits: Vec<Duration> = at.windows(2).map(|pair| pair[1] - pair[0]).collect();
        assert!(
            (WATCH_BASE / 2..=WATCH_BASE).contains(&waits[0]),
            "{waits:?}"
        );
        assert!(
            (WATCH_BASE..=WATCH_BASE * 2).contains(&waits[1]),
            "{waits:?}"
        );
        assert!(
            (WATCH_BASE * 2..=WATCH_BASE * 4).contains(&waits[2]),
            "{waits:?}"
        );
        // After the 410 the list comes at once.
        assert_eq!(waits[3], Duration::ZERO, "{waits:?}");
        // An item resets the count: the next 410 lists at once, the one after it waits the
        // first delay, and that is a failure counted from one again.
        assert_eq!(waits[4], Duration::ZERO, "{waits:?}");
        assert_eq!(waits[5], Duration::ZERO, "{waits:?}");
        assert!(
            (WATCH_BASE / 2..=WATCH_BASE).contains(&waits[6]),
            "{waits:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_failing_watch_never_waits_past_the_cap() {
        use kube::runtime::watcher::Error;
        let items = (0..12)
            .map(|_| Err(Error::WatchFailed(kube::Error::Api(status(500)))))
            .collect();
        let times = timed(items).await;
        let last = times[11].0 - times[10].0;
        assert!((WATCH_CAP / 2..=WATCH_CAP).contains(&last), "{last:?}");
    }

    #[test]
    fn only_a_410_means_list_again() {
        use kube::runtime::watcher::Error;
        assert!(is_gone(&Error::WatchError(status(410))));
        assert!(is_gone(&Error::InitialListFailed(kube::Error::Api(
            status(410)
        ))));
        assert!(!is_gone(&Error::WatchError(status(500))));
        assert!(!is_gone(&Error::WatchStartFailed(kube::Error::Api(
            status(403)
        ))));
        assert!(!is_gone(&Error::NoResourceVersion));
    }
}
