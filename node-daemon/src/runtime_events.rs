//! The runtime's container events (CRI `GetContainerEvents`): a container of this node started
//! or stopped wakes the round of its pod, so a recreate in flight waits on the
//! runtime's word instead of looking at the runtime every [`IN_FLIGHT_POLL`].
//!
//! The events are followed only where the runtime sends each event to every subscriber:
//! containerd 2.x. containerd 1.7 hands each event to one subscriber only (a single channel), so
//! there a daemon that followed them would take them from a kubelet with `EventedPLEG` on; other
//! runtimes are not known to broadcast them. Where they are not followed, or while the stream is
//! down, rounds look at the runtime every [`IN_FLIGHT_POLL`] as before.
//!
//! [`ContainerEvents`] says whether the events are followed now; [`follow`] keeps the stream,
//! and takes it up again after it breaks (the runtime restarts, the connection drops).
//!
//! [`IN_FLIGHT_POLL`]: crate::recreate::IN_FLIGHT_POLL

use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;

use crate::cri::Runtime;
use crate::proto::{ContainerEventResponse, ContainerEventType};

/// The first wait before the stream is asked for again after it broke, doubling to
/// [`RESUBSCRIBE_CAP`].
const RESUBSCRIBE_BASE: Duration = Duration::from_secs(1);
const RESUBSCRIBE_CAP: Duration = Duration::from_secs(30);

/// Whether the runtime `name` at `version` (as CRI `Version` reports them) sends every container
/// event to every subscriber: containerd from 2.0 (its CRI plugin's event queue), not 1.x.
pub fn broadcasts(name: &str, version: &str) -> bool {
    let major = version
        .trim_start_matches('v')
        .split(['.', '-', '+'])
        .next()
        .and_then(|major| major.parse::<u32>().ok());
    name == "containerd" && major.is_some_and(|major| major >= 2)
}

/// The work key (`namespace/name`) of the pod whose round an event wakes: a container started
/// or stopped (a container created, not yet started, or deleted after it stopped, changes
/// nothing a round decides). `None` for other events, or when the runtime sent no sandbox
/// status with it (containerd does so when it cannot read the sandbox).
pub fn pod_key(event: &ContainerEventResponse) -> Option<String> {
    let wakes = [
        ContainerEventType::ContainerStartedEvent,
        ContainerEventType::ContainerStoppedEvent,
    ]
    .map(|wakes| wakes as i32)
    .contains(&event.container_event_type);
    if !wakes {
        return None;
    }
    let metadata = event.pod_sandbox_status.as_ref()?.metadata.as_ref()?;
    (!metadata.namespace.is_empty() && !metadata.name.is_empty())
        .then(|| format!("{}/{}", metadata.namespace, metadata.name))
}

/// Whether the runtime's container events are followed now: the runtime answered the
/// subscription (containerd, through grpc-go, answers it only with its first event), and the
/// stream has not broken since. Kept in the gauge
/// `crr_node_daemon_container_events_followed`.
#[derive(Debug, Default)]
pub struct ContainerEvents {
    followed: Gauge,
}

impl ContainerEvents {
    /// Kept in `gauge` (0 until followed).
    pub fn new(gauge: Gauge) -> Self {
        gauge.set(0);
        Self { followed: gauge }
    }

    pub fn followed(&self) -> bool {
        self.followed.get() == 1
    }

    /// Events followed from the start, for tests of what rounds do with them.
    #[cfg(test)]
    pub(crate) fn followed_from_the_start() -> Self {
        let events = Self::default();
        events.set(true);
        events
    }

    fn set(&self, followed: bool) {
        self.followed.set(i64::from(followed));
    }
}

/// Follows the runtime's container events for good: each event's pod goes to `on_pod`. When the
/// stream opens or breaks, `events` says so and `on_switch` runs: the rounds waiting on a recreate
/// look again, on the events' terms from then on (a round that decided while the stream opened may
/// have missed its pod's event), or on the poll's until the stream is back. After a break the
/// stream is asked for again after a backoff.
pub async fn follow(
    runtime: Runtime,
    events: &ContainerEvents,
    on_pod: impl Fn(String),
    on_switch: impl Fn(),
) {
    let mut wait = RESUBSCRIBE_BASE;
    loop {
        match runtime.container_events().await {
            Ok(mut stream) => {
                events.set(true);
                on_switch();
                tracing::info!("following the runtime's container events");
                loop {
                    match stream.message().await {
                        Ok(Some(event)) => {
                            wait = RESUBSCRIBE_BASE;
                            if let Some(key) = pod_key(&event) {
                                on_pod(key);
                            }
                        }
                        Ok(None) => {
                            tracing::warn!("the runtime ended its container events");
                            break;
                        }
                        Err(status) => {
                            tracing::warn!(%status, "the runtime's container events broke");
                            break;
                        }
                    }
                }
                events.set(false);
                on_switch();
            }
            Err(error) => tracing::warn!(%error, "subscribing to the runtime's container events"),
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(RESUBSCRIBE_CAP);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{PodSandboxMetadata, PodSandboxStatus};

    #[test]
    fn containerd_two_and_later_broadcast_its_events_and_nothing_else_is_trusted_to() {
        for (name, version) in [
            ("containerd", "v2.2.9"),
            ("containerd", "v2.4.2"),
            ("containerd", "2.0.0"),
            ("containerd", "v3.0.0-rc.1"),
        ] {
            assert!(broadcasts(name, version), "{name} {version}");
        }
        for (name, version) in [
            ("containerd", "v1.7.27"),
            ("containerd", "1.6.0"),
            ("containerd", ""),
            ("containerd", "fake"),
            ("cri-o", "1.35.0"),
            ("docker", "28.0.0"),
        ] {
            assert!(!broadcasts(name, version), "{name} {version}");
        }
    }

    #[tokio::test]
    async fn events_name_their_pods_until_the_stream_breaks_and_then_it_is_taken_up_again() {
        use std::sync::{Arc, Mutex};

        use crate::fake_runtime::FakeRuntime;

        let fake = FakeRuntime::with_containers(&["app"]);
        fake.lock().events_answered_with_the_first = true;
        let runtime = fake.serve().await;
        let events = Arc::new(ContainerEvents::default());
        let pods = Arc::new(Mutex::new(Vec::<String>::new()));
        let switches = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let switched = |count: usize| {
            let switches = switches.clone();
            Box::new(move || switches.load(std::sync::atomic::Ordering::Relaxed) == count)
                as Box<dyn Fn() -> bool>
        };
        tokio::spawn({
            let (events, pods, switches) = (events.clone(), pods.clone(), switches.clone());
            async move {
                follow(
                    runtime,
                    &events,
                    move |key| pods.lock().unwrap().push(key),
                    move || {
                        switches.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    },
                )
                .await;
            }
        });
        let subscribed = |count: usize| {
            let fake = fake.clone();
            async move {
                while fake.lock().event_subscribers.len() != count {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        };
        let until = |what: &'static str, done: Box<dyn Fn() -> bool>| async move {
            tokio::time::timeout(Duration::from_secs(10), async {
                while !done() {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
            .await
            .unwrap_or_else(|_| panic!("{what} within 10 s"));
        };
        tokio::time::timeout(Duration::from_secs(10), subscribed(1))
            .await
            .expect("subscribed");
        // Subscribed, not answered: rounds keep looking at the runtime until the first event.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            !events.followed(),
            "not followed before the runtime answered"
        );
        fake.lock()
            .send_event("app-1", ContainerEventType::ContainerStoppedEvent);
        let seen = pods.clone();
        until(
            "the event's pod",
            Box::new(move || !seen.lock().unwrap().is_empty()),
        )
        .await;
        assert_eq!(*pods.lock().unwrap(), ["ns/p"]);
        assert!(events.followed());
        until("the waiting rounds woken as it opened", switched(1)).await;

        fake.lock().end_events();
        until("the waiting rounds woken as it broke", switched(2)).await;
        assert!(!events.followed());
        // Taken up again after the backoff: its events wake pods again.
        tokio::time::timeout(Duration::from_secs(10), subscribed(1))
            .await
            .expect("subscribed again");
        fake.lock()
            .send_event("app-2", ContainerEventType::ContainerStartedEvent);
        let seen = pods.clone();
        until(
            "the next event's pod",
            Box::new(move || seen.lock().unwrap().len() == 2),
        )
        .await;
        assert_eq!(*pods.lock().unwrap(), ["ns/p", "ns/p"]);
        assert!(events.followed(), "followed again");
        until("the waiting rounds woken as it opened again", switched(3)).await;
    }

    #[test]
    fn an_event_names_its_pod_by_the_sandbox_metadata() {
        let event = |namespace: &str, name: &str| ContainerEventResponse {
            container_id: "abc".into(),
            container_event_type: ContainerEventType::ContainerStartedEvent as i32,
            pod_sandbox_status: Some(PodSandboxStatus {
                metadata: Some(PodSandboxMetadata {
                    name: name.into(),
                    namespace: namespace.into(),
                    uid: "uid-1".into(),
                    attempt: 0,
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(pod_key(&event("ns", "web-0")).as_deref(), Some("ns/web-0"));
        let of_type = |type_: ContainerEventType| ContainerEventResponse {
            container_event_type: type_ as i32,
            ..event("ns", "web-0")
        };
        assert_eq!(
            pod_key(&of_type(ContainerEventType::ContainerStoppedEvent)).as_deref(),
            Some("ns/web-0")
        );
        for quiet in [
            ContainerEventType::ContainerCreatedEvent,
            ContainerEventType::ContainerDeletedEvent,
        ] {
            assert_eq!(pod_key(&of_type(quiet)), None, "{quiet:?}");
        }
        assert_eq!(pod_key(&event("", "web-0")), None);
        assert_eq!(pod_key(&ContainerEventResponse::default()), None);
    }
}
