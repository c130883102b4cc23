//! Admission latency and throughput over TLS on loopback: CREATE reviews of a v1beta1 CRR whose
//! pod is in the cache (an in-memory lookup, as after the reflector has synced), sent on
//! keep-alive TLS 1.3 connections to the real router and server. Client and server share the
//! machine's cores, so figures are a lower bound of what the server alone does.
//!
//!   cargo bench -p crr-webhook --bench admission
//!   CRR_BENCH_SECONDS=10 CRR_BENCH_CONNECTIONS=1,8,32 cargo bench -p crr-webhook --bench admission
//!
//! Prints figures; asserts nothing about them.

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use crr_webhook::server::{self, Limits};
use support::{Served, create_review};

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

/// `connections` clients, each sending reviews back to back for `duration`.
async fn run(served: &Served, connections: usize, duration: Duration) -> (Vec<Duration>, Duration) {
    let body = create_review("bench");
    let start = Instant::now();
    let deadline = start + duration;
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let connection = served
            .connect(served.client_config(&[&rustls::version::TLS13]))
            .await;
        let body = body.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let Ok(mut connection) = connection else {
                return latencies;
            };
            while Instant::now() < deadline {
                let sent = Instant::now();
                match connection.post(server::MUTATE_CRR, &body).await {
                    Ok((200, answer)) if !answer.is_empty() => latencies.push(sent.elapsed()),
                    Ok((status, _)) => {
                        eprintln!("unexpected answer {status}");
                        break;
                    }
                    Err(error) => {
                        eprintln!("request failed: {error}");
                        break;
                    }
                }
            }
            latencies
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        if let Ok(latencies) = task.await {
            all.extend(latencies);
        }
    }
    (all, start.elapsed())
}

fn main() {
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
        let _ = run(&served, 2, Duration::from_millis(500)).await;
        println!(
            "admission bench: CRR CREATE review (v1beta1, pod cached), TLS 1.3 keep-alive on loopback, {} worker threads, {seconds}s per row",
            std::thread::available_parallelism().map_or(0, |n| n.get())
        );
        println!("{:>11} {:>10} {:>10} {:>10} {:>10} {:>12}", "connections", "requests", "p50", "p99", "max", "reviews/s");
        for connections in connection_counts {
            let (mut latencies, elapsed) =
                run(&served, connections, Duration::from_secs_f64(seconds)).await;
            latencies.sort_unstable();
            let throughput = latencies.len() as f64 / elapsed.as_secs_f64();
            println!(
                "{connections:>11} {:>10} {:>10.3?} {:>10.3?} {:>10.3?} {throughput:>12.0}",
                latencies.len(),
                percentile(&latencies, 0.50),
                percentile(&latencies, 0.99),
                latencies.last().copied().unwrap_or_default(),
            );
        }
        let _ = served.stop().await;
    });
}
