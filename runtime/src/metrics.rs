//! Metrics encoding: every binary serves its `prometheus-client` registry in the OpenMetrics
//! text format, with the one content type that format has.

use std::collections::BTreeSet;
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

/// The metric families `text` (the OpenMetrics output of [`encode`]) declares, by the names
/// Prometheus stores them under: a counter `x` as `x_total`, any other family by its name (a
/// histogram's series add `_bucket`, `_sum`, `_count`).
pub fn exposed_families(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|declaration| declaration.split_once(' '))
        .map(|(name, kind)| match kind.trim() {
            "counter" => format!("{name}_total"),
            _ => name.to_owned(),
        })
        .collect()
}

/// The families a Markdown catalog (docs/metrics.md) lists whose names start with `prefix`: the
/// first cell of each table row, when it is one name in backticks.
pub fn documented_families(markdown: &str, prefix: &str) -> BTreeSet<String> {
    markdown
        .lines()
        .filter_map(|line| line.trim().strip_prefix('|'))
        .filter_map(|row| row.split('|').next())
        .filter_map(|cell| {
            cell.trim()
                .strip_prefix('`')
                .and_then(|cell| cell.strip_suffix('`'))
        })
        .filter(|name| name.starts_with(prefix))
        .map(str::to_owned)
        .collect()
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
    fn families_are_named_as_prometheus_stores_them() {
        let mut registry = Registry::with_prefix("crr_test");
        registry.register("things", "Things seen", Counter::<u64>::default());
        registry.register(
            "waits_seconds",
            "Waits",
            prometheus_client::metrics::histogram::Histogram::new([1.0]),
        );
        registry.register(
            "level",
            "Level",
            prometheus_client::metrics::gauge::Gauge::<i64>::default(),
        );
        let families = exposed_families(&encode(&registry).unwrap());
        assert_eq!(
            families.into_iter().collect::<Vec<_>>(),
            [
                "crr_test_level",
                "crr_test_things_total",
                "crr_test_waits_seconds"
            ]
        );
    }

    #[test]
    fn documented_families_are_the_first_cells_in_backticks() {
        let markdown = "| Family | Type |\n|---|---|\n| `crr_a_total` | counter |\n\
                        | `crr_b_seconds` | histogram with `crr_c` |\n| `other_d` | gauge |\n\
                        | plain | `crr_e` |\nText with `crr_f`.\n";
        let families = documented_families(markdown, "crr_");
        assert_eq!(
            families.into_iter().collect::<Vec<_>>(),
            ["crr_a_total", "crr_b_seconds"]
        );
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
