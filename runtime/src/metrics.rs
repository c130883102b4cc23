//! Metrics encoding: every binary serves its `prometheus-client` registry in the OpenMetrics
//! text format, with the one content type that format has.

use std::hash::Hash;

use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::registry::Registry;

/// Content type of [`encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Creates the series of `family` for each of `label_sets` (a counter at 0, a histogram with no
/// observations), so a family with a known, bounded set of label values exports every series
/// from the first scrape: a rate or an alert over it needs no "absent" special case.
pub fn start_at_zero<S, M, C>(family: &Family<S, M, C>, label_sets: impl IntoIterator<Item = S>)
where
    S: Clone + Hash + Eq,
    C: MetricConstructor<M>,
{
    for labels in label_sets {
        drop(family.get_or_create(&labels));
    }
}

/// The registry in the OpenMetrics text format (ends with `# EOF`).
pub fn encode(registry: &Registry) -> Result<String, std::fmt::Error> {
    let mut body = String::new();
    prometheus_client::encoding::text::encode(&mut body, registry)?;
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;

    #[test]
    fn encodes_openmetrics_text() {
        let mut registry = Registry::with_prefix("crr_test");
        let counter = Counter::<u64>::default();
        registry.register("things", "Things seen", counter.clone());
        counter.inc();
        let body = encode(&registry).unwrap();
        assert!(body.contains("crr_test_things_total 1"), "{body}");
        assert!(body.ends_with("# EOF\n"), "{body}");
    }

    #[test]
    fn started_series_are_exported_before_any_event() {
        let mut registry = Registry::with_prefix("crr_test");
        let family = Family::<Vec<(&'static str, &'static str)>, Counter>::default();
        registry.register("calls", "Calls by outcome", family.clone());
        start_at_zero(
            &family,
            [vec![("outcome", "ok")], vec![("outcome", "error")]],
        );
        let body = encode(&registry).unwrap();
        assert!(
            body.contains("crr_test_calls_total{outcome=\"ok\"} 0"),
            "{body}"
        );
        assert!(
            body.contains("crr_test_calls_total{outcome=\"error\"} 0"),
            "{body}"
        );
    }
}
