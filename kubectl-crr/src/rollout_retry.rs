//! `kubectl crr rollout retry NAME`: a new rollout of the pods a finished one did not recreate
//! (its failed pods, and the ones it never started when it failed or was aborted), with the same
//! spec and `onlyPods` naming them. The old rollout stays, as the record of what happened; the
//! new one carries the annotation `crr.dev/retry-of`.
//!
//! The pure part ([`pods_to_retry`], [`retry_of`]) decides from the old rollout, its target's
//! pods and its requests; [`execute`] reads them and creates the rollout.

use std::collections::BTreeSet;

use crr_crds::keys;
use crr_crds::rollout::{ContainerRecreateRollout, target_name};
use crr_crds::rules::rollout::MAX_ONLY_PODS;
use crr_crds::v1beta1::ContainerRecreateRequest;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client, ResourceExt};

use crate::cli::OutputFormat;
use crate::error::Error;
use crate::exit::Exit;
use crate::progress::Outcome;

use crate::FIELD_MANAGER;

/// The names of the pods `old` (a finished rollout) did not recreate, sorted: the pods of its
/// target (`pods`, as listed now) created before it and not being deleted, within its own
/// `onlyPods` when set, whose request of `old` (`requests`) did not succeed or never existed.
pub fn pods_to_retry(
    old: &ContainerRecreateRollout,
    pods: &[ObjectMeta],
    requests: &[ContainerRecreateRequest],
) -> Vec<String> {
    let created = old
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|time| time.0.as_second());
    let recreated: BTreeSet<&str> = requests
        .iter()
        .filter(|request| crate::progress::progress(request).outcome == Outcome::Succeeded)
        .map(|request| request.spec.pod_name.as_str())
        .collect();
    let mut names: Vec<String> = pods
        .iter()
        .filter(|pod| pod.deletion_timestamp.is_none())
        // As the operator reads a rollout's target: whole seconds, a pod of the same second is
        // not the rollout's.
        .filter(|pod| {
            match (
                created,
                pod.creation_timestamp.as_ref().map(|t| t.0.as_second()),
            ) {
                (Some(rollout), Some(pod)) => pod < rollout,
                _ => false,
            }
        })
        .filter_map(|pod| pod.name.clone())
        .filter(|name| old.spec.only_pods.is_empty() || old.spec.only_pods.contains(name))
        .filter(|name| !recreated.contains(name.as_str()))
        .collect();
    names.sort();
    names
}

/// The rollout that retries `old` on `pods` (from [`pods_to_retry`]): `old`'s spec, running
/// (neither paused nor aborted), `onlyPods` set to `pods`; named `name`, or generated from
/// `old`'s name. Refused when `old` has not finished or there is nothing to retry.
pub fn retry_of(
    old: &ContainerRecreateRollout,
    pods: Vec<String>,
    name: Option<&str>,
) -> Result<ContainerRecreateRollout, Error> {
    ensure_finished(old)?;
    let old_name = old.name_any();
    if pods.is_empty() {
        return Err(Error::NothingToRetry {
            name: old_name,
            why: "every pod of its target that still exists was recreated".to_owned(),
        });
    }
    if pods.len() > MAX_ONLY_PODS {
        return Err(Error::NothingToRetry {
            name: old_name,
            why: format!(
                "{} pods were not recreated, more than a retry names ({MAX_ONLY_PODS}): start a new rollout of the whole target",
                pods.len()
            ),
        });
    }
    let mut spec = old.spec.clone();
    spec.paused = false;
    spec.aborted = false;
    spec.only_pods = pods;
    // generateName adds 5 characters; a rollout's name is at most 63.
    let prefix: String = format!("{old_name}-retry-").chars().take(58).collect();
    let mut rollout = ContainerRecreateRollout::new(name.unwrap_or_default(), spec);
    rollout.metadata = ObjectMeta {
        name: name.map(str::to_owned),
        generate_name: name.is_none().then_some(prefix),
        namespace: old.namespace(),
        annotations: Some([(keys::ANNOTATION_RETRY_OF.to_owned(), old_name)].into()),
        ..ObjectMeta::default()
    };
    Ok(rollout)
}

/// Refuses a rollout that has not finished: only a finished one can be retried.
fn ensure_finished(old: &ContainerRecreateRollout) -> Result<(), Error> {
    match old.phase() {
        Some(phase) if phase.is_finished() => Ok(()),
        phase => Err(Error::RolloutNotFinished {
            name: old.name_any(),
            phase: phase.map_or("Pending", |phase| phase.as_str()).to_owned(),
        }),
    }
}

/// Runs `kubectl crr rollout retry NAME`.
pub async fn execute(
    client: Client,
    namespace: &str,
    old_name: &str,
    new_name: Option<&str>,
    wait: bool,
    timeout: Option<std::time::Duration>,
    output: Option<OutputFormat>,
) -> Result<Exit, Error> {
    let api: Api<ContainerRecreateRollout> = Api::namespaced(client.clone(), namespace);
    let old = crate::rollout::get(&api, namespace, old_name).await?;
    // Refuse a running rollout before reading its pods.
    ensure_finished(&old)?;
    let workload = old
        .spec
        .target
        .workload_ref
        .as_ref()
        .map(|workload| format!("{}/{}", workload.kind, workload.name));
    let selector = old
        .spec
        .target
        .selector
        .clone()
        .and_then(|selector| kube::core::Selector::try_from(selector).ok())
        .map(|selector| selector.to_string());
    let target = crate::rollout::target_pods(
        client.clone(),
        namespace,
        workload.as_deref(),
        selector.as_deref(),
    )
    .await?;
    let pods: Vec<ObjectMeta> = match &target.selector {
        Some(selector) => Api::<Pod>::namespaced(client.clone(), namespace)
            .list_metadata(&ListParams::default().labels(&selector.to_string()))
            .await?
            .items
            .into_iter()
            .map(|pod| pod.metadata)
            .collect(),
        None => Vec::new(),
    };
    let requests: Api<ContainerRecreateRequest> = Api::namespaced(client, namespace);
    let mine = requests
        .list(&ListParams::default().labels(&format!("{}={old_name}", keys::LABEL_ROLLOUT)))
        .await?
        .items;
    let rollout = retry_of(&old, pods_to_retry(&old, &pods, &mine), new_name)?;
    let params = PostParams {
        dry_run: false,
        field_manager: Some(FIELD_MANAGER.to_owned()),
    };
    let created = api.create(&params, &rollout).await?;
    match output {
        Some(format) => crate::output::print(&crate::output::object(&created, format)?)?,
        None => println!(
            "containerrecreaterollout/{} created ({}, {} pods containerrecreaterollout/{old_name} did not recreate)",
            created.name_any(),
            target_name(&created.spec.target),
            created.spec.only_pods.len()
        ),
    }
    if wait || timeout.is_some() {
        return crate::rollout::follow(&api, created, timeout).await;
    }
    Ok(Exit::Success)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn at(seconds: i64) -> Time {
        Time(jiff::Timestamp::from_second(1_800_000_000 + seconds).expect("a time"))
    }

    fn old(phase: &str, only_pods: &[&str]) -> ContainerRecreateRollout {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "crr.dev/v1alpha1", "kind": "ContainerRecreateRollout",
            "metadata": {"name": "nightly", "namespace": "shop", "creationTimestamp": at(100)},
            "spec": {
                "target": {"workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}},
                "containers": ["app"], "paused": true, "aborted": true, "onlyPods": only_pods,
                "maxUnavailable": "25%",
            },
            "status": {"phase": phase},
        }))
        .expect("a rollout")
    }

    fn pod(name: &str, created: i64) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.to_owned()),
            creation_timestamp: Some(at(created)),
            ..ObjectMeta::default()
        }
    }

    fn request(pod: &str, succeeded: bool) -> ContainerRecreateRequest {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "apps.kruise.io/v1beta1", "kind": "ContainerRecreateRequest",
            "metadata": {"name": format!("nightly-{pod}")},
            "spec": {"podName": pod, "containers": [{"name": "app"}]},
            "status": {"phase": "Completed", "completionTime": at(200),
                "conditions": [{"type": "Succeeded", "status": if succeeded {"True"} else {"False"},
                    "reason": "R", "message": "m", "lastTransitionTime": at(200)}]},
        }))
        .expect("a request")
    }

    #[test]
    fn a_retry_takes_the_failed_and_never_started_pods_that_were_there_before() {
        let mut deleting = pod("web-d", 1);
        deleting.deletion_timestamp = Some(at(150));
        let pods = [
            pod("web-a", 1),
            pod("web-b", 2),
            pod("web-c", 3),
            deleting,
            pod("web-new", 100),
        ];
        let requests = [request("web-a", true), request("web-b", false)];
        assert_eq!(
            pods_to_retry(&old("Aborted", &[]), &pods, &requests),
            ["web-b", "web-c"]
        );
        // A retry of a retry stays within its pods.
        assert_eq!(
            pods_to_retry(&old("Failed", &["web-b"]), &pods, &requests),
            ["web-b"]
        );
    }

    #[test]
    fn the_retry_runs_the_old_spec_on_those_pods_and_names_its_origin() {
        let old = old("Failed", &[]);
        let retry = retry_of(&old, vec!["web-b".into()], None).expect("a retry");
        assert_eq!(
            retry.metadata.generate_name.as_deref(),
            Some("nightly-retry-")
        );
        assert_eq!(retry.metadata.name, None);
        assert_eq!(retry.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(
            retry
                .annotations()
                .get(keys::ANNOTATION_RETRY_OF)
                .map(String::as_str),
            Some("nightly")
        );
        assert!(!retry.spec.paused && !retry.spec.aborted);
        assert_eq!(retry.spec.only_pods, ["web-b"]);
        assert_eq!(retry.spec.max_unavailable, old.spec.max_unavailable);
        assert_eq!(retry.spec.target, old.spec.target);
        let named = retry_of(&old, vec!["web-b".into()], Some("again")).expect("a retry");
        assert_eq!(named.metadata.name.as_deref(), Some("again"));
        assert_eq!(named.metadata.generate_name, None);
        let long = ContainerRecreateRollout {
            metadata: ObjectMeta {
                name: Some("r".repeat(63)),
                ..old.metadata.clone()
            },
            ..old.clone()
        };
        let prefix = retry_of(&long, vec!["web-b".into()], None)
            .expect("a retry")
            .metadata
            .generate_name
            .expect("generated");
        assert_eq!(prefix.len(), 58);
    }

    #[test]
    fn a_running_rollout_or_nothing_to_do_is_refused_with_why() {
        let running = retry_of(&old("Progressing", &[]), vec!["web-b".into()], None);
        assert!(
            matches!(&running, Err(Error::RolloutNotFinished { phase, .. }) if phase == "Progressing"),
            "{running:?}"
        );
        let done = retry_of(&old("Completed", &[]), Vec::new(), None);
        assert!(
            matches!(&done, Err(Error::NothingToRetry { .. })),
            "{done:?}"
        );
        let many = (0..=MAX_ONLY_PODS).map(|n| format!("web-{n}")).collect();
        assert!(matches!(
            retry_of(&old("Failed", &[]), many, None),
            Err(Error::NothingToRetry { .. })
        ));
    }
}
