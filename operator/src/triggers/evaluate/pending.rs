//! A config change that waits before its rollout, kept in the workload's TriggerRecord: for the
//! restart window, for the kubelets to write it to the pods' volumes, or for its objects to
//! settle after a recent rollout (`settle`).

use std::time::Duration;

use crr_crds::trigger_record::PendingChange;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::EventType;
use tracing::{debug, info};

use super::write_record;
use crate::triggers::config_change;
use crate::triggers::context::{TriggerContext, locked};
use crate::triggers::error::TriggerError;
use crate::triggers::index::{WorkloadEntry, WorkloadKey};
use crate::triggers::record::{self, Field};
use crate::triggers::refs::ConfigRef;
use crate::triggers::rollout as trigger_rollout;
use crate::triggers::settle;

/// How long a config change's rollout still waits (`settle`), and why: a follow-up for its objects
/// to settle, a change through a volume for the kubelets to write it there.
pub(super) fn hold(
    ctx: &TriggerContext,
    key: &WorkloadKey,
    entry: &WorkloadEntry,
    changed: &[ConfigRef],
) -> Option<(Duration, &'static str)> {
    let now = Timestamp::now();
    let workload = trigger_rollout::WorkloadId {
        namespace: &key.namespace,
        uid: &entry.uid,
    };
    let last_ended = trigger_rollout::last_ended(&ctx.rollouts.state(), &workload);
    let last_change = {
        let mut times = locked(&ctx.change_times);
        // Not seen to change since the operator started: from now, as the kubelet may not have
        // written it yet.
        times.last(key).unwrap_or_else(|| {
            times.changed(key.clone(), now);
            now
        })
    };
    let settling = settle::hold(last_ended, Some(last_change), now);
    let mounted = changed.iter().any(|object| entry.mounted.contains(object));
    let writing = mounted
        .then(|| settle::volume_hold(last_change, ctx.settings.volume_sync, now))
        .flatten();
    debug!(workload = ?key, ?settling, ?writing, "the config change waits");
    match (settling, writing) {
        (None, None) => None,
        (settling, Some(writing)) if settling.is_none_or(|settling| writing >= settling) => {
            Some((writing, WAIT_FOR_VOLUMES))
        }
        (settling, _) => settling.map(|settling| (settling, WAIT_TO_SETTLE)),
    }
}

/// Why a change mounted as a volume waits (`settle::volume_hold`).
const WAIT_FOR_VOLUMES: &str =
    "waits for the kubelets to write it to the pods' volumes (triggers.volumeSyncSeconds)";
/// Why a follow-up waits (`settle::hold`).
const WAIT_TO_SETTLE: &str =
    "follows a recent rollout and waits for its objects to stop changing for 5 s";

/// A config change that waits before its rollout: for the restart window, for the kubelets to
/// write it to the pods' volumes, or for its objects to settle.
pub(super) struct PendingWait<'a> {
    pub(super) changed: &'a [ConfigRef],
    /// The hashes rolled out before: the record keeps them until the change is rolled out.
    pub(super) recorded: Option<&'a config_change::Hashes>,
    /// The change that already waited, if one did.
    pub(super) before: Option<&'a PendingChange>,
    pub(super) now: Timestamp,
    /// When it is rolled out.
    pub(super) runs_at: Timestamp,
    /// What it waits for, for the Event.
    pub(super) why: String,
}

/// Keeps a config change that waits: the record says it waits (and since when, and until when)
/// and keeps the hashes rolled out before, so the change survives a restart and is rolled out,
/// with every change after it, when its time comes. `kubectl crr triggers` shows it. One Event
/// per pending change (a later change of the same objects only moves its time in the record).
pub(super) async fn wait_pending(
    ctx: &TriggerContext,
    key: &WorkloadKey,
    uid: &str,
    workload: &ObjectReference,
    wait: PendingWait<'_>,
) -> Result<(), TriggerError> {
    let pending = record::pending_change(wait.changed, wait.before, wait.now, wait.runs_at);
    if wait.before == Some(&pending) {
        return Ok(());
    }
    let hashes = wait.recorded.cloned().unwrap_or_default();
    let field = Field::ConfigHashes {
        hashes: &hashes,
        pending: Some(&pending),
    };
    write_record(ctx, key, uid, field).await?;
    if wait
        .before
        .is_some_and(|before| before.changed == pending.changed)
    {
        // The same objects changed again: the record says when it runs now, no new Event.
        return Ok(());
    }
    let note = format!(
        "changed: {}: {}; rolls out at {}",
        pending.changed.join(", "),
        wait.why,
        wait.runs_at
            .round(jiff::Unit::Second)
            .unwrap_or(wait.runs_at)
    );
    info!(workload = ?key, %note, "a config change waits");
    ctx.events
        .publish(workload, EventType::Normal, "ConfigChangePending", &note)
        .await;
    Ok(())
}
