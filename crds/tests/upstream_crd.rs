//! Our CRD against OpenKruise's own (`fixtures/apps.kruise.io_containerrecreaterequests.yaml`),
//! version by version and schema node by schema node. Every difference is listed in
//! [`DELIBERATE`] with its reason; any other fails the test with its path, and a listed
//! difference that no longer exists fails it too, so the list stays the truth.

use std::collections::BTreeSet;
use std::fmt;

use serde_json::Value;

const UPSTREAM: &str = include_str!("fixtures/apps.kruise.io_containerrecreaterequests.yaml");
const OURS: &str = include_str!("../crr.yaml");

/// A difference we mean. `versions` empty means the CRD itself (not one version); a path `*`
/// matches every path; `key` is the schema keyword that differs, or `""` for a field present on
/// one side only. Descriptions are compared word by word (line wrapping is the YAML writer's).
struct Deliberate {
    versions: &'static [&'static str],
    paths: &'static [&'static str],
    key: &'static str,
    reason: &'static str,
}

const BOTH: &[&str] = &["v1alpha1", "v1beta1"];
const V1ALPHA1: &[&str] = &["v1alpha1"];
const V1BETA1: &[&str] = &["v1beta1"];
const CRD: &[&str] = &[];

/// Printer columns crr adds to upstream's (version, column, why); upstream's own are kept as they are.
const ADDED_COLUMNS: &[(&str, &str, &str)] = &[(
    "v1beta1",
    "SUCCEEDED",
    "the Succeeded condition's status: a Completed request may have failed, which PHASE alone hides",
)];

const DELIBERATE: &[Deliberate] = &[
    // The CRD and its versions.
    Deliberate {
        versions: CRD,
        paths: &["spec"],
        key: "conversion",
        reason: "ours converts through crr's webhook; upstream's file has none (an OpenKruise \
                 install adds its own, to kruise-webhook-service)",
    },
    Deliberate {
        versions: BOTH,
        paths: &["additionalPrinterColumns[\"NODE\"]"],
        key: "description",
        reason: "upstream's says \"Pod name\" for the node column, a copy slip; ours says Node name",
    },
    Deliberate {
        versions: BOTH,
        paths: &["additionalPrinterColumns[\"AGE\"]"],
        key: "description",
        reason: "ours keeps the first sentence of metadata.creationTimestamp's description",
    },
    // The schemas as kube-rs generates them.
    Deliberate {
        versions: BOTH,
        paths: &[".apiVersion", ".kind", ".metadata"],
        key: "",
        reason: "kube-rs leaves the standard fields out of the schema; the API server serves and \
                 validates them the same either way",
    },
    Deliberate {
        versions: BOTH,
        paths: &[""],
        key: "title",
        reason: "kube-rs titles the root schema with the kind; a title validates nothing",
    },
    Deliberate {
        versions: BOTH,
        paths: &[""],
        key: "required",
        reason: "ours requires spec in the schema; upstream refuses a request without one in its \
                 webhook (podName can not be empty), so both refuse it",
    },
    Deliberate {
        versions: BOTH,
        paths: &["*"],
        key: "nullable",
        reason: "kube-rs marks Option fields nullable: an explicit null is kept instead of pruned, \
                 and every crr component decodes null as absent, so nothing a client sends is \
                 refused that upstream accepts",
    },
    Deliberate {
        versions: BOTH,
        paths: &[
            ".spec.containers[].preStop.httpGet.port",
            ".spec.containers[].preStop.tcpSocket.port",
        ],
        key: "anyOf",
        reason: "kube-rs writes int-or-string as x-kubernetes-int-or-string alone (present in \
                 both); the API server accepts the same integers and strings",
    },
    // Validation that is ours.
    Deliberate {
        versions: BOTH,
        paths: &[
            ".spec.strategy.minStartedSeconds",
            ".spec.strategy.terminationGracePeriodSeconds",
            ".spec.strategy.unreadyGracePeriodSeconds",
        ],
        key: "maximum",
        reason: "sane maximums (crds/src/limits.rs): every sum of a duration and a timestamp \
                 stays in range; far above any real use",
    },
    Deliberate {
        versions: V1BETA1,
        paths: &[
            ".spec.activeDeadlineSeconds",
            ".spec.ttlSecondsAfterFinished",
        ],
        key: "maximum",
        reason: "sane maximums (crds/src/limits.rs), v1beta1 only: v1alpha1 keeps upstream's \
                 looser schema for these two",
    },
    Deliberate {
        versions: V1ALPHA1,
        paths: &[
            ".spec.strategy.terminationGracePeriodSeconds",
            ".spec.strategy.unreadyGracePeriodSeconds",
        ],
        key: "minimum",
        reason: "upstream's v1alpha1 schema lets a negative grace period through and its webhook \
                 refuses it (must be non-negative integer); ours refuses it in the schema too, so \
                 the operator and daemon never see one even when the webhook was absent. Refused \
                 either way; negative minStartedSeconds and TTL, which upstream accepts, are \
                 accepted (no minimum) and set to 0 with a warning",
    },
    Deliberate {
        versions: V1ALPHA1,
        paths: &[".spec.strategy.failurePolicy"],
        key: "enum",
        reason: "upstream's webhook refuses anything but Fail and Ignore (unknown failurePolicy); \
                 ours refuses it in the schema too. Refused either way",
    },
    Deliberate {
        versions: V1ALPHA1,
        paths: &[".status.containerRecreateStates[].phase"],
        key: "enum",
        reason: "only node daemons write per-container states, always with one of these phases; \
                 a value outside them would fail the conversion to the stored v1beta1 (which has \
                 the enum, upstream's too) with a less readable message. status.phase, which the \
                 kruise client does send empty, has no enum in v1alpha1",
    },
    // Descriptions: our doc comments.
    Deliberate {
        versions: BOTH,
        paths: &[
            ".spec.strategy.minStartedSeconds",
            ".spec.strategy.terminationGracePeriodSeconds",
            ".spec.strategy.unreadyGracePeriodSeconds",
        ],
        key: "description",
        reason: "ours names the maximum (limits.rs)",
    },
    Deliberate {
        versions: V1BETA1,
        paths: &[
            ".spec.activeDeadlineSeconds",
            ".spec.ttlSecondsAfterFinished",
        ],
        key: "description",
        reason: "ours names the maximum (limits.rs)",
    },
    Deliberate {
        versions: BOTH,
        paths: &[
            ".spec",
            ".spec.containers[]",
            ".spec.strategy.failurePolicy",
            ".status",
            ".status.phase",
            ".status.containerRecreateStates[]",
            ".status.containerRecreateStates[].isKilled",
        ],
        key: "description",
        reason: "our doc comments (kubectl explain): what crr does, the webhook's default, the \
                 phase type shared by the request and its containers",
    },
    Deliberate {
        versions: V1ALPHA1,
        paths: &[".status.completionTime"],
        key: "description",
        reason: "our v1alpha1 doc comment, first sentence only",
    },
    Deliberate {
        versions: V1BETA1,
        paths: &[
            ".status.conditions",
            ".status.containerStatusSnapshot",
            ".status.containerStatusSnapshot[]",
            ".status.containerStatusSnapshot[].containerID",
            ".status.containerStatusSnapshot[].name",
        ],
        key: "description",
        reason: "ours names the conditions crr writes (PreRecreateGrace, Succeeded; upstream's \
                 text names a PodUnreadyAcquired type nobody writes), the legacy annotations \
                 they stand for, and containerd IDs; upstream's snapshot name has none",
    },
    Deliberate {
        versions: BOTH,
        paths: &[".spec.containers[].statusContext.restartCount"],
        key: "description",
        reason: "ours leaves out the kubelet's garbage-collection note, which is about \
                 ContainerStatus, not this copy",
    },
    Deliberate {
        versions: BOTH,
        paths: &[
            ".spec.containers[].preStop.exec",
            ".spec.containers[].preStop.tcpSocket",
        ],
        key: "description",
        reason: "ours come from k8s-openapi's core/v1 LifecycleHandler fields; upstream's carry \
                 Go comments of its own probe handler type",
    },
    Deliberate {
        versions: V1BETA1,
        paths: &[".status.conditions[].observedGeneration"],
        key: "description",
        reason: "k8s-openapi's metav1.Condition text (a newer Kubernetes than upstream vendors)",
    },
];

/// One way our CRD and upstream's differ.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Difference {
    /// The version, or `crd` for the CRD itself.
    scope: String,
    path: String,
    key: String,
    ours: String,
    upstream: String,
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.scope, self.path)?;
        if !self.key.is_empty() {
            write!(f, ".{}", self.key)?;
        }
        write!(f, ": ours {}, upstream {}", self.ours, self.upstream)
    }
}

impl Deliberate {
    fn covers(&self, difference: &Difference) -> bool {
        let scope_matches = if self.versions.is_empty() {
            difference.scope == "crd"
        } else {
            self.versions.contains(&difference.scope.as_str())
        };
        scope_matches
            && self
                .paths
                .iter()
                .any(|path| *path == "*" || *path == difference.path)
            && self.key == difference.key
    }
}

fn render(value: Option<&Value>) -> String {
    match value {
        None => "absent".to_owned(),
        Some(Value::Number(number)) => match number.as_f64() {
            Some(float) if float.fract() == 0.0 && float.abs() < 1e15 => {
                format!("{}", float as i64)
            }
            _ => number.to_string(),
        },
        Some(value) => value.to_string(),
    }
}

/// Equal as JSON, with `0` and `0.0` the same number (our YAML writer prints floats).
fn same(ours: Option<&Value>, upstream: Option<&Value>) -> bool {
    match (ours, upstream) {
        (Some(Value::Number(a)), Some(Value::Number(b))) => a.as_f64() == b.as_f64(),
        (Some(Value::Array(a)), Some(Value::Array(b))) => {
            a.len() == b.len() && a.iter().zip(b).all(|(a, b)| same(Some(a), Some(b)))
        }
        (Some(Value::Object(a)), Some(Value::Object(b))) => {
            a.len() == b.len() && a.iter().all(|(key, value)| same(Some(value), b.get(key)))
        }
        (a, b) => a == b,
    }
}

struct Walk<'a> {
    scope: &'a str,
    out: &'a mut Vec<Difference>,
}

impl Walk<'_> {
    fn differ(&mut self, path: &str, key: &str, ours: Option<&Value>, upstream: Option<&Value>) {
        if !same(ours, upstream) {
            self.out.push(Difference {
                scope: self.scope.to_owned(),
                path: path.to_owned(),
                key: key.to_owned(),
                ours: render(ours),
                upstream: render(upstream),
            });
        }
    }

    fn presence(&mut self, path: &str, ours: bool, upstream: bool) {
        let word = |present: bool| if present { "present" } else { "absent" };
        if ours != upstream {
            self.out.push(Difference {
                scope: self.scope.to_owned(),
                path: path.to_owned(),
                key: String::new(),
                ours: word(ours).to_owned(),
                upstream: word(upstream).to_owned(),
            });
        }
    }

    /// Compares two schema nodes: their keywords, then their properties and items node by node.
    fn schema(&mut self, path: &str, ours: &Value, upstream: &Value) {
        let keys: BTreeSet<&String> = object_keys(ours).chain(object_keys(upstream)).collect();
        for key in keys {
            match key.as_str() {
                "properties" => {
                    let names: BTreeSet<&String> = object_keys(&ours[key])
                        .chain(object_keys(&upstream[key]))
                        .collect();
                    for name in names {
                        let field = format!("{path}.{name}");
                        match (ours[key].get(name), upstream[key].get(name)) {
                            (Some(ours), Some(upstream)) => self.schema(&field, ours, upstream),
                            (ours, upstream) => {
                                self.presence(&field, ours.is_some(), upstream.is_some())
                            }
                        }
                    }
                }
                "items" if ours[key].is_object() && upstream[key].is_object() => {
                    self.schema(&format!("{path}[]"), &ours[key], &upstream[key]);
                }
                "description" => self.differ(
                    path,
                    key,
                    words(ours.get(key)).as_ref(),
                    words(upstream.get(key)).as_ref(),
                ),
                _ => self.differ(path, key, ours.get(key), upstream.get(key)),
            }
        }
    }

    /// Compares two objects key by key, one level deep (CRD and version fields).
    fn fields(&mut self, path: &str, ours: &Value, upstream: &Value, skip: &[&str]) {
        let keys: BTreeSet<&String> = object_keys(ours).chain(object_keys(upstream)).collect();
        for key in keys.into_iter().filter(|key| !skip.contains(&key.as_str())) {
            self.differ(path, key, ours.get(key), upstream.get(key));
        }
    }
}

/// A description with its line breaks and runs of spaces made single spaces: the two YAML
/// writers wrap lines differently, and the API server and `kubectl explain` do not care.
fn words(description: Option<&Value>) -> Option<Value> {
    description.map(|value| match value.as_str() {
        Some(text) => Value::String(text.split_whitespace().collect::<Vec<_>>().join(" ")),
        None => value.clone(),
    })
}

fn object_keys(value: &Value) -> impl Iterator<Item = &String> {
    value
        .as_object()
        .into_iter()
        .flat_map(|object| object.keys())
}

fn load(yaml: &str, what: &str) -> Value {
    serde_saphyr::from_str(yaml).unwrap_or_else(|error| panic!("{what} CRD: {error}"))
}

fn version<'a>(crd: &'a Value, name: &str) -> &'a Value {
    crd["spec"]["versions"]
        .as_array()
        .and_then(|versions| versions.iter().find(|v| v["name"] == name))
        .unwrap_or_else(|| panic!("version {name}"))
}

fn differences() -> Vec<Difference> {
    let ours = load(OURS, "our");
    let upstream = load(UPSTREAM, "upstream");
    let mut out = Vec::new();
    let mut crd = Walk {
        scope: "crd",
        out: &mut out,
    };
    crd.differ(
        "metadata",
        "name",
        ours["metadata"].get("name"),
        upstream["metadata"].get("name"),
    );
    crd.fields(
        "spec",
        &ours["spec"],
        &upstream["spec"],
        &["names", "versions"],
    );
    crd.fields(
        "spec.names",
        &ours["spec"]["names"],
        &upstream["spec"]["names"],
        &[],
    );
    let names = |crd: &Value| -> Vec<String> {
        crd["spec"]["versions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v["name"].as_str().map(str::to_owned))
            .collect()
    };
    assert_eq!(names(&ours), names(&upstream), "served versions");
    for name in names(&upstream) {
        let (ours, upstream) = (version(&ours, &name), version(&upstream, &name));
        let mut walk = Walk {
            scope: &name,
            out: &mut out,
        };
        walk.fields("", ours, upstream, &["schema", "additionalPrinterColumns"]);
        let columns = |version: &Value| -> Vec<Value> {
            version["additionalPrinterColumns"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        };
        let (mut our_columns, upstream_columns) = (columns(ours), columns(upstream));
        // Columns crr adds are deliberate too, each with its reason; the rest match upstream's.
        for (version, added, _reason) in ADDED_COLUMNS {
            if *version == name {
                let before = our_columns.len();
                our_columns.retain(|column| column["name"] != *added);
                assert_eq!(
                    before,
                    our_columns.len() + 1,
                    "{name}: no added column {added}"
                );
            }
        }
        let column_names = |columns: &[Value]| -> Vec<String> {
            columns
                .iter()
                .filter_map(|c| c["name"].as_str().map(str::to_owned))
                .collect()
        };
        assert_eq!(
            column_names(&our_columns),
            column_names(&upstream_columns),
            "{name} printer columns"
        );
        for (ours, upstream) in our_columns.iter().zip(&upstream_columns) {
            let path = format!("additionalPrinterColumns[{}]", render(ours.get("name")));
            walk.fields(&path, ours, upstream, &[]);
        }
        walk.schema(
            "",
            &ours["schema"]["openAPIV3Schema"],
            &upstream["schema"]["openAPIV3Schema"],
        );
    }
    out.sort();
    out
}

#[test]
fn upstream_crd_fixture_is_the_one_issue_17_names() {
    // Kept byte for byte: a migration starts from exactly this object.
    assert!(UPSTREAM.contains("controller-gen.kubebuilder.io/version: v0.17.3"));
    assert!(UPSTREAM.contains("name: containerrecreaterequests.apps.kruise.io"));
}

#[test]
fn every_difference_from_upstreams_crd_is_deliberate() {
    let differences = differences();
    let unlisted: Vec<String> = differences
        .iter()
        .filter(|difference| !DELIBERATE.iter().any(|d| d.covers(difference)))
        .map(ToString::to_string)
        .collect();
    let stale: Vec<String> = DELIBERATE
        .iter()
        .filter(|deliberate| !differences.iter().any(|d| deliberate.covers(d)))
        .map(|d| format!("{:?} {:?} .{} ({})", d.versions, d.paths, d.key, d.reason))
        .collect();
    assert!(
        unlisted.is_empty() && stale.is_empty(),
        "differences from OpenKruise's CRD that are not listed as deliberate:\n  {}\n\
         listed as deliberate but no longer different:\n  {}",
        unlisted.join("\n  "),
        stale.join("\n  ")
    );
}
