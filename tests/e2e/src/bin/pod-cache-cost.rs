//! `pod-cache-cost`: where a watch-backed pod cache's memory goes, measured on the pods of a real
//! API server (run by `bench/webhook-pods.sh`, after it has created its pods).
//!
//! It fills kube-runtime reflector stores the way a controller would, one after another in this
//! one process, and counts the heap each one holds (a counting global allocator: live bytes, not
//! RSS, so the allocator's own slack is shown apart):
//! - `Store<Pod>`, whole objects: what the webhook held until it stopped caching pods;
//! - `Store<Pod>` without `managedFields`;
//! - `Store<PartialObjectMeta<Pod>>` (a metadata-only watch);
//! - the JSON the API server sends for one pod, with and without `managedFields`.
//!
//! Also the peak during the initial list: the reflector fills a second map and swaps it in at
//! `InitDone`, so a relist briefly holds two copies.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::Context as _;
use futures::TryStreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PartialObjectMeta};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Client, Resource, ResourceExt as _};
use serde::de::DeserializeOwned;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; only counts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let now = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        PEAK.fetch_max(now, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live() -> usize {
    LIVE.load(Ordering::Relaxed)
}

fn reset_peak() {
    PEAK.store(live(), Ordering::Relaxed);
}

struct Row {
    what: &'static str,
    objects: usize,
    held: usize,
    peak: usize,
}

/// Lists and watches until the store is filled, then reports what it holds.
async fn fill<K>(
    what: &'static str,
    stream: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
    writer: reflector::store::Writer<K>,
    store: &Store<K>,
) -> anyhow::Result<Row>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    let before = live();
    reset_peak();
    let mut events = Box::pin(reflector::reflector(writer, stream));
    while let Some(event) = events.try_next().await? {
        if matches!(event, watcher::Event::InitDone) {
            break;
        }
    }
    drop(events);
    Ok(Row {
        what,
        objects: store.len(),
        held: live().saturating_sub(before),
        peak: PEAK.load(Ordering::Relaxed).saturating_sub(before),
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let client = Client::try_default()
        .await
        .context("connecting to the API server")?;
    let pods: Api<Pod> = Api::all(client.clone());
    let list = pods
        .list(&ListParams::default())
        .await
        .context("listing pods")?;
    let count = list.items.len().max(1);
    let json_bytes: usize = list
        .items
        .iter()
        .map(|pod| serde_json::to_vec(pod).map_or(0, |bytes| bytes.len()))
        .sum();
    let json_bytes_trimmed: usize = list
        .items
        .iter()
        .map(|pod| {
            let mut pod = pod.clone();
            pod.managed_fields_mut().clear();
            serde_json::to_vec(&pod).map_or(0, |bytes| bytes.len())
        })
        .sum();
    drop(list);

    let mut rows = Vec::new();
    {
        let (store, writer) = reflector::store::<Pod>();
        let stream = watcher(pods.clone(), watcher::Config::default());
        rows.push(fill("Store<Pod>, whole objects", stream, writer, &store).await?);
    }
    {
        let (store, writer) = reflector::store::<Pod>();
        let stream = watcher(pods.clone(), watcher::Config::default()).modify(|pod| {
            pod.managed_fields_mut().clear();
        });
        rows.push(fill("Store<Pod>, managedFields dropped", stream, writer, &store).await?);
    }
    {
        let (store, writer) = reflector::store::<PartialObjectMeta<Pod>>();
        let metadata = Api::<PartialObjectMeta<Pod>>::all(client.clone());
        let stream = watcher(metadata, watcher::Config::default()).modify(|pod| {
            pod.managed_fields_mut().clear();
        });
        rows.push(
            fill(
                "metadata only, managedFields dropped",
                stream,
                writer,
                &store,
            )
            .await?,
        );
    }

    let kib = |bytes: usize| bytes as f64 / 1024.0;
    println!("pods in the cluster: {count}");
    println!(
        "JSON per pod as served: {:.1} KiB; without managedFields: {:.1} KiB",
        kib(json_bytes / count),
        kib(json_bytes_trimmed / count)
    );
    println!("| cache | objects | heap held per pod | peak during the initial list, per pod |");
    println!("|---|---|---|---|");
    for row in rows {
        println!(
            "| {} | {} | {:.1} KiB | {:.1} KiB |",
            row.what,
            row.objects,
            kib(row.held / count),
            kib(row.peak / count)
        );
    }
    Ok(())
}
