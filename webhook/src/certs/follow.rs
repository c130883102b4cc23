//! One cluster object by name, kept current by a watch (`metadata.name` field selector, which
//! RBAC's `resourceNames` allows): what the certificate upkeep reads instead of a GET of each of
//! its objects on every pass. Only a projection of the object is kept (a webhook
//! configuration's client configs, the CRD's conversion client config), never the whole object.
//!
//! While the watch has not listed the object, or after it failed (an older install whose RBAC
//! grants `get` alone, the API server restarting), the object is [`Seen::Unknown`] and the
//! upkeep reads it by GET, as it did before: the watch saves requests, it is never needed.

use std::sync::Arc;

use crr_runtime::backoff::WatchBackoffExt as _;
use futures::StreamExt;
use kube::api::Api;
use kube::runtime::watcher as watch_stream;
use kube::runtime::watcher::{self, Event};
use serde::de::DeserializeOwned;
use tokio::sync::{Notify, watch};

/// What the watch has shown of the object.
#[derive(Clone, Debug, PartialEq)]
pub enum Seen<P> {
    /// Not listed yet, or the watch failed since: read it another way.
    Unknown,
    /// It does not exist.
    Absent,
    /// It exists; its projection.
    Present(P),
}

/// What a watch's events have shown, and the list in progress (pure: fed one event at a time).
#[derive(Debug)]
pub struct Tracking<P> {
    seen: Seen<P>,
    /// During a (re)list: what it has shown so far.
    listing: Option<Option<P>>,
}

impl<P> Default for Tracking<P> {
    fn default() -> Self {
        Self {
            seen: Seen::Unknown,
            listing: None,
        }
    }
}

impl<P: PartialEq> Tracking<P> {
    /// Takes one event of the watch (`Err`: it failed); whether what is seen changed.
    pub fn take<K>(
        &mut self,
        event: Result<Event<K>, watcher::Error>,
        project: impl Fn(K) -> P,
    ) -> bool {
        let next = match event {
            Ok(Event::Init) => {
                self.listing = Some(None);
                return false;
            }
            Ok(Event::InitApply(object)) => {
                self.listing = Some(Some(project(object)));
                return false;
            }
            Ok(Event::InitDone) => match self.listing.take() {
                Some(Some(projection)) => Seen::Present(projection),
                Some(None) | None => Seen::Absent,
            },
            Ok(Event::Apply(object)) => Seen::Present(project(object)),
            Ok(Event::Delete(_)) => Seen::Absent,
            Err(_) => {
                self.listing = None;
                Seen::Unknown
            }
        };
        let changed = next != self.seen;
        self.seen = next;
        changed
    }

    /// What is seen now.
    pub fn seen(&self) -> &Seen<P> {
        &self.seen
    }
}

/// The projection of one object, kept current by its watch's task.
#[derive(Clone, Debug)]
pub struct Followed<P> {
    current: watch::Receiver<Seen<P>>,
}

impl<P: Clone> Followed<P> {
    /// What is seen now.
    pub fn current(&self) -> Seen<P> {
        self.current.borrow().clone()
    }

    /// The projection of `name`: the watch's if it is current, else by GET.
    pub async fn or_get<K>(
        followed: Option<&Self>,
        api: &Api<K>,
        name: &str,
        project: impl Fn(K) -> P,
    ) -> Result<Option<P>, kube::Error>
    where
        K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug,
    {
        match followed.map(Self::current) {
            Some(Seen::Present(projection)) => Ok(Some(projection)),
            Some(Seen::Absent) => Ok(None),
            Some(Seen::Unknown) | None => Ok(api.get_opt(name).await?.map(project)),
        }
    }
}

/// Watches the object `name` of `api` for as long as the process runs, keeping `project` of it;
/// `changes` is notified whenever what is seen changes.
pub fn follow<K, P>(
    api: Api<K>,
    name: &str,
    project: fn(K) -> P,
    changes: Arc<Notify>,
) -> Followed<P>
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
    K::DynamicType: Default,
    P: Clone + PartialEq + Send + Sync + 'static,
{
    let (sender, current) = watch::channel(Seen::Unknown);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let what = format!("{} {name}", K::kind(&K::DynamicType::default()));
    let stream = watch_stream(api, config).watch_backoff();
    tokio::spawn(async move {
        let mut tracking = Tracking::default();
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            if let Err(error) = &event {
                tracing::warn!(%error, object = %what, "watching a certificate upkeep object; reading it by GET until the watch recovers");
            }
            if tracking.take(event, project) {
                sender.send_replace(tracking.seen().clone());
                changes.notify_one();
            }
        }
    });
    Followed { current }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn take(tracking: &mut Tracking<u32>, event: Event<u32>) -> bool {
        tracking.take(Ok(event), |value| value)
    }

    /// A tracking whose watch has listed `value`.
    fn listed(value: u32) -> Tracking<u32> {
        let mut tracking = Tracking::default();
        take(&mut tracking, Event::Init);
        take(&mut tracking, Event::InitApply(value));
        take(&mut tracking, Event::InitDone);
        tracking
    }

    #[test]
    fn unknown_until_listed_then_present_or_absent() {
        let mut tracking = Tracking::default();
        assert_eq!(tracking.seen(), &Seen::Unknown);
        assert!(!take(&mut tracking, Event::Init));
        assert!(!take(&mut tracking, Event::InitApply(1)));
        assert_eq!(tracking.seen(), &Seen::Unknown, "not yet listed whole");
        assert!(take(&mut tracking, Event::InitDone));
        assert_eq!(tracking.seen(), &Seen::Present(1));

        let mut missing = Tracking::<u32>::default();
        take(&mut missing, Event::Init);
        assert!(take(&mut missing, Event::InitDone));
        assert_eq!(missing.seen(), &Seen::Absent);
    }

    #[test]
    fn changes_and_deletions_follow_and_a_repeat_is_no_change() {
        let mut tracking = listed(1);
        assert!(!take(&mut tracking, Event::Apply(1)), "the same projection");
        assert!(take(&mut tracking, Event::Apply(2)));
        assert_eq!(tracking.seen(), &Seen::Present(2));
        assert!(take(&mut tracking, Event::Delete(2)));
        assert_eq!(tracking.seen(), &Seen::Absent);
    }

    #[test]
    fn a_failed_watch_is_unknown_until_it_lists_again_and_a_relist_replaces() {
        let mut tracking = listed(1);
        take(&mut tracking, Event::Init);
        assert!(tracking.take(Err(watcher::Error::NoResourceVersion), |value: u32| value));
        assert_eq!(tracking.seen(), &Seen::Unknown);
        // The relist after the failure shows the object gone: nothing from before lingers.
        take(&mut tracking, Event::Init);
        assert!(take(&mut tracking, Event::InitDone));
        assert_eq!(tracking.seen(), &Seen::Absent);
    }
}
