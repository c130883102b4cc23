//! Static checks of what `kubectl apply -k manifests/system` installs (the CRDs are
//! manifests/crd) (no cluster needed): the node daemon's pod gets only what it needs from its
//! node, the operator writes no workload, the CRDs are kept on uninstall.

use serde_json::Value;

const BASE: &str = include_str!("../../../manifests/system/crr.yaml");

fn objects() -> Vec<Value> {
    BASE.split("\n---\n")
        .filter(|document| document.lines().any(|line| line.starts_with("kind:")))
        .map(|document| serde_saphyr::from_str(document).expect("manifests/system/crr.yaml parses"))
        .collect()
}

fn node_daemon() -> Value {
    objects()
        .into_iter()
        .find(|object| object["kind"] == "DaemonSet")
        .expect("the node daemon's DaemonSet")
}

#[test]
fn the_node_daemon_has_no_host_network_and_mounts_the_runtime_socket_alone() {
    let daemon = node_daemon();
    let pod = &daemon["spec"]["template"]["spec"];
    assert_ne!(pod["hostNetwork"], Value::Bool(true), "hostNetwork");
    assert_ne!(pod["hostPID"], Value::Bool(true), "hostPID");
    let volumes = pod["volumes"].as_array().expect("volumes");
    assert_eq!(volumes.len(), 1, "one volume, the socket: {volumes:?}");
    let host_path = &volumes[0]["hostPath"];
    assert_eq!(host_path["type"], "Socket", "{host_path}");
    assert!(
        host_path["path"]
            .as_str()
            .is_some_and(|path| path.ends_with(".sock")),
        "{host_path}"
    );
    let container = &pod["containers"][0];
    let mount = &container["volumeMounts"][0];
    let socket_flag = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .find_map(|arg| arg.strip_prefix("--cri-socket="))
        .expect("--cri-socket");
    assert_eq!(
        mount["mountPath"], socket_flag,
        "the flag names the mounted socket"
    );
    assert!(
        container["args"]
            .as_array()
            .expect("args")
            .iter()
            .any(|arg| arg
                .as_str()
                .is_some_and(|arg| arg.starts_with("--cri-unavailable-exit-seconds="))),
        "the daemon exits when the mounted socket stays dead"
    );
    let security = &container["securityContext"];
    assert_ne!(security["privileged"], Value::Bool(true));
    assert_eq!(security["capabilities"]["drop"][0], "ALL");
}

fn find(kind: &str, name: &str) -> Value {
    objects()
        .into_iter()
        .find(|object| object["kind"] == kind && object["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("{kind} {name} in manifests/system/crr.yaml"))
}

/// The two-replica components: a PodDisruptionBudget that lets a drain take one
/// replica at a time, and a preferred (never required: a test bed of fewer nodes than replicas
/// still runs them all) anti-affinity that spreads them over nodes.
#[test]
fn the_operator_and_the_webhook_have_a_disruption_budget_and_spread_over_nodes() {
    for name in ["crr-operator", "crr-webhook"] {
        let deployment = find("Deployment", name);
        assert!(
            deployment["spec"]["replicas"].as_u64() > Some(1),
            "{name}: replicas"
        );
        let pod_labels = &deployment["spec"]["template"]["metadata"]["labels"];

        let budget = find("PodDisruptionBudget", name);
        assert_eq!(budget["spec"]["minAvailable"], 1, "{name}: {budget}");
        assert!(budget["spec"]["maxUnavailable"].is_null(), "{name}");
        let selector = budget["spec"]["selector"]["matchLabels"]
            .as_object()
            .expect("matchLabels");
        for (key, value) in selector {
            assert_eq!(
                &pod_labels[key], value,
                "{name}: the budget selects its pods"
            );
        }

        let anti = &deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"];
        assert!(
            anti["requiredDuringSchedulingIgnoredDuringExecution"].is_null(),
            "{name}: required anti-affinity would leave replicas Pending on a small cluster"
        );
        let terms = anti["preferredDuringSchedulingIgnoredDuringExecution"]
            .as_array()
            .unwrap_or_else(|| panic!("{name}: preferred anti-affinity"));
        assert!(
            terms.iter().any(|term| {
                let term = &term["podAffinityTerm"];
                term["topologyKey"] == "kubernetes.io/hostname"
                    && term["labelSelector"]["matchLabels"]
                        .as_object()
                        .is_some_and(|labels| {
                            labels.iter().all(|(key, value)| &pod_labels[key] == value)
                        })
            }),
            "{name}: spread by hostname, away from its own pods: {terms:?}"
        );
    }
}

/// The node daemon runs on every node, tainted or not, and before ordinary pods.
#[test]
fn the_node_daemon_tolerates_every_taint_and_is_node_critical() {
    let daemon = node_daemon();
    let pod = &daemon["spec"]["template"]["spec"];
    assert_eq!(pod["priorityClassName"], "system-node-critical");
    let tolerations = pod["tolerations"].as_array().expect("tolerations");
    assert!(
        tolerations
            .iter()
            .any(|toleration| toleration["operator"] == "Exists" && toleration["key"].is_null()),
        "tolerates everything: {tolerations:?}"
    );
    // Its admin port (probes, /metrics for a PodMonitor) is named and is where it listens.
    let container = &pod["containers"][0];
    let port = container["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .find(|port| port["name"] == "admin")
        .expect("a port named admin");
    let listen = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .find_map(|arg| arg.strip_prefix("--admin-listen="))
        .expect("--admin-listen");
    assert!(
        listen.ends_with(&format!(":{}", port["containerPort"])),
        "{listen} vs {port}"
    );
    assert_eq!(container["readinessProbe"]["httpGet"]["port"], "admin");
}

/// Requests and memory limits on every container (from BENCHMARKS.md's footprint), no CPU limit.
#[test]
fn every_component_requests_resources_and_limits_memory_only() {
    for (kind, name) in [
        ("Deployment", "crr-operator"),
        ("Deployment", "crr-webhook"),
        ("DaemonSet", "crr-node-daemon"),
    ] {
        let workload = find(kind, name);
        for container in workload["spec"]["template"]["spec"]["containers"]
            .as_array()
            .expect("containers")
        {
            let resources = &container["resources"];
            assert!(
                resources["requests"]["cpu"].is_string(),
                "{name}: {resources}"
            );
            assert!(
                resources["requests"]["memory"].is_string(),
                "{name}: {resources}"
            );
            assert!(
                resources["limits"]["memory"].is_string(),
                "{name}: {resources}"
            );
            assert!(resources["limits"]["cpu"].is_null(), "{name}: no CPU limit");
        }
    }
}

/// `helm test`'s objects and the optional Prometheus-operator ones stay out of what
/// `kubectl apply -k` installs.
#[test]
fn the_default_install_has_no_test_objects_and_no_monitors() {
    for object in objects() {
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        assert!(!name.starts_with("crr-test"), "{name}");
        assert!(
            !["Pod", "ServiceMonitor", "PodMonitor", "PrometheusRule"]
                .contains(&object["kind"].as_str().unwrap_or_default()),
            "{}: {name}",
            object["kind"]
        );
        assert!(
            object["metadata"]["annotations"]["helm.sh/hook"].is_null(),
            "{name} is a hook"
        );
    }
}

/// The verbs the ClusterRole `role` grants on `resource` of `group`, over all its rules.
fn granted(role: &Value, group: &str, resource: &str) -> Vec<String> {
    let mut verbs: Vec<String> = role["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .filter(|rule| {
            let has = |key: &str, wanted: &str| {
                rule[key]
                    .as_array()
                    .is_some_and(|items| items.iter().any(|item| item == wanted || item == "*"))
            };
            has("apiGroups", group) && has("resources", resource)
        })
        .flat_map(|rule| rule["verbs"].as_array().expect("verbs").clone())
        .map(|verb| verb.as_str().expect("a verb").to_owned())
        .collect();
    verbs.sort();
    verbs.dedup();
    verbs
}

/// The operator reads workloads and never writes them: what its triggers last did goes to
/// TriggerRecords, crr's own objects. No admission policy is left about workloads.
#[test]
fn the_operator_reads_workloads_and_writes_only_trigger_records() {
    let role = find("ClusterRole", "crr-operator");
    for resource in ["deployments", "statefulsets", "daemonsets"] {
        assert_eq!(
            granted(&role, "apps", resource),
            ["get", "list", "watch"],
            "{resource}"
        );
    }
    assert_eq!(
        granted(&role, "crr.dev", "triggerrecords"),
        ["create", "list", "patch", "watch"],
        "watched, and written by server-side apply: never read one by one or deleted (the \
         garbage collector deletes a record with its workload)"
    );
    for object in objects() {
        if object["kind"] != "ValidatingAdmissionPolicy" {
            continue;
        }
        let text = serde_json::to_string(&object).expect("JSON");
        for about in ["deployments", "statefulsets", "daemonsets", "config-hashes"] {
            assert!(
                !text.contains(about),
                "{}: about {about}",
                object["metadata"]["name"]
            );
        }
    }
}

const CRDS: &str = include_str!("../../../manifests/crd/crd.yaml");

/// manifests/crd holds crr's three CRDs, each kept by `helm uninstall` (deleting a CRD deletes
/// every object of it).
#[test]
fn the_crds_are_the_requests_rollouts_and_trigger_records_each_kept() {
    let crds: Vec<Value> = CRDS
        .split("\n---\n")
        .filter(|document| document.lines().any(|line| line.starts_with("kind:")))
        .map(|document| serde_saphyr::from_str(document).expect("manifests/crd/crd.yaml parses"))
        .collect();
    let names: Vec<&str> = crds
        .iter()
        .map(|crd| crd["metadata"]["name"].as_str().expect("a name"))
        .collect();
    assert_eq!(
        names,
        [
            "containerrecreaterequests.apps.kruise.io",
            "containerrecreaterollouts.crr.dev",
            "triggerrecords.crr.dev",
        ]
    );
    for crd in &crds {
        assert_eq!(
            crd["metadata"]["annotations"]["helm.sh/resource-policy"], "keep",
            "{}",
            crd["metadata"]["name"]
        );
    }
    let records = &crds[2];
    assert_eq!(records["spec"]["scope"], "Namespaced");
    assert_eq!(records["spec"]["names"]["kind"], "TriggerRecord");
}

const VALUES: &str = include_str!("../../../manifests/helm/crr/values.yaml");
const SCHEMA: &str = include_str!("../../../manifests/helm/crr/values.schema.json");

/// The schema node for `node`, following a local `$ref`.
fn resolve<'a>(schema: &'a Value, node: &'a Value) -> &'a Value {
    match node["$ref"].as_str() {
        Some(reference) => {
            let path = reference.strip_prefix("#/").expect("a local $ref");
            path.split('/').fold(schema, |node, key| &node[key])
        }
        None => node,
    }
}

/// Every key of values.yaml is described by the schema, and every object the schema describes
/// property by property refuses unknown keys (a typo fails the install). Helm validates values
/// against it; hack/check-chart.sh checks that bad values fail.
#[test]
fn the_schema_covers_every_value_and_refuses_unknown_keys() {
    let schema: Value = serde_json::from_str(SCHEMA).expect("values.schema.json is JSON");
    assert_eq!(schema["$schema"], "http://json-schema.org/draft-07/schema#");
    let values: Value = serde_saphyr::from_str(VALUES).expect("values.yaml parses");

    fn walk(schema: &Value, node: &Value, value: &Value, path: &str) {
        let node = resolve(schema, node);
        let Some(map) = value.as_object() else {
            return;
        };
        let Some(properties) = node["properties"].as_object() else {
            // A map of the user's (labels, nodeSelector) or a Kubernetes type (affinity
            // subtrees): described as a whole.
            assert_eq!(node["type"], "object", "{path}: {node}");
            return;
        };
        assert_eq!(
            node["additionalProperties"],
            Value::Bool(false),
            "{path}: unknown keys must fail"
        );
        for (key, child) in map {
            let described = properties
                .get(key)
                .unwrap_or_else(|| panic!("{path}.{key} is not in values.schema.json"));
            walk(schema, described, child, &format!("{path}.{key}"));
        }
        for required in node["required"].as_array().into_iter().flatten() {
            let required = required.as_str().expect("a key");
            assert!(
                map.contains_key(required),
                "{path}.{required} required, not in values.yaml"
            );
        }
    }
    walk(&schema, &schema, &values, "");

    // The bounds that matter most, spelled out.
    let properties = &schema["properties"];
    for component in ["operator", "webhook"] {
        assert_eq!(
            properties[component]["properties"]["replicas"]["minimum"],
            1
        );
    }
    let port = &properties["nodeDaemon"]["properties"]["metricsPort"];
    assert_eq!(
        (port["minimum"].as_u64(), port["maximum"].as_u64()),
        (Some(1), Some(65535))
    );
    assert_eq!(
        properties["logFormat"]["enum"],
        serde_json::json!(["json", "text"])
    );
    assert_eq!(
        properties["images"]["properties"]["pullPolicy"]["enum"],
        serde_json::json!(["Always", "IfNotPresent", "Never"])
    );
}

/// Every object installed, the CRDs included, carries Helm's and Kubernetes' recommended labels;
/// the components' workloads and their pods say which component they are, and the plain
/// manifests bring the namespace they install into, kept on `helm uninstall`.
#[test]
fn every_object_has_the_standard_labels_and_the_namespace_comes_with_them() {
    let crds = CRDS
        .split("\n---\n")
        .filter(|document| document.lines().any(|line| line.starts_with("kind:")))
        .map(|document| serde_saphyr::from_str(document).expect("manifests/crd/crd.yaml parses"));
    let all: Vec<Value> = objects().into_iter().chain(crds).collect();
    assert!(all.len() > 20, "{} objects", all.len());
    for object in &all {
        let labels = &object["metadata"]["labels"];
        for key in [
            "helm.sh/chart",
            "app.kubernetes.io/part-of",
            "app.kubernetes.io/instance",
            "app.kubernetes.io/managed-by",
            "app.kubernetes.io/version",
        ] {
            assert!(
                labels[key].is_string(),
                "{} {} lacks the label {key}: {labels}",
                object["kind"],
                object["metadata"]["name"]
            );
        }
    }
    for (kind, name, component) in [
        ("Deployment", "crr-operator", "operator"),
        ("Deployment", "crr-webhook", "webhook"),
        ("DaemonSet", "crr-node-daemon", "node-daemon"),
    ] {
        let workload = find(kind, name);
        for labels in [
            &workload["metadata"]["labels"],
            &workload["spec"]["template"]["metadata"]["labels"],
        ] {
            assert_eq!(labels["app.kubernetes.io/component"], component, "{name}");
            assert_eq!(labels["app.kubernetes.io/name"], name, "{name}");
        }
    }
    let namespace = find("Namespace", "crr-system");
    assert_eq!(
        namespace["metadata"]["annotations"]["helm.sh/resource-policy"],
        "keep"
    );
    assert_eq!(
        namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "privileged"
    );
}
