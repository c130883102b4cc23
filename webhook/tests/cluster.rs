//! The webhook against a real cluster (the local one from `hack/`, see hack/README.md).
//!
//! Each test gets a fresh namespace and runs the real `crr-webhook` binary inside the cluster's
//! network namespace (`nsenter --net=/run/netns/crr-node`), listening on that namespace's
//! loopback where the API server can call it, with its admin port on the node address
//! (10.213.0.2) so the test can read `/readyz` and `/metrics`. The test registers its own
//! Mutating/ValidatingWebhookConfiguration (unique names, `clientConfig.url`, no caBundle) whose
//! namespaceSelector matches only its namespace; the webhook manages its certificate itself — a
//! Secret in the test namespace — and publishes the caBundle into those configurations. Both
//! are deleted afterwards (keep them with `CRR_KEEP_NAMESPACES=1`). The CRD's conversion is
//! never touched.
//!
//! crr may also be installed in the cluster (hack/install.sh). Its CRR webhook has no
//! namespaceSelector, so it sees the test's requests too: our configurations are named to sort
//! after it (the API server calls mutating webhooks in name order), and admission accepts its
//! own output a second time unchanged. Assertions hold whichever webhook defaults first; where
//! only ours can be the one answering (feature gate, our readiness-gate label), the tests say so.
//!
//! The tests are ignored unless asked for (`-- --include-ignored`, as hack/cluster-test.sh runs
//! them); run without the test bed or its network namespace, they fail (see `crr_testbed`).

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crr_crds::keys;
use crr_testbed as testbed;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
    PostParams,
};
use kube::{Api, Client, ResourceExt as _};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::process::{Child, Command};

const WAIT: Duration = Duration::from_secs(60);
const NETNS: &str = "/run/netns/crr-node";
/// The node's address inside the cluster's network namespace, reachable from the root one.
const NODE_ADDRESS: &str = "10.213.0.2";
const NAMESPACE_LABEL: &str = "crr.apps.kruise.io/webhook-test";
const BUSYBOX: &str = "crr.local/busybox:1.35";

/// What a test gets: a client, its namespace and a suffix unique to it.
struct Env {
    client: Client,
    namespace: String,
    suffix: String,
}

/// The cluster, requiring the test bed's network namespace too; panics without them.
async fn cluster() -> Client {
    testbed::cluster_where(|| {
        if Path::new(NETNS).exists() {
            Ok(())
        } else {
            Err(format!(
                "{NETNS} is missing: these tests run the webhook inside the local test bed's network namespace"
            ))
        }
    })
    .await
}

/// Runs `body` in a fresh labelled namespace; deletes the namespace and the test's webhook
/// configurations afterwards (see `crr_testbed::in_namespace`).
async fn with_namespace<F, Fut>(test: &str, body: F)
where
    F: FnOnce(Env) -> Fut,
    Fut: Future<Output = ()>,
{
    let client = cluster().await;
    let suffix = testbed::unique_suffix();
    let namespace = format!("crr-wh-{test}-{suffix}");
    let labels = BTreeMap::from([(NAMESPACE_LABEL.to_owned(), suffix.clone())]);
    let body = body(Env {
        client: client.clone(),
        namespace: namespace.clone(),
        suffix: suffix.clone(),
    });
    let webhook_configurations = async {
        let selector = ListParams::default().labels(&format!("{NAMESPACE_LABEL}={suffix}"));
        let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
        let _ = mutating
            .delete_collection(&DeleteParams::default(), &selector)
            .await;
        let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
        let _ = validating
            .delete_collection(&DeleteParams::default(), &selector)
            .await;
    };
    testbed::in_namespace(&client, &namespace, labels, body, webhook_configurations).await;
}

fn crr_api(client: &Client, namespace: &str, version: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(keys::GROUP, version, keys::KIND),
        keys::PLURAL,
    );
    Api::namespaced_with(client.clone(), namespace, &resource)
}

/// A `crr-webhook` process in the cluster's network namespace, killed when dropped.
struct Webhook {
    child: Child,
    port: u16,
    admin: SocketAddr,
    configuration: String,
    secret: String,
}

impl Webhook {
    /// Starts the webhook (retrying on another port when the chosen one is taken) and waits
    /// until `/readyz` says its certificate is loaded and its caches are synced.
    async fn start(env: &Env, extra_args: &[&str]) -> Self {
        Self::start_on(env, "127.0.0.1", extra_args).await
    }

    /// [`Webhook::start`], listening on `host` of the cluster's network namespace: `0.0.0.0`
    /// lets the test reach the HTTPS port too (on [`NODE_ADDRESS`]).
    async fn start_on(env: &Env, host: &str, extra_args: &[&str]) -> Self {
        let configuration = format!("crr-webhook-test-{}", env.suffix);
        let secret = "crr-webhook-certs".to_owned();
        let mut last_failure = String::new();
        for attempt in 0..5u16 {
            let seed = u16::from_str_radix(&env.suffix[env.suffix.len().saturating_sub(4)..], 16)
                .unwrap_or(0);
            let port = 20000 + (seed.wrapping_add(attempt * 7919) % 20000) * 2;
            let admin: SocketAddr = format!("{NODE_ADDRESS}:{}", port + 1)
                .parse()
                .expect("an address");
            let mut child = Command::new("nsenter")
                .arg(format!("--net={NETNS}"))
                .arg(env!("CARGO_BIN_EXE_crr-webhook"))
                .args([
                    format!("--listen={host}:{port}"),
                    format!("--admin-listen={admin}"),
                    format!("--cert-secret={}/{secret}", env.namespace),
                    format!("--service={}/crr-webhook", env.namespace),
                    format!("--webhook-configuration={configuration}"),
                    "--crd=".to_owned(),
                    "--cert-resync-seconds=1".to_owned(),
                ])
                .args(extra_args)
                .env(
                    "RUST_LOG",
                    std::env::var("CRR_WEBHOOK_LOG").unwrap_or_else(|_| "warn".to_owned()),
                )
                .stdin(Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .expect("starting nsenter crr-webhook (needs root)");
            let deadline = Instant::now() + WAIT;
            loop {
                if let Ok(Some(status)) = child.try_wait() {
                    last_failure = format!("exited with {status} (port {port})");
                    break;
                }
                if let Some((200, _)) = http_get(admin, "/readyz").await {
                    return Self {
                        child,
                        port,
                        admin,
                        configuration,
                        secret,
                    };
                }
                if Instant::now() > deadline {
                    let _ = child.kill().await;
                    panic!("crr-webhook did not become ready within {WAIT:?} (port {port})");
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        panic!("crr-webhook did not start: {last_failure}");
    }

    fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.port)
    }

    /// Registers the CRR webhooks (and the pod readiness-gate webhook) for the test namespace
    /// only, without caBundle, and waits until the webhook has published its CA into both.
    async fn register(&self, env: &Env) -> Vec<u8> {
        let selector = json!({"matchLabels": {NAMESPACE_LABEL: env.suffix}});
        let crr_rules = json!([{
            "apiGroups": [keys::GROUP], "apiVersions": ["v1alpha1", "v1beta1"],
            "operations": ["CREATE", "UPDATE"], "resources": [keys::PLURAL], "scope": "Namespaced",
        }]);
        let labels = json!({NAMESPACE_LABEL: env.suffix});
        let mutating: MutatingWebhookConfiguration = serde_json::from_value(json!({
            "metadata": {"name": self.configuration, "labels": labels},
            "webhooks": [
                {
                    "name": format!("mcrr.{}.test.crr.apps.kruise.io", env.suffix),
                    "clientConfig": {"url": self.url(crr_webhook::routes::MUTATE_CRR)},
                    "rules": crr_rules, "namespaceSelector": selector,
                    "admissionReviewVersions": ["v1"], "sideEffects": "None",
                    "failurePolicy": "Fail", "matchPolicy": "Equivalent", "timeoutSeconds": 10,
                },
                {
                    "name": format!("gate.{}.test.crr.apps.kruise.io", env.suffix),
                    "clientConfig": {"url": self.url(crr_webhook::routes::MUTATE_POD)},
                    "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                               "resources": ["pods"], "scope": "Namespaced"}],
                    "namespaceSelector": selector,
                    "objectSelector": {"matchLabels": {gate_label(env): "true"}},
                    "admissionReviewVersions": ["v1"], "sideEffects": "None",
                    "failurePolicy": "Fail", "timeoutSeconds": 10,
                },
            ],
        }))
        .expect("a MutatingWebhookConfiguration");
        let validating: ValidatingWebhookConfiguration = serde_json::from_value(json!({
            "metadata": {"name": self.configuration, "labels": labels},
            "webhooks": [{
                "name": format!("vcrr.{}.test.crr.apps.kruise.io", env.suffix),
                "clientConfig": {"url": self.url(crr_webhook::routes::VALIDATE_CRR)},
                "rules": crr_rules, "namespaceSelector": selector,
                "admissionReviewVersions": ["v1"], "sideEffects": "None",
                "failurePolicy": "Fail", "matchPolicy": "Equivalent", "timeoutSeconds": 10,
            }],
        }))
        .expect("a ValidatingWebhookConfiguration");
        let mutating_api: Api<MutatingWebhookConfiguration> = Api::all(env.client.clone());
        let validating_api: Api<ValidatingWebhookConfiguration> = Api::all(env.client.clone());
        mutating_api
            .create(&PostParams::default(), &mutating)
            .await
            .expect("creating the MutatingWebhookConfiguration");
        validating_api
            .create(&PostParams::default(), &validating)
            .await
            .expect("creating the ValidatingWebhookConfiguration");
        let ca = self.secret_ca(env).await;
        testbed::wait_for(
            mutating_api,
            &self.configuration,
            |config: Option<&MutatingWebhookConfiguration>| {
                config.is_some_and(|c| {
                    c.webhooks
                        .iter()
                        .flatten()
                        .all(|w| has_ca(&w.client_config, &ca))
                })
            },
            "the webhook to publish its CA into the MutatingWebhookConfiguration",
            WAIT,
        )
        .await;
        testbed::wait_for(
            validating_api,
            &self.configuration,
            |config: Option<&ValidatingWebhookConfiguration>| {
                config.is_some_and(|c| {
                    c.webhooks
                        .iter()
                        .flatten()
                        .all(|w| has_ca(&w.client_config, &ca))
                })
            },
            "the webhook to publish its CA into the ValidatingWebhookConfiguration",
            WAIT,
        )
        .await;
        ca
    }

    /// The CA in the webhook's Secret (which it created: the test never writes one first).
    async fn secret_ca(&self, env: &Env) -> Vec<u8> {
        let secrets: Api<Secret> = Api::namespaced(env.client.clone(), &env.namespace);
        let secret = secrets
            .get(&self.secret)
            .await
            .expect("the webhook created its certificate Secret");
        assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/tls"));
        let data = secret.data.unwrap_or_default();
        for key in ["tls.crt", "tls.key", "ca.crt"] {
            assert!(
                data.get(key).is_some_and(|value| !value.0.is_empty()),
                "the Secret lacks {key}"
            );
        }
        data.get("ca.crt")
            .map(|ca| ca.0.clone())
            .unwrap_or_default()
    }

    /// The value of one sample of `/metrics` (summed over label sets containing `labels`).
    async fn metric(&self, name: &str, labels: &str) -> f64 {
        let Some((200, body)) = http_get(self.admin, "/metrics").await else {
            panic!("/metrics did not answer");
        };
        body.lines()
            .filter(|line| line.starts_with(name) && line.contains(labels))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }
}

impl Drop for Webhook {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

fn has_ca(
    config: &k8s_openapi::api::admissionregistration::v1::WebhookClientConfig,
    ca: &[u8],
) -> bool {
    config.ca_bundle.as_ref().map(|b| b.0.as_slice()) == Some(ca)
}

/// Whether the caBundle of `config` holds the certificate(s) of `ca_pem` (among others).
fn bundle_contains(
    config: &k8s_openapi::api::admissionregistration::v1::WebhookClientConfig,
    ca_pem: &str,
) -> bool {
    let bundle = pem_certificates(
        &config
            .ca_bundle
            .as_ref()
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
            .unwrap_or_default(),
    );
    let wanted = pem_certificates(ca_pem);
    !wanted.is_empty() && wanted.iter().all(|ca| bundle.contains(ca))
}

/// The DER certificates of a PEM text.
fn pem_certificates(pem: &str) -> Vec<Vec<u8>> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject as _;
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .filter_map(Result::ok)
        .map(|der| der.to_vec())
        .collect()
}

/// The readiness-gate opt-in label of this test: unique, so only our webhook acts on it.
fn gate_label(env: &Env) -> String {
    format!("gate-{}.test.crr.apps.kruise.io/readiness-gate", env.suffix)
}

/// Plain-HTTP GET (the admin port): status and body, or `None` when nothing answers.
async fn http_get(address: SocketAddr, path: &str) -> Option<(u16, String)> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(address).await.ok()?;
        stream
            .write_all(format!("GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await.ok()?;
        let text = String::from_utf8_lossy(&response).into_owned();
        let status = text.split(' ').nth(1)?.parse().ok()?;
        let body = text.split_once("\r\n\r\n")?.1.to_owned();
        Some((status, body))
    };
    tokio::time::timeout(Duration::from_secs(5), exchange)
        .await
        .ok()
        .flatten()
}

/// Other webhook configurations that admit CRRs here (an installed crr); those of other tests
/// of this file select only their own namespace.
async fn foreign_crr_webhooks(env: &Env) -> Vec<String> {
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(env.client.clone());
    let list = mutating
        .list(&ListParams::default())
        .await
        .expect("listing MutatingWebhookConfigurations");
    list.items
        .into_iter()
        .filter(|config| !config.labels().contains_key(NAMESPACE_LABEL))
        .filter(|config| {
            config.webhooks.iter().flatten().any(|hook| {
                hook.rules.iter().flatten().any(|rule| {
                    rule.resources
                        .iter()
                        .flatten()
                        .any(|r| r == keys::PLURAL || r == "*")
                })
            })
        })
        .map(|config| config.name_any())
        .collect()
}

/// A running pod with an httpGet preStop on `app` and an exec preStop on `sidecar`; returns it
/// once both containers have IDs.
async fn running_pod(env: &Env, name: &str) -> Pod {
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), &env.namespace);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 7,
            "containers": [
                {"name": "app", "image": BUSYBOX, "imagePullPolicy": "IfNotPresent",
                 "command": ["sleep", "3600"],
                 "ports": [{"name": "http", "containerPort": 8080}],
                 "lifecycle": {"preStop": {"httpGet": {"path": "/drain", "port": "http"}}}},
                {"name": "sidecar", "image": BUSYBOX, "imagePullPolicy": "IfNotPresent",
                 "command": ["sleep", "3600"],
                 "lifecycle": {"preStop": {"exec": {"command": ["true"]}}}},
            ],
        },
    }))
    .expect("a Pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("creating the pod");
    testbed::wait_for(
        pods,
        name,
        |pod: Option<&Pod>| {
            pod.and_then(|p| p.status.as_ref())
                .and_then(|s| s.container_statuses.as_ref())
                .is_some_and(|statuses| {
                    statuses.len() == 2
                        && statuses
                            .iter()
                            .all(|s| s.container_id.as_deref().is_some_and(|id| !id.is_empty()))
                })
        },
        "the pod's containers to start",
        WAIT,
    )
    .await
    .expect("the pod is gone")
}

fn crr_object(version: &str, name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": format!("{}/{version}", keys::GROUP),
        "kind": keys::KIND,
        "metadata": {"name": name},
        "spec": spec,
    }))
    .expect("a CRR")
}

/// Creates a CRR. While the API server has not caught up with a just-published caBundle (or the
/// webhook's new certificate), it reports "failed calling webhook": that is retried until
/// [`WAIT`]; any other answer is returned.
async fn create(api: &Api<DynamicObject>, object: &DynamicObject) -> Result<DynamicObject, String> {
    let deadline = Instant::now() + WAIT;
    loop {
        match api.create(&PostParams::default(), object).await {
            Ok(created) => return Ok(created),
            Err(kube::Error::Api(status))
                if status.message.contains("failed calling webhook")
                    && Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(kube::Error::Api(status)) => {
                return Err(format!("{} {}", status.code, status.message));
            }
            Err(error) => panic!("creating a CRR: {error}"),
        }
    }
}

/// The API server's message in an error, or the error itself.
fn api_message(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => format!("{} {}", status.code, status.message),
        other => other.to_string(),
    }
}

fn container_status(pod: &Pod, name: &str) -> (String, i32) {
    let status = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|all| all.iter().find(|s| s.name == name))
        .unwrap_or_else(|| panic!("pod has no status for {name}"));
    (
        status.container_id.clone().unwrap_or_default(),
        status.restart_count,
    )
}

/// Asserts a created CRR carries every default and injection, derived from the real pod.
fn assert_defaulted(crr: &DynamicObject, pod: &Pod, version: &str) {
    let labels = crr.labels();
    assert_eq!(
        labels.get(keys::LABEL_ACTIVE).map(String::as_str),
        Some("true"),
        "{version}"
    );
    assert_eq!(
        labels.get(keys::LABEL_NODE_NAME),
        pod.spec.as_ref().and_then(|s| s.node_name.as_ref()),
        "{version}"
    );
    assert_eq!(
        labels.get(keys::LABEL_POD_UID),
        pod.metadata.uid.as_ref(),
        "{version}"
    );
    let spec = &crr.data["spec"];
    assert_eq!(spec["strategy"]["failurePolicy"], "Fail", "{version}");
    assert_eq!(
        spec["strategy"]["terminationGracePeriodSeconds"], 7,
        "{version}: the grace period comes from the pod"
    );
    let containers = spec["containers"].as_array().expect("containers");
    for container in containers {
        let name = container["name"].as_str().expect("a name");
        let (id, restarts) = container_status(pod, name);
        assert_eq!(
            container["statusContext"],
            json!({"containerID": id, "restartCount": restarts}),
            "{version}: statusContext of {name} is the pod's"
        );
    }
    let app = &containers[0];
    assert_eq!(app["preStop"]["httpGet"]["path"], "/drain", "{version}");
    assert_eq!(app["ports"][0]["containerPort"], 8080, "{version}");
    let sidecar = &containers[1];
    assert_eq!(
        sidecar["preStop"]["exec"]["command"],
        json!(["true"]),
        "{version}"
    );
    assert!(sidecar.get("ports").is_none(), "{version}");
}

/// Self-managed certificate from a Secret, CRR creation defaulted in both versions, invalid
/// requests refused with their messages, update immutability, then a certificate written into
/// the Secret by hand served without a restart (and its CA published).
#[tokio::test]
#[ignore = "needs the local test bed (hack/README.md); hack/cluster-test.sh runs it"]
async fn crr_admission_through_the_api_server() {
    with_namespace("crr", |env| async move {
        let webhook = Webhook::start(&env, &[]).await;
        let first_ca = webhook.register(&env).await;
        let foreign = foreign_crr_webhooks(&env).await;
        if !foreign.is_empty() {
            eprintln!(
                "note: {foreign:?} also admit CRRs here: ours is named to run after them and \
                 accepts their output unchanged"
            );
        }
        let pod = running_pod(&env, "web").await;
        // A long unready grace keeps an installed node daemon from killing anything meanwhile.
        let valid = json!({"podName": "web", "containers": [{"name": "app"}, {"name": "sidecar"}],
                           "strategy": {"unreadyGracePeriodSeconds": 3600}});

        let before = webhook.metric("crr_webhook_reviews_total", "endpoint=\"mutate\"").await;
        for version in ["v1beta1", "v1alpha1"] {
            let api = crr_api(&env.client, &env.namespace, version);
            let created = create(&api, &crr_object(version, &format!("ok-{version}"), valid.clone()))
                .await
                .unwrap_or_else(|error| panic!("{version}: a valid CRR was refused: {error}"));
            assert_defaulted(&created, &pod, version);
        }
        let after = webhook.metric("crr_webhook_reviews_total", "endpoint=\"mutate\"").await;
        assert!(after >= before + 2.0, "our mutating endpoint answered both creations ({before} → {after})");

        // Invalid requests: refused with the rule's message.
        let api = crr_api(&env.client, &env.namespace, "v1beta1");
        let cases = [
            ("ghost", json!({"podName": "ghost", "containers": [{"name": "app"}]}), "no found Pod named ghost"),
            ("nope", json!({"podName": "web", "containers": [{"name": "nope"}]}), "container nope not found in Pod"),
            ("twice", json!({"podName": "web", "containers": [{"name": "app"}, {"name": "app"}]}), "can not recreate app multi times"),
            ("deadline", json!({"podName": "web", "containers": [{"name": "app"}], "activeDeadlineSeconds": 1}), "activeDeadlineSeconds can not be less than 3s"),
            ("readonly", json!({"podName": "web", "containers": [{"name": "app", "statusContext": {"containerID": "containerd://forged", "restartCount": 0}}]}), "ready-only fields"),
            ("policy", json!({"podName": "web", "containers": [{"name": "app"}], "strategy": {"failurePolicy": "Sometimes"}}), "unknown failurePolicy Sometimes"),
        ];
        for (name, spec, message) in cases {
            let error = create(&api, &crr_object("v1beta1", name, spec))
                .await
                .err()
                .unwrap_or_else(|| panic!("{name}: an invalid CRR was admitted"));
            assert!(error.starts_with("400 "), "{name}: {error}");
            assert!(error.contains(message), "{name}: {error:?} lacks {message:?}");
            if foreign.is_empty() {
                assert!(error.contains(&env.suffix), "{name}: refused by our webhook: {error}");
            }
        }

        // Updates: spec and identity labels frozen, other changes allowed.
        let name = "ok-v1beta1";
        let refused = api
            .patch(name, &PatchParams::default(), &Patch::Merge(json!({"spec": {"ttlSecondsAfterFinished": 60}})))
            .await
            .expect_err("a spec change was admitted");
        assert!(api_message(&refused).contains("spec of ContainerRecreateRequest is immutable"), "{refused}");
        let refused = api
            .patch(name, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {keys::LABEL_POD_UID: "another"}}})))
            .await
            .expect_err("a pod-uid label change was admitted");
        assert!(api_message(&refused).contains("not allowed to update immutable label"), "{refused}");
        let labelled = api
            .patch(name, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"team": "web"}}})))
            .await
            .expect("an unrelated label change is allowed");
        assert_eq!(labelled.labels().get("team").map(String::as_str), Some("web"));
        let validated = webhook.metric("crr_webhook_reviews_total", "endpoint=\"validate\"").await;
        assert!(validated >= 1.0, "our validating endpoint answered ({validated})");

        // Rotation: a new key pair written to the Secret is served and published, no restart.
        let names = crr_webhook::certs::generate::service_dns_names(&env.namespace, "crr-webhook");
        crr_runtime::tls::install_crypto_provider();
        let rotated = crr_webhook::certs::generate::generate(&names).expect("generating a certificate");
        assert_ne!(rotated.ca_pem.as_bytes(), first_ca.as_slice());
        let secrets: Api<Secret> = Api::namespaced(env.client.clone(), &env.namespace);
        let data: BTreeMap<String, ByteString> = [
            ("tls.crt", &rotated.cert_pem),
            ("tls.key", &rotated.key_pem),
            ("ca.crt", &rotated.ca_pem),
        ]
        .into_iter()
        .map(|(key, value)| (key.to_owned(), ByteString(value.clone().into_bytes())))
        .collect();
        secrets
            .patch(&webhook.secret, &PatchParams::default(), &Patch::Merge(json!({"data": data})))
            .await
            .expect("rotating the Secret");
        // The Secret now holds a CA without its key: the webhook serves what was written and
        // migrates it by a CA rollover, so the published bundle holds the written CA (and, once
        // the rollover has staged its new CA, that one beside it).
        let ca = rotated.ca_pem;
        testbed::wait_for(
            Api::<ValidatingWebhookConfiguration>::all(env.client.clone()),
            &webhook.configuration,
            |config: Option<&ValidatingWebhookConfiguration>| {
                config.is_some_and(|c| c.webhooks.iter().flatten().all(|w| bundle_contains(&w.client_config, &ca)))
            },
            "the rotated CA to be published", WAIT,)
        .await;
        let created = create(&api, &crr_object("v1beta1", "after-rotation", valid.clone()))
            .await
            .unwrap_or_else(|error| panic!("after rotation, a valid CRR was refused: {error}"));
        assert_defaulted(&created, &pod, "v1beta1 after rotation");
        let process_alive = http_get(webhook.admin, "/healthz").await;
        assert_eq!(process_alive.map(|(code, _)| code), Some(200));
    })
    .await;
}

/// With the node daemon disabled, creation is refused with a message saying so. Only our
/// webhook runs with the gate off, so the refusal is ours.
#[tokio::test]
#[ignore = "needs the local test bed (hack/README.md); hack/cluster-test.sh runs it"]
async fn feature_gate_off_refuses_creation() {
    with_namespace("gate", |env| async move {
        let webhook = Webhook::start(&env, &["--node-daemon-enabled=false"]).await;
        webhook.register(&env).await;
        let pod = running_pod(&env, "web").await;
        let api = crr_api(&env.client, &env.namespace, "v1beta1");
        let error = create(
            &api,
            &crr_object(
                "v1beta1",
                "r",
                json!({"podName": pod.name_any(), "containers": [{"name": "app"}]}),
            ),
        )
        .await
        .expect_err("a CRR was admitted with the node daemon disabled");
        assert!(error.starts_with("403 "), "{error}");
        assert!(error.contains("node daemon is disabled"), "{error}");
        assert!(
            error.contains(&env.suffix),
            "refused by our webhook: {error}"
        );
        let denied = webhook
            .metric("crr_webhook_rejections_total", "FeatureGateDisabled")
            .await;
        assert!(denied >= 1.0, "rejection counted by reason ({denied})");
    })
    .await;
}

/// Pods carrying the opt-in label get the `KruisePodReady` readiness gate; others do not.
#[tokio::test]
#[ignore = "needs the local test bed (hack/README.md); hack/cluster-test.sh runs it"]
async fn readiness_gate_is_injected_into_labelled_pods() {
    with_namespace("pods", |env| async move {
        let label = gate_label(&env);
        let webhook = Webhook::start(&env, &[&format!("--readiness-gate-label={label}")]).await;
        webhook.register(&env).await;
        let pods: Api<Pod> = Api::namespaced(env.client.clone(), &env.namespace);
        let pod = |name: &str, labels: Value, gates: Value| -> Pod {
            serde_json::from_value(json!({
                "metadata": {"name": name, "labels": labels},
                // Bound to a node that does not exist: nothing needs to run.
                "spec": {"nodeName": "crr-webhook-test-nowhere", "readinessGates": gates,
                         "containers": [{"name": "c", "image": BUSYBOX}]},
            }))
            .expect("a Pod")
        };
        let create = |pod: Pod| {
            let pods = pods.clone();
            async move {
                let deadline = Instant::now() + WAIT;
                loop {
                    match pods.create(&PostParams::default(), &pod).await {
                        Ok(created) => return created,
                        Err(kube::Error::Api(status))
                            if status.message.contains("failed calling webhook")
                                && Instant::now() < deadline =>
                        {
                            tokio::time::sleep(Duration::from_millis(250)).await;
                        }
                        Err(error) => panic!("creating pod {}: {error}", pod.name_any()),
                    }
                }
            }
        };
        let gates = |pod: &Pod| -> Vec<String> {
            pod.spec
                .iter()
                .flat_map(|s| s.readiness_gates.iter().flatten())
                .map(|g| g.condition_type.clone())
                .collect()
        };
        let opted_in = create(pod(
            "opted-in",
            json!({label.as_str(): "true"}),
            Value::Null,
        ))
        .await;
        assert_eq!(gates(&opted_in), [keys::POD_CONDITION_KRUISE_POD_READY]);
        let with_other_gate = create(pod(
            "other-gate",
            json!({label.as_str(): "true"}),
            json!([{"conditionType": "example.com/other"}]),
        ))
        .await;
        assert_eq!(
            gates(&with_other_gate),
            ["example.com/other", keys::POD_CONDITION_KRUISE_POD_READY]
        );
        let plain = create(pod("plain", json!({"app": "web"}), Value::Null)).await;
        assert!(gates(&plain).is_empty(), "{:?}", gates(&plain));
        let patched = webhook
            .metric(
                "crr_webhook_reviews_total",
                "endpoint=\"pod\",verdict=\"patched\"",
            )
            .await;
        assert!(
            patched >= 2.0,
            "our pod endpoint patched both labelled pods ({patched})"
        );
    })
    .await;
}

/// Connects to the webhook's HTTPS port trusting exactly the CAs of `bundle` (PEM), as an API
/// server does with a caBundle; the error when the handshake fails.
async fn handshake(address: SocketAddr, server_name: &str, bundle: &str) -> Result<(), String> {
    use rustls::pki_types::{CertificateDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    for der in pem_certificates(bundle) {
        roots
            .add(CertificateDer::from(der))
            .map_err(|error| format!("a CA of the bundle: {error}"))?;
    }
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from(server_name.to_owned()).map_err(|error| error.to_string())?;
    let exchange = async {
        let stream = tokio::net::TcpStream::connect(address)
            .await
            .map_err(|error| format!("connecting: {error}"))?;
        tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
            .connect(name, stream)
            .await
            .map(drop)
            .map_err(|error| format!("handshake: {error}"))
    };
    tokio::time::timeout(Duration::from_secs(5), exchange)
        .await
        .map_err(|_| "handshake timed out".to_owned())?
}

/// The caBundles of every webhook of our two configurations, by configuration kind.
async fn published_bundles(env: &Env, configuration: &str) -> Vec<(&'static str, String)> {
    let text = |config: &k8s_openapi::api::admissionregistration::v1::WebhookClientConfig| {
        config
            .ca_bundle
            .as_ref()
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
            .unwrap_or_default()
    };
    let mutating = Api::<MutatingWebhookConfiguration>::all(env.client.clone())
        .get(configuration)
        .await
        .expect("reading the MutatingWebhookConfiguration");
    let validating = Api::<ValidatingWebhookConfiguration>::all(env.client.clone())
        .get(configuration)
        .await
        .expect("reading the ValidatingWebhookConfiguration");
    let mut bundles: Vec<(&'static str, String)> = mutating
        .webhooks
        .iter()
        .flatten()
        .map(|hook| ("mutating", text(&hook.client_config)))
        .collect();
    bundles.extend(
        validating
            .webhooks
            .iter()
            .flatten()
            .map(|hook| ("validating", text(&hook.client_config))),
    );
    bundles
}

fn secret_field(secret: &Secret, key: &str) -> String {
    secret
        .data
        .as_ref()
        .and_then(|data| data.get(key))
        .map(|value| String::from_utf8_lossy(&value.0).into_owned())
        .unwrap_or_default()
}

/// The self-managed certificate with test-bed lifetimes (CA 40 s, serving 15 s, 4 s overlaps):
/// while the webhook renews its serving certificate and rolls its CA over, every caBundle it
/// publishes is read again and again, and a TLS client trusting exactly that bundle must
/// complete a handshake with the webhook every time; so must the API server (a dry-run CRR
/// creation must reach our webhook, never fail calling it). Both CAs are in both
/// configurations' caBundle during the overlap; afterwards the Secret holds the new CA and its
/// key, the old CA has left the caBundles, and the renewals were Events and metrics.
#[tokio::test]
#[ignore = "needs the local test bed (hack/README.md); hack/cluster-test.sh runs it"]
async fn certificates_rotate_without_an_admission_outage() {
    with_namespace("rotate", |env| async move {
        crr_runtime::tls::install_crypto_provider();
        let started = Instant::now();
        // Listening on 0.0.0.0 of the cluster's network namespace: the API server calls
        // 127.0.0.1 there, the test calls the node address from outside.
        let webhook = Webhook::start_on(
            &env,
            "0.0.0.0",
            &[
                "--ca-validity-seconds=40",
                "--serving-validity-seconds=15",
                "--ca-overlap-seconds=4",
            ],
        )
        .await;
        let first_ca = String::from_utf8(webhook.register(&env).await).expect("a PEM CA");
        let https: SocketAddr = format!("{NODE_ADDRESS}:{}", webhook.port)
            .parse()
            .expect("an address");
        let server_name = format!("crr-webhook.{}.svc", env.namespace);
        let secrets: Api<Secret> = Api::namespaced(env.client.clone(), &env.namespace);
        let first_key = secret_field(&secrets.get(&webhook.secret).await.expect("the Secret"), "ca.key");
        assert!(!first_key.is_empty(), "the Secret keeps the CA's key (ca.key)");

        // The API server's view: a dry-run creation for a pod that does not exist reaches the
        // webhook (which refuses it) unless the API server cannot call it.
        let crrs = crr_api(&env.client, &env.namespace, "v1beta1");
        let probe = crr_object(
            "v1beta1",
            "probe",
            json!({"podName": "ghost", "containers": [{"name": "app"}]}),
        );
        let dry_run = PostParams {
            dry_run: true,
            ..PostParams::default()
        };

        let mut failures: Vec<String> = Vec::new();
        let mut serving_seen: Vec<String> = Vec::new();
        let mut signing_seen: Vec<String> = Vec::new();
        let mut served_by_first_ca = 0;
        let mut two_cas_in: std::collections::BTreeSet<&str> = Default::default();
        let (mut handshakes, mut admissions) = (0, 0);
        let deadline = started + Duration::from_secs(80);
        let retired = loop {
            let elapsed = started.elapsed();
            let secret = secrets.get(&webhook.secret).await.expect("reading the Secret");
            let serving = secret_field(&secret, "tls.crt");
            let signing = secret_field(&secret, "signing-ca.crt");
            if !signing_seen.contains(&signing) {
                signing_seen.push(signing.clone());
            }
            if !serving_seen.contains(&serving) {
                serving_seen.push(serving);
                if signing_seen.len() == 1 {
                    served_by_first_ca += 1;
                }
            }

            let bundles = published_bundles(&env, &webhook.configuration).await;
            let mut tried: Vec<&str> = Vec::new();
            for (kind, bundle) in &bundles {
                if pem_certificates(bundle).len() == 2 {
                    two_cas_in.insert(kind);
                }
                if tried.contains(&bundle.as_str()) {
                    continue;
                }
                tried.push(bundle);
                handshakes += 1;
                if let Err(error) = handshake(https, &server_name, bundle).await {
                    failures.push(format!(
                        "{elapsed:?}: trusting the {kind} caBundle ({} CAs): {error}",
                        pem_certificates(bundle).len()
                    ));
                }
            }

            match crrs.create(&dry_run, &probe).await {
                Err(kube::Error::Api(status)) if status.message.contains("no found Pod named ghost") => {
                    admissions += 1;
                }
                Err(kube::Error::Api(status)) if status.message.contains("failed calling webhook") => {
                    failures.push(format!("{elapsed:?}: the API server: {}", status.message));
                }
                other => panic!("unexpected answer to the dry-run probe: {other:?}"),
            }

            let retired = signing_seen.len() >= 2
                && bundles
                    .iter()
                    .all(|(_, bundle)| pem_certificates(bundle) == pem_certificates(&signing));
            if retired && served_by_first_ca >= 2 && two_cas_in.len() == 2 {
                break true;
            }
            if Instant::now() > deadline {
                break false;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        };
        eprintln!(
            "rotation seen in {:?}: {} serving certificates ({served_by_first_ca} from the first CA), {} signing CAs, {handshakes} handshakes, {admissions} admissions through the API server",
            started.elapsed(),
            serving_seen.len(),
            signing_seen.len()
        );
        assert!(failures.is_empty(), "admission outages: {failures:#?}");
        assert!(
            served_by_first_ca >= 2,
            "the serving certificate was renewed before the CA rollover"
        );
        assert_eq!(
            two_cas_in.len(),
            2,
            "both CAs were in the mutating and the validating caBundle during the overlap (seen in {two_cas_in:?})"
        );
        assert!(
            retired,
            "within 80 s a new CA signs and the old one left every caBundle ({} signing CAs seen)",
            signing_seen.len()
        );
        assert!(admissions > 0 && handshakes > 0);

        let secret = secrets.get(&webhook.secret).await.expect("reading the Secret");
        let signing = secret_field(&secret, "signing-ca.crt");
        assert_ne!(pem_certificates(&signing), pem_certificates(&first_ca), "a new CA signs");
        let key = secret_field(&secret, "ca.key");
        assert!(!key.is_empty() && key != first_key, "the Secret holds the new CA's key");
        let bundle = secret_field(&secret, "ca.crt");
        assert!(
            pem_certificates(&signing)
                .iter()
                .all(|ca| pem_certificates(&bundle).contains(ca)),
            "ca.crt holds the signing CA"
        );
        assert!(
            !pem_certificates(&bundle)
                .iter()
                .any(|ca| pem_certificates(&first_ca).contains(ca)),
            "the first CA has left ca.crt"
        );

        // Each step was an Event about the Secret.
        let events: Api<k8s_openapi::api::events::v1::Event> =
            Api::namespaced(env.client.clone(), &env.namespace);
        let wanted = [
            "ServingCertificateRenewed",
            "CARolloverStarted",
            "CABundlePublished",
            "CARolloverSwitched",
            "CARetired",
        ];
        let event_deadline = Instant::now() + Duration::from_secs(15);
        let reasons = loop {
            let reasons: std::collections::BTreeSet<String> = events
                .list(&ListParams::default())
                .await
                .expect("listing Events")
                .items
                .into_iter()
                .filter(|event| {
                    event.regarding.as_ref().and_then(|r| r.name.as_deref())
                        == Some(webhook.secret.as_str())
                        && event.reporting_controller.as_deref() == Some("crr-webhook")
                })
                .filter_map(|event| event.reason)
                .collect();
            if wanted.iter().all(|reason| reasons.contains(*reason)) || Instant::now() > event_deadline {
                break reasons;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        for reason in wanted {
            assert!(reasons.contains(reason), "no {reason} Event about the Secret: {reasons:?}");
        }

        // And the metrics of the replica that did it (the only one here).
        let serving_renewals = webhook
            .metric("crr_webhook_certificate_renewals_total", "certificate=\"serving\"")
            .await;
        let ca_renewals = webhook
            .metric("crr_webhook_certificate_renewals_total", "certificate=\"ca\"")
            .await;
        assert!(serving_renewals >= 2.0, "a renewal and the switch ({serving_renewals})");
        assert!(ca_renewals >= 1.0, "a new CA ({ca_renewals})");
        let ca_expiry = webhook
            .metric(
                "crr_webhook_certificate_expiry_timestamp_seconds",
                "certificate=\"ca\"",
            )
            .await;
        let signing_expiry = pem_certificates(&signing)
            .first()
            .and_then(|der| crr_webhook::x509::not_after(der).ok())
            .expect("the signing CA's expiry");
        assert!(
            ca_expiry >= signing_expiry as f64,
            "the expiry metric shows the new CA ({ca_expiry} < {signing_expiry})"
        );
    })
    .await;
}
