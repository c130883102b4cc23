//! The operator's request watch under a flood, in one process and without a cluster: `n`
//! requests (`FLOOD`, default 20,000) arrive active and each settles once `LAG` (default 15,000)
//! newer ones have arrived, through the real settled index and reflector store; the resident
//! memory at the start, at its peak and after a `malloc_trim` once all are settled.
//! `NOINDEX=1` hands the settled requests to nobody (the store only), for comparison.
//!
//! `cargo run --release -p crr-operator --example flood_sim` (BENCHMARKS.md, "The settled index
//! without an allocation per entry").

use crr_crds::v1beta1::ContainerRecreateRequest;
use crr_operator::request::settled::SettledIndex;
use kube::runtime::{reflector, watcher};
use serde_json::json;

fn resident_kib() -> u64 {
    crr_runtime::memory::process_status_kib("self", "VmRSS").unwrap_or(0)
}

fn setting(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

/// Request `index` as the operator's watch delivers it after admission: active, or settled at
/// its deadline.
fn request(index: usize, settled: bool) -> serde_json::Result<ContainerRecreateRequest> {
    let mut labels = json!({
        "crr.apps.kruise.io/pod-uid": "8b1e7c5e-6a55-4f2e-9b1c-3f1f0c1d2e3f",
        "crr.apps.kruise.io/node-name": "kwok-node-17",
    });
    let status = if settled {
        json!({"phase": "Completed", "completionTime": "2026-11-29T11:39:05Z",
               "containerRecreateStates": [{"name": "app", "phase": "Failed",
                                            "message": "activeDeadlineSeconds exceeded"}]})
    } else {
        labels["crr.apps.kruise.io/active"] = "true".into();
        json!({"phase": "Recreating", "containerRecreateStates": [{"name": "app", "phase": "Pending"}]})
    };
    let mut crr: ContainerRecreateRequest = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1beta1", "kind": "ContainerRecreateRequest",
        "metadata": {
            "name": format!("ttl-{index}"), "namespace": "crr-scale-ttl",
            "uid": format!("0b1e7c5e-6a55-4f2e-9b1c-{index:012}"),
            "resourceVersion": format!("{}", 1_234_567 + 2 * index + usize::from(settled)),
            "generation": 1, "creationTimestamp": "2026-11-29T11:39:00Z", "labels": labels,
        },
        "spec": {
            "podName": format!("ttl-{}", index % 100),
            "containers": [{"name": "app", "statusContext": {
                "containerID": "containerd://0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                "restartCount": 0}}],
            "strategy": {"failurePolicy": "Fail", "unreadyGracePeriodSeconds": 0, "minStartedSeconds": 0},
            "activeDeadlineSeconds": 3, "ttlSecondsAfterFinished": 86400,
        },
        "status": status,
    }))?;
    crr_operator::cache::keep_what_reconciles_read(&mut crr);
    Ok(crr)
}

fn main() -> serde_json::Result<()> {
    crr_runtime::memory::map_large_allocations();
    let (flood, lag) = (setting("FLOOD", 20_000), setting("LAG", 15_000));
    let store_only = std::env::var_os("NOINDEX").is_some();
    let index = SettledIndex::default();
    let (store, mut writer) = reflector::store::<ContainerRecreateRequest>();
    let mut deliver = |event: watcher::Event<ContainerRecreateRequest>| match event {
        watcher::Event::Apply(crr) if store_only && crr_operator::cache::is_settled(&crr) => {
            writer.apply_watcher_event(&watcher::Event::Delete(crr));
        }
        event if store_only => writer.apply_watcher_event(&event),
        event => {
            if let Some(event) = index.route(event) {
                writer.apply_watcher_event(&event);
            }
        }
    };
    deliver(watcher::Event::Init);
    deliver(watcher::Event::InitDone);
    crr_runtime::memory::trim();
    let start = resident_kib();
    let mut peak = start;
    for step in 0..flood + lag {
        if step < flood {
            deliver(watcher::Event::Apply(request(step, false)?));
        }
        if step >= lag {
            deliver(watcher::Event::Apply(request(step - lag, true)?));
        }
        if step % 1000 == 0 {
            peak = peak.max(resident_kib());
        }
    }
    crr_runtime::memory::trim();
    println!(
        "{flood} requests, {lag} active at most: {} cached, {} settled; resident KiB at the start {start}, at the peak {peak}, after a trim {}",
        store.state().len(),
        index.len(),
        resident_kib()
    );
    Ok(())
}
