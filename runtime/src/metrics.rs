//! Metrics encoding: every binary serves its `prometheus-client` registry in the OpenMetrics
//! text format, with the one content type that format has. Beside it, what the binaries' metrics
//! share: series started at zero, the source a scrape-time collector reads, and what their tests
//! check in a scrape (the lines they expect, and that docs/metrics.md lists exactly the families
//! served).

use std::collections::BTreeSet;
use std::hash::Hash;
use std::sync::Arc;

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

/// What a [`Collector`](prometheus_client::collector::Collector) reads when it is scraped: a
/// closure over the binary's own state (a cache, a count), so that the families it reports are
/// exact at scrape time instead of updated on every change. A collector must be `Debug` and a
/// closure is not: this one shows as `ScrapeSource(..)`, so the collector can derive `Debug`.
pub struct ScrapeSource<T>(Arc<dyn Fn() -> T + Send + Sync>);

impl<T> ScrapeSource<T> {
    /// The source that calls `read` at each scrape.
    pub fn new(read: impl Fn() -> T + Send + Sync + 'static) -> Self {
        Self(Arc::new(read))
    }

    /// The current value.
    pub fn read(&self) -> T {
        (self.0)()
    }
}

impl<T> Clone for ScrapeSource<T> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

impl<T> std::fmt::Debug for ScrapeSource<T> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("ScrapeSource(..)")
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

/// The lines of `expected` that the scrape `text` lacks: what a binary's metrics test looks for
/// (a series with its value, a `# TYPE` line) and did not find.
pub fn missing_lines<'a>(text: &str, expected: &[&'a str]) -> Vec<&'a str> {
    expected
        .iter()
        .copied()
        .filter(|line| !text.contains(line))
        .collect()
}

/// Where a binary's scrape and the catalog (docs/metrics.md) disagree; empty when the catalog
/// lists exactly the families served.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct CatalogMismatch {
    /// Families the scrape serves that the catalog does not list.
    pub undocumented: BTreeSet<String>,
    /// Families the catalog lists under the binary's prefix that the scrape does not serve.
    pub unserved: BTreeSet<String>,
}

/// Compares the families the scrape `text` serves ([`exposed_families`]) with those the
/// Markdown `catalog` lists under `prefix` ([`documented_families`]).
pub fn catalog_mismatch(text: &str, catalog: &str, prefix: &str) -> CatalogMismatch {
    let served = exposed_families(text);
    let documented = documented_families(catalog, prefix);
    CatalogMismatch {
        undocumented: served.difference(&documented).cloned().collect(),
        unserved: documented.difference(&served).cloned().collect(),
    }
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
    fn missing_lines_are_those_the_scrape_lacks_in_the_order_asked() {
        let text = "# TYPE crr_test_things counter\ncrr_test_things_total 1\n# EOF\n";
        assert_eq!(
            missing_lines(
                text,
                &[
                    "crr_test_waits 0",
                    "crr_test_things_total 1",
                    "# TYPE crr_test_waits gauge"
                ]
            ),
            ["crr_test_waits 0", "# TYPE crr_test_waits gauge"]
        );
        assert!(missing_lines(text, &["# TYPE crr_test_things counter"]).is_empty());
    }

    #[test]
    fn the_catalog_mismatch_names_undocumented_and_unserved_families() {
        let text = "# TYPE crr_test_things counter\n# TYPE crr_test_level gauge\n# EOF\n";
        let catalog = "| `crr_test_things_total` | counter |\n| `crr_test_waits_seconds` | histogram |\n\
                       | `crr_other_total` | counter |\n";
        let mismatch = catalog_mismatch(text, catalog, "crr_test_");
        assert_eq!(
            mismatch.undocumented.into_iter().collect::<Vec<_>>(),
            ["crr_test_level"]
        );
        assert_eq!(
            mismatch.unserved.into_iter().collect::<Vec<_>>(),
            ["crr_test_waits_seconds"]
        );
        let agreeing = "| `crr_test_things_total` | counter |\n| `crr_test_level` | gauge |\n";
        assert_eq!(
            catalog_mismatch(text, agreeing, "crr_test_"),
            CatalogMismatch::default()
        );
    }

    /// A collector of one gauge, as the binaries write theirs.
    #[derive(Debug)]
    struct LevelCollector {
        level: ScrapeSource<i64>,
    }

    impl prometheus_client::collector::Collector for LevelCollector {
        fn encode(
            &self,
            mut encoder: prometheus_client::encoding::DescriptorEncoder,
        ) -> Result<(), std::fmt::Error> {
            use prometheus_client::encoding::EncodeMetric as _;
            let metric = encoder.encode_descriptor(
                "level",
                "Level",
                None,
                prometheus_client::metrics::MetricType::Gauge,
            )?;
            prometheus_client::metrics::gauge::ConstGauge::new(self.level.read()).encode(metric)
        }
    }

    #[test]
    fn a_scrape_source_is_read_at_each_scrape() {
        use std::sync::atomic::{AtomicI64, Ordering};
        let level = Arc::new(AtomicI64::new(3));
        let source = ScrapeSource::new({
            let level = Arc::clone(&level);
            move || level.load(Ordering::Relaxed)
        });
        let mut registry = Registry::with_prefix("crr_test");
        registry.register_collector(Box::new(LevelCollector {
            level: source.clone(),
        }));
        assert!(encode(&registry).unwrap().contains("crr_test_level 3"));
        level.store(5, Ordering::Relaxed);
        assert!(encode(&registry).unwrap().contains("crr_test_level 5"));
        assert_eq!(source.read(), 5);
        assert_eq!(
            format!("{:?}", LevelCollector { level: source }),
            "LevelCollector { level: ScrapeSource(..) }"
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
