//! `kubectl crr rollout restart deploy/web`: asks the crr operator to restart a workload's
//! containers in place by setting the workload's annotation `crr.dev/restart-requested-at` to
//! the current time, with a merge patch of that one annotation. The pod template is not touched,
//! so no new ReplicaSet and no new pods: the operator sees the new value and starts one
//! ContainerRecreateRollout of the containers `crr.dev/recreate-containers` names (default:
//! every regular container), once per value, and names it in a `RestartRequested` Event.
//!
//! The pure parts (the target, the value, the patch, the line printed) are functions here with
//! their tests; [`execute`] is the one API call. It does not create or follow the rollout: the
//! operator does, and it may not run or may refuse the value (`kubectl crr triggers` shows it).

use crr_crds::keys;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};

use crate::cli::DryRun;
use crate::error::Error;
use crate::exit::Exit;

use crate::FIELD_MANAGER;

/// The longest object name the API server takes (a DNS subdomain).
const MAX_NAME_LENGTH: usize = 253;

/// A workload whose restart the operator acts on: a Deployment, StatefulSet or DaemonSet of
/// `apps/v1` (the kinds its triggers watch).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestartTarget {
    /// `Deployment`, `StatefulSet` or `DaemonSet`.
    pub kind: &'static str,
    /// Its resource: `deployments`, ...
    pub plural: &'static str,
    /// The workload's name.
    pub name: String,
}

impl RestartTarget {
    /// Reads `deploy/web`, `deployment/web`, `sts/db`, `statefulset/db`, `ds/agent`,
    /// `daemonset/agent` (plurals and any case too).
    pub fn parse(text: &str) -> Result<Self, Error> {
        let invalid = |message: String| Error::InvalidFlag {
            flag: "WORKLOAD",
            message,
        };
        // The kinds as `kubectl crr rollout` reads them; of those, the ones the triggers watch.
        let workload = crate::workload::workload_ref(text)?;
        let (kind, plural) = match workload.kind.as_str() {
            "Deployment" => ("Deployment", "deployments"),
            "StatefulSet" => ("StatefulSet", "statefulsets"),
            "DaemonSet" => ("DaemonSet", "daemonsets"),
            _ => {
                return Err(invalid(format!(
                    "{text:?}: the operator restarts Deployments, StatefulSets and DaemonSets on request; restart the ReplicaSet's Deployment, or its pods with `kubectl crr rollout {text} -c CONTAINER`"
                )));
            }
        };
        let name = workload.name.as_str();
        if !is_object_name(name) {
            return Err(invalid(format!(
                "{name:?} is not a workload name (lower-case letters, digits, '-' and '.', at most {MAX_NAME_LENGTH})"
            )));
        }
        Ok(Self {
            kind,
            plural,
            name: name.to_owned(),
        })
    }

    /// The resource to patch.
    pub fn resource(&self) -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apps", "v1", self.kind),
            self.plural,
        )
    }
}

impl std::fmt::Display for RestartTarget {
    /// As kubectl names it: `deployment.apps/web`.
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            formatter,
            "{}.apps/{}",
            self.kind.to_ascii_lowercase(),
            self.name
        )
    }
}

/// Whether `name` can name an object: a DNS subdomain (so it cannot reach another path, as
/// `web/scale` would).
fn is_object_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_LENGTH
        && name.chars().all(|character| {
            character.is_ascii_lowercase()
                || character.is_ascii_digit()
                || character == '-'
                || character == '.'
        })
        && name.starts_with(|character: char| character.is_ascii_alphanumeric())
        && name.ends_with(|character: char| character.is_ascii_alphanumeric())
}

/// The annotation's value for a restart asked for at `now`: RFC 3339 in UTC, to the second
/// (`2026-11-29T20:00:00Z`). Two requests within one second are one value, so one restart.
pub fn requested_value(now: jiff::Timestamp) -> String {
    now.round(jiff::Unit::Second)
        .unwrap_or(now)
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// The merge patch that sets `crr.dev/restart-requested-at` to `value` and nothing else.
pub fn patch_body(value: &str) -> serde_json::Value {
    serde_json::json!({
        "metadata": {"annotations": {keys::ANNOTATION_RESTART_REQUESTED_AT: value}}
    })
}

/// What is printed once the value is set (or would be, in a dry run), after
/// `kubectl rollout restart`'s `deployment.apps/web restarted`.
pub fn requested_line(target: &RestartTarget, value: &str, dry_run: Option<DryRun>) -> String {
    let set = format!(
        "{target} restart requested ({}={value})",
        keys::ANNOTATION_RESTART_REQUESTED_AT
    );
    match dry_run {
        None => format!("{set}; crr restarts its containers in place"),
        Some(DryRun::Client) => format!("{set} (dry run)"),
        Some(DryRun::Server) => format!("{set} (server dry run)"),
    }
}

/// Runs `kubectl crr rollout restart WORKLOAD`: sets the annotation (with `--dry-run=server`
/// the API server checks the patch and stores nothing; with `--dry-run[=client]` the workload
/// is only read, to say whether it exists).
pub async fn execute(
    client: Client,
    namespace: &str,
    workload: &str,
    dry_run: Option<DryRun>,
) -> Result<Exit, Error> {
    let target = RestartTarget::parse(workload)?;
    let value = requested_value(jiff::Timestamp::now());
    let api: Api<DynamicObject> = Api::namespaced_with(client, namespace, &target.resource());
    let not_found = || Error::WorkloadNotFound {
        namespace: namespace.to_owned(),
        kind: target.kind.to_ascii_lowercase(),
        name: target.name.clone(),
    };
    if dry_run == Some(DryRun::Client) {
        api.get_metadata_opt(&target.name)
            .await?
            .ok_or_else(not_found)?;
    } else {
        let params = PatchParams {
            dry_run: dry_run == Some(DryRun::Server),
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        api.patch_metadata(&target.name, &params, &Patch::Merge(patch_body(&value)))
            .await
            .map_err(|error| match error {
                kube::Error::Api(status) if status.code == 404 => not_found(),
                other => other.into(),
            })?;
    }
    println!("{}", requested_line(&target, &value, dry_run));
    Ok(Exit::Success)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workloads_are_read_by_kubectl_names_of_the_three_kinds() {
        for (text, kind, plural) in [
            ("deploy/web", "Deployment", "deployments"),
            ("deployment/web", "Deployment", "deployments"),
            ("Deployments/web", "Deployment", "deployments"),
            ("sts/web", "StatefulSet", "statefulsets"),
            ("statefulset/web", "StatefulSet", "statefulsets"),
            ("ds/web", "DaemonSet", "daemonsets"),
            ("daemonset/web", "DaemonSet", "daemonsets"),
        ] {
            let target = RestartTarget::parse(text).expect(text);
            assert_eq!(
                target,
                RestartTarget {
                    kind,
                    plural,
                    name: "web".to_owned()
                }
            );
            let resource = target.resource();
            assert_eq!(
                (resource.api_version.as_str(), resource.plural.as_str()),
                ("apps/v1", plural)
            );
        }
        assert_eq!(
            RestartTarget::parse("deploy/web").unwrap().to_string(),
            "deployment.apps/web"
        );
        assert_eq!(
            RestartTarget::parse("sts/db").unwrap().to_string(),
            "statefulset.apps/db"
        );
    }

    #[test]
    fn other_kinds_and_names_that_are_no_object_names_are_refused() {
        for bad in [
            "web",
            "deploy/",
            "pod/web",
            "job/web",
            "deploy/Web",
            "deploy/web/scale",
            "deploy/-web",
            "deploy/web.",
            &format!("deploy/{}", "w".repeat(254)),
        ] {
            assert!(RestartTarget::parse(bad).is_err(), "{bad} accepted");
        }
        let error = RestartTarget::parse("rs/web-5d9f").expect_err("a ReplicaSet");
        assert!(error.to_string().contains("Deployment"), "{error}");
        assert!(RestartTarget::parse("deploy/web-1.v2").is_ok());
    }

    #[test]
    fn the_value_is_utc_to_the_second() {
        for (now, value) in [
            ("2026-11-29T20:00:00Z", "2026-11-29T20:00:00Z"),
            ("2026-11-29T19:59:59.6Z", "2026-11-29T20:00:00Z"),
            ("2026-11-29T20:00:00.4Z", "2026-11-29T20:00:00Z"),
            ("2026-11-29T21:30:05+01:00", "2026-11-29T20:30:05Z"),
        ] {
            let now: jiff::Timestamp = now.parse().expect(now);
            assert_eq!(requested_value(now), value);
        }
    }

    #[test]
    fn the_patch_sets_the_one_annotation() {
        assert_eq!(
            patch_body("2026-11-29T20:00:00Z"),
            serde_json::json!({"metadata": {"annotations": {
                "crr.dev/restart-requested-at": "2026-11-29T20:00:00Z"
            }}})
        );
    }

    /// A scripted API server: each step checks the request and answers as the API server would.
    mod api {
        use http::{Request, Response};
        use kube::client::Body;

        pub type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

        pub fn client() -> (kube::Client, Handle) {
            let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
            (kube::Client::new(service, "default"), handle)
        }

        /// The next request, answered with `status` and `body`.
        pub async fn answer(handle: &mut Handle, status: u16, body: serde_json::Value) -> Sent {
            let (request, send) =
                tokio::time::timeout(std::time::Duration::from_secs(5), handle.next_request())
                    .await
                    .expect("a request")
                    .expect("the client is alive");
            let method = request.method().to_string();
            let path = request.uri().path().to_owned();
            let query = request.uri().query().unwrap_or_default().to_owned();
            let content_type = request
                .headers()
                .get(http::header::CONTENT_TYPE)
                .map(|value| value.to_str().expect("ASCII").to_owned());
            let bytes = request.into_body().collect_bytes().await.expect("a body");
            let sent = if bytes.is_empty() {
                serde_json::Value::Null
            } else {
                serde_json::from_slice(&bytes).expect("JSON")
            };
            send.send_response(
                Response::builder()
                    .status(status)
                    .body(Body::from(serde_json::to_vec(&body).expect("JSON")))
                    .expect("a response"),
            );
            Sent {
                method,
                path,
                query,
                content_type,
                body: sent,
            }
        }

        /// What the plugin sent.
        pub struct Sent {
            pub method: String,
            pub path: String,
            pub query: String,
            pub content_type: Option<String>,
            pub body: serde_json::Value,
        }

        pub fn metadata(name: &str) -> serde_json::Value {
            serde_json::json!({
                "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                "metadata": {"name": name, "namespace": "shop"},
            })
        }

        pub fn not_found(name: &str) -> serde_json::Value {
            serde_json::json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": format!("deployments.apps \"{name}\" not found"),
                "reason": "NotFound", "code": 404,
            })
        }
    }

    /// `key=value` pairs of a query string.
    fn query_has(query: &str, pair: &str) -> bool {
        query.split('&').any(|part| part == pair)
    }

    #[tokio::test]
    async fn a_restart_is_one_merge_patch_of_the_annotation_by_the_plugin() {
        let (client, mut handle) = api::client();
        let run = tokio::spawn(async move { execute(client, "shop", "deploy/web", None).await });
        let sent = api::answer(&mut handle, 200, api::metadata("web")).await;
        assert_eq!(
            (sent.method.as_str(), sent.path.as_str()),
            ("PATCH", "/apis/apps/v1/namespaces/shop/deployments/web")
        );
        assert!(
            query_has(&sent.query, "fieldManager=kubectl-crr"),
            "{}",
            sent.query
        );
        assert!(!sent.query.contains("dryRun"), "{}", sent.query);
        assert_eq!(
            sent.content_type.as_deref(),
            Some("application/merge-patch+json")
        );
        let value = sent.body["metadata"]["annotations"][keys::ANNOTATION_RESTART_REQUESTED_AT]
            .as_str()
            .expect("the value")
            .to_owned();
        assert_eq!(sent.body, patch_body(&value));
        let at: jiff::Timestamp = value.parse().expect("RFC 3339");
        assert!(
            jiff::Timestamp::now().duration_since(at).as_secs().abs() < 60,
            "{value}"
        );
        assert_eq!(run.await.unwrap().expect("requested"), Exit::Success);
    }

    #[tokio::test]
    async fn a_workload_that_does_not_exist_is_an_error() {
        for dry_run in [None, Some(DryRun::Server), Some(DryRun::Client)] {
            let (client, mut handle) = api::client();
            let run = tokio::spawn(async move { execute(client, "shop", "sts/db", dry_run).await });
            let sent = api::answer(&mut handle, 404, api::not_found("db")).await;
            let method = if dry_run == Some(DryRun::Client) {
                "GET"
            } else {
                "PATCH"
            };
            assert_eq!(
                (sent.method.as_str(), sent.path.as_str()),
                (method, "/apis/apps/v1/namespaces/shop/statefulsets/db")
            );
            let error = run.await.unwrap().expect_err("not found");
            assert!(
                matches!(&error, Error::WorkloadNotFound { kind, name, namespace }
                    if kind == "statefulset" && name == "db" && namespace == "shop"),
                "{error:?}"
            );
            assert_eq!(
                error.to_string(),
                "statefulset \"db\" not found in namespace \"shop\""
            );
        }
    }

    #[tokio::test]
    async fn a_server_dry_run_patches_with_dry_run_and_a_client_one_only_reads() {
        let (client, mut handle) = api::client();
        let run =
            tokio::spawn(
                async move { execute(client, "shop", "ds/agent", Some(DryRun::Server)).await },
            );
        let sent = api::answer(&mut handle, 200, api::metadata("agent")).await;
        assert_eq!(sent.method, "PATCH");
        assert!(query_has(&sent.query, "dryRun=All"), "{}", sent.query);
        assert_eq!(run.await.unwrap().expect("checked"), Exit::Success);

        let (client, mut handle) = api::client();
        let run =
            tokio::spawn(
                async move { execute(client, "shop", "ds/agent", Some(DryRun::Client)).await },
            );
        let sent = api::answer(&mut handle, 200, api::metadata("agent")).await;
        assert_eq!(
            (sent.method.as_str(), sent.path.as_str()),
            ("GET", "/apis/apps/v1/namespaces/shop/daemonsets/agent")
        );
        assert_eq!(run.await.unwrap().expect("checked"), Exit::Success);
    }

    #[test]
    fn the_line_reads_like_kubectl_rollout_restart() {
        let target = RestartTarget::parse("deploy/web").unwrap();
        let value = "2026-11-29T20:00:00Z";
        assert_eq!(
            requested_line(&target, value, None),
            "deployment.apps/web restart requested (crr.dev/restart-requested-at=2026-11-29T20:00:00Z); crr restarts its containers in place"
        );
        assert_eq!(
            requested_line(&target, value, Some(DryRun::Client)),
            "deployment.apps/web restart requested (crr.dev/restart-requested-at=2026-11-29T20:00:00Z) (dry run)"
        );
        assert_eq!(
            requested_line(&target, value, Some(DryRun::Server)),
            "deployment.apps/web restart requested (crr.dev/restart-requested-at=2026-11-29T20:00:00Z) (server dry run)"
        );
    }
}
