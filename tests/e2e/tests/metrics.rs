//! crr's metrics as a real Prometheus sees them, after the e2e and nodes suites ran:
//! hack/cluster-test.sh starts the test bed's Prometheus (hack/prometheus.sh, Debian's build,
//! scraping every crr pod through the API server) before those suites and runs this after them.
//!
//! - `families`: every metric family docs/metrics.md lists has had at least one series during the
//!   run (a replica replaced mid-suite takes its counters with it), and so has
//!   every metric the alerting rules and the dashboard query (monitoring/);
//! - `recreate-count`: the recreate-duration histogram counts each completed request exactly
//!   once: N requests complete, its count (summed over the operator's replicas) grows by N and
//!   stays there, and so do the outcomes. The node daemons count each recreated container under
//!   its pod's own labels (`crr_container_recreates_total`), and a deleted pod's series go.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, ensure};
use crr_e2e::{Ctx, Expect, Scenario, Version, succeeded};
use serde_json::json;

const IGNORED: &str =
    "needs the test bed with crr installed and hack/prometheus.sh up; hack/cluster-test.sh runs it";
const REQUESTS: usize = 3;
const RECREATES: &str = "sum(crr_operator_recreate_duration_seconds_count)";
const RECREATED: &str =
    "sum(crr_operator_outcomes_total{outcome=\"succeeded\",reason=\"Recreated\"})";

fn main() {
    let scenarios = vec![
        (
            Scenario {
                name: "families",
                run: |ctx| Box::pin(families(ctx)),
            },
            Expect::Pass,
        ),
        (
            Scenario {
                name: "recreate-count",
                run: |ctx| Box::pin(recreate_count(ctx)),
            },
            Expect::Pass,
        ),
    ];
    crr_e2e::suite_main("metrics", scenarios, IGNORED, |client| async move {
        crr_e2e::installed(&client).await?;
        query(&["value", "vector(1)"])
            .await
            .map(|_| ())
            .map_err(|error| format!("the test bed's Prometheus does not answer: {error:#}"))
    });
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `hack/prometheus-query.sh` with `args`; its stdout, or an error with its output.
async fn query(args: &[&str]) -> anyhow::Result<String> {
    let output = tokio::process::Command::new(root().join("hack/prometheus-query.sh"))
        .args(args)
        .current_dir(root())
        .output()
        .await
        .context("running hack/prometheus-query.sh")?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    ensure!(
        output.status.success(),
        "hack/prometheus-query.sh {args:?}: {}{}",
        stdout,
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(stdout)
}

/// The value of a PromQL expression that gives one sample; 0 when it gives none yet.
async fn value(expression: &str) -> anyhow::Result<f64> {
    match query(&["value", expression]).await {
        Ok(text) => text
            .trim()
            .parse()
            .map_err(|_| anyhow!("{expression} = {text:?}: not a number")),
        Err(_) => Ok(0.0),
    }
}

/// Polls `expression` until it equals `want` (a scrape every 5 s), then returns its value.
async fn settles_at(expression: &str, want: f64, within: Duration) -> anyhow::Result<f64> {
    let start = Instant::now();
    loop {
        let now = value(expression).await?;
        if now == want || start.elapsed() > within {
            return Ok(now);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The value of `expression` once it holds still over `quiet` (two scrapes and more), for at
/// most `within`: what the suites before left behind (a request the last one completed is
/// observed by the operator and scraped a few seconds after that suite ends).
async fn settled(expression: &str, quiet: Duration, within: Duration) -> anyhow::Result<f64> {
    let start = Instant::now();
    let mut last = value(expression).await?;
    loop {
        tokio::time::sleep(quiet).await;
        let now = value(expression).await?;
        if now == last {
            return Ok(now);
        }
        ensure!(
            start.elapsed() < within,
            "{expression} kept moving for {within:?} while nothing was recreated ({last} then {now})"
        );
        last = now;
    }
}

async fn families(_ctx: Ctx) -> anyhow::Result<()> {
    // Every family of the catalog (the script reads docs/metrics.md).
    query(&["missing"])
        .await
        .context("families of docs/metrics.md without a series")?;
    let output = tokio::process::Command::new(root().join("hack/check-monitoring.sh"))
        .arg("--used-metrics")
        .output()
        .await
        .context("running hack/check-monitoring.sh --used-metrics")?;
    ensure!(output.status.success(), "check-monitoring --used-metrics");
    let used: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    ensure!(
        used.len() >= 10,
        "only {} metrics found in the alerts and the dashboard: {used:?}",
        used.len()
    );
    let mut args = vec!["missing"];
    args.extend(used.iter().map(String::as_str));
    query(&args)
        .await
        .context("metrics the alerts or the dashboard query, without a series")?;
    Ok(())
}

async fn recreate_count(ctx: Ctx) -> anyhow::Result<()> {
    // Whatever the earlier suites left must settle first: the count holds still over two scrapes
    // (the last request of the suite before is observed and scraped a few seconds after it).
    let before = settled(RECREATES, Duration::from_secs(11), Duration::from_secs(60)).await?;
    let recreated_before = value(RECREATED).await?;
    for index in 0..REQUESTS {
        ctx.two_container_pod(&format!("counted-{index}"), |_| {})
            .await?;
    }
    let mut names = Vec::new();
    for index in 0..REQUESTS {
        names.push(
            ctx.create_crr(
                Version::V1beta1,
                json!({"metadata": {"name": format!("counted-{index}")},
                       "spec": {"podName": format!("counted-{index}"), "containers": [{"name": "app"}],
                                "strategy": {"minStartedSeconds": 1}}}),
            )
            .await?,
        );
    }
    for name in &names {
        let crr = ctx.wait_completed(name, Duration::from_secs(90)).await?;
        succeeded(&crr, 1)?;
    }
    let want = before + REQUESTS as f64;
    let after = settles_at(RECREATES, want, Duration::from_secs(60)).await?;
    ensure!(
        after == want,
        "{RECREATES}: {before} before, {after} after {REQUESTS} completed requests (want {want})"
    );
    // Counted once: three more scrapes later it has not moved.
    tokio::time::sleep(Duration::from_secs(16)).await;
    let later = value(RECREATES).await?;
    ensure!(
        later == want,
        "{RECREATES} moved to {later} after settling at {want}"
    );
    let recreated = value(RECREATED).await?;
    ensure!(
        recreated == recreated_before + REQUESTS as f64,
        "{RECREATED}: {recreated_before} before, {recreated} after {REQUESTS} recreates"
    );
    planned_restarts(&ctx).await
}

/// The node daemons' `crr_container_recreates_total`, as the test bed's Prometheus stores it:
/// under the restarted pod's own `namespace` and `pod` (the daemon's job honours the labels),
/// one per recreated container and none for the container left alone; a deleted pod's series go.
async fn planned_restarts(ctx: &Ctx) -> anyhow::Result<()> {
    let series = |pod: &str, container: &str| {
        format!(
            "sum(crr_container_recreates_total{{job=\"crr-node-daemon\",namespace=\"{}\",pod=\"{pod}\",container=\"{container}\"}})",
            ctx.namespace
        )
    };
    for index in 0..REQUESTS {
        let pod = format!("counted-{index}");
        let app = settles_at(&series(&pod, "app"), 1.0, Duration::from_secs(30)).await?;
        ensure!(app == 1.0, "{}: {app}, want 1", series(&pod, "app"));
        let sidecar = value(&series(&pod, "sidecar")).await?;
        ensure!(
            sidecar == 0.0,
            "{}: {sidecar}, want none",
            series(&pod, "sidecar")
        );
    }
    let gone = "counted-0";
    ctx.pods()
        .delete(gone, &Default::default())
        .await
        .with_context(|| format!("deleting pod {gone}"))?;
    let present = format!(
        "count(crr_container_recreates_total{{namespace=\"{}\",pod=\"{gone}\"}})",
        ctx.namespace
    );
    // The kubelet removes a deleted pod's containers at its next garbage collection (every
    // minute), the daemon looks every minute: a few minutes at most.
    let left = settles_at(&present, 0.0, Duration::from_secs(240)).await?;
    ensure!(
        left == 0.0,
        "{present}: {left} after the pod was deleted, want none"
    );
    let kept = value(&series("counted-1", "app")).await?;
    ensure!(kept == 1.0, "the other pods' series stay: {kept}");
    Ok(())
}
