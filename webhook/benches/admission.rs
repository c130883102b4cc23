//! Admission latency and throughput over TLS on loopback: CREATE reviews of a v1beta1 CRR whose
//! pod is in the cache (an in-memory lookup, as after the reflector has synced), sent on
//! keep-alive TLS 1.3 connections to the real router and server.
//!
//! The server runs in this process; the load comes from a second process (this same binary,
//! started again with `CRR_ADMISSION_BENCH_CLIENT` set), so client and server do not share a
//! runtime or an allocator. They still share the machine's cores: the server's own CPU time per
//! review is printed too, as the figure that does not depend on the client.
//!
//!   cargo bench -p crr-webhook --bench admission
//!   CRR_BENCH_SECONDS=10 CRR_BENCH_CONNECTIONS=1,8,32 cargo bench -p crr-webhook --bench admission
//!
//! Last, the abuse row: 16 connections (`CRR_BENCH_ABUSE_CONNECTIONS`) send the largest body
//! each endpoint takes (CRR and pod reviews, a ConversionReview of a LIST), back to back, and
//! the server's peak RSS (VmHWM, reset first) is printed against the chart's 128 MiB limit.
//!
//! Prints figures; asserts nothing about them.

#[path = "../tests/support/mod.rs"]
mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crr_runtime::server::Limits;
use crr_webhook::routes;
use support::{Served, create_review};

/// Set in the client process: `ADDRESS CONNECTIONS SECONDS [largest]`; the CA comes in
/// `CA_ENV`. With `largest`, connection `i` sends the `i % 3`-th of the largest bodies.
const CLIENT_ENV: &str = "CRR_ADMISSION_BENCH_CLIENT";
const CA_ENV: &str = "CRR_ADMISSION_BENCH_CA";

fn setting<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

fn percentile(sorted: &[Duration], fraction: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() as f64 * fraction).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[index]
}

/// The client process: `connections` connections, each sending reviews back to back for
/// `duration`; prints `requests elapsed_ns p50_ns p99_ns max_ns errors` on one line.
fn client(spec: &str) -> Result<(), String> {
    let mut fields = spec.split_whitespace();
    let (Some(address), Some(connections), Some(seconds)) =
        (fields.next(), fields.next(), fields.next())
    else {
        return Err(format!(
            "{CLIENT_ENV}={spec:?}: want ADDRESS CONNECTIONS SECONDS"
        ));
    };
    let address: SocketAddr = address.parse().map_err(|e| format!("address: {e}"))?;
    let connections: usize = connections
        .parse()
        .map_err(|e| format!("connections: {e}"))?;
    let duration = Duration::from_secs_f64(seconds.parse().map_err(|e| format!("seconds: {e}"))?);
    let largest = fields.next() == Some("largest");
    let ca = std::env::var(CA_ENV).map_err(|_| format!("{CA_ENV} is not set"))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let (mut latencies, elapsed, errors) = runtime.block_on(async move {
        let config = support::client_config(&ca, &[&rustls::version::TLS13]);
        let bodies = if largest {
            support::largest_bodies()
        } else {
            vec![(routes::MUTATE_CRR, create_review("bench"))]
        };
        let start = Instant::now();
        let deadline = start + duration;
        let mut tasks = Vec::new();
        for index in 0..connections {
            let config = config.clone();
            let (path, body) = bodies[index % bodies.len()].clone();
            tasks.push(tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut connection = match support::connect(address, config).await {
                    Ok(connection) => connection,
                    Err(error) => return (latencies, Some(format!("connect: {error}"))),
                };
                while Instant::now() < deadline {
                    let sent = Instant::now();
                    match connection.post(path, &body).await {
                        Ok((200, answer)) if !answer.is_empty() => latencies.push(sent.elapsed()),
                        Ok((status, _)) => return (latencies, Some(format!("answer {status}"))),
                        Err(error) => return (latencies, Some(format!("request: {error}"))),
                    }
                }
                (latencies, None)
            }));
        }
        let (mut all, mut errors) = (Vec::new(), Vec::new());
        for task in tasks {
            match task.await {
                Ok((latencies, error)) => {
                    all.extend(latencies);
                    errors.extend(error);
                }
                Err(error) => errors.push(error.to_string()),
            }
        }
        (all, start.elapsed(), errors)
    });
    for error in &errors {
        eprintln!("admission bench client: {error}");
    }
    latencies.sort_unstable();
    println!(
        "{} {} {} {} {} {}",
        latencies.len(),
        elapsed.as_nanos(),
        percentile(&latencies, 0.50).as_nanos(),
        percentile(&latencies, 0.99).as_nanos(),
        latencies.last().copied().unwrap_or_default().as_nanos(),
        errors.len()
    );
    Ok(())
}

/// One row: a client process with `connections` connections for `seconds`.
struct Row {
    requests: u64,
    elapsed: Duration,
    p50: Duration,
    p99: Duration,
    max: Duration,
    errors: u64,
}

async fn load(
    served: &Served,
    connections: usize,
    seconds: f64,
    mode: &str,
) -> Result<Row, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let output = tokio::process::Command::new(exe)
        .env(
            CLIENT_ENV,
            format!("{} {connections} {seconds} {mode}", served.address),
        )
        .env(CA_ENV, &served.bundle.ca_pem)
        .stderr(std::process::Stdio::inherit())
        .output()
        .await
        .map_err(|e| format!("starting the client process: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let numbers: Vec<u64> = stdout
        .split_whitespace()
        .filter_map(|n| n.parse().ok())
        .collect();
    let [requests, elapsed, p50, p99, max, errors] = numbers[..] else {
        return Err(format!(
            "client process ({}) printed {stdout:?}",
            output.status
        ));
    };
    Ok(Row {
        requests,
        elapsed: Duration::from_nanos(elapsed),
        p50: Duration::from_nanos(p50),
        p99: Duration::from_nanos(p99),
        max: Duration::from_nanos(max),
        errors,
    })
}

/// This process's CPU time (user + system), from /proc (Linux only; zero elsewhere).
fn own_cpu() -> Duration {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return Duration::ZERO;
    };
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i)?.parse::<u64>().ok())
        .sum();
    Duration::from_millis(ticks * 10)
}

fn main() {
    if let Ok(spec) = std::env::var(CLIENT_ENV) {
        if let Err(error) = client(&spec) {
            eprintln!("admission bench client: {error}");
            std::process::exit(1);
        }
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let seconds: f64 = setting("CRR_BENCH_SECONDS", 5.0);
        let connection_counts: Vec<usize> = std::env::var("CRR_BENCH_CONNECTIONS")
            .unwrap_or_else(|_| "1,4,16".to_owned())
            .split(',')
            .filter_map(|count| count.trim().parse().ok())
            .collect();
        let served = Served::start(true, Limits::default()).await;
        // Warm-up: handshakes, allocator, caches.
        if let Err(error) = load(&served, 2, 0.5, "small").await {
            eprintln!("admission bench: warm-up failed: {error}");
            std::process::exit(1);
        }
        println!(
            "admission bench: CRR CREATE review (v1beta1, pod cached), TLS 1.3 keep-alive on loopback, client in its own process, {} cores, {seconds}s per row",
            std::thread::available_parallelism().map_or(0, |n| n.get())
        );
        println!(
            "{:>11} {:>10} {:>10} {:>10} {:>10} {:>12} {:>16}",
            "connections", "requests", "p50", "p99", "max", "reviews/s", "server CPU/review"
        );
        for connections in connection_counts {
            let cpu_before = own_cpu();
            let row = match load(&served, connections, seconds, "small").await {
                Ok(row) => row,
                Err(error) => {
                    println!("{connections:>11} failed: {error}");
                    continue;
                }
            };
            let server_cpu = own_cpu().saturating_sub(cpu_before);
            let throughput = row.requests as f64 / row.elapsed.as_secs_f64();
            let per_review = server_cpu / u32::try_from(row.requests.max(1)).unwrap_or(u32::MAX);
            println!(
                "{connections:>11} {:>10} {:>10.3?} {:>10.3?} {:>10.3?} {throughput:>12.0} {per_review:>16.1?}{}",
                row.requests,
                row.p50,
                row.p99,
                row.max,
                if row.errors > 0 { format!("  ({} connection errors)", row.errors) } else { String::new() },
            );
        }
        let abuse_connections: usize = setting("CRR_BENCH_ABUSE_CONNECTIONS", 16);
        // Reset this process's peak RSS (VmHWM) so the figure is the abuse row's alone.
        let _ = std::fs::write("/proc/self/clear_refs", "5");
        match load(&served, abuse_connections, seconds, "largest").await {
            Ok(row) => println!(
                "largest bodies ({} KiB CRR review, {} KiB pod review, {} MiB ConversionReview), {abuse_connections} connections: {} answered in {:.1?}, p99 {:.0?}; server peak RSS {:.1} MiB (chart limit 128 MiB){}",
                routes::CRR_BODY_LIMIT / 1024,
                routes::POD_BODY_LIMIT / 1024,
                routes::CONVERT_BODY_LIMIT / (1024 * 1024),
                row.requests,
                row.elapsed,
                row.p99,
                peak_rss_mib(),
                if row.errors > 0 { format!("  ({} connection errors)", row.errors) } else { String::new() },
            ),
            Err(error) => println!("largest bodies: failed: {error}"),
        }
        let _ = served.stop().await;
    });
}

/// This process's peak resident set (VmHWM) in MiB, from /proc (Linux only; zero elsewhere).
fn peak_rss_mib() -> f64 {
    crr_runtime::memory::process_status_kib("self", "VmHWM").map_or(0.0, |kib| kib as f64 / 1024.0)
}
