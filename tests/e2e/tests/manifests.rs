//! Static checks of what `kubectl apply -k manifests/system` installs (the CRD is manifests/crd) (no cluster needed): the
//! node daemon's pod gets only what it needs from its node (issue 16).

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
