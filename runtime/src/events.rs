//! Kubernetes Events (`events.k8s.io/v1`), published by one publisher per process. A failed
//! publish is logged, never an error: an Event is a courtesy to whoever runs `kubectl describe`,
//! not part of the work.
//!
//! Repeats of an Event (the same object, type, reason and action) within [`SERIES_WINDOW`] fold
//! into an Event series, one PATCH of `series` instead of a new object, as kube-runtime's
//! `Recorder` and client-go do. What is remembered per Event is small (its name and count) and
//! bounded: at most [`SERIES_CAPACITY`] of them, client-go's size, the oldest forgotten first; a
//! repeat of a forgotten one starts a new Event. kube-runtime's `Recorder` keeps every Event it
//! published for six minutes, whole, and scans them all on each publish: under a flood of
//! requests the operator's leader, publishing about 50 Events a second, held 50 MiB more than its
//! follower and spent its time in that scan.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};

pub use kube::runtime::events::EventType;

/// How long a repeat still joins the series of an earlier Event (client-go's and kube-runtime's
/// six minutes).
pub const SERIES_WINDOW: SignedDuration = SignedDuration::from_mins(6);
/// The most Events remembered for series at once (client-go's LRU size).
pub const SERIES_CAPACITY: usize = 4096;

/// What makes two Events the same Event: who says what about which object.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct SeriesKey {
    type_: &'static str,
    reason: String,
    action: String,
    namespace: Option<String>,
    kind: Option<String>,
    name: Option<String>,
    uid: Option<String>,
    field_path: Option<String>,
}

impl SeriesKey {
    fn new(regarding: &ObjectReference, type_: &'static str, reason: &str, action: &str) -> Self {
        Self {
            type_,
            reason: reason.to_owned(),
            action: action.to_owned(),
            namespace: regarding.namespace.clone(),
            kind: regarding.kind.clone(),
            name: regarding.name.clone(),
            uid: regarding.uid.clone(),
            field_path: regarding.field_path.clone(),
        }
    }
}

/// A published Event, as far as its series goes.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Published {
    name: String,
    namespace: String,
    count: i32,
    last_observed: Timestamp,
}

/// The Events remembered for series, at most `capacity`.
#[derive(Debug)]
struct SeriesCache {
    entries: HashMap<SeriesKey, Published>,
    capacity: usize,
}

impl SeriesCache {
    fn new(capacity: usize) -> Self {
        Self {
            entries: HashMap::new(),
            capacity: capacity.max(1),
        }
    }

    /// A repeat of a remembered Event seen within the window: counted, and returned with its new
    /// count. `None`: a new Event is to be created (and then [`Self::remember`]ed).
    fn repeat(&mut self, key: &SeriesKey, now: Timestamp) -> Option<Published> {
        let entry = self.entries.get_mut(key)?;
        if entry.last_observed + SERIES_WINDOW <= now {
            self.entries.remove(key);
            return None;
        }
        entry.count = entry.count.saturating_add(1);
        entry.last_observed = now;
        Some(entry.clone())
    }

    /// Remembers a new Event, forgetting first what the window has passed and then, when still
    /// full, the eighth of the entries seen longest ago (one scan per eighth of the capacity).
    fn remember(&mut self, key: SeriesKey, published: Published) {
        if self.entries.len() >= self.capacity {
            let now = published.last_observed;
            self.entries
                .retain(|_, entry| entry.last_observed + SERIES_WINDOW > now);
        }
        if self.entries.len() >= self.capacity {
            let mut ages: Vec<Timestamp> = self
                .entries
                .values()
                .map(|entry| entry.last_observed)
                .collect();
            ages.sort_unstable();
            let forget = (self.capacity / 8).max(1);
            let cutoff = ages[forget.min(ages.len()) - 1];
            self.entries.retain(|_, entry| entry.last_observed > cutoff);
        }
        self.entries.insert(key, published);
    }

    fn len(&self) -> usize {
        self.entries.len()
    }
}

/// Publishes Events as one component (`reportingController`) and instance.
#[derive(Clone)]
pub struct EventPublisher {
    client: Client,
    controller: String,
    instance: String,
    series: Arc<Mutex<SeriesCache>>,
}

impl EventPublisher {
    /// Events reported by `component` (e.g. `crr-operator`), `instance` being this replica or
    /// node.
    pub fn new(client: Client, component: &str, instance: impl Into<String>) -> Self {
        Self {
            client,
            controller: component.to_owned(),
            instance: instance.into(),
            series: Arc::new(Mutex::new(SeriesCache::new(SERIES_CAPACITY))),
        }
    }

    /// A `Normal` Event about `regarding`; the reason is also the action.
    pub async fn normal(&self, regarding: &ObjectReference, reason: &str, note: &str) {
        self.publish(regarding, EventType::Normal, reason, note)
            .await;
    }

    /// A `Warning` Event about `regarding`; the reason is also the action.
    pub async fn warning(&self, regarding: &ObjectReference, reason: &str, note: &str) {
        self.publish(regarding, EventType::Warning, reason, note)
            .await;
    }

    /// An Event about `regarding`; the reason is also the action. A repeat within the window
    /// raises the count of the earlier Event's series.
    pub async fn publish(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        note: &str,
    ) {
        if let Err(error) = self.try_publish(regarding, type_, reason, note).await {
            tracing::warn!(%error, reason, object = ?regarding.name, "could not publish an Event");
        }
    }

    async fn try_publish(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        note: &str,
    ) -> Result<(), kube::Error> {
        let type_name = match type_ {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        };
        let key = SeriesKey::new(regarding, type_name, reason, reason);
        let now = Timestamp::now();
        let repeat = self
            .series
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .repeat(&key, now);
        if let Some(repeat) = repeat {
            let events: Api<K8sEvent> = Api::namespaced(self.client.clone(), &repeat.namespace);
            let series = EventSeries {
                count: repeat.count,
                last_observed_time: MicroTime(now),
            };
            let patch = serde_json::json!({ "series": series });
            events
                .patch(&repeat.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            return Ok(());
        }
        let namespace = regarding
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_owned());
        let name = format!(
            "{}.{:x}",
            regarding.name.as_deref().unwrap_or(&self.controller),
            now.as_nanosecond()
        );
        let event = K8sEvent {
            action: Some(reason.to_owned()),
            reason: Some(reason.to_owned()),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            note: Some(note.to_owned()),
            metadata: ObjectMeta {
                namespace: Some(namespace.clone()),
                name: Some(name.clone()),
                ..ObjectMeta::default()
            },
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            type_: Some(type_name.to_owned()),
            ..K8sEvent::default()
        };
        let events: Api<K8sEvent> = Api::namespaced(self.client.clone(), &namespace);
        events.create(&PostParams::default(), &event).await?;
        self.series
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remember(
                key,
                Published {
                    name,
                    namespace,
                    count: 1,
                    last_observed: now,
                },
            );
        Ok(())
    }

    /// How many Events are remembered for series now.
    pub fn remembered(&self) -> usize {
        self.series
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .len()
    }
}

#[cfg(test)]
mod tests;
