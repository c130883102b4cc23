//! Figures the benches take on this machine: the CPU time and resident memory of crr's
//! processes (read from `/proc`: every component runs on this one machine) and summaries of
//! samples (median, p90, p99), and the requests crr's service accounts made, from the test bed API
//! server's audit log.

use std::collections::BTreeMap;
use std::io::BufRead as _;
use std::time::Duration;

use anyhow::Context as _;
use kube::Client;
use serde_json::{Value, json};

/// The crr programs the benches follow, as their process names.
pub const PROGRAMS: [&str; 3] = ["crr-operator", "crr-webhook", "crr-node-daemon"];

/// A process on this machine: CPU seconds so far and resident memory.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Usage {
    pub cpu_seconds: f64,
    pub rss_kib: u64,
}

/// The pids whose command name is `program` (the kernel keeps 15 bytes of it).
pub fn pids_of(program: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids: Vec<u32> = entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|comm| comm_matches(program, comm.trim()))
        })
        .collect();
    pids.sort_unstable();
    pids
}

/// Whether a `/proc/<pid>/comm` value names `program`: the kernel truncates names to 15 bytes.
fn comm_matches(program: &str, comm: &str) -> bool {
    !comm.is_empty() && (program == comm || (comm.len() == 15 && program.starts_with(comm)))
}

/// CPU time and RSS of one process, `None` once it is gone.
pub fn usage(pid: u32) -> Option<Usage> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_usage(&stat, &status)
}

/// [`usage`] from the texts of `/proc/<pid>/stat` and `/proc/<pid>/status` (clock ticks of
/// 1/100 s, as on every Linux this runs on).
fn parse_usage(stat: &str, status: &str) -> Option<Usage> {
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    let rss_kib = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())?;
    Some(Usage {
        cpu_seconds: ticks / 100.0,
        rss_kib,
    })
}

/// Sum over every process of `program` (the operator and webhook have two replicas).
pub fn total_usage(program: &str) -> Usage {
    pids_of(program)
        .into_iter()
        .filter_map(usage)
        .fold(Usage::default(), |sum, one| Usage {
            cpu_seconds: sum.cpu_seconds + one.cpu_seconds,
            rss_kib: sum.rss_kib + one.rss_kib,
        })
}

/// The value of the environment variable `name` (a bench's knob), else `default`; a value that
/// does not parse is an error naming it.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> anyhow::Result<T> {
    match std::env::var(name) {
        Ok(value) => value
            .trim()
            .parse()
            .map_err(|_| anyhow::anyhow!("{name}={value:?} is not a valid value")),
        Err(_) => Ok(default),
    }
}

/// Writes a bench's results as `<dir>/<date><suffix>.json` and `.md` (and the table also as
/// `<dir>/<latest>` when given), and prints the table.
pub fn write_results(
    dir: &std::path::Path,
    suffix: &str,
    report: &impl serde::Serialize,
    markdown: &str,
    latest: Option<&str>,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let stem = format!("{}{suffix}", jiff::Zoned::now().strftime("%Y-%m-%dT%H%M"));
    std::fs::write(
        dir.join(format!("{stem}.json")),
        serde_json::to_string_pretty(report)?,
    )?;
    std::fs::write(dir.join(format!("{stem}.md")), markdown)?;
    if let Some(latest) = latest {
        std::fs::write(dir.join(latest), markdown)?;
    }
    println!("{markdown}");
    eprintln!("wrote {}/{stem}.json and .md", dir.display());
    Ok(())
}

/// Median, p90, p99, min and max of some samples (nearest rank); NaN when there are none.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Summary {
    pub samples: usize,
    pub median: f64,
    pub p90: f64,
    pub p99: f64,
    pub min: f64,
    pub max: f64,
}

pub fn summarize(values: &[f64]) -> Summary {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let at = |q: f64| -> f64 {
        if sorted.is_empty() {
            return f64::NAN;
        }
        let index = ((sorted.len() as f64 - 1.0) * q).round() as usize;
        sorted[index.min(sorted.len() - 1)]
    };
    Summary {
        samples: sorted.len(),
        median: at(0.5),
        p90: at(0.9),
        p99: at(0.99),
        min: sorted.first().copied().unwrap_or(f64::NAN),
        max: sorted.last().copied().unwrap_or(f64::NAN),
    }
}

/// The service accounts crr's components run as.
const SYSTEM_ACCOUNTS: &str = "system:serviceaccount:crr-system:";

/// (component, verb, resource[/subresource]) → requests, from the audit log's `ResponseComplete`
/// events of crr's service accounts received within [start, end].
pub fn audit_counts(
    path: &str,
    start: jiff::Timestamp,
    end: jiff::Timestamp,
) -> anyhow::Result<BTreeMap<(String, String, String), usize>> {
    let file = std::fs::File::open(path).with_context(|| format!("reading {path}"))?;
    let mut counts = BTreeMap::new();
    for line in std::io::BufReader::new(file).lines() {
        let line = line?;
        let Ok(event) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let Some(user) = event["user"]["username"].as_str() else {
            continue;
        };
        let Some(component) = user.strip_prefix(SYSTEM_ACCOUNTS) else {
            continue;
        };
        let received: Option<jiff::Timestamp> = event["requestReceivedTimestamp"]
            .as_str()
            .and_then(|time| time.parse().ok());
        if !received.is_some_and(|time| time >= start && time <= end) {
            continue;
        }
        let verb = event["verb"].as_str().unwrap_or_default().to_owned();
        let object = &event["objectRef"];
        let mut resource = object["resource"].as_str().unwrap_or("(none)").to_owned();
        if let Some(sub) = object["subresource"].as_str() {
            resource = format!("{resource}/{sub}");
        }
        *counts
            .entry((component.to_owned(), verb, resource))
            .or_insert(0) += 1;
    }
    Ok(counts)
}

/// The writes of every user, and crr's reads, on objects of `namespace`, from the audit log's
/// `ResponseComplete` events, in the order received: one line each, `received (+took) user verb
/// resource[/subresource] name code`. What a slow request's time went to, told by the API
/// server.
pub fn audit_timeline(path: &str, namespace: &str) -> anyhow::Result<Vec<String>> {
    let file = std::fs::File::open(path).with_context(|| format!("reading {path}"))?;
    let mut lines = Vec::new();
    for line in std::io::BufReader::new(file).lines() {
        let line = line?;
        if !line.contains(namespace) {
            continue;
        }
        let Ok(event) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let object = &event["objectRef"];
        if event["stage"] != "ResponseComplete" || object["namespace"] != namespace {
            continue;
        }
        let user = event["user"]["username"].as_str().unwrap_or_default();
        let verb = event["verb"].as_str().unwrap_or_default();
        let crr = user.starts_with(SYSTEM_ACCOUNTS);
        if !crr && matches!(verb, "get" | "list" | "watch") {
            continue;
        }
        let time = |field: &str| -> Option<jiff::Timestamp> { event[field].as_str()?.parse().ok() };
        let (Some(received), Some(done)) =
            (time("requestReceivedTimestamp"), time("stageTimestamp"))
        else {
            continue;
        };
        let mut resource = object["resource"].as_str().unwrap_or("(none)").to_owned();
        if let Some(sub) = object["subresource"].as_str() {
            resource = format!("{resource}/{sub}");
        }
        lines.push(format!(
            "{} (+{:.3}s) {} {verb} {resource} {} {}",
            received.strftime("%H:%M:%S%.3f"),
            done.duration_since(received).as_secs_f64(),
            user.rsplit(':').next().unwrap_or(user),
            object["name"].as_str().unwrap_or("-"),
            event["responseStatus"]["code"].as_i64().unwrap_or(0),
        ));
    }
    Ok(lines)
}

/// RSS at the end and CPU over `window` of every crr process, one entry per process; the
/// operator's are marked `leader` or `follower`.
pub async fn sample_processes(client: &Client, window: Duration) -> Value {
    let before: BTreeMap<u32, Usage> = PROGRAMS
        .iter()
        .flat_map(|program| pids_of(program))
        .filter_map(|pid| Some((pid, usage(pid)?)))
        .collect();
    tokio::time::sleep(window).await;
    let leader = operator_leader_pid(client).await;
    let mut out = BTreeMap::<&str, Vec<Value>>::new();
    for program in PROGRAMS {
        for pid in pids_of(program) {
            let (Some(now), Some(then)) = (usage(pid), before.get(&pid)) else {
                continue;
            };
            let mut entry = json!({
                "rss_mib": now.rss_kib as f64 / 1024.0,
                "cpu_millicores": (now.cpu_seconds - then.cpu_seconds) * 1000.0 / window.as_secs_f64(),
            });
            if program == "crr-operator" {
                entry["role"] = json!(if Some(pid) == leader {
                    "leader"
                } else {
                    "follower"
                });
            }
            out.entry(program).or_default().push(entry);
        }
    }
    json!(out)
}

/// The pid of the operator's leader, when it can be told (the Lease's holder and its process).
pub async fn operator_leader_pid(client: &Client) -> Option<u32> {
    let leader = crate::faults::operator_leader(client).await.ok()?;
    crate::faults::process_of(&leader, "crr-operator").ok()
}

/// The pod label that names a crr component (its program).
const COMPONENT_LABEL: &str = "app.kubernetes.io/name";

/// The highest resident memory one crr process was seen with while [`RssPeaks`] sampled.
#[derive(Clone, Debug)]
pub struct ProcessPeak {
    /// Its pod in the system namespace.
    pub pod: String,
    /// Its program (one of [`PROGRAMS`]).
    pub program: String,
    /// The node its pod runs on.
    pub node: String,
    /// The highest RSS seen, KiB.
    pub peak_kib: u64,
    /// Of it, the anonymous part (`RssAnon`: the heap; the rest is mostly the binary's pages).
    pub peak_anon_kib: u64,
    /// Samples taken (the process was readable).
    pub samples: usize,
    /// The pids it had: more than one when the container was restarted while sampled.
    pub pids: Vec<u32>,
}

/// Samples the RSS of every crr process (each pod of the system namespace that runs one of
/// [`PROGRAMS`], found through /proc by its pod's cgroup) every `every` in the background, keeping
/// each one's peak, until [`RssPeaks::stop`]. A process that goes (its container restarted) is
/// looked for again in its pod at the next sample.
pub struct RssPeaks {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Vec<ProcessPeak>>,
}

impl RssPeaks {
    /// Finds every crr process (an error when one of the component pods has none) and starts.
    pub async fn start(client: &Client, every: Duration) -> anyhow::Result<Self> {
        use k8s_openapi::api::core::v1::Pod;
        let pods: kube::Api<Pod> = kube::Api::namespaced(client.clone(), crate::SYSTEM_NAMESPACE);
        let mut watched = Vec::new();
        for pod in pods
            .list(&Default::default())
            .await
            .context("listing crr's pods")?
            .items
        {
            let Some(program) = PROGRAMS.iter().find(|program| {
                pod.metadata
                    .labels
                    .as_ref()
                    .and_then(|labels| labels.get(COMPONENT_LABEL))
                    .is_some_and(|name| name == *program)
            }) else {
                continue;
            };
            if pod.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let pid = crate::faults::process_of(&pod, program)?;
            let peak = ProcessPeak {
                pod: pod.metadata.name.clone().unwrap_or_default(),
                program: (*program).to_owned(),
                node: pod
                    .spec
                    .as_ref()
                    .and_then(|spec| spec.node_name.clone())
                    .unwrap_or_default(),
                peak_kib: 0,
                peak_anon_kib: 0,
                samples: 0,
                pids: vec![pid],
            };
            watched.push((pod, peak));
        }
        anyhow::ensure!(!watched.is_empty(), "no crr process found to sample");
        let (stop, mut stopped) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            loop {
                for (pod, peak) in &mut watched {
                    let mut pid = peak.pids.last().copied();
                    let mut now = pid.and_then(usage);
                    if now.is_none() {
                        pid = crate::faults::process_of(pod, &peak.program).ok();
                        now = pid.and_then(usage);
                        if let Some(pid) = pid.filter(|pid| !peak.pids.contains(pid)) {
                            peak.pids.push(pid);
                        }
                    }
                    if let Some(now) = now {
                        if now.rss_kib > peak.peak_kib {
                            peak.peak_kib = now.rss_kib;
                            peak.peak_anon_kib = pid.map_or(0, rss_anon_kib);
                        }
                        peak.samples += 1;
                    }
                }
                tokio::select! {
                    _ = ticks.tick() => {}
                    _ = &mut stopped => break,
                }
            }
            watched.into_iter().map(|(_, peak)| peak).collect()
        });
        Ok(Self { stop, task })
    }

    /// Stops sampling (after one last sample) and returns each process's peak, in the order found.
    pub async fn stop(self) -> anyhow::Result<Vec<ProcessPeak>> {
        let _ = self.stop.send(());
        self.task.await.context("the RSS sampler panicked")
    }
}

/// `RssAnon` of a process, KiB (0 when unreadable).
fn rss_anon_kib(pid: u32) -> u64 {
    crr_runtime::memory::process_status_kib(&pid.to_string(), "RssAnon").unwrap_or(0)
}

/// Bytes of a Kubernetes memory quantity (`128Mi`, `1G`, `65536`); `None` for a form this does
/// not read (fractions, exponents, milli).
pub fn memory_bytes(quantity: &str) -> Option<u64> {
    let quantity = quantity.trim();
    let digits = quantity
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(quantity.len());
    let (number, suffix) = quantity.split_at(digits);
    let factor: u64 = match suffix {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        _ => return None,
    };
    number.parse::<u64>().ok()?.checked_mul(factor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_audit_timeline_keeps_writes_and_crrs_reads_in_the_namespace() {
        let event = |user: &str, verb: &str, namespace: &str, sub: Option<&str>| {
            let mut object = json!({"resource": "pods", "namespace": namespace, "name": "plain"});
            if let Some(sub) = sub {
                object["subresource"] = json!(sub);
            }
            json!({"stage": "ResponseComplete", "verb": verb, "user": {"username": user},
                   "objectRef": object, "responseStatus": {"code": 200},
                   "requestReceivedTimestamp": "2026-11-29T10:00:01.250000Z",
                   "stageTimestamp": "2026-11-29T10:00:01.500000Z"})
            .to_string()
        };
        let log = [
            event("system:node:crr-node", "patch", "plain-ns", Some("status")),
            event("admin", "get", "plain-ns", None),
            event(
                "system:serviceaccount:crr-system:crr-webhook",
                "get",
                "plain-ns",
                None,
            ),
            event(
                "system:node:crr-node",
                "patch",
                "plain-ns-2",
                Some("status"),
            ),
            "not json plain-ns".to_owned(),
        ]
        .join("\n");
        let path = std::env::temp_dir().join(format!("audit-timeline-{}.log", std::process::id()));
        std::fs::write(&path, log).expect("a temporary file");
        let lines = audit_timeline(path.to_str().expect("a UTF-8 path"), "plain-ns");
        std::fs::remove_file(&path).ok();
        assert_eq!(
            lines.expect("read"),
            [
                "10:00:01.250 (+0.250s) crr-node patch pods/status plain 200",
                "10:00:01.250 (+0.250s) crr-webhook get pods plain 200",
            ]
        );
    }

    #[test]
    fn a_process_is_found_by_its_full_or_truncated_name_only() {
        assert!(comm_matches("crr-webhook", "crr-webhook"));
        assert!(comm_matches("crr-node-daemon", "crr-node-daemon"));
        assert!(comm_matches("crr-node-daemon-x", "crr-node-daemon"));
        assert!(!comm_matches("crr-operator", "crr-op"));
        assert!(!comm_matches("crr-operator", ""));
    }

    #[test]
    fn usage_reads_cpu_ticks_and_rss() {
        let stat = "42 (crr (webhook)) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 4 0";
        let status = "Name:\tcrr-webhook\nVmRSS:\t   20480 kB\nThreads:\t4\n";
        assert_eq!(
            parse_usage(stat, status),
            Some(Usage {
                cpu_seconds: 3.0,
                rss_kib: 20480
            })
        );
        assert_eq!(parse_usage(stat, "Name:\tx\n"), None);
    }

    #[test]
    fn memory_quantities_read_as_bytes() {
        assert_eq!(memory_bytes("128Mi"), Some(128 << 20));
        assert_eq!(memory_bytes("64Mi"), Some(64 << 20));
        assert_eq!(memory_bytes("1G"), Some(1_000_000_000));
        assert_eq!(memory_bytes("65536"), Some(65536));
        assert_eq!(memory_bytes("1.5Gi"), None);
        assert_eq!(memory_bytes("100m"), None);
        assert_eq!(memory_bytes("Mi"), None);
    }

    #[test]
    fn summaries_take_the_nearest_rank() {
        let summary = summarize(&(1..=100).map(f64::from).collect::<Vec<_>>());
        assert_eq!(
            (summary.median, summary.p90, summary.p99),
            (51.0, 90.0, 99.0)
        );
        assert_eq!(
            (summary.min, summary.max, summary.samples),
            (1.0, 100.0, 100)
        );
        assert!(summarize(&[]).median.is_nan());
    }
}
