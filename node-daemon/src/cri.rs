//! The container runtime, over CRI v1 gRPC on its unix socket: finding a pod's containers by the
//! kubelet's labels, running preStop exec hooks, stopping containers. Every call goes through
//! [`Runtime::call`], which reports its latency and failure by RPC method (`CriMetrics`).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crr_crds::keys::{
    CRI_ANNOTATION_RESTART_COUNT, CRI_LABEL_CONTAINER_NAME, CRI_LABEL_POD_NAME,
    CRI_LABEL_POD_NAMESPACE, CRI_LABEL_POD_UID,
};
use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint};

use crate::metrics::CriMetrics;
use crate::proto::runtime_service_client::RuntimeServiceClient;
use crate::proto::{
    ContainerEventResponse, ContainerFilter, ContainerState, ContainerStatusRequest,
    ExecSyncRequest, GetEventsRequest, ListContainersRequest, StopContainerRequest, VersionRequest,
};
use crate::recreate::{ContainerOwner, RuntimeContainer};

/// Where runtimes put their CRI socket, tried in order when none is given.
pub const KNOWN_SOCKETS: [&str; 6] = [
    "/run/containerd/containerd.sock",
    "/var/run/containerd/containerd.sock",
    "/run/crio/crio.sock",
    "/var/run/crio/crio.sock",
    "/run/cri-dockerd.sock",
    "/var/run/cri-dockerd.sock",
];

#[derive(Debug, thiserror::Error)]
pub enum CriError {
    #[error("no CRI socket found (tried {0})")]
    NoSocket(String),
    #[error("connecting to the runtime at {path}: {source}")]
    Connect {
        path: PathBuf,
        source: tonic::transport::Error,
    },
    /// The runtime is (momentarily) unreachable: worth a retry.
    #[error("runtime unavailable: {0}")]
    Unavailable(String),
    /// The container is gone.
    #[error("container not found: {0}")]
    NotFound(String),
    #[error("runtime error: {0}")]
    Other(String),
}

impl From<tonic::Status> for CriError {
    fn from(status: tonic::Status) -> Self {
        if is_transient(&status) {
            return Self::Unavailable(format!("{:?}: {}", status.code(), status.message()));
        }
        match status.code() {
            tonic::Code::NotFound => Self::NotFound(status.message().to_owned()),
            _ => Self::Other(format!("{:?}: {}", status.code(), status.message())),
        }
    }
}

impl CriError {
    /// Whether the call may succeed if made again: the runtime was unreachable or slow, not
    /// wrong. A round that meets such an error is retried, never turned into a failure.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Unavailable(_) | Self::Connect { .. })
    }
}

/// A runtime that restarts (containerd, in place) answers the calls under way with
/// `Unavailable`, `Cancelled` (the connection went with it) or, from tonic's transport, `Unknown:
/// transport error`; a call past its deadline with `DeadlineExceeded`. All worth another try.
fn is_transient(status: &tonic::Status) -> bool {
    match status.code() {
        tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Cancelled => true,
        tonic::Code::Unknown => status.message().starts_with("transport error"),
        _ => false,
    }
}

/// Bound of a call that only reads (Version, ListContainers, ContainerStatus).
const READ_DEADLINE: Duration = Duration::from_secs(10);
/// What a call that waits on the runtime (ExecSync, StopContainer) gets beyond its own timeout.
const WAIT_MARGIN: Duration = Duration::from_secs(10);

/// A CRI request with a deadline: every call has one, so a runtime that hangs ends a round
/// with `DeadlineExceeded` (retried) instead of holding its pod slot.
fn with_deadline<T>(message: T, deadline: Duration) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(deadline);
    request
}

/// The socket to use: the given one, or the first known one that exists.
pub fn find_socket(given: Option<&Path>) -> Result<PathBuf, CriError> {
    if let Some(path) = given {
        return Ok(path.to_owned());
    }
    KNOWN_SOCKETS
        .iter()
        .map(PathBuf::from)
        .find(|path| path.exists())
        .ok_or_else(|| CriError::NoSocket(KNOWN_SOCKETS.join(", ")))
}

/// A CRI runtime client (cheap to clone: one HTTP/2 connection underneath).
#[derive(Clone)]
pub struct Runtime {
    client: RuntimeServiceClient<Channel>,
    metrics: CriMetrics,
    /// `containerd`, `cri-o`...: the scheme of container IDs the kubelet reports.
    pub name: String,
    pub version: String,
}

impl Runtime {
    /// Connects over the unix socket and asks the runtime's name and version; calls are
    /// reported nowhere.
    pub async fn connect(path: &Path) -> Result<Self, CriError> {
        Self::connect_reporting(path, CriMetrics::default()).await
    }

    /// Connects over the unix socket and asks the runtime's name and version; every call,
    /// that one included, is reported to `metrics`.
    pub async fn connect_reporting(path: &Path, metrics: CriMetrics) -> Result<Self, CriError> {
        let socket = path.to_owned();
        // The URI is required by tonic but unused: every connection goes to the socket.
        let channel = Endpoint::from_static("http://[::1]:1")
            .connect_timeout(Duration::from_secs(5))
            .connect_with_connector(tower::service_fn(move |_| {
                let socket = socket.clone();
                async move {
                    Ok::<_, std::io::Error>(TokioIo::new(
                        tokio::net::UnixStream::connect(socket).await?,
                    ))
                }
            }))
            .await
            .map_err(|source| CriError::Connect {
                path: path.to_owned(),
                source,
            })?;
        let mut runtime = Self {
            client: RuntimeServiceClient::new(channel),
            metrics,
            name: String::new(),
            version: String::new(),
        };
        let version = runtime.version(READ_DEADLINE).await?;
        runtime.name = version.runtime_name;
        runtime.version = version.runtime_version;
        Ok(runtime)
    }

    /// Makes one CRI call (`method` names its RPC, for the metrics) and reports how long it took
    /// and whether it failed.
    async fn call<T>(
        &self,
        method: &'static str,
        call: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T, CriError> {
        let started = Instant::now();
        let answer = call.await;
        self.metrics
            .observe(method, started.elapsed(), answer.is_ok());
        Ok(answer?.into_inner())
    }

    async fn version(&self, deadline: Duration) -> Result<crate::proto::VersionResponse, CriError> {
        let request = with_deadline(
            VersionRequest {
                version: "v1".into(),
            },
            deadline,
        );
        self.call("Version", self.client.clone().version(request))
            .await
    }

    /// Asks the runtime its version within `deadline`: is it reachable through our socket?
    pub async fn version_probe(&self, deadline: Duration) -> Result<(), CriError> {
        self.version(deadline).await.map(drop)
    }

    /// The newest attempt of each container of the pod, by container name.
    pub async fn pod_containers(
        &self,
        pod_uid: &str,
    ) -> Result<Vec<(String, RuntimeContainer)>, CriError> {
        let request = ListContainersRequest {
            filter: Some(ContainerFilter {
                label_selector: [(CRI_LABEL_POD_UID.to_owned(), pod_uid.to_owned())].into(),
                ..Default::default()
            }),
        };
        let containers = self
            .call(
                "ListContainers",
                self.client
                    .clone()
                    .list_containers(with_deadline(request, READ_DEADLINE)),
            )
            .await?
            .containers;
        let mut newest: std::collections::BTreeMap<String, (i64, u32, RuntimeContainer)> =
            Default::default();
        for container in containers {
            let Some(name) = container.labels.get(CRI_LABEL_CONTAINER_NAME).cloned() else {
                continue;
            };
            let attempt = container
                .metadata
                .as_ref()
                .map_or(0, |metadata| metadata.attempt);
            let restart_count = container
                .annotations
                .get(CRI_ANNOTATION_RESTART_COUNT)
                .and_then(|count| count.parse().ok())
                .unwrap_or(i32::try_from(attempt).unwrap_or(i32::MAX));
            let label = |key: &str| container.labels.get(key).cloned().unwrap_or_default();
            let runtime_container = RuntimeContainer {
                id: format!("{}://{}", self.scheme(), container.id),
                restart_count,
                running: container.state == ContainerState::ContainerRunning as i32,
                started_at: None,
                owner: ContainerOwner {
                    pod_uid: label(CRI_LABEL_POD_UID),
                    pod_namespace: label(CRI_LABEL_POD_NAMESPACE),
                    pod_name: label(CRI_LABEL_POD_NAME),
                    container_name: name.clone(),
                },
            };
            let newer = newest.get(&name).is_none_or(|(created, seen_attempt, _)| {
                (container.created_at, attempt) > (*created, *seen_attempt)
            });
            if newer {
                newest.insert(name, (container.created_at, attempt, runtime_container));
            }
        }
        let mut found = Vec::with_capacity(newest.len());
        for (name, (_, _, mut container)) in newest {
            if container.running {
                // Only the status has the start time (minStartedSeconds counts from it).
                match self.started_at(&container.id).await {
                    Ok(started_at) => container.started_at = started_at,
                    Err(CriError::NotFound(_)) => container.running = false,
                    Err(error) => return Err(error),
                }
            }
            found.push((name, container));
        }
        Ok(found)
    }

    /// The runtime's status of one container (`None` when it has none to give).
    async fn status_of(
        &self,
        container_id: &str,
    ) -> Result<Option<crate::proto::ContainerStatus>, CriError> {
        let request = with_deadline(
            ContainerStatusRequest {
                container_id: strip_scheme(container_id).to_owned(),
                verbose: false,
            },
            READ_DEADLINE,
        );
        Ok(self
            .call(
                "ContainerStatus",
                self.client.clone().container_status(request),
            )
            .await?
            .status)
    }

    /// When the container started, by the runtime (this node's clock); `None` if it has not.
    async fn started_at(&self, container_id: &str) -> Result<Option<jiff::Timestamp>, CriError> {
        Ok(self
            .status_of(container_id)
            .await?
            .filter(|status| status.started_at > 0)
            .and_then(|status| {
                jiff::Timestamp::from_nanosecond(i128::from(status.started_at)).ok()
            }))
    }

    /// How an exited container ended: its exit code and when (this node's clock); `None` while
    /// it runs or when the runtime no longer knows it.
    pub async fn exit(
        &self,
        container_id: &str,
    ) -> Result<Option<(i32, jiff::Timestamp)>, CriError> {
        let status = match self.status_of(container_id).await {
            Ok(status) => status,
            Err(CriError::NotFound(_)) => None,
            Err(error) => return Err(error),
        };
        Ok(status
            .filter(|status| status.finished_at > 0)
            .and_then(|status| {
                jiff::Timestamp::from_nanosecond(i128::from(status.finished_at))
                    .ok()
                    .map(|at| (status.exit_code, at))
            }))
    }

    /// The runtime's container events, as a stream without end (`runtime_events`). It has no
    /// deadline, and is not reported with the calls: a runtime may answer it only with its
    /// first event.
    pub async fn container_events(
        &self,
    ) -> Result<tonic::Streaming<ContainerEventResponse>, CriError> {
        Ok(self
            .client
            .clone()
            .get_container_events(GetEventsRequest {})
            .await?
            .into_inner())
    }

    /// `containerd` for containerd, as the kubelet writes IDs (`containerd://...`).
    pub fn scheme(&self) -> &str {
        match self.name.as_str() {
            "cri-o" => "cri-o",
            "docker" => "docker",
            _ => "containerd",
        }
    }

    /// Runs a command in the container; the runtime stops it after `timeout` (the caller bounds
    /// the call itself too: not every runtime honours the timeout). Returns (exit code, output).
    pub async fn exec_sync(
        &self,
        container_id: &str,
        command: Vec<String>,
        timeout: Duration,
    ) -> Result<(i32, String), CriError> {
        let request = ExecSyncRequest {
            container_id: strip_scheme(container_id).to_owned(),
            cmd: command,
            timeout: i64::try_from(timeout.as_secs().max(1)).unwrap_or(i64::MAX),
        };
        let request = with_deadline(request, timeout.saturating_add(WAIT_MARGIN));
        let response = self
            .call("ExecSync", self.client.clone().exec_sync(request))
            .await?;
        let mut output = String::from_utf8_lossy(&response.stdout).into_owned();
        output.push_str(&String::from_utf8_lossy(&response.stderr));
        Ok((response.exit_code, output))
    }

    /// Stops the container: SIGTERM, then SIGKILL after `grace_seconds`.
    pub async fn stop(&self, container_id: &str, grace_seconds: i64) -> Result<(), CriError> {
        let request = StopContainerRequest {
            container_id: strip_scheme(container_id).to_owned(),
            timeout: grace_seconds,
        };
        let waits = Duration::from_secs(u64::try_from(grace_seconds).unwrap_or(0));
        let request = with_deadline(request, waits.saturating_add(WAIT_MARGIN));
        self.call("StopContainer", self.client.clone().stop_container(request))
            .await?;
        Ok(())
    }
}

/// `containerd://abc` → `abc`.
pub fn strip_scheme(container_id: &str) -> &str {
    container_id
        .split_once("://")
        .map_or(container_id, |(_, id)| id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crr_runtime::metrics::missing_lines;

    #[tokio::test]
    async fn every_call_is_reported_by_method_and_failures_counted() {
        let fake = crate::fake_runtime::FakeRuntime::with_containers(&["app"]);
        fake.lock().failing_stops.push("app-1".to_owned());
        let metrics = CriMetrics::default();
        let runtime = fake.serve_reporting(metrics.clone()).await;
        assert!(runtime.stop("containerd://app-1", 0).await.is_err());
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register("cri_request_duration_seconds", "", metrics.duration.clone());
        registry.register("cri_errors", "", metrics.errors.clone());
        let text = crr_runtime::metrics::encode(&registry).expect("encode");
        let expected = [
            "cri_request_duration_seconds_count{method=\"Version\"} 1",
            "cri_request_duration_seconds_count{method=\"StopContainer\"} 1",
            "cri_errors_total{method=\"StopContainer\"} 1",
        ];
        let missing = missing_lines(&text, &expected);
        assert!(missing.is_empty(), "{missing:?} missing from\n{text}");
        assert!(
            !text.contains("cri_errors_total{method=\"Version\"}"),
            "{text}"
        );
    }

    #[test]
    fn a_restarting_runtime_is_transient_a_wrong_request_is_not() {
        for status in [
            tonic::Status::unavailable("connection refused"),
            tonic::Status::deadline_exceeded("slow"),
            tonic::Status::cancelled("connection closed"),
            tonic::Status::unknown("transport error"),
        ] {
            assert!(CriError::from(status.clone()).is_transient(), "{status:?}");
        }
        for status in [
            tonic::Status::unknown("exec failed: no such process"),
            tonic::Status::invalid_argument("bad id"),
            tonic::Status::internal("boom"),
        ] {
            assert!(!CriError::from(status.clone()).is_transient(), "{status:?}");
        }
        assert!(matches!(
            CriError::from(tonic::Status::not_found("gone")),
            CriError::NotFound(_)
        ));
    }
}
