//! The `kubectl-crr` binary against a real cluster (the local one from `hack/`, see
//! hack/README.md), run as a user runs it: a process with `KUBECONFIG` and `-n`.
//!
//! Each test gets a fresh namespace (labelled `crr.apps.kruise.io/test=kubectl-crr`), deleted
//! afterwards unless `CRR_KEEP_NAMESPACES=1`. The tests are ignored unless asked for
//! (`-- --include-ignored`, as hack/cluster-test.sh runs them); run without the test bed, they
//! fail (see `crr_testbed`). The CRD is created when missing, without its conversion webhook
//! (only v1beta1 is used).
//!
//! No node daemon takes part: where it would write a request's status, the test writes it
//! through the API server. crr may be installed on the cluster or not: the admission webhook, when
//! present, completes the requests the plugin creates (so the pods are real, running pods); an
//! installed node daemon or operator is denied every write in the test's namespace by a
//! ValidatingAdmissionPolicy, so only the test moves a request's status.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::{
    Running, WAIT, completed, daemon_writes, first_request, ready_pods, run, with_namespace,
};
use crr_crds::v1beta1::ContainerRecreateRequest;
use futures::StreamExt as _;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::ListParams;
use kube::runtime::watcher;
use kube::{Api, ResourceExt as _};
use serde_json::{Value, json};

fn names(crr: &ContainerRecreateRequest) -> Vec<String> {
    crr.spec.containers.iter().map(|c| c.name.clone()).collect()
}

#[tokio::test]
#[ignore = "needs the local test bed (hack/README.md); hack/cluster-test.sh runs it"]
async fn recreate_creates_a_request_for_the_pod_with_the_strategy_flags() {
    with_namespace("create", |client, namespace| async move {
        ready_pods(&client, &namespace, "web", &["web"]).await;
        let output = run(
            &namespace,
            &[
                "recreate",
                "web",
                "-c",
                "app",
                "--ordered",
                "--force",
                "--failure-policy",
                "Ignore",
                "--unready-grace",
                "5s",
                "--min-started",
                "10s",
                "--deadline",
                "5m",
                "--ttl",
                "30m",
                "-o",
                "json",
            ],
        )
        .await;
        assert_eq!(output.status.code(), Some(0));
        let printed: ContainerRecreateRequest =
            serde_json::from_slice(&output.stdout).expect("the created request as JSON");
        let name = printed.name_any();
        assert!(name.starts_with("web-") && name.len() > 4, "{name}");

        let crrs: Api<ContainerRecreateRequest> = Api::namespaced(client.clone(), &namespace);
        let stored = crrs.get(&name).await.expect("the stored request");
        assert_eq!(stored.metadata.generate_name.as_deref(), Some("web-"));
        assert_eq!(stored.spec.pod_name, "web");
        assert_eq!(names(&stored), ["app"]);
        let strategy = stored.strategy();
        assert_eq!(strategy.failure_policy.as_deref(), Some("Ignore"));
        assert!(strategy.ordered_recreate && strategy.force_recreate);
        assert_eq!(strategy.unready_grace_period_seconds, Some(5));
        assert_eq!(strategy.min_started_seconds, 10);
        assert_eq!(stored.spec.active_deadline_seconds, Some(300));
        assert_eq!(stored.spec.ttl_seconds_after_finished, Some(1800));

        // No container named: every container of the pod.
        let output = run(&namespace, &["recreate", "web"]).await;
        assert_eq!(output.status.code(), Some(0));
        let stdout = String::from_utf8_lossy(&output.stdout);
        let created = stdout
            .trim()
            .strip_prefix("containerrecreaterequest/")
            .and_then(|rest| rest.strip_suffix(" created"))
            .unwrap_or_else(|| panic!("unexpected output {stdout:?}"));
        let all = crrs.get(created).await.expect("the second request");
        assert_eq!(names(&all), ["app", "sidecar"]);
        assert_eq!(
            all.strategy().failure_policy.as_deref().unwrap_or("Fail"),
            "Fail"
        );
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the local test bed (hack/README.md); hack/cluster-test.sh runs it"]
async fn dry_runs_store_nothing() {
    with_namespace("dryrun", |client, namespace| async move {
        ready_pods(&client, &namespace, "web", &["web"]).await;
        let client_side = run(
            &namespace,
            &[
                "recreate",
                "web",
                "-c",
                "app",
                "--dry-run=client",
                "-o",
                "yaml",
            ],
        )
        .await;
        assert_eq!(client_side.status.code(), Some(0));
        let printed: ContainerRecreateRequest =
            serde_saphyr::from_slice(&client_side.stdout).expect("the request as YAML");
        assert_eq!(printed.metadata.generate_name.as_deref(), Some("web-"));
        assert_eq!(names(&printed), ["app"]);

        let server_side = run(
            &namespace,
            &[
                "recreate",
                "web",
                "-c",
                "app",
                "--dry-run=server",
                "-o",
                "json",
            ],
        )
        .await;
        assert_eq!(server_side.status.code(), Some(0));
        let checked: ContainerRecreateRequest =
            serde_json::from_slice(&server_side.stdout).expect("the server's answer as JSON");
        assert!(
            checked.name_any().starts_with("web-"),
            "the server generated a name"
        );

        let summary = run(&namespace, &["recreate", "web", "--dry-run=server"]).await;
        assert!(
            String::from_utf8_lossy(&summary.stdout).contains("created (server dry run)"),
            "server dry run summary"
        );

        let crrs: Api<ContainerRecreateRequest> = Api::namespaced(client.clone(), &namespace);
        assert!(
            crrs.list(&ListParams::default())
                .await
                .expect("listing")
                .items
                .is_empty()
        );
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the local test bed (hack/README.md); hack/cluster-test.sh runs it"]
async fn missing_pod_and_unknown_container_are_clear_errors() {
    with_namespace("errors", |client, namespace| async move {
        ready_pods(&client, &namespace, "web", &["web"]).await;
        let missing = run(&namespace, &["recreate", "nope"]).await;
        assert_eq!(missing.status.code(), Some(1));
        assert_eq!(
            String::from_utf8_lossy(&missing.stderr).trim(),
            format!("error: pod \"nope\" not found in namespace \"{namespace}\"")
        );
        let unknown = run(&namespace, &["recreate", "web", "-c", "nginx"]).await;
        assert_eq!(unknown.status.code(), Some(1));
        assert_eq!(
            String::from_utf8_lossy(&unknown.stderr).trim(),
            "error: container \"nginx\" is not in pod web (its containers: app, sidecar)"
        );
        let no_match = run(&namespace, &["recreate", "-l", "app=none"]).await;
        assert_eq!(no_match.status.code(), Some(1));
        let not_found = run(&namespace, &["describe", "nothing"]).await;
        assert_eq!(not_found.status.code(), Some(1));
        let crrs: Api<ContainerRecreateRequest> = Api::namespaced(client.clone(), &namespace);
        assert!(
            crrs.list(&ListParams::default())
                .await
                .expect("listing")
                .items
                .is_empty()
        );
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the local test bed (hack/README.md); hack/cluster-test.sh runs it"]
async fn wait_follows_the_phases_and_exits_zero_on_success() {
    with_namespace("waitok", |client, namespace| async move {
        ready_pods(&client, &namespace, "web", &["web"]).await;
        let mut plugin = Running::start(&namespace, &["recreate", "web", "-c", "app", "--wait"]);
        let crr = first_request(&client, &namespace).await;
        let name = crr.name_any();
        plugin.wait_for_line("web/app").await;
        daemon_writes(
            &client,
            &namespace,
            &name,
            json!({"phase": "Recreating", "containerRecreateStates": [
                {"name": "app", "phase": "Recreating", "isKilled": true}]}),
        )
        .await;
        plugin.wait_for_line("Recreating").await;
        daemon_writes(
            &client,
            &namespace,
            &name,
            completed(json!([{"name": "app", "phase": "Succeeded", "isKilled": true}])),
        )
        .await;
        assert_eq!(
            plugin.exit_code().await,
            Some(0),
            "stderr: {}",
            plugin.stderr()
        );
        let stdout = plugin.stdout();
        assert!(
            stdout.contains(&format!("web/app {name}: Pending")),
            "{stdout}"
        );
        assert!(
            stdout.contains(&format!("web/app {name}: Recreating")),
            "{stdout}"
        );
        assert!(
            stdout.contains(&format!("web/app {name}: Succeeded")),
            "{stdout}"
        );
        assert!(
            stdout.contains(&format!("{name} (pod web) succeeded")),
            "{stdout}"
        );
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the local test bed (hack/README.md); hack/cluster-test.sh runs it"]
async fn wait_exits_non_zero_when_a_container_failed_or_the_timeout_passed() {
    with_namespace("waitfail", |client, namespace| async move {
        ready_pods(&client, &namespace, "web", &["web"]).await;
        let mut plugin = Running::start(&namespace, &["recreate", "web", "--wait"]);
        let crr = first_request(&client, &namespace).await;
        daemon_writes(
            &client,
            &namespace,
            &crr.name_any(),
            json!({
                "phase": "Completed",
                "completionTime": Time(jiff::Timestamp::now()),
                "message": "kill container error: boom",
                "containerRecreateStates": [
                    {"name": "app", "phase": "Failed", "message": "kill container error: boom"},
                    {"name": "sidecar", "phase": "Pending"},
                ],
            }),
        )
        .await;
        assert_eq!(plugin.exit_code().await, Some(3));
        assert!(
            plugin.stderr().contains("kill container error: boom"),
            "stderr: {}",
            plugin.stderr()
        );

        // Nobody moves this one: the timeout ends the wait.
        let timed_out = run(
            &namespace,
            &["recreate", "web", "-c", "app", "--timeout", "3s"],
        )
        .await;
        assert_eq!(timed_out.status.code(), Some(4));
        assert!(String::from_utf8_lossy(&timed_out.stderr).contains("timed out"));
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the local test bed (hack/README.md); hack/cluster-test.sh runs it"]
async fn get_describe_and_output_formats_show_the_requests() {
    with_namespace("get", |client, namespace| async move {
        ready_pods(&client, &namespace, "web", &["web"]).await;
        let created = run(&namespace, &["recreate", "web", "-c", "app", "-o", "json"]).await;
        let crr: ContainerRecreateRequest =
            serde_json::from_slice(&created.stdout).expect("the created request");
        let name = crr.name_any();

        let mut watch = Running::start(&namespace, &["get", "-w"]);
        watch.wait_for_line("CONTAINERS").await;
        watch.wait_for_line(&name).await;

        daemon_writes(
            &client,
            &namespace,
            &name,
            completed(json!([{"name": "app", "phase": "Succeeded", "isKilled": true}])),
        )
        .await;
        watch.wait_for_line("Completed").await;
        let _ = watch.child.kill().await;
        let watched = watch.stdout();
        let completed_row = watched
            .lines()
            .find(|line| line.contains("Completed"))
            .expect("a completed row");
        assert!(completed_row.starts_with(&name), "{completed_row}");
        assert!(completed_row.contains(" web "), "{completed_row}");
        assert!(completed_row.contains(" 1/1 "), "{completed_row}");

        let table = run(&namespace, &["get"]).await;
        let text = String::from_utf8_lossy(&table.stdout);
        let mut lines = text.lines();
        let header: Vec<&str> = lines.next().expect("header").split_whitespace().collect();
        assert_eq!(
            header,
            ["NAME", "POD", "NODE", "PHASE", "CONTAINERS", "AGE"]
        );
        let row: Vec<&str> = lines.next().expect("a row").split_whitespace().collect();
        assert_eq!(row[0], name);
        assert_eq!(row[1], "web");
        assert_eq!(row[row.len() - 3], "Completed");
        assert_eq!(row[row.len() - 2], "1/1");

        let all = run(&namespace, &["get", "-A", "-l", "nothing-has-this-label"]).await;
        assert_eq!(all.status.code(), Some(0));

        let list = run(&namespace, &["get", "-o", "json"]).await;
        let list: Value = serde_json::from_slice(&list.stdout).expect("a JSON list");
        assert_eq!(list["kind"], "List");
        assert_eq!(list["items"][0]["metadata"]["name"], name.as_str());

        let one = run(&namespace, &["get", &name, "-o", "yaml"]).await;
        let one: ContainerRecreateRequest =
            serde_saphyr::from_slice(&one.stdout).expect("the request as YAML");
        assert_eq!(one.name_any(), name);
        assert!(one.is_completed());

        let described = run(&namespace, &["describe", &name]).await;
        assert_eq!(described.status.code(), Some(0));
        let text = String::from_utf8_lossy(&described.stdout);
        for expected in [
            format!("Name:                 {name}"),
            "Pod:                  web".to_owned(),
            "Phase:                Completed".to_owned(),
            "Result:               Succeeded".to_owned(),
            "Containers:".to_owned(),
            "Events:".to_owned(),
        ] {
            assert!(text.contains(&expected), "missing {expected:?} in\n{text}");
        }
        assert!(
            text.lines()
                .any(|line| line.trim_start().starts_with("app ") && line.contains("Succeeded")),
            "{text}"
        );

        let as_json = run(&namespace, &["describe", &name, "-o", "json"]).await;
        let as_json: ContainerRecreateRequest =
            serde_json::from_slice(&as_json.stdout).expect("describe -o json");
        assert_eq!(as_json.name_any(), name);
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the local test bed (hack/README.md); hack/cluster-test.sh runs it"]
async fn selector_batch_with_max_unavailable_one_never_has_two_requests_active() {
    with_namespace("batch", |client, namespace| async move {
        let pods = ["web-a", "web-b", "web-c"];
        ready_pods(&client, &namespace, "batch", &pods).await;
        // An unrelated pod the selector must not pick.
        ready_pods(&client, &namespace, "other", &["other"]).await;

        let crrs: Api<ContainerRecreateRequest> = Api::namespaced(client.clone(), &namespace);
        let mut events = watcher(crrs, watcher::Config::default()).boxed();
        let mut plugin = Running::start(
            &namespace,
            &[
                "recreate",
                "-l",
                "app=batch",
                "-c",
                "app",
                "--max-unavailable",
                "1",
            ],
        );

        // name -> (pod, completed), from watch events only.
        let mut seen: BTreeMap<String, (String, bool)> = BTreeMap::new();
        let mut most_active = 0;
        let drive = async {
            while seen.values().filter(|(_, done)| *done).count() < pods.len() {
                let event = events
                    .next()
                    .await
                    .expect("the watch goes on")
                    .expect("a watch event");
                let crr = match event {
                    watcher::Event::Apply(crr) | watcher::Event::InitApply(crr) => crr,
                    _ => continue,
                };
                let name = crr.name_any();
                let done = crr.is_completed();
                let is_new = !seen.contains_key(&name);
                seen.insert(name.clone(), (crr.spec.pod_name.clone(), done));
                let active = seen.values().filter(|(_, done)| !done).count();
                most_active = most_active.max(active);
                assert!(
                    active <= 1,
                    "{active} requests of the batch active at once: {seen:?}"
                );
                if is_new && !done {
                    // The daemon's part: recreate, then finish.
                    daemon_writes(&client, &namespace, &name, json!({"phase": "Recreating"})).await;
                    daemon_writes(
                        &client,
                        &namespace,
                        &name,
                        completed(json!([{"name": "app", "phase": "Succeeded", "isKilled": true}])),
                    )
                    .await;
                }
            }
        };
        if tokio::time::timeout(WAIT, drive).await.is_err() {
            panic!(
                "the batch did not finish; seen {seen:?}; stdout:\n{}",
                plugin.stdout()
            );
        }
        assert_eq!(
            plugin.exit_code().await,
            Some(0),
            "stderr: {}",
            plugin.stderr()
        );
        assert_eq!(most_active, 1);
        let targeted: BTreeSet<&str> = seen.values().map(|(pod, _)| pod.as_str()).collect();
        assert_eq!(
            targeted,
            BTreeSet::from(pods),
            "one request per matching pod"
        );
        assert_eq!(seen.len(), pods.len());
        assert!(
            plugin.stdout().contains("3 of 3 pods recreated"),
            "{}",
            plugin.stdout()
        );
    })
    .await;
}

/// kubectl's plugin completion (`kubectl_complete-crr`, a link to the binary) completes object
/// names from the cluster: the namespace's pods after `recreate`, `deploy/NAME` after a kind.
#[tokio::test]
#[ignore = "needs the local test bed (hack/README.md); hack/cluster-test.sh runs it"]
async fn plugin_completion_offers_the_namespaces_pods() {
    with_namespace("complete", |client, namespace| async move {
        ready_pods(&client, &namespace, "web", &["web-a", "web-b"]).await;
        let folder = std::env::temp_dir().join(format!("crr-complete-{}", std::process::id()));
        std::fs::create_dir_all(&folder).expect("a folder");
        let link = folder.join("kubectl_complete-crr");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_kubectl-crr"), &link).expect("a link");
        let complete = |words: Vec<String>| {
            let link = link.clone();
            async move {
                let output = tokio::process::Command::new(&link)
                    .args(words)
                    .output()
                    .await
                    .expect("running kubectl_complete-crr");
                String::from_utf8_lossy(&output.stdout).into_owned()
            }
        };
        let pods = complete(vec![
            "-n".into(),
            namespace.clone(),
            "recreate".into(),
            "web".into(),
        ])
        .await;
        assert_eq!(pods, "web-a\nweb-b\n:4\n");
        let kinds = complete(vec![
            "-n".into(),
            namespace.clone(),
            "rollout".into(),
            "".into(),
        ])
        .await;
        assert!(kinds.starts_with("deploy/\nsts/\nds/\nrs/\n"), "{kinds}");
        let _ = std::fs::remove_dir_all(&folder);
    })
    .await;
}
