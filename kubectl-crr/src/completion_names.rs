//! Names from the cluster for kubectl's plugin completion (`kubectl_complete-crr`): pods for
//! `recreate`, requests for `get` and `describe`, rollouts for the rollout verbs, and
//! `deploy/NAME`-style workloads where a workload goes, in the namespace the words name (`-n`,
//! else the context's), through `--kubeconfig` and `--context` when typed. A cluster that does
//! not answer within [`PATIENCE`] completes nothing rather than hanging the shell.

use std::path::PathBuf;
use std::time::Duration;

use crr_crds::rollout::ContainerRecreateRollout;
use crr_crds::v1beta1::ContainerRecreateRequest;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

use crate::cli::Connection;
use crate::completion::{Names, names_wanted, plugin_completion_output, workload_prefixes};

/// How long completion waits for the cluster.
pub const PATIENCE: Duration = Duration::from_secs(3);

/// The connection flags among `words`, as the plugin would read them.
pub fn connection_of(words: &[String]) -> Connection {
    let mut connection = Connection {
        kubeconfig: None,
        context: std::env::var("KUBECTL_CRR_CONTEXT").ok(),
        namespace: std::env::var("KUBECTL_CRR_NAMESPACE").ok(),
    };
    let mut words = words.iter().peekable();
    while let Some(word) = words.next() {
        let (flag, inline) = match word.split_once('=') {
            Some((flag, value)) => (flag, Some(value.to_owned())),
            None => (word.as_str(), None),
        };
        let mut value = || inline.clone().or_else(|| words.next().cloned());
        match flag {
            "-n" | "--namespace" => connection.namespace = value(),
            "--context" => connection.context = value(),
            "--kubeconfig" => connection.kubeconfig = value().map(PathBuf::from),
            _ => {}
        }
    }
    connection
}

/// What `kubectl_complete-crr` prints: the definition's candidates, and where an object's name
/// goes, the names the cluster has that begin with what is typed.
pub async fn output(words: &[String]) -> String {
    let Some(names) = names_wanted(words) else {
        return plugin_completion_output(words);
    };
    let partial = words.last().map_or("", String::as_str);
    let found = tokio::time::timeout(PATIENCE, candidates(words, names, partial))
        .await
        .unwrap_or_default();
    let mut text: String = found
        .into_iter()
        .filter(|name| name.starts_with(partial))
        .map(|name| format!("{name}\n"))
        .collect();
    // Cobra's ShellCompDirectiveNoFileComp (and NoSpace after a bare kind such as `deploy/`).
    let no_space = partial.is_empty() || !partial.contains('/');
    text.push_str(if matches!(names, Names::Workloads { .. }) && no_space {
        ":6\n"
    } else {
        ":4\n"
    });
    text
}

async fn candidates(words: &[String], names: Names, partial: &str) -> Vec<String> {
    let Ok((client, namespace)) = crate::kubeconfig::connect(&connection_of(words)).await else {
        return Vec::new();
    };
    match names {
        Names::Pods => names_of::<Pod>(client, &namespace).await,
        Names::Requests => names_of::<ContainerRecreateRequest>(client, &namespace).await,
        Names::Rollouts => names_of::<ContainerRecreateRollout>(client, &namespace).await,
        Names::RolloutsOrWorkloads if !partial.contains('/') => {
            let mut found = names_of::<ContainerRecreateRollout>(client, &namespace).await;
            found.extend(workload_prefixes(true).into_iter().map(str::to_owned));
            found
        }
        Names::RolloutsOrWorkloads => workloads(client, &namespace, true, partial).await,
        Names::Workloads { replica_sets } => {
            workloads(client, &namespace, replica_sets, partial).await
        }
    }
}

/// `deploy/`, `sts/`... while no kind is typed; then that kind's objects as `KIND/NAME`.
async fn workloads(
    client: Client,
    namespace: &str,
    replica_sets: bool,
    partial: &str,
) -> Vec<String> {
    let Some((kind, _)) = partial.split_once('/') else {
        return workload_prefixes(replica_sets)
            .into_iter()
            .map(str::to_owned)
            .collect();
    };
    let names =
        match crate::workload::workload_ref(&format!("{kind}/x")).map(|workload| workload.kind) {
            Ok(kind) if kind == "Deployment" => names_of::<Deployment>(client, namespace).await,
            Ok(kind) if kind == "StatefulSet" => names_of::<StatefulSet>(client, namespace).await,
            Ok(kind) if kind == "DaemonSet" => names_of::<DaemonSet>(client, namespace).await,
            Ok(kind) if kind == "ReplicaSet" && replica_sets => {
                names_of::<ReplicaSet>(client, namespace).await
            }
            _ => Vec::new(),
        };
    names
        .into_iter()
        .map(|name| format!("{kind}/{name}"))
        .collect()
}

/// The names of `K` in `namespace` (a metadata-only list: names are all it needs).
async fn names_of<K>(client: Client, namespace: &str) -> Vec<String>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client, namespace);
    match api.list_metadata(&ListParams::default().limit(500)).await {
        Ok(list) => list
            .items
            .into_iter()
            .filter_map(|object| object.metadata.name)
            .collect(),
        Err(_) => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(words: &[&str]) -> Vec<String> {
        words.iter().map(|word| (*word).to_owned()).collect()
    }

    #[test]
    fn the_connection_flags_are_read_from_the_words() {
        let connection = connection_of(&words(&[
            "--kubeconfig=/tmp/k",
            "-n",
            "shop",
            "--context",
            "prod",
            "recreate",
            "",
        ]));
        assert_eq!(connection.kubeconfig, Some(PathBuf::from("/tmp/k")));
        assert_eq!(connection.namespace.as_deref(), Some("shop"));
        assert_eq!(connection.context.as_deref(), Some("prod"));
        let inline = connection_of(&words(&["--namespace=db", "get", ""]));
        assert_eq!(inline.namespace.as_deref(), Some("db"));
    }

    #[tokio::test]
    async fn where_no_name_goes_the_definitions_candidates_answer() {
        assert_eq!(output(&words(&["get", "-o", "y"])).await, "yaml\n:4\n");
    }
}
