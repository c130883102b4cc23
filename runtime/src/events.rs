//! Kubernetes Events, published through one recorder per process (kube-runtime's `Recorder`,
//! which folds repeats into an Event series). A failed publish is logged, never an error: an
//! Event is a courtesy to whoever runs `kubectl describe`, not part of the work.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

/// Publishes Events as one component (`reportingController`) and instance.
#[derive(Clone)]
pub struct EventPublisher {
    recorder: Recorder,
}

impl EventPublisher {
    /// Events reported by `component` (e.g. `crr-operator`), `instance` being this replica or
    /// node.
    pub fn new(client: Client, component: &str, instance: impl Into<String>) -> Self {
        Self {
            recorder: Recorder::new(
                client,
                Reporter {
                    controller: component.to_owned(),
                    instance: Some(instance.into()),
                },
            ),
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

    /// An Event about `regarding`; the reason is also the action.
    pub async fn publish(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        note: &str,
    ) {
        let event = Event {
            type_,
            reason: reason.to_owned(),
            note: Some(note.to_owned()),
            action: reason.to_owned(),
            secondary: None,
        };
        if let Err(error) = self.recorder.publish(&event, regarding).await {
            tracing::warn!(%error, reason, object = ?regarding.name, "could not publish an Event");
        }
    }
}
