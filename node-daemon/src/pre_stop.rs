//! preStop hooks, run before a kill: `exec` inside the container through CRI `ExecSync`,
//! `httpGet` and `tcpSocket` against the handler's host or else the pod's IP (the node's for
//! host-network pods), named ports resolved from the ports the webhook injected. Every hook is
//! bounded by the time it is given. A failed hook is reported by the caller and the kill goes on.
//!
//! `tcpSocket` is a connect check, as in a probe (as upstream's CRD allows it): the kubelet rejects it
//! as a lifecycle handler, so a pod never sees it run there; here a request carrying one gets
//! a connection to the port before its container is stopped. This module decides nothing
//! about when hooks run; `round` calls it before a kill.

use std::time::Duration;

use crate::cri::Runtime;
use crate::hook_error::HookError;
use crr_crds::v1beta1::ProbeHandler;
use k8s_openapi::api::core::v1::ContainerPort;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// The port a handler names: a number, or a name looked up in `ports`.
pub fn resolve_port(port: &IntOrString, ports: &[ContainerPort]) -> Result<u16, HookError> {
    match port {
        IntOrString::Int(number) => {
            u16::try_from(*number).map_err(|_| HookError::UnknownPort(number.to_string()))
        }
        IntOrString::String(name) => name
            .parse::<u16>()
            .ok()
            .or_else(|| {
                ports
                    .iter()
                    .find(|port| port.name.as_deref() == Some(name.as_str()))
                    .and_then(|port| u16::try_from(port.container_port).ok())
            })
            .ok_or_else(|| HookError::UnknownPort(name.clone())),
    }
}

/// Runs the hook within `budget`.
pub async fn run(
    runtime: &Runtime,
    container_id: &str,
    handler: &ProbeHandler,
    ports: &[ContainerPort],
    pod_ip: Option<&str>,
    budget: Duration,
) -> Result<(), HookError> {
    let timed_out = || HookError::Timeout(budget.as_secs());
    if let Some(exec) = &handler.exec {
        let command = exec.command.clone().unwrap_or_default();
        let (code, output) =
            tokio::time::timeout(budget, runtime.exec_sync(container_id, command, budget))
                .await
                .map_err(|_| timed_out())?
                .map_err(|error| HookError::Runtime(error.to_string()))?;
        return if code == 0 {
            Ok(())
        } else {
            Err(HookError::ExecFailed {
                code,
                output: output.chars().take(512).collect(),
            })
        };
    }
    let host = |given: &Option<String>| {
        given
            .clone()
            .filter(|host| !host.is_empty())
            .or_else(|| pod_ip.map(str::to_owned))
            .ok_or(HookError::NoAddress)
    };
    if let Some(http) = &handler.http_get {
        let port = resolve_port(&http.port, ports)?;
        let host = host(&http.host)?;
        let headers: Vec<(String, String)> = http
            .http_headers
            .iter()
            .flatten()
            .map(|header| (header.name.clone(), header.value.clone()))
            .collect();
        let request = crate::http_hook::HookRequest::new(
            http.scheme.as_deref(),
            &host,
            port,
            http.path.as_deref(),
            &headers,
        )?;
        return tokio::time::timeout(budget, crate::http_hook::get(&request))
            .await
            .map_err(|_| timed_out())?
            .map(drop);
    }
    if let Some(tcp) = &handler.tcp_socket {
        let port = resolve_port(&tcp.port, ports)?;
        let host = host(&tcp.host)?;
        return tokio::time::timeout(budget, tcp_connect(&host, port))
            .await
            .map_err(|_| timed_out())?;
    }
    Err(HookError::Empty)
}

/// A TCP connect, closed at once; success is an accepted connection.
pub async fn tcp_connect(host: &str, port: u16) -> Result<(), HookError> {
    tokio::net::TcpStream::connect((host, port))
        .await
        .map(drop)
        .map_err(|error| HookError::Tcp {
            address: format!("{host}:{port}"),
            message: error.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_resolve_by_number_and_by_name() {
        let ports = vec![ContainerPort {
            name: Some("http".into()),
            container_port: 8080,
            ..Default::default()
        }];
        assert_eq!(resolve_port(&IntOrString::Int(80), &ports), Ok(80));
        assert_eq!(
            resolve_port(&IntOrString::String("http".into()), &ports),
            Ok(8080)
        );
        assert_eq!(
            resolve_port(&IntOrString::String("9090".into()), &ports),
            Ok(9090)
        );
        assert_eq!(
            resolve_port(&IntOrString::String("grpc".into()), &ports),
            Err(HookError::UnknownPort("grpc".into()))
        );
    }

    fn tcp(port: u16) -> ProbeHandler {
        ProbeHandler {
            tcp_socket: Some(k8s_openapi::api::core::v1::TCPSocketAction {
                host: None,
                port: IntOrString::Int(i32::from(port)),
            }),
            ..Default::default()
        }
    }

    fn http(port: u16) -> ProbeHandler {
        ProbeHandler {
            http_get: Some(k8s_openapi::api::core::v1::HTTPGetAction {
                port: IntOrString::Int(i32::from(port)),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    async fn runtime() -> Runtime {
        crate::fake_runtime::FakeRuntime::with_containers(&["app"])
            .serve()
            .await
    }

    /// A listener whose accept queue is full: a further connect is never answered.
    async fn unanswering_port() -> (u16, Vec<tokio::net::TcpStream>, tokio::net::TcpListener) {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket
            .bind("127.0.0.1:0".parse().expect("address"))
            .expect("bind");
        let listener = socket.listen(0).expect("listen");
        let port = listener.local_addr().expect("addr").port();
        let mut held = vec![];
        loop {
            let connect = tokio::net::TcpStream::connect(("127.0.0.1", port));
            match tokio::time::timeout(Duration::from_millis(300), connect).await {
                Ok(Ok(stream)) => held.push(stream),
                _ => break,
            }
            assert!(held.len() < 64, "the accept queue never filled");
        }
        (port, held, listener)
    }

    #[tokio::test]
    async fn tcp_socket_succeeds_when_the_pod_accepts_and_fails_when_it_refuses() {
        let runtime = runtime().await;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let budget = Duration::from_secs(5);
        run(
            &runtime,
            "containerd://app-1",
            &tcp(port),
            &[],
            Some("127.0.0.1"),
            budget,
        )
        .await
        .expect("an accepted connection is success");
        drop(listener);
        let error = run(
            &runtime,
            "containerd://app-1",
            &tcp(port),
            &[],
            Some("127.0.0.1"),
            budget,
        )
        .await
        .expect_err("a refused connection fails");
        assert!(matches!(error, HookError::Tcp { .. }), "{error}");
        let error = run(
            &runtime,
            "containerd://app-1",
            &tcp(port),
            &[],
            None,
            budget,
        )
        .await
        .expect_err("no address");
        assert_eq!(error, HookError::NoAddress);
    }

    #[tokio::test]
    async fn tcp_socket_and_http_get_time_out_within_their_budget() {
        let runtime = runtime().await;
        let (port, _held, _listener) = unanswering_port().await;
        let budget = Duration::from_secs(1);
        let error = run(
            &runtime,
            "containerd://app-1",
            &tcp(port),
            &[],
            Some("127.0.0.1"),
            budget,
        )
        .await
        .expect_err("no answer");
        assert_eq!(error, HookError::Timeout(1));
        // An HTTP server that accepts and never answers.
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = silent.local_addr().expect("addr").port();
        let _accepting = tokio::spawn(async move {
            let (_stream, _) = silent.accept().await.expect("accept");
            std::future::pending::<()>().await;
        });
        let error = run(
            &runtime,
            "containerd://app-1",
            &http(port),
            &[],
            Some("127.0.0.1"),
            budget,
        )
        .await
        .expect_err("no answer");
        assert_eq!(error, HookError::Timeout(1));
    }
}
