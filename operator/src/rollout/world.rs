//! Reading what a rollout's plan needs from the API server: the target's pods (by the
//! workload's selector and ownership, or by the rollout's selector) and the PodDisruptionBudgets
//! that select them, with every pod each of those selects.
//!
//! The workload comes from a watch of it by name, slim (`scoped_watches::SlimWorkload`); pods come
//! from the watches of the scopes running rollouts read (`scoped_watches`), decoded slim
//! (`pod_view::SlimPod`): the operator's memory follows the pods of rollouts at work, not the
//! cluster's. A scope whose watch has not listed its pods yet is listed by label selector, slim,
//! [`POD_PAGE`] a page (a tenant's 1 MB pods cost a page's body, never a reconcile's worth of
//! whole pods).
//!
//! [`POD_PAGE`]: crate::pod_view::POD_PAGE

use std::collections::{BTreeMap, BTreeSet};

use crr_crds::rollout::{RolloutTarget, WorkloadRef};
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::ListParams;
use kube::core::{Selector, SelectorExt};
use kube::{Api, Client, ResourceExt};

use super::plan::BudgetView;
use super::scoped_watches::ScopedWatches;
use crate::pod_view::{POD_PAGE, SlimPod};
use crr_crds::rollout_order::is_terminating;

/// Why the world could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// An API call failed.
    #[error("{what}: {source}")]
    Api {
        /// What was being read.
        what: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The workload could not be read.
    #[error("{what}: {source}")]
    Workload {
        /// What was being read.
        what: String,
        /// Why.
        #[source]
        source: crr_runtime::workload::WorkloadError,
    },
    /// A selector could not be turned into a list request.
    #[error("the selector of {what} is invalid: {source}")]
    Selector {
        /// Whose selector.
        what: String,
        /// Why.
        #[source]
        source: kube::core::ParseExpressionError,
    },
}

/// The target as read.
#[derive(Debug, Default)]
pub struct Target {
    /// Whether the workload exists (always true for a selector target).
    pub exists: bool,
    /// The selector the pods were listed with (`None` when the workload is gone).
    pub selector: Option<LabelSelector>,
    /// Every pod the selector matches, the target's or not (a PDB with the same selector reuses
    /// them).
    pub listed: Vec<Pod>,
    /// The target's pods among them: owned by the workload (directly or through its
    /// ReplicaSets), or all of them for a selector target.
    pub pods: Vec<Pod>,
}

/// Reads the target of a rollout in `namespace`.
pub async fn read_target(
    client: &Client,
    watches: &ScopedWatches,
    namespace: &str,
    target: &RolloutTarget,
) -> Result<Target, ReadError> {
    if let Some(workload) = &target.workload_ref {
        return read_workload(client, watches, namespace, workload).await;
    }
    let Some(selector) = &target.selector else {
        return Ok(Target::default());
    };
    let listed = pods(
        client,
        watches,
        namespace,
        selector,
        "the rollout's selector",
    )
    .await?;
    Ok(Target {
        exists: true,
        selector: Some(selector.clone()),
        pods: listed.clone(),
        listed,
    })
}

async fn read_workload(
    client: &Client,
    watches: &ScopedWatches,
    namespace: &str,
    workload: &WorkloadRef,
) -> Result<Target, ReadError> {
    let what = format!("{} {namespace}/{}", workload.kind, workload.name);
    let watched = watches
        .workload(namespace, &workload.kind, &workload.name)
        .await;
    let found = match watched {
        Some(watched) => watched,
        // Not watched current yet (or a kind admission refuses): one GET.
        None => match crr_runtime::workload::get(client, namespace, &workload.kind, &workload.name)
            .await
        {
            Ok(found) => found,
            // A kind admission refuses (stored while the webhook was away): no such target.
            Err(crr_runtime::workload::WorkloadError::UnknownKind { .. }) => None,
            Err(source) => {
                return Err(ReadError::Workload {
                    what: format!("reading {what}"),
                    source,
                });
            }
        },
    };
    let Some(crr_runtime::workload::Workload {
        uid,
        selector: Some(selector),
        ..
    }) = found
    else {
        return Ok(Target::default());
    };
    let listed = pods(client, watches, namespace, &selector, &what).await?;
    let owners: Vec<String> = if workload.kind == "Deployment" {
        let watched = watches
            .replica_sets(namespace, &selector_of(&selector, &what)?)
            .await;
        let replica_sets = match watched {
            Some(watched) => watched.iter().map(|meta| meta.metadata.clone()).collect(),
            None => Api::<ReplicaSet>::namespaced(client.clone(), namespace)
                .list_metadata(&list_params(&selector, &what)?)
                .await
                .map_err(|source| ReadError::Api {
                    what: format!("listing the ReplicaSets of {what}"),
                    source,
                })?
                .items
                .into_iter()
                .map(|meta| meta.metadata)
                .collect::<Vec<_>>(),
        };
        replica_sets
            .iter()
            .filter(|meta| crr_crds::controller_uid(meta) == Some(uid.as_str()))
            .filter_map(|meta| meta.uid.clone())
            .collect()
    } else {
        vec![uid]
    };
    let pods = listed
        .iter()
        .filter(|pod| {
            crr_crds::controller_uid(&pod.metadata)
                .is_some_and(|owner| owners.iter().any(|uid| uid == owner))
        })
        .cloned()
        .collect();
    Ok(Target {
        exists: true,
        selector: Some(selector),
        listed,
        pods,
    })
}

/// A request of the rollout being planned, as its budgets' reading needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OwnRequest {
    /// When the request was created.
    pub created: Timestamp,
    /// Whether it has finished.
    pub finished: bool,
}

/// How far before its request's creation (or after it, for clocks apart) a rollout's entry in
/// a PDB's `status.disruptedPods` is taken for its own: the rollout writes the entry just
/// before it creates the request, and writes it again on every try until the request exists.
const OWN_ENTRY_BEFORE: jiff::SignedDuration = jiff::SignedDuration::from_secs(30);
const OWN_ENTRY_AFTER: jiff::SignedDuration = jiff::SignedDuration::from_secs(5);

/// Whether an entry of `disruptedPods` made at `entry` is the reservation of `request`'s slot.
/// An eviction's entry is not: the eviction API deletes the pod at once, and the entries of a
/// pod being deleted are never taken for a rollout's.
pub fn is_own_entry(entry: Timestamp, request: &OwnRequest) -> bool {
    entry >= request.created - OWN_ENTRY_BEFORE && entry <= request.created + OWN_ENTRY_AFTER
}

/// The PDBs of `budgets` (the namespace's) that select at least one of `target`'s pods, each
/// with every pod it selects. A PDB without a selector selects nothing; an empty one selects
/// every pod of the namespace (policy/v1). A pod the PDB's status lists in `disruptedPods`
/// (evicted, or reserved by a rollout), or one in `busy` (a request of anyone's in flight), is
/// disrupted: not healthy, Ready or not. The exception is an entry of this rollout's own
/// (`own`, its requests by pod name; [`is_own_entry`]) whose request has finished: that slot is
/// free, and the entry is `released`.
pub async fn read_budgets(
    client: &Client,
    watches: &ScopedWatches,
    namespace: &str,
    target: &Target,
    budgets: &[std::sync::Arc<PodDisruptionBudget>],
    busy: &BTreeSet<String>,
    own: &BTreeMap<String, OwnRequest>,
) -> Result<Vec<BudgetView>, ReadError> {
    let mut views = Vec::new();
    for budget in budgets {
        let name = budget.name_any();
        let Some(selector) = budget.spec.as_ref().and_then(|spec| spec.selector.clone()) else {
            continue;
        };
        let what = format!("PodDisruptionBudget {namespace}/{name}");
        let matcher =
            Selector::try_from(selector.clone()).map_err(|source| ReadError::Selector {
                what: what.clone(),
                source,
            })?;
        let selects_target = target
            .pods
            .iter()
            .any(|pod| matcher.matches(pod.metadata.labels.as_ref().unwrap_or(&BTreeMap::new())));
        if !selects_target {
            continue;
        }
        let pods = if target.selector.as_ref() == Some(&selector) {
            target.listed.clone()
        } else {
            pods(client, watches, namespace, &selector, &what).await?
        };
        let status = budget.status.clone().unwrap_or_default();
        let entries = status.disrupted_pods.unwrap_or_default();
        let (disrupted, released) = disrupted_and_released(&pods, &entries, busy, own);
        views.push(BudgetView {
            name,
            disruptions_allowed: status.disruptions_allowed,
            desired_healthy: status.desired_healthy,
            expected_pods: status.expected_pods,
            current_healthy: status.current_healthy,
            resource_version: budget.resource_version().unwrap_or_default(),
            released,
            disrupted,
            status_current: status.observed_generation.unwrap_or(0)
                >= budget.metadata.generation.unwrap_or(0),
            pods: pods
                .iter()
                .filter_map(|pod| {
                    Some((
                        pod.uid()?,
                        crr_crds::rules::pod_ready(pod) && !is_terminating(pod),
                    ))
                })
                .collect(),
        });
    }
    Ok(views)
}

/// Of `pods` (a PDB's), the UIDs of the disrupted ones (an entry in `entries`, the PDB's
/// `disruptedPods`, or a request in flight: `busy`) and the names of those whose entry the
/// rollout may release (its own entry, its request finished, the pod not being deleted).
fn disrupted_and_released(
    pods: &[Pod],
    entries: &BTreeMap<String, k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    busy: &BTreeSet<String>,
    own: &BTreeMap<String, OwnRequest>,
) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut disrupted = BTreeSet::new();
    let mut released = BTreeSet::new();
    for pod in pods {
        let Some(uid) = pod.uid() else { continue };
        let name = pod.name_any();
        if let Some(entry) = entries.get(&name) {
            let releasable = !is_terminating(pod)
                && own
                    .get(&name)
                    .is_some_and(|request| request.finished && is_own_entry(entry.0, request));
            if releasable {
                released.insert(name);
            } else {
                disrupted.insert(uid.clone());
            }
        }
        if busy.contains(&uid) {
            disrupted.insert(uid);
        }
    }
    (disrupted, released)
}

fn selector_of(selector: &LabelSelector, what: &str) -> Result<Selector, ReadError> {
    Selector::try_from(selector.clone()).map_err(|source| ReadError::Selector {
        what: what.to_owned(),
        source,
    })
}

fn list_params(selector: &LabelSelector, what: &str) -> Result<ListParams, ReadError> {
    Ok(ListParams::default().labels_from(&selector_of(selector, what)?))
}

/// The pods `selector` selects in `namespace`: from its scope's watch, or listed while the
/// watch has not listed them.
async fn pods(
    client: &Client,
    watches: &ScopedWatches,
    namespace: &str,
    selector: &LabelSelector,
    what: &str,
) -> Result<Vec<Pod>, ReadError> {
    match watches.pods(namespace, &selector_of(selector, what)?).await {
        Some(watched) => Ok(watched),
        None => list_pods(client, namespace, selector, what).await,
    }
}

async fn list_pods(
    client: &Client,
    namespace: &str,
    selector: &LabelSelector,
    what: &str,
) -> Result<Vec<Pod>, ReadError> {
    let mut params = list_params(selector, what)?.limit(POD_PAGE);
    let pods = Api::<SlimPod>::namespaced(client.clone(), namespace);
    let mut listed = Vec::new();
    loop {
        let page = pods.list(&params).await.map_err(|source| ReadError::Api {
            what: format!("listing the pods of {what}"),
            source,
        })?;
        listed.extend(page.items.into_iter().map(|pod| pod.0));
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(listed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).expect("a pod")
    }

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).expect("a valid time")
    }

    #[test]
    fn a_rollouts_entry_is_released_once_its_request_finished_and_only_then() {
        let named = |name: &str, terminating: bool| {
            let mut value =
                serde_json::json!({"metadata": {"name": name, "uid": format!("uid-{name}")}});
            if terminating {
                value["metadata"]["deletionTimestamp"] = "2027-01-15T08:00:00Z".into();
            }
            pod(value)
        };
        let pods = [
            named("done", false),
            named("running", false),
            named("evicted", true),
            named("stranger", false),
            named("old", false),
            named("free", false),
        ];
        let time = |seconds| k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(seconds));
        let entries = BTreeMap::from([
            // Reserved a second before the request was made; the request has finished.
            ("done".to_owned(), time(99)),
            // Reserved; the request is in flight.
            ("running".to_owned(), time(100)),
            // Evicted after its request finished: the pod is being deleted.
            ("evicted".to_owned(), time(100)),
            // An eviction's entry: no request of this rollout.
            ("stranger".to_owned(), time(100)),
            // An entry made long before this rollout's request: not its reservation.
            ("old".to_owned(), time(10)),
        ]);
        let own = |finished| OwnRequest {
            created: at(100),
            finished,
        };
        let own = BTreeMap::from([
            ("done".to_owned(), own(true)),
            ("running".to_owned(), own(false)),
            ("evicted".to_owned(), own(true)),
            ("old".to_owned(), own(true)),
            ("free".to_owned(), own(true)),
        ]);
        let busy = BTreeSet::from(["uid-running".to_owned()]);
        let (disrupted, released) = disrupted_and_released(&pods, &entries, &busy, &own);
        assert_eq!(released, BTreeSet::from(["done".to_owned()]));
        assert_eq!(
            disrupted,
            ["uid-running", "uid-evicted", "uid-stranger", "uid-old"]
                .into_iter()
                .map(str::to_owned)
                .collect::<BTreeSet<_>>()
        );
    }

    #[test]
    fn an_entry_is_a_rollouts_own_only_near_its_requests_creation() {
        let request = OwnRequest {
            created: at(100),
            finished: true,
        };
        assert!(is_own_entry(at(100), &request));
        assert!(is_own_entry(at(70), &request));
        assert!(is_own_entry(at(105), &request));
        assert!(!is_own_entry(at(69), &request));
        assert!(!is_own_entry(at(106), &request));
    }
}
