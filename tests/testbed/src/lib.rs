//! What the cluster tests of every crate share (`tests/cluster.rs` of crds' neighbours): reaching
//! the local test bed (hack/README.md), the CRD, waiting by watch, a fresh namespace per test, and
//! keeping an installed crr out of that namespace.
//!
//! Without a reachable cluster the tests print why and pass; with `CRR_CLUSTER_TESTS=1` (what
//! `make test` sets) a missing cluster is a failure. `CRR_KEEP_NAMESPACES=1` keeps each test's
//! namespace (and what the test registered for it) for a look afterwards.

use std::collections::BTreeMap;
use std::future::Future;
use std::io::Write as _;
use std::time::Duration;

use crr_crds::keys;
use crr_crds::v1beta1::ContainerRecreateRequest;
use futures::FutureExt as _;
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::{Condition, await_condition};
use kube::{Api, Client, ResourceExt as _};
use serde_json::json;

/// The label every test namespace carries, valued with the crate that made it.
pub const TEST_LABEL: &str = "crr.apps.kruise.io/test";

/// The cluster client, or `None` (after saying why) when the tests should be skipped.
pub async fn cluster() -> Option<Client> {
    cluster_where(|| Ok(())).await
}

/// [`cluster`], also requiring `usable` of the machine (say, the test bed's network namespace).
pub async fn cluster_where(usable: impl FnOnce() -> Result<(), String>) -> Option<Client> {
    let required = std::env::var("CRR_CLUSTER_TESTS").as_deref() == Ok("1");
    let _ = rustls::crypto::ring::default_provider().install_default();
    let connect = async {
        let client = Client::try_default().await.map_err(|e| e.to_string())?;
        client
            .apiserver_version()
            .await
            .map_err(|e| e.to_string())?;
        usable()?;
        Ok::<_, String>(client)
    };
    let reason = match tokio::time::timeout(Duration::from_secs(15), connect).await {
        Ok(Ok(client)) => return Some(client),
        Ok(Err(error)) => error,
        Err(_) => "the API server did not answer within 15 s".to_owned(),
    };
    if required {
        panic!("CRR_CLUSTER_TESTS=1 but no usable cluster: {reason}");
    }
    // Written to the stderr handle, not with eprintln!, so the test harness does not swallow it.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED: no usable Kubernetes cluster ({reason}). Start the local cluster \
         (hack/README.md), export its KUBECONFIG and set CRR_CLUSTER_TESTS=1 to run these tests."
    );
    None
}

/// Waits (by watch) until `condition` holds for the named object (`None`: it holds for no
/// object); panics after `within`, showing the object as it is then.
pub async fn wait_for<K>(
    api: Api<K>,
    name: &str,
    condition: impl Condition<K>,
    what: &str,
    within: Duration,
) -> Option<K>
where
    K: Clone + std::fmt::Debug + Send + serde::de::DeserializeOwned + kube::Resource + 'static,
{
    match tokio::time::timeout(within, await_condition(api.clone(), name, condition)).await {
        Ok(Ok(object)) => object,
        Ok(Err(error)) => panic!("waiting for {what}: {error}"),
        Err(_) => {
            let current = api.get_opt(name).await;
            panic!("timed out after {within:?} waiting for {what}; current object: {current:#?}")
        }
    }
}

/// Creates the CRD when it is missing (without its conversion webhook: these tests use the
/// storage version) and waits until it is established.
pub async fn ensure_crd(client: &Client, within: Duration) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    if crds
        .get_opt(keys::CRD_NAME)
        .await
        .expect("reading the CRD")
        .is_none()
    {
        let mut crd =
            crr_crds::crd(&crr_crds::ConversionService::default()).expect("building the CRD");
        crd.spec.conversion = Some(CustomResourceConversion {
            strategy: "None".to_owned(),
            webhook: None,
        });
        match crds.create(&PostParams::default(), &crd).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.is_already_exists() => {}
            Err(error) => panic!("creating the CRD: {error}"),
        }
    }
    let established = |crd: Option<&CustomResourceDefinition>| {
        crd.and_then(|crd| crd.status.as_ref())
            .and_then(|status| status.conditions.as_ref())
            .is_some_and(|conditions| {
                conditions
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            })
    };
    wait_for(
        crds,
        keys::CRD_NAME,
        established,
        "the CRD to be established",
        within,
    )
    .await;
}

/// A short hexadecimal suffix that keeps names of parallel tests and runs apart.
pub fn unique_suffix() -> String {
    format!(
        "{:x}",
        std::process::id() ^ jiff::Timestamp::now().subsec_nanosecond().unsigned_abs()
    )
}

/// Runs `body` with the client in a fresh namespace `<prefix>-<test>-<suffix>` labelled
/// [`TEST_LABEL`]`=<component>`, after making sure the CRD is there; cleans up as
/// [`in_namespace`] does. `within` bounds the waits.
pub async fn with_namespace<F, Fut>(
    prefix: &str,
    component: &str,
    test: &str,
    within: Duration,
    body: F,
) where
    F: FnOnce(Client, String) -> Fut,
    Fut: Future<Output = ()>,
{
    let Some(client) = cluster().await else {
        return;
    };
    ensure_crd(&client, within).await;
    let name = format!("{prefix}-{test}-{}", unique_suffix());
    let labels = BTreeMap::from([(TEST_LABEL.to_owned(), component.to_owned())]);
    let body = body(client.clone(), name.clone());
    in_namespace(&client, &name, labels, body, async {}).await;
}

/// Runs `body` in the fresh namespace `namespace` (created with `labels`), then cleans up, also
/// when `body` panics: the isolation policy of [`deny_writes`] if there is one, then (unless
/// `CRR_KEEP_NAMESPACES=1`) `cleanup`, the finalizers of leftover requests, and the namespace.
pub async fn in_namespace(
    client: &Client,
    namespace: &str,
    labels: BTreeMap<String, String>,
    body: impl Future<Output = ()>,
    cleanup: impl Future<Output = ()>,
) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: ObjectMeta {
                    name: Some(namespace.to_owned()),
                    labels: Some(labels),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .expect("creating the test namespace");
    let outcome = std::panic::AssertUnwindSafe(body).catch_unwind().await;
    let _ = Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
        .delete(namespace, &DeleteParams::default())
        .await;
    let _ = Api::<ValidatingAdmissionPolicy>::all(client.clone())
        .delete(namespace, &DeleteParams::default())
        .await;
    if std::env::var("CRR_KEEP_NAMESPACES").as_deref() == Ok("1") {
        eprintln!("keeping namespace {namespace}");
    } else {
        cleanup.await;
        // Finalizers of leftover requests (the operator adds them) must not keep the namespace.
        let crrs: Api<ContainerRecreateRequest> = Api::namespaced(client.clone(), namespace);
        if let Ok(list) = crrs.list(&Default::default()).await {
            for crr in list {
                let _ = crrs
                    .patch(
                        &crr.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(json!({ "metadata": { "finalizers": null } })),
                    )
                    .await;
            }
        }
        let _ = namespaces
            .delete(namespace, &DeleteParams::background())
            .await;
    }
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// The user an installed component runs as (its service account in manifests/).
fn installed_account(component: &str) -> String {
    format!("system:serviceaccount:crr-system:{component}")
}

/// Denies the installed components `components` (service account names, say `crr-node-daemon`,
/// in whatever namespace crr is installed) every write of requests,
/// their status and ConfigMaps in `namespace`, with `message`, through a ValidatingAdmissionPolicy
/// named after the namespace (removed by [`in_namespace`]); returns once the API server enforces
/// it, proven by a dry-run as the first of them being refused. So the component under test is
/// the only one acting there, whatever is installed in the cluster.
pub async fn deny_writes(
    client: &Client,
    namespace: &str,
    components: &[&str],
    message: &str,
    within: Duration,
) {
    let is_installed = components
        .iter()
        .map(|component| format!("request.userInfo.username.endsWith(':{component}')"))
        .collect::<Vec<_>>()
        .join(" || ");
    let policy: ValidatingAdmissionPolicy = serde_json::from_value(json!({
        "metadata": {"name": namespace, "labels": {TEST_LABEL: "isolation"}},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [keys::GROUP, ""],
                "apiVersions": ["*"],
                "operations": ["CREATE", "UPDATE", "DELETE"],
                "resources": [keys::PLURAL, format!("{}/status", keys::PLURAL), "configmaps"],
            }]},
            "matchConditions": [{"name": "installed-crr", "expression": is_installed}],
            "validations": [{"expression": "false", "message": message}],
        },
    }))
    .expect("a policy");
    let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
        "metadata": {"name": namespace, "labels": {TEST_LABEL: "isolation"}},
        "spec": {
            "policyName": namespace,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {
                "kubernetes.io/metadata.name": namespace,
            }}},
        },
    }))
    .expect("a binding");
    Api::<ValidatingAdmissionPolicy>::all(client.clone())
        .create(&PostParams::default(), &policy)
        .await
        .expect("creating the isolation policy");
    Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .expect("creating the isolation policy binding");
    // Probe as an installed component with every right, so only the policy can refuse.
    let mut config = kube::Config::infer().await.expect("a kubeconfig");
    config.auth_info.impersonate = components.first().map(|first| installed_account(first));
    config.auth_info.impersonate_groups = Some(vec!["system:masters".to_owned()]);
    let impersonated = Client::try_from(config).expect("an impersonating client");
    let config_maps: Api<ConfigMap> = Api::namespaced(impersonated, namespace);
    let probe = ConfigMap {
        metadata: ObjectMeta {
            name: Some("isolation-probe".to_owned()),
            ..Default::default()
        },
        ..Default::default()
    };
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let enforced = async {
        loop {
            match config_maps.create(&dry_run, &probe).await {
                Err(kube::Error::Api(status)) if status.message.contains(message) => return,
                _ => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    };
    tokio::time::timeout(within, enforced)
        .await
        .expect("the isolation policy is never enforced");
}
