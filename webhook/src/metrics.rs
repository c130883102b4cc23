//! Prometheus metrics of the webhook (prefix `crr_webhook`): reviews by endpoint and verdict,
//! their latency, and rejections by reason.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReviewLabels {
    pub endpoint: &'static str,
    pub verdict: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndpointLabels {
    pub endpoint: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: &'static str,
}

#[derive(Clone)]
pub struct Metrics {
    pub reviews: Family<ReviewLabels, Counter>,
    pub latency: Family<EndpointLabels, Histogram>,
    pub rejections: Family<ReasonLabels, Counter>,
}

impl Metrics {
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            reviews: Family::default(),
            latency: Family::new_with_constructor(|| {
                // 50µs .. ~1.6s
                Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
                    0.00005, 2.0, 16,
                ))
            }),
            rejections: Family::default(),
        };
        let sub = registry.sub_registry_with_prefix("crr_webhook");
        sub.register(
            "reviews",
            "Reviews answered, by endpoint and verdict",
            metrics.reviews.clone(),
        );
        sub.register(
            "review_duration_seconds",
            "Time to answer a review",
            metrics.latency.clone(),
        );
        sub.register(
            "rejections",
            "Requests denied, by rule",
            metrics.rejections.clone(),
        );
        metrics
    }

    pub fn observe(&self, endpoint: &'static str, verdict: &'static str, took: Duration) {
        self.reviews
            .get_or_create(&ReviewLabels { endpoint, verdict })
            .inc();
        self.latency
            .get_or_create(&EndpointLabels { endpoint })
            .observe(took.as_secs_f64());
    }
}
