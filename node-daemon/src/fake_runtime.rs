//! A fake container runtime for tests: a tonic CRI server from the same proto, on a unix socket,
//! holding containers in memory. It answers the calls the daemon makes (Version,
//! ListContainers, ContainerStatus, ExecSync, StopContainer), records them, and plays the
//! kubelet when asked: a stopped container is replaced by a new attempt. It streams container
//! events (GetContainerEvents) to every subscriber, as containerd 2 does: a stop sends the
//! stopped container's, and the successor's start when it plays the kubelet.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crr_crds::keys::{
    CRI_ANNOTATION_RESTART_COUNT, CRI_LABEL_CONTAINER_NAME, CRI_LABEL_POD_NAME,
    CRI_LABEL_POD_NAMESPACE, CRI_LABEL_POD_UID,
};
use tokio::sync::Notify;
use tokio_stream::StreamExt as _;
use tonic::{Request, Response, Status};

use crate::cri::Runtime;
use crate::proto::runtime_service_server::{RuntimeService, RuntimeServiceServer};
use crate::proto::{
    Container, ContainerEventResponse, ContainerEventType, ContainerMetadata, ContainerState,
    ContainerStatus, ContainerStatusRequest, ContainerStatusResponse, ExecSyncRequest,
    ExecSyncResponse, GetEventsRequest, ListContainersRequest, ListContainersResponse,
    PodSandboxMetadata, PodSandboxStatus, StopContainerRequest, StopContainerResponse,
    VersionRequest, VersionResponse,
};

pub const POD_UID: &str = crate::recreate::FIXTURE_POD_UID;
/// The namespace and name the fake's containers are labelled with (the fixture request's pod).
pub const POD_NAMESPACE: &str = crate::recreate::FIXTURE_NAMESPACE;
pub const POD_NAME: &str = "p";

#[derive(Clone, Debug)]
pub struct FakeContainer {
    pub id: String,
    pub name: String,
    /// The pod namespace label, when it is not [`POD_NAMESPACE`] (a container of another pod).
    pub namespace_label: Option<String>,
    pub attempt: u32,
    pub running: bool,
    pub started_at: jiff::Timestamp,
    /// When it exited (set by StopContainer), with [`FakeState::exit_code`].
    pub finished_at: Option<jiff::Timestamp>,
}

/// How ExecSync answers.
#[derive(Clone, Debug, Default)]
pub struct ExecBehaviour {
    pub exit_code: i32,
    /// Time the command takes.
    pub delay: Duration,
    /// Never answer (until the test drops the server).
    pub hang: bool,
}

#[derive(Default)]
pub struct FakeState {
    pub containers: Vec<FakeContainer>,
    /// (container ID without scheme, grace seconds) of every StopContainer call.
    pub stops: Vec<(String, i64)>,
    /// (container ID, command, timeout seconds) of every ExecSync call.
    pub execs: Vec<(String, Vec<String>, i64)>,
    pub exec: ExecBehaviour,
    /// Container IDs whose StopContainer fails.
    pub failing_stops: Vec<String>,
    /// How many StopContainer calls to come find the runtime away (restarting): `Unavailable`.
    pub unavailable_stops: usize,
    /// Play the kubelet: replace a stopped container by a running new attempt.
    pub restart_on_stop: bool,
    /// The runtime is away: Version answers `Unavailable`.
    pub away: bool,
    /// How long ago a stopped container's exit is reported (as if rounds ran later).
    pub exited_ago: std::time::Duration,
    /// The exit code every exited container reports: 0 (a clean exit on SIGTERM) unless set.
    pub exit_code: i32,
    /// GetContainerEvents answers only with its first event, as containerd does (grpc-go sends
    /// a stream's headers with its first message); at once otherwise, as tonic does.
    pub events_answered_with_the_first: bool,
    /// The open GetContainerEvents streams.
    pub event_subscribers:
        Vec<tokio::sync::mpsc::UnboundedSender<Result<ContainerEventResponse, Status>>>,
}

impl FakeState {
    /// Sends `event` about container `id` of the fake's pod to every subscriber.
    pub fn send_event(&mut self, id: &str, event: ContainerEventType) {
        let response = ContainerEventResponse {
            container_id: id.to_owned(),
            container_event_type: event as i32,
            pod_sandbox_status: Some(PodSandboxStatus {
                metadata: Some(PodSandboxMetadata {
                    name: POD_NAME.to_owned(),
                    namespace: POD_NAMESPACE.to_owned(),
                    uid: POD_UID.to_owned(),
                    attempt: 0,
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        self.event_subscribers
            .retain(|subscriber| subscriber.send(Ok(response.clone())).is_ok());
    }

    /// Ends every GetContainerEvents stream (as a runtime that restarts does).
    pub fn end_events(&mut self) {
        self.event_subscribers.clear();
    }
}

impl FakeState {
    /// The newest container of `name`.
    pub fn newest(&self, name: &str) -> Option<&FakeContainer> {
        self.containers
            .iter()
            .filter(|container| container.name == name)
            .max_by_key(|container| container.attempt)
    }

    pub fn stopped_ids(&self) -> Vec<String> {
        self.stops.iter().map(|(id, _)| id.clone()).collect()
    }
}

#[derive(Clone, Default)]
pub struct FakeRuntime {
    pub state: Arc<Mutex<FakeState>>,
    /// Notified on every ExecSync call, before it answers.
    pub exec_started: Arc<Notify>,
}

static SOCKETS: AtomicUsize = AtomicUsize::new(0);

impl FakeRuntime {
    /// A runtime with one running first attempt (`<name>-1`) of each name.
    pub fn with_containers(names: &[&str]) -> Self {
        let fake = Self::default();
        {
            let mut state = fake.lock();
            state.restart_on_stop = true;
            for name in names {
                state.containers.push(FakeContainer {
                    id: format!("{name}-1"),
                    name: (*name).to_owned(),
                    namespace_label: None,
                    attempt: 0,
                    running: true,
                    started_at: jiff::Timestamp::now() - jiff::SignedDuration::from_secs(3600),
                    finished_at: None,
                });
            }
        }
        fake
    }

    pub fn lock(&self) -> MutexGuard<'_, FakeState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Serves on a fresh unix socket and returns a client connected to it.
    pub async fn serve(&self) -> Runtime {
        self.serve_reporting(crate::metrics::CriMetrics::default())
            .await
    }

    /// [`FakeRuntime::serve`], the client reporting its calls to `metrics`.
    pub async fn serve_reporting(&self, metrics: crate::metrics::CriMetrics) -> Runtime {
        let path: PathBuf = std::env::temp_dir().join(format!(
            "crr-fake-cri-{}-{}.sock",
            std::process::id(),
            SOCKETS.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_file(&path);
        let listener = tokio::net::UnixListener::bind(&path).expect("binding the fake CRI socket");
        let service = RuntimeServiceServer::new(self.clone());
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener)),
        );
        Runtime::connect_reporting(&path, metrics)
            .await
            .expect("connecting to the fake CRI server")
    }
}

fn to_cri(container: &FakeContainer) -> Container {
    Container {
        id: container.id.clone(),
        metadata: Some(ContainerMetadata {
            name: container.name.clone(),
            attempt: container.attempt,
        }),
        state: if container.running {
            ContainerState::ContainerRunning
        } else {
            ContainerState::ContainerExited
        } as i32,
        created_at: i64::try_from(container.started_at.as_nanosecond()).unwrap_or(i64::MAX),
        labels: [
            (CRI_LABEL_POD_UID.to_owned(), POD_UID.to_owned()),
            (
                CRI_LABEL_POD_NAMESPACE.to_owned(),
                container
                    .namespace_label
                    .clone()
                    .unwrap_or_else(|| POD_NAMESPACE.to_owned()),
            ),
            (CRI_LABEL_POD_NAME.to_owned(), POD_NAME.to_owned()),
            (CRI_LABEL_CONTAINER_NAME.to_owned(), container.name.clone()),
        ]
        .into(),
        annotations: [(
            CRI_ANNOTATION_RESTART_COUNT.to_owned(),
            container.attempt.to_string(),
        )]
        .into(),
        ..Default::default()
    }
}

#[tonic::async_trait]
impl RuntimeService for FakeRuntime {
    async fn version(
        &self,
        _: Request<VersionRequest>,
    ) -> Result<Response<VersionResponse>, Status> {
        if self.lock().away {
            return Err(Status::unavailable("the runtime is restarting"));
        }
        Ok(Response::new(VersionResponse {
            version: "0.1.0".into(),
            runtime_name: "containerd".into(),
            runtime_version: "fake".into(),
            runtime_api_version: "v1".into(),
        }))
    }

    async fn list_containers(
        &self,
        request: Request<ListContainersRequest>,
    ) -> Result<Response<ListContainersResponse>, Status> {
        let wanted = request
            .into_inner()
            .filter
            .and_then(|filter| filter.label_selector.get(CRI_LABEL_POD_UID).cloned());
        let containers = if wanted.as_deref() == Some(POD_UID) {
            self.lock().containers.iter().map(to_cri).collect()
        } else {
            vec![]
        };
        Ok(Response::new(ListContainersResponse { containers }))
    }

    async fn container_status(
        &self,
        request: Request<ContainerStatusRequest>,
    ) -> Result<Response<ContainerStatusResponse>, Status> {
        let id = request.into_inner().container_id;
        let state = self.lock();
        let container = state
            .containers
            .iter()
            .find(|container| container.id == id)
            .ok_or_else(|| Status::not_found(format!("container {id}")))?;
        Ok(Response::new(ContainerStatusResponse {
            status: Some(ContainerStatus {
                id: container.id.clone(),
                started_at: i64::try_from(container.started_at.as_nanosecond()).unwrap_or(i64::MAX),
                finished_at: container.finished_at.map_or(0, |at| {
                    i64::try_from(at.as_nanosecond()).unwrap_or(i64::MAX)
                }),
                exit_code: if container.finished_at.is_some() {
                    state.exit_code
                } else {
                    0
                },
                ..Default::default()
            }),
            ..Default::default()
        }))
    }

    async fn exec_sync(
        &self,
        request: Request<ExecSyncRequest>,
    ) -> Result<Response<ExecSyncResponse>, Status> {
        let request = request.into_inner();
        let behaviour = {
            let mut state = self.lock();
            state.execs.push((
                request.container_id.clone(),
                request.cmd.clone(),
                request.timeout,
            ));
            state.exec.clone()
        };
        self.exec_started.notify_one();
        if behaviour.hang {
            std::future::pending::<()>().await;
        }
        tokio::time::sleep(behaviour.delay).await;
        Ok(Response::new(ExecSyncResponse {
            stdout: b"hook ran".to_vec(),
            stderr: vec![],
            exit_code: behaviour.exit_code,
        }))
    }

    async fn get_container_events(
        &self,
        _: Request<GetEventsRequest>,
    ) -> Result<Response<tonic::codegen::BoxStream<ContainerEventResponse>>, Status> {
        let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel();
        let answered_with_the_first = {
            let mut state = self.lock();
            state.event_subscribers.push(sender);
            state.events_answered_with_the_first
        };
        let first = if answered_with_the_first {
            receiver.recv().await
        } else {
            None
        };
        let rest = tokio_stream::wrappers::UnboundedReceiverStream::new(receiver);
        Ok(Response::new(Box::pin(
            tokio_stream::iter(first).chain(rest),
        )))
    }

    async fn stop_container(
        &self,
        request: Request<StopContainerRequest>,
    ) -> Result<Response<StopContainerResponse>, Status> {
        let request = request.into_inner();
        let mut state = self.lock();
        state
            .stops
            .push((request.container_id.clone(), request.timeout));
        if state.failing_stops.contains(&request.container_id) {
            return Err(Status::internal("cannot stop"));
        }
        if state.unavailable_stops > 0 {
            state.unavailable_stops -= 1;
            return Err(Status::unavailable(
                "connection refused: the runtime restarts",
            ));
        }
        let restart = state.restart_on_stop;
        let state_exited_ago = state.exited_ago;
        let container = state
            .containers
            .iter_mut()
            .find(|container| container.id == request.container_id)
            .ok_or_else(|| Status::not_found(request.container_id.clone()))?;
        container.running = false;
        container.finished_at = Some(
            jiff::Timestamp::now()
                - jiff::SignedDuration::try_from(state_exited_ago).unwrap_or_default(),
        );
        let (name, attempt) = (container.name.clone(), container.attempt + 1);
        let namespace_label = container.namespace_label.clone();
        state.send_event(
            &request.container_id,
            ContainerEventType::ContainerStoppedEvent,
        );
        if restart {
            let id = format!("{name}-{}", attempt + 1);
            state.containers.push(FakeContainer {
                id: id.clone(),
                name,
                namespace_label,
                attempt,
                running: true,
                started_at: jiff::Timestamp::now(),
                finished_at: None,
            });
            state.send_event(&id, ContainerEventType::ContainerStartedEvent);
        }
        Ok(Response::new(StopContainerResponse {}))
    }
}
