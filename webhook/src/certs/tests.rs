//! Tests of the certificate modules together: generation, the resolver, the Secret model and
//! the rotation run step by step.

use super::bundle::*;
use super::generate::*;
use super::publish::*;
use super::resolver::*;
use super::secret::*;
use super::upkeep::rfc3339;
use crate::rotation::{self, Policy, RotationStep};
use crate::x509::Expiry;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::WebhookClientConfig;
use k8s_openapi::api::core::v1::Secret;

#[test]
fn generated_bundle_loads_and_names_the_service() {
    crr_runtime::tls::install_crypto_provider();
    let names = service_dns_names("crr-system", "crr-webhook");
    assert!(names.contains(&"crr-webhook.crr-system.svc".to_owned()));
    let bundle = generate(&names).expect("generate");
    assert!(bundle.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
    assert!(bundle.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
    assert_ne!(bundle.cert_pem, bundle.ca_pem);
    let key = certified_key(&bundle).expect("loads into rustls");
    assert_eq!(key.cert.len(), 1);
}

#[test]
fn resolver_swaps_only_on_change() {
    crr_runtime::tls::install_crypto_provider();
    let first = generate(&["a".to_owned()]).expect("generate");
    let second = generate(&["b".to_owned()]).expect("generate");
    let resolver = CertResolver::new(first.clone()).expect("resolver");
    assert!(!resolver.set(first).expect("same"));
    assert!(resolver.set(second.clone()).expect("new"));
    assert!(resolver.bundle() == second);
}

#[test]
fn ca_bundle_patch_touches_only_webhooks_without_the_ca() {
    let with = |ca: Option<&str>| WebhookClientConfig {
        ca_bundle: ca.map(|ca| ByteString(ca.as_bytes().to_vec())),
        ..Default::default()
    };
    let configs = [with(Some("CA")), with(None), with(Some("old"))];
    let patch = ca_bundle_patch(configs.iter(), "CA").expect("two are stale");
    let paths: Vec<String> = patch
        .0
        .iter()
        .map(|op| match op {
            json_patch::PatchOperation::Add(add) => add.path.to_string(),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(
        paths,
        [
            "/webhooks/1/clientConfig/caBundle",
            "/webhooks/2/clientConfig/caBundle"
        ]
    );
    assert!(ca_bundle_patch([with(Some("CA"))].iter(), "CA").is_none());
}

#[test]
fn expiry_reads_both_certificates_of_a_generated_bundle() {
    let before = time_now().unix_timestamp();
    let bundle = generate(&["a".to_owned()]).expect("generate");
    let expiry = bundle.expiry();
    for (at, lifetime) in [
        (expiry.serving, Policy::DEFAULT.serving_validity),
        (expiry.ca, Policy::DEFAULT.ca_validity),
    ] {
        let at = at.expect("read");
        assert!(
            (before + lifetime..=before + lifetime + 5).contains(&at),
            "{at}"
        );
    }
}

const NOW: i64 = 1_800_000_000;

fn names() -> Vec<String> {
    service_dns_names("crr-system", "crr-webhook")
}

/// The test bed's policy (tests/cluster.rs): CA 40 s, serving 15 s, overlap 4 s, resync 1 s.
fn short() -> Policy {
    Policy::new(40, None, 15, None, 4, 1).expect("a valid policy")
}

/// Whether a client that trusts exactly `bundle` accepts `serving` at `now` for every name
/// of the Service (and 127.0.0.1, which the cluster test calls).
fn trusted(serving: &str, bundle: &str, now: i64) -> bool {
    let mut names = names();
    names.push("127.0.0.1".to_owned());
    first_der(serving).is_some_and(|leaf| verifies(&leaf, &ders(bundle), now, &names))
}

/// Runs the rotation pass by pass (one a second, every bundle published at once) from
/// `stored` at `from` to `to`; checks at every pass that the serving certificate is trusted
/// by the bundle in the Secret and by the bundle of the pass before (an API server one step
/// behind). Returns the steps taken, with their times, and the last contents.
fn run(
    mut stored: Stored,
    from: i64,
    to: i64,
    policy: &Policy,
) -> (Vec<(i64, RotationStep)>, Stored) {
    crr_runtime::tls::install_crypto_provider();
    let mut steps = Vec::new();
    for now in from..to {
        let facts = stored.facts(now, &names(), true);
        let step = rotation::plan(&facts, now, policy);
        if step == RotationStep::Idle {
            continue;
        }
        let next = stored.apply(step, now, policy, &names()).expect("apply");
        assert!(
            trusted(&next.serving_cert, &next.ca_bundle, now),
            "{step} at {now}: the new Secret is consistent"
        );
        assert!(
            trusted(&next.serving_cert, &stored.ca_bundle, now),
            "{step} at {now}: an API server with the bundle before the step still trusts what is served"
        );
        assert!(
            trusted(&stored.serving_cert, &next.ca_bundle, now),
            "{step} at {now}: a replica that has not re-read the Secret is still trusted"
        );
        assert_ne!(next, stored, "{step} at {now} changed nothing");
        steps.push((now, step));
        stored = next;
    }
    (steps, stored)
}

#[test]
fn rotation_renews_serving_and_rolls_the_ca_over_without_an_untrusted_moment() {
    let policy = short();
    let first = Stored::generate(&names(), NOW, &policy).expect("generate");
    let first_ca = first.signing.clone().expect("a signing CA");
    let (steps, last) = run(first, NOW, NOW + 40, &policy);
    let names: Vec<RotationStep> = steps.iter().map(|(_, step)| *step).collect();
    assert_eq!(
        names,
        [
            RotationStep::RenewServing,
            RotationStep::RenewServing,
            RotationStep::StageCa,
            RotationStep::MarkPublished,
            RotationStep::RenewServing,
            RotationStep::SwitchCa,
            RotationStep::RetireCa,
        ],
        "{steps:?}"
    );
    let at = |wanted: RotationStep| {
        steps
            .iter()
            .find(|(_, step)| *step == wanted)
            .map(|(at, _)| at - NOW)
    };
    assert_eq!(
        at(RotationStep::RenewServing),
        Some(10),
        "two thirds of 15 s"
    );
    assert_eq!(
        at(RotationStep::StageCa),
        Some(27),
        "13 s before the CA's 40 s are up"
    );
    assert_eq!(
        at(RotationStep::SwitchCa),
        Some(32),
        "the overlap after publication"
    );
    assert_eq!(
        at(RotationStep::RetireCa),
        Some(36),
        "the overlap after the switch"
    );
    let signing = last.signing.expect("a signing CA");
    assert_ne!(signing, first_ca, "a new CA signs");
    assert_eq!(
        ders(&last.ca_bundle),
        ders(&signing.cert_pem),
        "the old CA has left the bundle"
    );
    assert!(
        last.next.is_none() && last.previous_since.is_none() && last.next_published_at.is_none()
    );
}

#[test]
fn both_cas_are_in_the_bundle_between_stage_and_retire() {
    let policy = short();
    let first = Stored::generate(&names(), NOW, &policy).expect("generate");
    let (_, staged) = run(first, NOW, NOW + 28, &policy);
    assert_eq!(ders(&staged.ca_bundle).len(), 2);
    assert!(staged.next.is_some());
    let (_, switched) = run(staged, NOW + 28, NOW + 33, &policy);
    assert_eq!(
        ders(&switched.ca_bundle).len(),
        2,
        "the old CA stays after the switch"
    );
    assert_eq!(switched.previous_since, Some(NOW + 32));
}

#[test]
fn the_secret_keeps_the_cert_manager_keys_and_round_trips() {
    let policy = short();
    let first = Stored::generate(&names(), NOW, &policy).expect("generate");
    let (_, staged) = run(first, NOW, NOW + 29, &policy);
    let mut secret = Secret::default();
    staged.write_into(&mut secret);
    let data = secret.data.clone().unwrap_or_default();
    for key in [
        TLS_CERT,
        TLS_KEY,
        CA_CERT,
        CA_KEY,
        SIGNING_CA_CERT,
        NEXT_CA_CERT,
        NEXT_CA_KEY,
    ] {
        assert!(data.contains_key(key), "{key}");
    }
    assert_eq!(Stored::from_secret(&secret), staged);
    assert_eq!(
        bundle_from_secret(&secret).expect("a bundle"),
        staged.bundle()
    );
    let (_, retired) = run(staged, NOW + 29, NOW + 40, &policy);
    retired.write_into(&mut secret);
    let data = secret.data.clone().unwrap_or_default();
    assert!(!data.contains_key(NEXT_CA_CERT) && !data.contains_key(NEXT_CA_KEY));
    assert!(
        secret
            .metadata
            .annotations
            .clone()
            .unwrap_or_default()
            .is_empty()
    );
    assert_eq!(Stored::from_secret(&secret), retired);
}

#[test]
fn a_secret_without_the_ca_key_is_migrated_by_a_rollover() {
    // What crr wrote before it kept CA keys: tls.crt, tls.key, ca.crt only.
    let policy = short();
    let legacy = Stored::generate(&names(), NOW, &Policy::DEFAULT).expect("generate");
    let legacy = Stored {
        signing: None,
        ..legacy
    };
    let facts = legacy.facts(NOW, &names(), true);
    assert_eq!(facts.signing_ca, None);
    assert!(facts.other_cas && facts.serving.is_some());
    let (steps, last) = run(legacy.clone(), NOW, NOW + 20, &policy);
    let names: Vec<RotationStep> = steps.iter().map(|(_, step)| *step).collect();
    assert_eq!(
        names[..4],
        [
            RotationStep::StageCa,
            RotationStep::MarkPublished,
            RotationStep::SwitchCa,
            RotationStep::RetireCa
        ],
        "{steps:?}"
    );
    assert!(
        !ders(&last.ca_bundle)
            .iter()
            .any(|ca| ders(&legacy.ca_bundle).contains(ca))
    );
    assert!(last.signing.is_some());
}

#[test]
fn a_ca_key_that_does_not_belong_to_a_ca_of_the_bundle_does_not_sign() {
    // Someone replaced tls.crt, tls.key and ca.crt by hand and left crr's keys behind.
    let policy = short();
    let ours = Stored::generate(&names(), NOW, &policy).expect("generate");
    let theirs = Stored::generate(&names(), NOW, &policy).expect("generate");
    let mixed = Stored {
        signing: ours.signing.clone(),
        ..theirs.clone()
    };
    let facts = mixed.facts(NOW, &names(), true);
    assert_eq!(facts.signing_ca, None);
    assert!(facts.serving.is_some_and(|s| !s.from_signing_ca));
    assert_eq!(rotation::plan(&facts, NOW, &policy), RotationStep::StageCa);
    let wrong_key = Stored {
        signing: Some(CaPair {
            cert_pem: theirs.signing.clone().expect("a CA").cert_pem,
            key_pem: ours.signing.clone().expect("a CA").key_pem,
        }),
        ..theirs
    };
    assert_eq!(wrong_key.facts(NOW, &names(), true).signing_ca, None);
}

#[test]
fn an_unusable_secret_is_regenerated() {
    crr_runtime::tls::install_crypto_provider();
    let policy = short();
    let empty = Stored::default();
    let facts = empty.facts(NOW, &names(), true);
    assert_eq!(
        rotation::plan(&facts, NOW, &policy),
        RotationStep::Regenerate
    );
    let fresh = empty
        .apply(RotationStep::Regenerate, NOW, &policy, &names())
        .expect("apply");
    assert!(trusted(&fresh.serving_cert, &fresh.ca_bundle, NOW));
    let for_other_names =
        Stored::generate(&["elsewhere".to_owned()], NOW, &policy).expect("generate");
    let facts = for_other_names.facts(NOW, &names(), true);
    assert_eq!(
        facts.serving, None,
        "a certificate for other names is not usable"
    );
    assert_eq!(
        rotation::plan(&facts, NOW, &policy),
        RotationStep::RenewServing
    );
}

#[test]
fn event_times_are_rfc_3339() {
    assert_eq!(rfc3339(Some(1_800_000_000)), "2027-01-15T08:00:00Z");
    assert_eq!(rfc3339(None), "?");
}

#[test]
fn a_serving_certificate_never_outlives_its_ca() {
    let policy = short();
    let stored = Stored::generate(&names(), NOW, &policy).expect("generate");
    let ca = stored.signing.expect("a CA");
    let (cert, _) = issue_serving(&ca, &names(), NOW + 35, 15).expect("issue");
    let leaf = first_der(&cert).expect("a certificate");
    let ca_der = first_der(&ca.cert_pem).expect("a certificate");
    assert_eq!(
        crate::x509::not_after(&leaf).expect("read"),
        crate::x509::not_after(&ca_der).expect("read")
    );
}

#[test]
fn expiry_takes_the_ca_that_lasts_longest_and_skips_what_it_cannot_read() {
    let older = generate(&["a".to_owned()]).expect("generate");
    let mut bundle = generate(&["b".to_owned()]).expect("generate");
    let newest = bundle.expiry().ca;
    bundle.ca_pem = format!("{}{}", bundle.ca_pem, older.ca_pem);
    assert_eq!(bundle.expiry().ca, newest);
    bundle.ca_pem = String::new();
    bundle.cert_pem = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".into();
    assert_eq!(bundle.expiry(), Expiry::default());
}

#[test]
fn resolver_reports_the_expiry_of_the_bundle_in_use() {
    crr_runtime::tls::install_crypto_provider();
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = crate::metrics::Metrics::register(&mut registry);
    let first = generate(&["a".to_owned()]).expect("generate");
    let resolver = CertResolver::reporting(first.clone(), metrics.certificate_expiry.clone())
        .expect("resolver");
    let text = crr_runtime::metrics::encode(&registry).expect("encode");
    let serving = first.expiry().serving.expect("serving");
    assert!(
        text.contains(&format!(
            "crr_webhook_certificate_expiry_timestamp_seconds{{certificate=\"serving\"}} {serving}"
        )),
        "{text}"
    );
    let mut second = first.clone();
    second.ca_pem = String::new();
    assert!(resolver.set(second).expect("swap"));
    let text = crr_runtime::metrics::encode(&registry).expect("encode");
    assert!(
        !text.contains("crr_webhook_certificate_expiry_timestamp_seconds{certificate=\"ca\"}"),
        "a bundle without CA: {text}"
    );
}

#[test]
fn garbage_pem_is_an_error_not_a_panic() {
    let bundle = Bundle {
        cert_pem: "nope".into(),
        key_pem: "nope".into(),
        ca_pem: String::new(),
    };
    assert!(certified_key(&bundle).is_err());
}
