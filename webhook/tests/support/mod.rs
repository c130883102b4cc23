//! Shared by the in-process server tests and the benchmark: a webhook served over real TLS on
//! loopback with pods given as values, and a minimal HTTP/1.1 client over rustls.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;

use crr_runtime::server::{self, Limits};
use crr_runtime::shutdown::{Shutdown, Trigger};
use crr_webhook::admission::Lookup;
use crr_webhook::certs::bundle::Bundle;
use crr_webhook::certs::generate::{generate, service_dns_names};
use crr_webhook::certs::resolver::CertResolver;
use crr_webhook::metrics::Metrics;
use crr_webhook::review::ClusterLookup;
use crr_webhook::routes::{self, AppState};
use crr_webhook::serving;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use prometheus_client::registry::Registry;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// A cluster of one pod and one node, answered from memory (the "cached pod" case).
pub struct Cached {
    pub pod: Arc<Pod>,
    pub node: Arc<Node>,
}

impl ClusterLookup for Cached {
    async fn pod(&self, _namespace: &str, name: &str) -> Lookup<Arc<Pod>> {
        if self.pod.metadata.name.as_deref() == Some(name) {
            Lookup::Found(self.pod.clone())
        } else {
            Lookup::NotFound
        }
    }
    async fn node(&self, _name: &str) -> Lookup<Arc<ObjectMeta>> {
        Lookup::Found(Arc::new(self.node.metadata.clone()))
    }
}

pub fn pod() -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "web-0", "namespace": "default", "uid": "pod-uid-1"},
        "spec": {
            "nodeName": "node-a", "terminationGracePeriodSeconds": 45,
            "containers": [
                {"name": "app", "image": "busybox", "ports": [{"name": "http", "containerPort": 8080}],
                 "lifecycle": {"preStop": {"httpGet": {"path": "/drain", "port": "http"}}}},
                {"name": "sidecar", "image": "busybox"}
            ]
        },
        "status": {"phase": "Running", "containerStatuses": [
            {"name": "app", "containerID": "containerd://app-1", "restartCount": 2, "ready": true, "image": "busybox", "imageID": ""},
            {"name": "sidecar", "containerID": "containerd://sidecar-1", "restartCount": 0, "ready": true, "image": "busybox", "imageID": ""}
        ]}
    }))
    .expect("a pod")
}

/// A CREATE review of a v1beta1 CRR for `web-0`'s containers.
pub fn create_review(uid: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "apps.kruise.io", "version": "v1beta1", "kind": "ContainerRecreateRequest"},
            "resource": {"group": "apps.kruise.io", "version": "v1beta1", "resource": "containerrecreaterequests"},
            "name": "r", "namespace": "default", "operation": "CREATE",
            "userInfo": {"username": "tester"},
            "object": {"apiVersion": "apps.kruise.io/v1beta1", "kind": "ContainerRecreateRequest",
                       "metadata": {"name": "r", "namespace": "default"},
                       "spec": {"podName": "web-0", "containers": [{"name": "app"}, {"name": "sidecar"}]}}
        }
    }))
    .expect("a review")
}

/// A retained v1alpha1 CRR as the API server stores it after a recreate: labels, the legacy
/// status annotations, two containers with their injected fields, a finished status.
pub fn retained_v1alpha1(index: usize) -> serde_json::Value {
    json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "ContainerRecreateRequest",
        "metadata": {
            "name": format!("web-{index}-recreate"), "namespace": "default",
            "uid": format!("00000000-0000-0000-0000-{index:012}"),
            "resourceVersion": format!("{}", 100_000 + index),
            "creationTimestamp": "2026-11-24T06:00:00Z",
            "labels": {
                "crr.apps.kruise.io/pod-name": format!("web-{index}"),
                "crr.apps.kruise.io/pod-uid": format!("11111111-0000-0000-0000-{index:012}"),
                "crr.apps.kruise.io/node-name": "node-a",
                "crr.apps.kruise.io/active": "true"
            },
            "annotations": {
                "crr.apps.kruise.io/unready-acquired": "2026-11-24T06:00:01Z",
                "crr.apps.kruise.io/sync-container-statuses":
                    "[{\"name\":\"app\",\"containerID\":\"containerd://aaaa\",\"restartCount\":1,\"ready\":true}]"
            }
        },
        "spec": {
            "podName": format!("web-{index}"),
            "containers": [
                {"name": "app", "preStop": {"exec": {"command": ["sh", "-c", "sleep 1"]}},
                 "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                 "statusContext": {"containerID": "containerd://aaaa", "restartCount": 0}},
                {"name": "sidecar", "statusContext": {"containerID": "containerd://bbbb", "restartCount": 0}}
            ],
            "strategy": {"failurePolicy": "Fail", "orderedRecreate": false, "terminationGracePeriodSeconds": 30,
                         "unreadyGracePeriodSeconds": 1, "minStartedSeconds": 0},
            "activeDeadlineSeconds": 300, "ttlSecondsAfterFinished": 86400
        },
        "status": {
            "phase": "Completed", "completionTime": "2026-11-24T06:00:05Z",
            "message": "",
            "containerRecreateStates": [{"name": "app", "phase": "Succeeded"}, {"name": "sidecar", "phase": "Succeeded"}]
        }
    })
}

/// Request bodies of the largest size each endpoint takes (a few KiB under its limit), with
/// their paths: a CRR CREATE review padded with an annotation, a pod CREATE review of an
/// opted-in pod padded likewise, and a ConversionReview of as many retained v1alpha1 CRRs as fit.
pub fn largest_bodies() -> Vec<(&'static str, Vec<u8>)> {
    use crr_webhook::routes;
    let margin = 16 * 1024;
    let mut crr: Value = serde_json::from_slice(&create_review("largest")).expect("a review");
    crr["request"]["object"]["metadata"]["annotations"] =
        json!({"padding": "x".repeat(routes::CRR_BODY_LIMIT - margin)});
    let pod = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "largest", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "default", "operation": "CREATE", "userInfo": {},
            "object": {"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": "p", "labels": {crr_crds::keys::LABEL_READINESS_GATE: "true"},
                                    "annotations": {"padding": "x".repeat(routes::POD_BODY_LIMIT - margin)}},
                       "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
        }
    });
    let one = serde_json::to_vec(&retained_v1alpha1(99_999))
        .expect("JSON")
        .len()
        + 1;
    let count = (routes::CONVERT_BODY_LIMIT - margin) / one;
    let objects: Vec<_> = (0..count).map(retained_v1alpha1).collect();
    let convert = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
        "request": {"uid": "largest", "desiredAPIVersion": "apps.kruise.io/v1beta1", "objects": objects}
    });
    let bodies = vec![
        (routes::MUTATE_CRR, serde_json::to_vec(&crr).expect("JSON")),
        (routes::MUTATE_POD, serde_json::to_vec(&pod).expect("JSON")),
        (
            crr_crds::CONVERSION_PATH,
            serde_json::to_vec(&convert).expect("JSON"),
        ),
    ];
    bodies
}

/// A webhook serving on `127.0.0.1:<any>` until dropped.
pub struct Served {
    pub address: SocketAddr,
    pub bundle: Bundle,
    pub registry: Arc<Registry>,
    shutdown: Trigger,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Served {
    pub async fn start(node_daemon_enabled: bool, limits: Limits) -> Self {
        Self::start_with_client_ca(node_daemon_enabled, limits, None).await
    }

    /// [`Served::start`], requiring admission callers to present a client certificate signed
    /// by `client_ca_pem` when given.
    pub async fn start_with_client_ca(
        node_daemon_enabled: bool,
        limits: Limits,
        client_ca_pem: Option<&str>,
    ) -> Self {
        crr_runtime::tls::install_crypto_provider();
        let client_ca = client_ca_pem.map(|pem| {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
                roots.add(cert.expect("client CA PEM")).expect("client CA");
            }
            roots
        });
        let bundle =
            generate(&service_dns_names("crr-system", "crr-webhook")).expect("a certificate");
        let resolver = CertResolver::new(bundle.clone()).expect("a resolver");
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        let state = Arc::new(AppState {
            lookup: Cached {
                pod: Arc::new(pod()),
                node: Arc::new(
                    serde_json::from_value(json!({"metadata": {"name": "node-a"}}))
                        .expect("a node"),
                ),
            },
            templates: Arc::new(NoWorkloads),
            node_daemon_enabled,
            readiness_gate_label: crr_crds::keys::LABEL_READINESS_GATE.to_owned(),
            metrics,
            client_certificate_required: client_ca.is_some(),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let address = listener.local_addr().expect("an address");
        let (shutdown, requested) = Shutdown::manual();
        let task = tokio::spawn(server::serve(
            listener,
            Some(Arc::new(
                serving::tls_config(resolver, client_ca).expect("TLS settings"),
            )),
            routes::router(state),
            requested.requested(),
            limits,
        ));
        Self {
            address,
            bundle,
            registry: Arc::new(registry),
            shutdown,
            task,
        }
    }

    /// Asks the server to drain and waits for it to return.
    pub async fn stop(self) -> std::io::Result<()> {
        self.shutdown.request();
        self.task.await.expect("the server task")
    }

    pub fn client_config(
        &self,
        versions: &[&'static rustls::SupportedProtocolVersion],
    ) -> rustls::ClientConfig {
        client_config(&self.bundle.ca_pem, versions)
    }

    pub async fn connect(&self, config: rustls::ClientConfig) -> std::io::Result<Connection> {
        connect(self.address, config).await
    }
}

/// A client trusting only `ca_pem`.
pub fn client_config(
    ca_pem: &str,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> rustls::ClientConfig {
    crr_runtime::tls::install_crypto_provider();
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.expect("CA PEM")).expect("CA cert");
    }
    rustls::ClientConfig::builder_with_protocol_versions(versions)
        .with_root_certificates(roots)
        .with_no_client_auth()
}

/// A client CA and a client certificate it signs (clientAuth): the CA's PEM, the client's
/// certificate PEM and key PEM.
pub fn client_identity() -> (String, String, String) {
    use rcgen::{
        BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, KeyPair,
        KeyUsagePurpose,
    };
    let ca_key = KeyPair::generate().expect("a CA key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    let ca = ca_params.self_signed(&ca_key).expect("a CA");
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().expect("a client key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("client params");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "kube-apiserver");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let cert = params
        .signed_by(&key, &issuer)
        .expect("a client certificate");
    (ca.pem(), cert.pem(), key.serialize_pem())
}

/// [`client_config`] presenting the client certificate `cert_pem` with `key_pem`.
pub fn client_config_with_identity(
    ca_pem: &str,
    cert_pem: &str,
    key_pem: &str,
) -> rustls::ClientConfig {
    crr_runtime::tls::install_crypto_provider();
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.expect("CA PEM")).expect("CA cert");
    }
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .map(|cert| cert.expect("client PEM"))
        .collect();
    let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).expect("a key");
    rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .expect("a client identity")
}

/// A TLS connection to a webhook at `address` (its certificate names the IP).
pub async fn connect(
    address: SocketAddr,
    config: rustls::ClientConfig,
) -> std::io::Result<Connection> {
    let tcp = tokio::net::TcpStream::connect(address).await?;
    tcp.set_nodelay(true)?;
    let name = ServerName::IpAddress(address.ip().into());
    let stream = TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await?;
    Ok(Connection {
        stream: BufReader::new(stream),
    })
}

/// One keep-alive HTTP/1.1 connection over TLS.
pub struct Connection {
    pub stream: BufReader<TlsStream<tokio::net::TcpStream>>,
}

impl Connection {
    /// Sends a POST and reads the answer: status and body.
    pub async fn post(&mut self, path: &str, body: &[u8]) -> std::io::Result<(u16, Vec<u8>)> {
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: crr-webhook\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        let stream = self.stream.get_mut();
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body).await?;
        stream.flush().await?;
        self.read_response().await
    }

    pub async fn read_response(&mut self) -> std::io::Result<(u16, Vec<u8>)> {
        let invalid =
            |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned());
        let mut line = String::new();
        if self.stream.read_line(&mut line).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let status = line
            .split(' ')
            .nth(1)
            .and_then(|code| code.parse().ok())
            .ok_or_else(|| invalid("status line"))?;
        let mut length = 0usize;
        loop {
            line.clear();
            if self.stream.read_line(&mut line).await? == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value
                    .trim()
                    .parse()
                    .map_err(|_| invalid("content-length"))?;
            }
        }
        let mut body = vec![0; length];
        self.stream.read_exact(&mut body).await?;
        Ok((status, body))
    }
}

/// The `response` of an AdmissionReview body.
pub fn response(body: &[u8]) -> Value {
    serde_json::from_slice::<Value>(body).expect("a JSON answer")["response"].clone()
}

/// No workload exists: rollouts naming one are refused (the server tests do not admit rollouts).
struct NoWorkloads;

impl crr_webhook::rollout_review::TemplateLookup for NoWorkloads {
    fn template<'a>(
        &'a self,
        _namespace: &'a str,
        _workload: &'a crr_crds::rollout::WorkloadRef,
    ) -> std::pin::Pin<
        Box<
            dyn std::future::Future<
                    Output = crr_webhook::admission::Lookup<
                        k8s_openapi::api::core::v1::PodTemplateSpec,
                    >,
                > + Send
                + 'a,
        >,
    > {
        Box::pin(async { crr_webhook::admission::Lookup::NotFound })
    }
}
