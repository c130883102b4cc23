//! Prometheus metrics of the webhook (prefix `crr_webhook`; the catalog with label values is
//! docs/metrics.md): reviews by endpoint and verdict, their latency, rejections by reason, and
//! when the certificates in use expire, and how many this replica renewed.
//!
//! Label values are bounded: `endpoint` is one per route ([`ENDPOINTS`]), `verdict` one of
//! [`VERDICTS`] (`routes::verdict_label`), `reason` a rule's or a lookup's static name
//! (`admission::Rejection::reason`), never anything taken from the request.

use std::time::Duration;

use crr_runtime::metrics::start_at_zero;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::x509::Expiry;

/// The `endpoint` label of each route: the CRR mutating and validating hooks, the rollout
/// validating hook, the pod readiness-gate hook, the CRD conversion.
pub const ENDPOINTS: [&str; 5] = ["mutate", "validate", "rollout", "pod", "convert"];

/// Every `verdict` label: an admission review is `allowed`, `patched` (allowed with a JSON
/// patch), `denied` (a broken rule) or `error` (the webhook could not decide: a pod or node
/// lookup failed, a patch could not be encoded; the request is denied with code 500); a
/// conversion is `converted` or `error` (an object could not be converted). `invalid`: the body
/// was not a review at all (nothing the API server sends).
pub const VERDICTS: [&str; 6] = [
    "allowed",
    "patched",
    "denied",
    "error",
    "invalid",
    "converted",
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReviewLabels {
    pub endpoint: &'static str,
    pub verdict: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CertificateLabels {
    /// `ca` or `serving`.
    pub certificate: &'static str,
}

/// `crr_webhook_certificate_expiry_timestamp_seconds`: the notAfter of the CA and the serving
/// certificate in use, as Unix seconds; a certificate not in use (no CA file) or unreadable has
/// no series.
#[derive(Clone, Debug, Default)]
pub struct CertificateExpiry(Family<CertificateLabels, Gauge>);

impl CertificateExpiry {
    /// Reports `expiry` (the bundle just put in use).
    pub fn set(&self, expiry: Expiry) {
        for (certificate, at) in [("serving", expiry.serving), ("ca", expiry.ca)] {
            let labels = CertificateLabels { certificate };
            match at {
                Some(at) => {
                    self.0.get_or_create(&labels).set(at);
                }
                None => {
                    self.0.remove(&labels);
                }
            }
        }
    }
}

/// `crr_webhook_certificate_renewals_total`: certificates this replica made for the
/// self-managed Secret and wrote there first (of replicas deciding the same renewal, only the
/// winner counts it): `serving` a serving certificate (renewed, or issued by a new CA at the
/// switch), `ca` a new CA (staged for a rollover). Summed over replicas, the renewals done.
#[derive(Clone, Debug, Default)]
pub struct CertificateRenewals(Family<CertificateLabels, Counter>);

impl CertificateRenewals {
    /// Counts one new `certificate` (`ca` or `serving`).
    pub fn inc(&self, certificate: &'static str) {
        self.0
            .get_or_create(&CertificateLabels { certificate })
            .inc();
    }
}

#[derive(Clone)]
pub struct Metrics {
    pub reviews: Family<ReviewLabels, Counter>,
    pub latency: Family<ReviewLabels, Histogram>,
    pub rejections: Family<ReasonLabels, Counter>,
    pub certificate_expiry: CertificateExpiry,
    pub certificate_renewals: CertificateRenewals,
}

impl Metrics {
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            reviews: Family::default(),
            latency: Family::new_with_constructor(|| {
                // 50µs .. ~1.6s
                Histogram::new(exponential_buckets(0.00005, 2.0, 16))
            }),
            rejections: Family::default(),
            certificate_expiry: CertificateExpiry::default(),
            certificate_renewals: CertificateRenewals::default(),
        };
        let sub = registry.sub_registry_with_prefix("crr_webhook");
        sub.register(
            "reviews",
            "Reviews answered, by endpoint (mutate, validate, pod, convert) and verdict (allowed, patched, denied, error, invalid, converted)",
            metrics.reviews.clone(),
        );
        sub.register(
            "review_duration_seconds",
            "Seconds to answer a review (after its body was read), by endpoint and verdict",
            metrics.latency.clone(),
        );
        sub.register(
            "rejections",
            "Admission requests denied, by reason (the broken rule, or the failed lookup of an error verdict)",
            metrics.rejections.clone(),
        );
        sub.register(
            "certificate_expiry_timestamp_seconds",
            "When the certificate in use expires (notAfter, Unix seconds), for the CA and the serving certificate",
            metrics.certificate_expiry.0.clone(),
        );
        sub.register(
            "certificate_renewals",
            "Certificates made for the self-managed Secret by this replica (its write won): ca (a new CA staged for a rollover), serving (a serving certificate)",
            metrics.certificate_renewals.0.clone(),
        );
        // Both series from the start (at 0): a rate over a counter that appears with its first
        // increment misses that increment, and the catalog check wants a series per family.
        start_at_zero(
            &metrics.certificate_renewals.0,
            ["ca", "serving"].map(|certificate| CertificateLabels { certificate }),
        );
        metrics
    }

    pub fn observe(&self, endpoint: &'static str, verdict: &'static str, took: Duration) {
        let labels = ReviewLabels { endpoint, verdict };
        self.reviews.get_or_create(&labels).inc();
        self.latency
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crr_runtime::metrics::{CatalogMismatch, catalog_mismatch, missing_lines};

    #[test]
    fn scrape_shows_every_family_with_its_labels() {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        metrics.observe("mutate", "patched", Duration::from_millis(2));
        metrics
            .rejections
            .get_or_create(&ReasonLabels {
                reason: "PodNotFound",
            })
            .inc();
        metrics.certificate_expiry.set(Expiry {
            serving: Some(1_900_000_000),
            ca: Some(2_000_000_000),
        });
        metrics.certificate_renewals.inc("serving");
        let text = crr_runtime::metrics::encode(&registry).expect("encode");
        let expected = [
            "# TYPE crr_webhook_reviews counter",
            "crr_webhook_reviews_total{endpoint=\"mutate\",verdict=\"patched\"} 1",
            "# TYPE crr_webhook_review_duration_seconds histogram",
            "crr_webhook_review_duration_seconds_count{endpoint=\"mutate\",verdict=\"patched\"} 1",
            "crr_webhook_rejections_total{reason=\"PodNotFound\"} 1",
            "# TYPE crr_webhook_certificate_expiry_timestamp_seconds gauge",
            "crr_webhook_certificate_expiry_timestamp_seconds{certificate=\"serving\"} 1900000000",
            "crr_webhook_certificate_expiry_timestamp_seconds{certificate=\"ca\"} 2000000000",
            "# TYPE crr_webhook_certificate_renewals counter",
            "crr_webhook_certificate_renewals_total{certificate=\"serving\"} 1",
            "crr_webhook_certificate_renewals_total{certificate=\"ca\"} 0",
        ];
        let missing = missing_lines(&text, &expected);
        assert!(missing.is_empty(), "{missing:?} missing from\n{text}");
        assert_eq!(
            catalog_mismatch(&text, include_str!("../../docs/metrics.md"), "crr_webhook_"),
            CatalogMismatch::default(),
            "docs/metrics.md lists exactly the families the webhook serves"
        );
    }

    #[test]
    fn a_certificate_no_longer_in_use_loses_its_series() {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        metrics.certificate_expiry.set(Expiry {
            serving: Some(1),
            ca: Some(2),
        });
        metrics.certificate_expiry.set(Expiry {
            serving: Some(3),
            ca: None,
        });
        let text = crr_runtime::metrics::encode(&registry).expect("encode");
        assert!(
            text.contains(
                "crr_webhook_certificate_expiry_timestamp_seconds{certificate=\"serving\"} 3"
            ),
            "{text}"
        );
        assert!(
            !text.contains("crr_webhook_certificate_expiry_timestamp_seconds{certificate=\"ca\"}"),
            "{text}"
        );
    }
}
