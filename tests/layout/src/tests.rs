use super::*;

fn edges(pairs: &[(&str, &[&str])]) -> BTreeMap<String, BTreeSet<String>> {
    pairs
        .iter()
        .map(|(from, to)| {
            (
                (*from).to_owned(),
                to.iter().map(|target| (*target).to_owned()).collect(),
            )
        })
        .collect()
}

#[test]
fn module_paths_follow_the_file_layout() {
    let src = Path::new("/x/src");
    assert_eq!(
        module_path(src, Path::new("/x/src/lib.rs")).as_deref(),
        Some("")
    );
    assert_eq!(
        module_path(src, Path::new("/x/src/main.rs")).as_deref(),
        Some("")
    );
    assert_eq!(
        module_path(src, Path::new("/x/src/certs.rs")).as_deref(),
        Some("certs")
    );
    assert_eq!(
        module_path(src, Path::new("/x/src/certs/mod.rs")).as_deref(),
        Some("certs")
    );
    assert_eq!(
        module_path(src, Path::new("/x/src/certs/secret.rs")).as_deref(),
        Some("certs::secret")
    );
    assert_eq!(module_path(src, Path::new("/y/other.rs")), None);
}

#[test]
fn references_are_read_from_uses_paths_and_groups_but_not_comments_or_strings() {
    let text = r#"
use crate::metrics::{CertificateExpiry, CertificateRenewals};
use crate::{readiness, reconcile::{self, Action}};
use super::bundle::Bundle;
// use crate::commented::Out;
let name = "crate::in_a_string";
fn f() { crate::deadline::until(a, b); }
use crate::rotation::{self as rot, Policy};
"#;
    let paths = referenced_paths("certs::upkeep", text);
    let expected: BTreeSet<String> = [
        "metrics::CertificateExpiry",
        "metrics::CertificateRenewals",
        "readiness",
        "reconcile",
        "reconcile::Action",
        "certs::bundle::Bundle",
        "deadline::until",
        "rotation",
        "rotation::Policy",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    assert_eq!(paths, expected);
}

#[test]
fn the_production_part_stops_at_the_inline_test_module() {
    assert_eq!(
        production_part("a\n#[cfg(test)]\nmod tests {\n b\n}\n"),
        "a\n"
    );
    assert_eq!(production_part("a\n#[cfg(test)]\nmod tests;\n"), "a\n");
    assert_eq!(production_part("a\n"), "a\n");
}

#[test]
fn a_circle_of_two_and_one_of_three_are_found_and_a_chain_is_not() {
    let found = circles(&edges(&[
        ("controller", &["metrics", "executor"]),
        ("metrics", &["controller"]),
        ("executor", &["error"]),
        ("error", &[]),
        ("certs", &["run"]),
        ("run", &["routes"]),
        ("routes", &["certs"]),
    ]));
    assert_eq!(
        found,
        vec![
            vec!["certs".to_owned(), "routes".to_owned(), "run".to_owned()],
            vec!["controller".to_owned(), "metrics".to_owned()],
        ]
    );
    assert!(circles(&edges(&[("a", &["b"]), ("b", &["c"]), ("c", &[])])).is_empty());
}

// The examples are split with `concat!` so that the repository's own text search for citations
// (the literal strings) finds none here.
#[test]
fn our_issue_numbers_and_the_outside_spec_are_caught_and_upstream_issues_are_not() {
    assert!(cites_the_missing(concat!(
        "// Writes are folded (iss",
        "ue 18): the phase"
    )));
    assert!(cites_the_missing("//! the fault suite of Issue 16"));
    assert!(cites_the_missing("# as issues 3 and 4 ask"));
    assert!(cites_the_missing(concat!(
        "//! The order follows crr-behaviour",
        ".md §3"
    )));
    assert!(cites_the_missing(concat!(
        "/// the snapshot (spec sec",
        "tion 4)"
    )));
    assert!(!cites_the_missing(
        "/// clock skew breaks it (kruise issue 895)"
    ));
    assert!(!cites_the_missing("/// (kruise issues 1058, 1626)"));
    assert!(!cites_the_missing("/// a known issue with the API server"));
    assert!(!cites_the_missing("/// see docs/behaviour.md §3"));
}

#[test]
fn a_wing_reaching_into_another_or_the_ground_reaching_up_is_a_breach() {
    let wings = ["request", "rollout", "triggers"];
    let paths = |list: &[&str]| list.iter().map(|path| (*path).to_owned()).collect();
    assert_eq!(
        wing_of("rollout::decide::Decision", &wings),
        Some("rollout")
    );
    assert_eq!(wing_of("readiness::acquire", &wings), None);
    assert_eq!(
        wing_breaches(
            "rollout::controller",
            &paths(&[
                "rollout::decide",
                "reconcile_errors::RETRY_BASE",
                "request::cache"
            ]),
            &wings,
            &["run"],
        ),
        ["request::cache"]
    );
    assert_eq!(
        wing_breaches(
            "request::controller::tests",
            &paths(&["request::controller", "triggers::index"]),
            &wings,
            &["run"],
        ),
        ["triggers::index"],
        "a wing's tests count"
    );
    assert_eq!(
        wing_breaches(
            "cache",
            &paths(&["rollout::request_state", "deadline"]),
            &wings,
            &["run"],
        ),
        ["rollout::request_state"],
        "the ground does not reach up"
    );
    assert!(
        wing_breaches(
            "run",
            &paths(&["request::start", "rollout::start", "triggers::start"]),
            &wings,
            &["run", "args"],
        )
        .is_empty()
    );
}
