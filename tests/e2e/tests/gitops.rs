//! Argo CD's health checks for crr's kinds (manifests/gitops/argocd, docs/gitops.md), run with a
//! real Lua 5.1 interpreter (Debian's `lua5.1`, hack/install-deps.sh; Argo CD's gopher-lua is
//! 5.1) on objects captured from the test bed by `hack/capture-gitops-fixtures.sh`:
//! `tests/fixtures/gitops/<Status>-<what>.json`, each named after the health Argo CD must show
//! for it. Argo CD hands a script the object as a Lua table (arrays 1-based, nulls absent), as
//! [`lua_value`] writes it.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

fn gitops() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../manifests/gitops/argocd")
}

fn script(kind: &str) -> String {
    let file = match kind {
        "ContainerRecreateRequest" => "containerrecreaterequest.lua",
        "ContainerRecreateRollout" => "containerrecreaterollout.lua",
        other => panic!("no health check for {other}"),
    };
    std::fs::read_to_string(gitops().join(file)).expect("the health check")
}

/// `value` as a Lua constructor, as Argo CD converts an object for its scripts.
fn lua_value(value: &Value) -> String {
    match value {
        Value::Null => "nil".to_owned(),
        Value::Bool(flag) => flag.to_string(),
        Value::Number(number) => number.to_string(),
        Value::String(text) => lua_string(text),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(lua_value).collect();
            format!("{{{}}}", items.join(", "))
        }
        Value::Object(fields) => {
            let fields: Vec<String> = fields
                .iter()
                .filter(|(_, value)| !value.is_null())
                .map(|(key, value)| format!("[{}] = {}", lua_string(key), lua_value(value)))
                .collect();
            format!("{{{}}}", fields.join(", "))
        }
    }
}

fn lua_string(text: &str) -> String {
    let mut quoted = String::from("\"");
    for byte in text.bytes() {
        match byte {
            b'"' | b'\\' => {
                quoted.push('\\');
                quoted.push(char::from(byte));
            }
            b' '..=b'~' => quoted.push(char::from(byte)),
            other => quoted.push_str(&format!("\\{other}")),
        }
    }
    quoted.push('"');
    quoted
}

/// The health Argo CD shows for `object`: (status, message).
fn health(object: &Value) -> (String, String) {
    let kind = object["kind"].as_str().expect("a kind");
    let program = format!(
        "obj = {}\nlocal function health()\n{}\nend\nlocal hs = health()\nio.write(hs.status, \"\\n\", hs.message or \"\", \"\\n\")\n",
        lua_value(object),
        script(kind)
    );
    let mut lua = Command::new("lua5.1")
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("lua5.1 runs (Debian's lua5.1: hack/install-deps.sh)");
    lua.stdin
        .take()
        .expect("stdin")
        .write_all(program.as_bytes())
        .expect("the program written");
    let output = lua.wait_with_output().expect("lua5.1 ends");
    assert!(
        output.status.success(),
        "lua5.1 failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).expect("UTF-8");
    let mut lines = text.lines();
    (
        lines.next().unwrap_or_default().to_owned(),
        lines.next().unwrap_or_default().to_owned(),
    )
}

#[test]
fn every_captured_object_shows_the_health_its_name_says() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gitops");
    let mut checked = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("the fixtures") {
        let path = entry.expect("an entry").path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let Some(expected) = name.split('-').next().filter(|_| name.ends_with(".json")) else {
            continue;
        };
        let object: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("JSON");
        let (status, message) = health(&object);
        assert_eq!(status, expected, "{name}: {message}");
        checked.push((name, status, message));
    }
    let statuses: std::collections::BTreeSet<&str> = checked
        .iter()
        .map(|(_, status, _)| status.as_str())
        .collect();
    assert_eq!(
        statuses,
        ["Degraded", "Healthy", "Progressing", "Suspended"].into(),
        "every health is covered: {checked:#?}"
    );
    for kind in ["ContainerRecreateRequest", "ContainerRecreateRollout"] {
        assert!(
            checked
                .iter()
                .any(|(name, _, _)| name.contains(&kind.to_lowercase()[17..])),
            "no {kind} captured"
        );
    }
}

#[test]
fn a_failed_request_and_rollout_say_why() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gitops");
    for name in [
        "Degraded-request-v1beta1-failed.json",
        "Degraded-rollout-failed.json",
        "Degraded-rollout-aborted.json",
    ] {
        let object: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join(name)).expect(name))
                .expect("JSON");
        let (_, message) = health(&object);
        assert!(!message.is_empty(), "{name} says nothing");
    }
}

#[test]
fn argocd_cm_carries_the_scripts_byte_for_byte() {
    let text = std::fs::read_to_string(gitops().join("argocd-cm.yaml")).expect("argocd-cm.yaml");
    let patch: Value = serde_saphyr::from_str(&text).expect("YAML");
    for (key, kind) in [
        (
            "resource.customizations.health.apps.kruise.io_ContainerRecreateRequest",
            "ContainerRecreateRequest",
        ),
        (
            "resource.customizations.health.crr.dev_ContainerRecreateRollout",
            "ContainerRecreateRollout",
        ),
    ] {
        assert_eq!(
            patch["data"][key].as_str(),
            Some(script(kind).as_str()),
            "{key}"
        );
    }
}

#[test]
fn lua_values_are_argo_cds_tables() {
    let value = serde_json::json!({"a": [1, "x\"y"], "b": null, "c": {"d": true}});
    assert_eq!(
        lua_value(&value),
        r#"{["a"] = {1, "x\"y"}, ["c"] = {["d"] = true}}"#
    );
}
