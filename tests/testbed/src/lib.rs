//! What the cluster tests of every crate share (`tests/cluster.rs` of crds' neighbours): reaching
//! the local test bed (hack/README.md) and only it, the CRD, waiting by watch, a fresh namespace per
//! test, and keeping an installed crr out of that namespace. It decides two things, as pure
//! functions with their own tests: whether a cluster may be written to ([`admit_cluster`]) and
//! what a harness-less suite was asked to run ([`SuiteArgs`]).
//!
//! **A cluster test never passes without a cluster.** Each one is
//! `#[ignore = "needs the local test bed (hack/README.md); hack/cluster-test.sh runs it"]`, so a
//! plain `cargo test --workspace` reports it *ignored*, not passed. Run with `--include-ignored`
//! (or `--ignored`), as hack/cluster-test.sh does, it fails with the reason when there is no usable
//! cluster: [`cluster`] panics, it never skips. (`CRR_CLUSTER_TESTS`, which used to turn skipping
//! into failing, is gone: there is no skipping left to turn off.)
//!
//! **The end-to-end suite** (tests/e2e, `harness = false`, its own `main`) keeps the same contract
//! by hand, reading libtest's own flags through [`SuiteArgs`]: without `--ignored` or
//! `--include-ignored` it runs nothing and says so in libtest's words (`test simple ... ignored`,
//! `test result: ok. 0 passed; 0 failed; 16 ignored`), exit 0; with either, a missing cluster or a
//! crr that is not installed ends it with the reason and exit 1. Making the target opt-in with
//! `test = false` instead would also take it out of `--all-targets` and `--tests`, so clippy and
//! the build would stop checking its code.
//!
//! **Only the local test bed is written to.** These tests create namespaces, cluster-wide
//! admission policies and webhook configurations, and the CRD. Before its first request,
//! [`cluster`] reads the inferred client configuration and refuses any API server but the test
//! bed's ([`TESTBED_APISERVER`], from hack/cluster-env.sh) unless `CRR_TESTBED_ANY_CLUSTER=1`
//! ([`ANY_CLUSTER_ENV`]): a developer's `cargo test` with another cluster current fails, touching
//! nothing.
//!
//! `CRR_KEEP_NAMESPACES=1` keeps each test's namespace (and what the test registered for it) for
//! a look afterwards.

#![forbid(unsafe_code)]

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

/// The local test bed's API server (`APISERVER` in hack/cluster-env.sh).
pub const TESTBED_APISERVER: &str = "https://10.213.0.2:6443";

/// The test bed's admin kubeconfig (`KUBECONFIG_ADMIN` in hack/cluster-env.sh).
pub const TESTBED_KUBECONFIG: &str = "/var/lib/crr-cluster/admin.kubeconfig";

/// Set to `1`, lets the tests write to a cluster other than the local test bed.
pub const ANY_CLUSTER_ENV: &str = "CRR_TESTBED_ANY_CLUSTER";

/// A cluster the tests may write to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admitted {
    /// The local test bed.
    TestBed,
    /// Another cluster, allowed by [`ANY_CLUSTER_ENV`].
    Elsewhere,
}

/// Whether the tests may write to the API server at `url`: the local test bed's always, any other
/// only when `any_cluster` ([`ANY_CLUSTER_ENV`] is `1`). The refusal names the URL found and both
/// ways out.
pub fn admit_cluster(url: &http::Uri, any_cluster: bool) -> Result<Admitted, String> {
    let port = url.port_u16().or(match url.scheme_str() {
        Some("https") => Some(443),
        Some("http") => Some(80),
        _ => None,
    });
    let test_bed = url.scheme_str() == Some("https")
        && url.host() == Some("10.213.0.2")
        && port == Some(6443)
        && matches!(url.path(), "" | "/");
    match (test_bed, any_cluster) {
        (true, _) => Ok(Admitted::TestBed),
        (false, true) => Ok(Admitted::Elsewhere),
        (false, false) => Err(format!(
            "refusing to run cluster tests against {url}: they create namespaces, admission \
             policies, webhook configurations and the CRD, and only the local test bed \
             ({TESTBED_APISERVER}) is known to be disposable. Point KUBECONFIG at \
             {TESTBED_KUBECONFIG} (hack/README.md), or set {ANY_CLUSTER_ENV}=1 to use this \
             cluster anyway"
        )),
    }
}

/// The client configuration the tests use (kube's inference: `KUBECONFIG`, `~/.kube/config`, or
/// in-cluster), once [`admit_cluster`] allows writing to its API server.
pub async fn test_bed_config() -> Result<kube::Config, String> {
    let config = kube::Config::infer().await.map_err(|error| {
        format!(
            "no client configuration ({error}): start the local test bed (hack/README.md) \
             and export KUBECONFIG={TESTBED_KUBECONFIG}"
        )
    })?;
    let any_cluster = std::env::var(ANY_CLUSTER_ENV).as_deref() == Ok("1");
    if admit_cluster(&config.cluster_url, any_cluster)? == Admitted::Elsewhere {
        // Written to the stderr handle, not with eprintln!, so the test harness does not swallow it.
        let _ = writeln!(
            std::io::stderr(),
            "note: {ANY_CLUSTER_ENV}=1: running cluster tests against {}, not the local test bed",
            config.cluster_url
        );
    }
    Ok(config)
}

/// The client of the local test bed, or why there is none: see [`connect_where`].
pub async fn connect() -> Result<Client, String> {
    connect_where(|| Ok(())).await
}

/// A client whose API server [`admit_cluster`] allows and answers within 15 s, on a machine that
/// `usable` accepts (say, it has the test bed's network namespace); or why not. Nothing is sent to
/// a refused API server.
pub async fn connect_where(usable: impl FnOnce() -> Result<(), String>) -> Result<Client, String> {
    crr_runtime::tls::install_crypto_provider();
    let config = test_bed_config().await?;
    let url = config.cluster_url.clone();
    let connect = async {
        let client = Client::try_from(config).map_err(|e| e.to_string())?;
        client.apiserver_version().await.map_err(|e| {
            format!("{url} does not answer ({e}): is the local test bed up (hack/README.md)?")
        })?;
        usable()?;
        Ok::<_, String>(client)
    };
    match tokio::time::timeout(Duration::from_secs(15), connect).await {
        Ok(outcome) => outcome,
        Err(_) => Err(format!(
            "{url} did not answer within 15 s: is the local test bed up (hack/README.md)?"
        )),
    }
}

/// The cluster client; panics (failing the test) with the reason when there is no usable one.
pub async fn cluster() -> Client {
    cluster_where(|| Ok(())).await
}

/// [`cluster`], also requiring `usable` of the machine (say, the test bed's network namespace).
pub async fn cluster_where(usable: impl FnOnce() -> Result<(), String>) -> Client {
    match connect_where(usable).await {
        Ok(client) => client,
        Err(reason) => panic!("this cluster test cannot run: {reason}"),
    }
}

/// What libtest's flags ask of a test target with its own `main` (`harness = false`), whose tests
/// all need the cluster and so count as ignored (module docs): the flags it does not know, such as
/// `--nocapture`, change nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SuiteArgs {
    /// `--ignored` or `--include-ignored`: run the tests.
    pub run_ignored: bool,
    /// `--list`: name the tests, run none.
    pub list: bool,
    /// Names to run (any of them as a substring); none: all.
    pub filters: Vec<String>,
    /// `--skip NAME`: names not to run (as a substring).
    pub skips: Vec<String>,
}

impl SuiteArgs {
    /// Reads the arguments after the program's name, as libtest would.
    pub fn parse(args: impl IntoIterator<Item = String>) -> Self {
        /// libtest's flags that take their value as the next argument.
        const WITH_VALUE: [&str; 6] = [
            "--test-threads",
            "--color",
            "--format",
            "--logfile",
            "--shuffle-seed",
            "-Z",
        ];
        let mut parsed = Self::default();
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--ignored" | "--include-ignored" => parsed.run_ignored = true,
                "--list" => parsed.list = true,
                "--skip" => parsed.skips.extend(args.next()),
                flag if WITH_VALUE.contains(&flag) => {
                    args.next();
                }
                flag if flag.starts_with("--skip=") => {
                    parsed.skips.push(flag["--skip=".len()..].to_owned());
                }
                flag if flag.starts_with('-') => {}
                filter => parsed.filters.push(filter.to_owned()),
            }
        }
        parsed
    }

    /// Whether the test `name` is among those asked for.
    pub fn selects(&self, name: &str) -> bool {
        (self.filters.is_empty()
            || self
                .filters
                .iter()
                .any(|filter| name.contains(filter.as_str())))
            && !self.skips.iter().any(|skip| name.contains(skip.as_str()))
    }
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
    wait_established(client, keys::CRD_NAME, within).await;
}

/// Waits (at most `within`) until the CRD `name` is Established: its kind is served.
pub async fn wait_established(client: &Client, name: &str, within: Duration) {
    let established = |crd: Option<&CustomResourceDefinition>| {
        crd.and_then(|crd| crd.status.as_ref())
            .and_then(|status| status.conditions.as_ref())
            .is_some_and(|conditions| {
                conditions
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            })
    };
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    wait_for(
        crds,
        name,
        established,
        &format!("the CRD {name} to be established"),
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
    let client = cluster().await;
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
/// in whatever namespace crr is installed) every write of requests, rollouts,
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
                "apiGroups": [keys::GROUP, keys::ROLLOUT_GROUP, ""],
                "apiVersions": ["*"],
                "operations": ["CREATE", "UPDATE", "DELETE"],
                "resources": [
                    keys::PLURAL, format!("{}/status", keys::PLURAL),
                    keys::ROLLOUT_PLURAL, format!("{}/status", keys::ROLLOUT_PLURAL),
                    "configmaps",
                ],
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
    let mut config = test_bed_config()
        .await
        .unwrap_or_else(|reason| panic!("{reason}"));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn admit(url: &str, any_cluster: bool) -> Result<Admitted, String> {
        admit_cluster(&url.parse().expect("a URL"), any_cluster)
    }

    #[test]
    fn admits_the_test_bed_api_server() {
        for url in [
            TESTBED_APISERVER,
            "https://10.213.0.2:6443/",
            "HTTPS://10.213.0.2:6443",
        ] {
            assert_eq!(admit(url, false), Ok(Admitted::TestBed), "{url}");
        }
    }

    #[test]
    fn refuses_other_api_servers_naming_the_url_and_the_ways_out() {
        for url in [
            "https://10.213.0.2",
            "https://10.213.0.2:443",
            "http://10.213.0.2:6443",
            "https://10.213.0.3:6443",
            "https://127.0.0.1:6443",
            "https://kubernetes.default.svc",
            "https://prod.example.com:6443",
            "https://10.213.0.2:6443/some/proxy",
        ] {
            let refusal = admit(url, false).expect_err(url);
            let shown = url.parse::<http::Uri>().expect("a URL").to_string();
            assert!(refusal.contains(&shown), "{url}: {refusal}");
            assert!(refusal.contains(TESTBED_APISERVER), "{url}: {refusal}");
            assert!(refusal.contains(TESTBED_KUBECONFIG), "{url}: {refusal}");
            assert!(
                refusal.contains(&format!("{ANY_CLUSTER_ENV}=1")),
                "{url}: {refusal}"
            );
        }
    }

    #[test]
    fn any_cluster_switch_admits_other_api_servers_as_elsewhere() {
        assert_eq!(
            admit("https://prod.example.com:6443", true),
            Ok(Admitted::Elsewhere)
        );
        assert_eq!(admit(TESTBED_APISERVER, true), Ok(Admitted::TestBed));
    }

    fn suite(args: &[&str]) -> SuiteArgs {
        SuiteArgs::parse(args.iter().map(|arg| (*arg).to_owned()))
    }

    #[test]
    fn suite_runs_nothing_without_an_ignored_flag() {
        for args in [
            &[][..],
            &["--nocapture"],
            &["simple"],
            &["--test-threads", "1"],
        ] {
            assert!(!suite(args).run_ignored, "{args:?}");
        }
        assert!(suite(&["--include-ignored"]).run_ignored);
        assert!(suite(&["--ignored"]).run_ignored);
    }

    #[test]
    fn suite_reads_filters_skips_and_list_as_libtest_does() {
        let args = suite(&[
            "--test-threads",
            "1",
            "--include-ignored",
            "plugin",
            "--skip",
            "batch",
            "--skip=wait2",
            "--color=never",
            "--format",
            "pretty",
            "--exact",
        ]);
        assert_eq!(args.filters, ["plugin"]);
        assert_eq!(args.skips, ["batch", "wait2"]);
        assert!(args.run_ignored && !args.list);
        assert!(args.selects("plugin-wait"));
        assert!(!args.selects("plugin-batch"), "skipped");
        assert!(!args.selects("simple"), "filtered out");
        assert!(suite(&["--list"]).list);
        assert!(suite(&[]).selects("anything"));
    }
}
