//! Settled requests, kept out of the request cache: a compact index and the TTL deletions it
//! drives.
//!
//! A settled request (finished, observed, no finalizer, not being deleted: [`cache::is_settled`])
//! that no rollout made is of use to the operator for one thing only: deleting it when its
//! `ttlSecondsAfterFinished` runs out. Kept in the reflector store, even slimmed, each one cost
//! a whole `ContainerRecreateRequest` (every `ObjectMeta` field, a store key, an `Arc`), its
//! pieces scattered among the freed parts of the object it was cut from, and a flood of them
//! grew every replica by kilobytes per request. Here each is one small entry: namespace, name,
//! UID and expiry.
//!
//! [`SettledIndex::route`] sits between the request watch and the store: a settled request goes
//! into the index, and the store sees its deletion (so a copy cached while it was active
//! leaves); every other event goes on unchanged. A re-list rebuilds the index as it rebuilds the
//! store. Requests of a rollout stay in the store whole or slim (`cache`): the rollout's plan
//! reads their outcome.
//!
//! [`expire_while_leading`] deletes the entries whose TTL has run out, on the Lease holder only,
//! preconditioned on the UID (a new request under the same name is never deleted). No Event
//! says so: it would be about an object that is gone (the log line does).
//!
//! [`cache::is_settled`]: crate::cache::is_settled

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crr_crds::keys;
use crr_crds::v1beta1::ContainerRecreateRequest;
use jiff::Timestamp;
use kube::api::{DeleteParams, Preconditions};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use tokio::sync::Notify;
use tracing::{debug, info, warn};

use crate::deadline;
use crate::request::context::Context;
use crate::request::error::Error;
use crate::request::metrics::SettledCounts;
use entries::Entries;

/// With nothing due, the deletion loop looks again at least this often (a clock that jumped,
/// a lost notification).
pub const IDLE_RECHECK: Duration = Duration::from_secs(30);

/// `(namespace, name)`.
type Key = (Box<str>, Box<str>);

/// What the index keeps of a settled request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settled {
    /// The request's UID: the deletion's precondition.
    pub uid: Option<Box<str>>,
    /// Whether it has `ttlSecondsAfterFinished` (the metric of requests nothing deletes).
    pub has_ttl: bool,
    /// When to delete it (after a failed deletion: when to try again); `None` never.
    pub expiry: Option<Timestamp>,
}

/// A request whose deletion is due.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Due {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID, the deletion's precondition.
    pub uid: Option<String>,
}

/// The settled entry of `crr`, or `None` when the request belongs in the store: not settled,
/// made by a rollout, or without a name or namespace.
pub fn settled_entry(crr: &ContainerRecreateRequest) -> Option<(Key, Settled)> {
    if !crate::cache::is_settled(crr) || crr.labels().contains_key(keys::LABEL_ROLLOUT) {
        return None;
    }
    let namespace = crr.metadata.namespace.as_deref()?;
    let name = crr.metadata.name.as_deref()?;
    if !entries::fits(namespace, name, crr.metadata.uid.as_deref()) {
        return None;
    }
    let completed = crr
        .status
        .as_ref()
        .and_then(|status| status.completion_time.as_ref())
        .map(|time| time.0);
    let ttl = crr.spec.ttl_seconds_after_finished;
    Some((
        (namespace.into(), name.into()),
        Settled {
            uid: crr.metadata.uid.as_deref().map(Into::into),
            has_ttl: ttl.is_some(),
            expiry: completed.and_then(|completed| deadline::ttl_expiry(completed, ttl)),
        },
    ))
}

fn key_of(crr: &ContainerRecreateRequest) -> Option<(&str, &str)> {
    Some((
        crr.metadata.namespace.as_deref()?,
        crr.metadata.name.as_deref()?,
    ))
}

#[derive(Default)]
struct State {
    entries: Entries,
    /// While the watch re-lists: the entries seen so far, which replace `entries` at its end.
    relisting: Option<Entries>,
    /// When the deletion loop means to wake next: an earlier expiry wakes it sooner.
    next_wake: Option<Timestamp>,
}

/// The settled requests of the watched namespaces (see the module documentation).
#[derive(Default)]
pub struct SettledIndex {
    state: Mutex<State>,
    changed: Notify,
}

impl std::fmt::Debug for SettledIndex {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("SettledIndex")
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

impl SettledIndex {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes one event of the request watch: records settled requests here and returns what
    /// the store should see instead (`None`: nothing).
    pub fn route(
        &self,
        event: watcher::Event<ContainerRecreateRequest>,
    ) -> Option<watcher::Event<ContainerRecreateRequest>> {
        match event {
            watcher::Event::Apply(crr) => match settled_entry(&crr) {
                Some((key, settled)) => {
                    self.insert(key, settled);
                    Some(watcher::Event::Delete(crr))
                }
                None => {
                    if let Some((namespace, name)) = key_of(&crr) {
                        self.state().entries.remove(namespace, name);
                    }
                    Some(watcher::Event::Apply(crr))
                }
            },
            watcher::Event::Delete(crr) => {
                if let Some((namespace, name)) = key_of(&crr) {
                    self.state().entries.remove(namespace, name);
                }
                Some(watcher::Event::Delete(crr))
            }
            watcher::Event::Init => {
                self.state().relisting = Some(Entries::default());
                Some(watcher::Event::Init)
            }
            watcher::Event::InitApply(crr) => match settled_entry(&crr) {
                Some(((namespace, name), settled)) => {
                    let mut state = self.state();
                    match &mut state.relisting {
                        Some(relisting) => relisting.insert(&namespace, &name, &settled),
                        None => state.entries.insert(&namespace, &name, &settled),
                    }
                    None
                }
                None => Some(watcher::Event::InitApply(crr)),
            },
            watcher::Event::InitDone => {
                {
                    let mut state = self.state();
                    if let Some(relisted) = state.relisting.take() {
                        state.entries = relisted;
                    }
                    state.entries.compact();
                }
                self.changed.notify_one();
                Some(watcher::Event::InitDone)
            }
        }
    }

    fn insert(&self, key: Key, settled: Settled) {
        let wake_sooner = {
            let mut state = self.state();
            let sooner = match (settled.expiry, state.next_wake) {
                (Some(expiry), Some(next)) => expiry < next,
                (Some(_), None) => true,
                (None, _) => false,
            };
            state.entries.insert(&key.0, &key.1, &settled);
            sooner
        };
        if wake_sooner {
            self.changed.notify_one();
        }
    }

    /// How many settled requests there are.
    pub fn len(&self) -> usize {
        self.state().entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many have no `ttlSecondsAfterFinished`: nothing deletes them.
    pub fn without_ttl(&self) -> usize {
        self.state()
            .entries
            .iter()
            .filter(|settled| !settled.has_ttl)
            .count()
    }

    /// Both counts, for the cache metrics.
    pub fn counts(&self) -> SettledCounts {
        SettledCounts {
            settled: self.len(),
            without_ttl: self.without_ttl(),
        }
    }

    /// The requests whose expiry has passed at `now`, and the next expiry after them; that
    /// next expiry is also the wake-up an earlier new entry will interrupt.
    pub fn due(&self, now: Timestamp) -> (Vec<Due>, Option<Timestamp>) {
        let mut state = self.state();
        let mut due = Vec::new();
        let mut next: Option<Timestamp> = None;
        for settled in state.entries.iter() {
            let Some(expiry) = settled.expiry else {
                continue;
            };
            if deadline::has_passed(expiry, now) {
                due.push(Due {
                    namespace: settled.namespace.to_owned(),
                    name: settled.name.to_owned(),
                    uid: settled.uid.map(str::to_owned),
                });
            } else if next.is_none_or(|next| expiry < next) {
                next = Some(expiry);
            }
        }
        state.next_wake = next;
        (due, next)
    }

    /// Forgets `due` (deleted, or gone): unless the entry has since become another request
    /// of the same name.
    pub fn forget(&self, due: &Due) {
        self.state()
            .entries
            .remove_if(&due.namespace, &due.name, |settled| {
                settled.uid == due.uid.as_deref()
            });
    }

    /// Tries `due` again at `at` (its deletion failed).
    pub fn retry_at(&self, due: &Due, at: Timestamp) {
        self.state()
            .entries
            .set_expiry_if(&due.namespace, &due.name, at, |settled| {
                settled.uid == due.uid.as_deref()
            });
    }

    /// Resolves when an entry may have become due sooner than the loop planned.
    pub async fn changed(&self) {
        self.changed.notified().await;
    }
}

/// What became of one deletion.
#[derive(Debug, PartialEq, Eq)]
enum Deletion {
    /// Deleted now.
    Deleted,
    /// Already gone, or replaced by another request of the same name.
    Gone,
}

/// Deletes one due request, preconditioned on its UID.
async fn delete(ctx: &Context, due: &Due) -> Result<Deletion, Error> {
    let crrs: Api<ContainerRecreateRequest> = Api::namespaced(ctx.client.clone(), &due.namespace);
    let params = DeleteParams::default().preconditions(Preconditions {
        uid: due.uid.clone(),
        resource_version: None,
    });
    match crrs.delete(&due.name, &params).await {
        Ok(_) => Ok(Deletion::Deleted),
        // 404: gone; 409: the UID precondition failed, the name is another request's now.
        Err(kube::Error::Api(status)) if status.is_not_found() || status.is_conflict() => {
            Ok(Deletion::Gone)
        }
        Err(source) => Err(Error::Write {
            action: "deleting the finished request",
            object: format!("crr {}/{}", due.namespace, due.name),
            source,
        }),
    }
}

/// Deletes settled requests as their TTL runs out, while this replica holds the Lease, until
/// `shutdown` resolves.
pub async fn expire_while_leading(
    ctx: Arc<Context>,
    index: Arc<SettledIndex>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let mut leader = ctx.leader.clone();
    loop {
        let leading = async {
            if leader.wait_for(|leading| *leading).await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            () = &mut shutdown => return,
            () = leading => {}
        }
        let (due, next) = index.due(Timestamp::now());
        for due in &due {
            if !ctx.is_leader() {
                break;
            }
            let key = format!("{}/{}", due.namespace, due.name);
            match delete(&ctx, due).await {
                Ok(deletion) => {
                    index.forget(due);
                    ctx.backoff.succeeded(&key);
                    if deletion == Deletion::Deleted {
                        info!(crr = %key, "deleted after ttlSecondsAfterFinished");
                    } else {
                        debug!(crr = %key, "gone before its TTL deletion");
                    }
                }
                Err(error) => {
                    ctx.metrics.errors.count(error.kind());
                    let after = ctx.backoff.failed(&key);
                    warn!(crr = %key, %error, retry_in = ?after, "TTL deletion failed");
                    let at = Timestamp::now()
                        .checked_add(after)
                        .unwrap_or(Timestamp::MAX);
                    index.retry_at(due, at);
                }
            }
        }
        if !due.is_empty() {
            // Deleting took time; look again before sleeping.
            continue;
        }
        let sleep = next
            .map(|next| deadline::until(next, Timestamp::now()))
            .unwrap_or(IDLE_RECHECK)
            .min(IDLE_RECHECK);
        tokio::select! {
            () = &mut shutdown => return,
            () = tokio::time::sleep(sleep) => {}
            () = index.changed() => {}
            _ = leader.changed() => {}
        }
    }
}

mod entries;

#[cfg(test)]
mod tests;
