//! What `run.rs` hands each of the three wings (`request`, `rollout`, `triggers`) when it starts
//! them under the Lease: the API client, the Event publisher, leadership, the watched namespace
//! and the shutdown signal.
//!
//! Every replica runs every wing's watches; only the Lease holder acts. A wing reconciles all
//! its objects each time this replica becomes leader ([`WingContext::became_leader`]), stops
//! taking work once shutdown is asked for, and finishes what is in flight.

use std::time::Duration;

use crr_runtime::events::EventPublisher;
use crr_runtime::shutdown::Shutdown;
use futures::Stream;
use k8s_openapi::NamespaceResourceScope;
use kube::{Api, Client, Resource};
use tokio::sync::watch;
use tracing::{info, warn};

/// Field manager of every write the operator makes, in each wing and in the gate starter.
pub const FIELD_MANAGER: &str = "crr-operator";

/// The first look again for a CRD that is not installed; it doubles up to [`CRD_RECHECK_CAP`].
pub const CRD_RECHECK_BASE: Duration = Duration::from_secs(1);
/// A wing waiting for its CRD looks again at least this often.
pub const CRD_RECHECK_CAP: Duration = Duration::from_secs(300);

/// The operator's shared ground, one clone per wing.
#[derive(Clone)]
pub struct WingContext {
    /// API client.
    pub client: Client,
    /// Publishes Events (field manager and reporting instance of this replica).
    pub events: EventPublisher,
    /// `true` while this replica holds the Lease.
    pub leader: watch::Receiver<bool>,
    /// Only this namespace's objects; all namespaces when `None`.
    pub namespace: Option<String>,
    /// Asked for on SIGTERM: wings stop taking work and drain.
    pub shutdown: Shutdown,
}

impl WingContext {
    /// Whether this replica holds the Lease now.
    pub fn is_leader(&self) -> bool {
        *self.leader.borrow()
    }

    /// The `Api` of `K` in the watched namespace, or in all namespaces.
    pub fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        crr_runtime::client::namespaced_or_all(self.client.clone(), self.namespace.as_deref())
    }

    /// Emits each time this replica becomes leader.
    pub fn became_leader(&self) -> impl Stream<Item = ()> + Send + 'static {
        became_leader(self.leader.clone())
    }

    /// Waits until the API server serves `K` (its CRD is installed), looking again with a
    /// doubling backoff, and says so once: a wing whose CRD is missing neither fails its watches
    /// in a loop nor fills the log. `false`: shutdown came first.
    pub async fn wait_until_served<K>(&self, wing: &'static str) -> bool
    where
        K: Resource<DynamicType = ()>,
    {
        let (api_version, plural, kind) = (K::api_version(&()), K::plural(&()), K::kind(&()));
        let mut delay = CRD_RECHECK_BASE;
        let mut said = false;
        loop {
            let missing = match self.client.list_api_group_resources(&api_version).await {
                Ok(list)
                    if list
                        .resources
                        .iter()
                        .any(|resource| resource.name == plural) =>
                {
                    if said {
                        info!(wing, %kind, "the CRD is installed now: starting");
                    }
                    return true;
                }
                Ok(_) => format!("{api_version} does not serve {plural}"),
                Err(kube::Error::Api(status)) if status.code == 404 => {
                    format!("{api_version} is not served")
                }
                Err(error) => error.to_string(),
            };
            if !said {
                warn!(
                    wing,
                    %kind,
                    reason = %missing,
                    "the CRD is not installed (or not served): this wing waits for it, looking again with backoff up to every {}s",
                    CRD_RECHECK_CAP.as_secs()
                );
                said = true;
            }
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = self.shutdown.requested() => return false,
            }
            delay = (delay * 2).min(CRD_RECHECK_CAP);
        }
    }
}

/// Emits each time the receiver turns true.
pub fn became_leader(leader: watch::Receiver<bool>) -> impl Stream<Item = ()> + Send + 'static {
    futures::stream::unfold(leader, |mut leader| async move {
        loop {
            leader.changed().await.ok()?;
            if *leader.borrow_and_update() {
                return Some(((), leader));
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use crr_crds::rollout::ContainerRecreateRollout;
    use futures::StreamExt as _;
    use http::{Method, StatusCode};
    use serde_json::json;

    use super::*;
    use crate::api_mock::{self, api_status, expect, respond};

    fn wing(client: Client) -> (WingContext, crr_runtime::shutdown::Trigger) {
        let (stop, shutdown) = Shutdown::manual();
        let (_, leader) = watch::channel(true);
        let wing = WingContext {
            events: EventPublisher::new(client.clone(), "crr-operator", "test"),
            client,
            leader,
            namespace: None,
            shutdown,
        };
        (wing, stop)
    }

    #[tokio::test(start_paused = true)]
    async fn a_missing_crd_is_looked_for_again_with_backoff_until_it_is_served() {
        let (client, mut api) = api_mock::client();
        let (wing, _stop) = wing(client);
        let waiting = tokio::spawn(async move {
            wing.wait_until_served::<ContainerRecreateRollout>("rollout")
                .await
        });
        let group = "/apis/crr.dev/v1alpha1";
        let (_, send) = expect(&mut api, Method::GET, group).await;
        send.send_response(respond(StatusCode::NOT_FOUND, &api_status(404, "NotFound")));
        let asked = tokio::time::Instant::now();
        let (_, send) = expect(&mut api, Method::GET, group).await;
        assert!(asked.elapsed() >= CRD_RECHECK_BASE, "{:?}", asked.elapsed());
        // The group without the kind is not enough.
        send.send_response(respond(
            StatusCode::OK,
            &json!({"kind": "APIResourceList", "groupVersion": "crr.dev/v1alpha1", "resources": []}),
        ));
        let asked = tokio::time::Instant::now();
        let (_, send) = expect(&mut api, Method::GET, group).await;
        assert!(
            asked.elapsed() >= CRD_RECHECK_BASE * 2,
            "{:?}",
            asked.elapsed()
        );
        send.send_response(respond(
            StatusCode::OK,
            &json!({"kind": "APIResourceList", "groupVersion": "crr.dev/v1alpha1", "resources": [
                {"name": "containerrecreaterollouts", "singularName": "containerrecreaterollout",
                 "namespaced": true, "kind": "ContainerRecreateRollout", "verbs": ["get"]},
            ]}),
        ));
        assert!(waiting.await.expect("joins"));
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_ends_the_wait() {
        let (client, mut api) = api_mock::client();
        let (wing, stop) = wing(client);
        let waiting = tokio::spawn(async move {
            wing.wait_until_served::<ContainerRecreateRollout>("rollout")
                .await
        });
        let (_, send) = expect(&mut api, Method::GET, "/apis/crr.dev/v1alpha1").await;
        send.send_response(respond(StatusCode::NOT_FOUND, &api_status(404, "NotFound")));
        stop.request();
        assert!(!waiting.await.expect("joins"));
    }

    #[tokio::test]
    async fn emits_on_each_rise_of_leadership_only() {
        let (leader, receiver) = watch::channel(false);
        let mut rises = Box::pin(became_leader(receiver));
        leader.send_replace(true);
        assert_eq!(rises.next().await, Some(()));
        leader.send_replace(false);
        leader.send_replace(true);
        assert_eq!(rises.next().await, Some(()));
        drop(leader);
        assert_eq!(rises.next().await, None);
    }
}
