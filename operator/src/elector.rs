//! Leader election: holds a `coordination.k8s.io/v1` Lease and publishes "am I the leader?".
//!
//! Each round reads the Lease, asks `lease::decide`, and writes the claim with the Lease's
//! resourceVersion as precondition (a create for a missing Lease), so of two candidates in one
//! round only one wins. The elector remembers when it first saw the Lease's current record, on
//! its own monotonic clock (`lease::Observation`): another holder's claim expires a lease duration
//! after that, never by comparing the holder's `renewTime` with our clock. A leader that cannot renew for `renew_deadline` steps down before the
//! Lease can expire for the others. On shutdown the holder clears `holderIdentity`, so another
//! replica takes over at once rather than after the lease duration.

use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::PostParams;
use kube::{Api, Client};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::lease::{self, Decision};

/// Lease settings.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// This replica's identity (unique among replicas).
    pub identity: String,
    /// How long a claim lasts without renewal.
    pub lease_duration: Duration,
    /// How long a leader keeps acting without a successful renewal.
    pub renew_deadline: Duration,
    /// Time between rounds.
    pub retry_period: Duration,
}

/// Holds the Lease while running.
pub struct Elector {
    api: Api<Lease>,
    settings: Settings,
    leader: watch::Sender<bool>,
    /// The Lease record as last read or written, and when we first saw it.
    observation: Option<lease::Observation>,
}

impl Elector {
    /// An elector and the receiver of its leadership state (initially `false`).
    pub fn new(client: Client, settings: Settings) -> (Self, watch::Receiver<bool>) {
        let (leader, receiver) = watch::channel(false);
        let api = Api::namespaced(client, &settings.namespace);
        (
            Self {
                api,
                settings,
                leader,
                observation: None,
            },
            receiver,
        )
    }

    fn set_leader(&self, leading: bool) {
        self.leader.send_if_modified(|current| {
            if *current == leading {
                return false;
            }
            *current = leading;
            true
        });
    }

    /// Runs election rounds until `stop` turns true, then gives the Lease up.
    pub async fn run(mut self, mut stop: watch::Receiver<bool>) {
        let mut last_renewal: Option<Instant> = None;
        loop {
            let leading = *self.leader.borrow();
            match self.try_acquire_or_renew().await {
                Ok(true) => {
                    if !leading {
                        info!(identity = %self.settings.identity, lease = %self.settings.name, "became leader");
                    }
                    last_renewal = Some(Instant::now());
                    self.set_leader(true);
                }
                Ok(false) => {
                    if leading {
                        warn!(identity = %self.settings.identity, "lost the Lease to another replica");
                    }
                    self.set_leader(false);
                }
                Err(error) => {
                    warn!(%error, "cannot read or write the leader Lease");
                    let overdue = last_renewal.is_none_or(|renewed| {
                        lease::must_step_down(renewed.elapsed(), self.settings.renew_deadline)
                    });
                    if leading && overdue {
                        warn!("could not renew the Lease in time; stepping down");
                        self.set_leader(false);
                    }
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(self.settings.retry_period) => {}
                _ = stop.wait_for(|stop| *stop) => break,
            }
        }
        let was_leading = *self.leader.borrow();
        self.set_leader(false);
        if was_leading {
            match self.release().await {
                Ok(()) => info!("released the leader Lease"),
                Err(error) => warn!(%error, "could not release the leader Lease"),
            }
        }
    }

    /// One round: `Ok(true)` when we hold the Lease afterwards.
    async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        let current = self.api.get_opt(&self.settings.name).await?;
        let observed_at = Instant::now();
        let spec = current.as_ref().and_then(|lease| lease.spec.as_ref());
        self.observation =
            spec.map(|spec| lease::observe(self.observation.take(), spec, observed_at));
        let settings = &self.settings;
        let decision = lease::decide(
            spec,
            &settings.identity,
            settings.lease_duration,
            self.observation.as_ref(),
            observed_at,
        );
        let Some(claim) = lease::claim(
            &decision,
            spec,
            &settings.identity,
            settings.lease_duration,
            Timestamp::now(),
        ) else {
            return Ok(false);
        };
        let result = match (decision, current) {
            (Decision::Create, _) | (_, None) => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(settings.name.clone()),
                        namespace: Some(settings.namespace.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(claim),
                };
                self.api.create(&PostParams::default(), &lease).await
            }
            (_, Some(current)) => {
                // `current` carries its resourceVersion: the replace fails if anyone wrote since.
                let lease = Lease {
                    metadata: current.metadata,
                    spec: Some(claim),
                };
                self.api
                    .replace(&settings.name, &PostParams::default(), &lease)
                    .await
            }
        };
        match result {
            Ok(written) => {
                // Our own write is the record the others now count from; so do we.
                self.observation = written.spec.map(|record| lease::Observation {
                    record,
                    observed_at,
                });
                Ok(true)
            }
            Err(kube::Error::Api(status)) if status.is_conflict() || status.is_already_exists() => {
                Ok(false)
            }
            Err(error) => Err(error),
        }
    }

    async fn release(&self) -> Result<(), kube::Error> {
        let Some(current) = self.api.get_opt(&self.settings.name).await? else {
            return Ok(());
        };
        let Some(spec) = current
            .spec
            .as_ref()
            .and_then(|spec| lease::release(spec, &self.settings.identity))
        else {
            return Ok(());
        };
        let lease = Lease {
            metadata: current.metadata,
            spec: Some(spec),
        };
        self.api
            .replace(&self.settings.name, &PostParams::default(), &lease)
            .await
            .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{Method, Request, Response, StatusCode};
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    use kube::client::Body;
    use serde_json::{Value, json};

    type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

    const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/crr-system/leases";

    fn elector() -> (Elector, Handle) {
        let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(service, "default");
        let (elector, _leader) = Elector::new(
            client,
            Settings {
                namespace: "crr-system".to_owned(),
                name: "crr-operator".to_owned(),
                identity: "me".to_owned(),
                lease_duration: Duration::from_secs(15),
                renew_deadline: Duration::from_secs(10),
                retry_period: Duration::from_secs(2),
            },
        );
        (elector, handle)
    }

    fn respond(status: StatusCode, body: &Value) -> Response<Body> {
        Response::builder()
            .status(status)
            .body(Body::from(serde_json::to_vec(body).expect("json")))
            .expect("response")
    }

    fn status(code: u16, reason: &str) -> Value {
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": reason, "reason": reason, "code": code})
    }

    fn lease(holder: &str, renewed_ago: i64) -> Value {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some("crr-operator".to_owned()),
                namespace: Some("crr-system".to_owned()),
                resource_version: Some("5".to_owned()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.to_owned()),
                lease_duration_seconds: Some(15),
                renew_time: Some(MicroTime(
                    Timestamp::now() - jiff::SignedDuration::from_secs(renewed_ago),
                )),
                ..LeaseSpec::default()
            }),
        };
        serde_json::to_value(lease).expect("json")
    }

    async fn next(
        handle: &mut Handle,
        method: Method,
        path: &str,
    ) -> (Value, tower_test::mock::SendResponse<Response<Body>>) {
        let (request, send) = handle.next_request().await.expect("a request");
        assert_eq!(request.method(), method);
        assert_eq!(request.uri().path(), path);
        let bytes = request.into_body().collect_bytes().await.expect("body");
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).expect("json")
        };
        (body, send)
    }

    /// The spec of a Lease as a client reads it back (MicroTime keeps microseconds only).
    fn read_back(lease: &Value) -> LeaseSpec {
        serde_json::from_value::<Lease>(lease.clone())
            .expect("lease")
            .spec
            .expect("spec")
    }

    #[tokio::test]
    async fn missing_lease_is_created_held_by_us_and_observed() {
        let (mut elector, mut handle) = elector();
        let server = tokio::spawn(async move {
            let (_, send) = next(&mut handle, Method::GET, &format!("{LEASES}/crr-operator")).await;
            send.send_response(respond(StatusCode::NOT_FOUND, &status(404, "NotFound")));
            let (body, send) = next(&mut handle, Method::POST, LEASES).await;
            assert_eq!(body["spec"]["holderIdentity"], "me");
            send.send_response(respond(StatusCode::CREATED, &body));
        });
        assert!(elector.try_acquire_or_renew().await.expect("round"));
        server.await.expect("server");
        let observed = elector.observation.expect("our write observed");
        assert_eq!(observed.record.holder_identity.as_deref(), Some("me"));
    }

    #[tokio::test]
    async fn live_lease_of_another_replica_is_not_written() {
        let (mut elector, mut handle) = elector();
        let server = tokio::spawn(async move {
            let (_, send) = next(&mut handle, Method::GET, &format!("{LEASES}/crr-operator")).await;
            send.send_response(respond(StatusCode::OK, &lease("other", 1)));
        });
        assert!(!elector.try_acquire_or_renew().await.expect("round"));
        server.await.expect("server");
    }

    #[tokio::test]
    async fn lease_renewed_long_ago_by_the_holders_clock_is_not_taken_when_first_seen() {
        // The holder's clock runs an hour behind ours: by renewTime the Lease looks long expired.
        let (mut elector, mut handle) = elector();
        let server = tokio::spawn(async move {
            let (_, send) = next(&mut handle, Method::GET, &format!("{LEASES}/crr-operator")).await;
            send.send_response(respond(StatusCode::OK, &lease("other", 3600)));
        });
        assert!(!elector.try_acquire_or_renew().await.expect("round"));
        server.await.expect("server");
        assert!(elector.observation.is_some());
    }

    #[tokio::test]
    async fn lease_unchanged_for_a_duration_is_taken_over_guarded_by_resource_version() {
        let (mut elector, mut handle) = elector();
        // Renewed "just now" by the holder's clock, which runs ahead; but we have seen this same
        // record for 20 s (more than the 15 s duration): its holder is gone.
        let stale = lease("other", -30);
        elector.observation = Some(lease::Observation {
            record: read_back(&stale),
            observed_at: Instant::now()
                .checked_sub(Duration::from_secs(20))
                .expect("uptime over 20 s"),
        });
        let server = tokio::spawn(async move {
            let (_, send) = next(&mut handle, Method::GET, &format!("{LEASES}/crr-operator")).await;
            send.send_response(respond(StatusCode::OK, &stale));
            let (body, send) =
                next(&mut handle, Method::PUT, &format!("{LEASES}/crr-operator")).await;
            assert_eq!(body["metadata"]["resourceVersion"], "5");
            assert_eq!(body["spec"]["holderIdentity"], "me");
            // Another replica won this round.
            send.send_response(respond(StatusCode::CONFLICT, &status(409, "Conflict")));
        });
        assert!(!elector.try_acquire_or_renew().await.expect("round"));
        server.await.expect("server");
    }

    #[tokio::test]
    async fn release_clears_the_holder_only_when_we_hold_it() {
        let (elector, mut handle) = elector();
        let server = tokio::spawn(async move {
            let (_, send) = next(&mut handle, Method::GET, &format!("{LEASES}/crr-operator")).await;
            send.send_response(respond(StatusCode::OK, &lease("me", 1)));
            let (body, send) =
                next(&mut handle, Method::PUT, &format!("{LEASES}/crr-operator")).await;
            assert!(body["spec"].get("holderIdentity").is_none());
            send.send_response(respond(StatusCode::OK, &body));
        });
        elector.release().await.expect("release");
        server.await.expect("server");
    }
}
