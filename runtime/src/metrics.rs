//! Metrics encoding: every binary serves its `prometheus-client` registry in the OpenMetrics
//! text format, with the one content type that format has.

use prometheus_client::registry::Registry;

/// Content type of [`encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

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
}
