//! Evaluating one workload: the config-change and schedule decisions carried out against the
//! API server (reads of the used objects' data when the index says their resourceVersion moved,
//! the rollout's creation, the workload's TriggerRecord, the Events).
//!
//! What to do is decided by `config_change::decide` and `schedule::step` from values; this file
//! gathers those values (the index, the rollout cache, the reads) and carries the decision out.
//! The calls it makes are tested against a scripted API server in `evaluate/tests.rs`. Nothing
//! here writes the workload: what the triggers did goes to its record (`record`).

use std::collections::BTreeMap;
use std::time::Duration;

use crr_crds::rollout::ContainerRecreateRollout;
use crr_crds::trigger_record::TriggerRecord;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference, Secret};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::events::EventType;
use kube::{Api, ResourceExt};
use tracing::{debug, info};

use super::annotations::{self, Triggers};
use super::config_change::{self, Decision};
use super::context::{TriggerContext, locked};
use super::error::{TriggerError, api_error};
use super::index::{MAX_REFERENCES, ObjectKey, ReadHash, WorkloadEntry, WorkloadKey};
use super::record::{self, Field};
use super::refs::{ConfigKind, ConfigRef};
use super::rollout::{self as trigger_rollout, Cause, Doomed, NameTaken, Trigger, WorkloadView};
use super::schedule::{self, Skipped, Step};
use super::warnings;
use crate::wing::FIELD_MANAGER;
use pending::{PendingWait, hold, wait_pending};

/// The hash of `object`'s data in `namespace` now, read only when the index says its
/// resourceVersion moved since the last read; `None` when it does not exist.
async fn current_hash(
    ctx: &TriggerContext,
    namespace: &str,
    object: &ConfigRef,
) -> Result<Option<String>, TriggerError> {
    let key = ObjectKey {
        namespace: namespace.to_owned(),
        object: object.clone(),
    };
    if let Some(hash) = ctx.index().fresh_hash(&key) {
        return Ok(Some(hash.to_owned()));
    }
    let read = match object.kind {
        ConfigKind::ConfigMap => Api::<ConfigMap>::namespaced(ctx.client.clone(), namespace)
            .get_opt(&object.name)
            .await
            .map(|found| found.map(|map| (map.resource_version(), super::hash::config_map(&map)))),
        ConfigKind::Secret => Api::<Secret>::namespaced(ctx.client.clone(), namespace)
            .get_opt(&object.name)
            .await
            .map(|found| {
                found.map(|secret| (secret.resource_version(), super::hash::secret(&secret)))
            }),
    }
    .map_err(api_error(format!("reading {object} in {namespace}")))?
    .map(|(read_at, hash)| ReadHash {
        version: read_at.unwrap_or_default(),
        hash,
    });
    let hash = read.as_ref().map(|read| read.hash.clone());
    ctx.index().record_read(key, read);
    Ok(hash)
}

/// Writes one trigger's field of the workload's record (server-side apply, creating the record
/// the first time), and takes the answer as what the record now says.
async fn write_record(
    ctx: &TriggerContext,
    key: &WorkloadKey,
    uid: &str,
    field: record::Field<'_>,
) -> Result<(), TriggerError> {
    let body = record::apply(key, uid, &field);
    let name = body.metadata.name.clone().unwrap_or_default();
    let api: Api<TriggerRecord> = Api::namespaced(ctx.client.clone(), &key.namespace);
    let written = api
        .patch(
            &name,
            &PatchParams::apply(field.manager()).force(),
            &Patch::Apply(&body),
        )
        .await
        .map_err(api_error(format!(
            "writing the trigger record {}/{name}",
            key.namespace
        )))?;
    ctx.records().wrote(&written);
    ctx.count_pending_changes();
    Ok(())
}

/// Creates `rollout` (built for `cause`) under the first of its names that is free, or that an
/// earlier try of it holds (`trigger_rollout::name_taken`, which tells an earlier try whose
/// record write failed from a rollout of data the config went back to); returns that name and
/// whether this call created it.
async fn create_rollout(
    ctx: &TriggerContext,
    view: &WorkloadView,
    cause: &Cause,
    mut rollout: ContainerRecreateRollout,
) -> Result<(String, bool), TriggerError> {
    let namespace = &view.namespace;
    let api: Api<ContainerRecreateRollout> = Api::namespaced(ctx.client.clone(), namespace);
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PostParams::default()
    };
    for attempt in 1..=trigger_rollout::MAX_NAME_TRIES {
        let name = trigger_rollout::rollout_name_try(&view.name, cause, attempt);
        rollout.metadata.name = Some(name.clone());
        match api.create(&params, &rollout).await {
            Ok(_) => {
                ctx.metrics.rollout_created(cause.trigger());
                ctx.clear_warning(&view.uid, warnings::ROLLOUT_REFUSED);
                return Ok((name, true));
            }
            Err(kube::Error::Api(status)) if status.code == 409 => {
                let existing = api
                    .get_opt(&name)
                    .await
                    .map_err(api_error(format!("reading rollout {namespace}/{name}")))?;
                let taken = existing.map(|existing| {
                    trigger_rollout::name_taken(
                        &existing,
                        &ctx.rollouts.state(),
                        &view.id(),
                        cause.trigger(),
                    )
                });
                if taken == Some(NameTaken::EarlierTry) {
                    return Ok((name, false));
                }
                debug!(%namespace, %name, ?taken, "rollout name held by another rollout; trying the next");
            }
            Err(source) => {
                if let kube::Error::Api(status) = &source
                    && matches!(status.code, 400 | 403 | 422)
                {
                    let note = format!(
                        "the {} trigger's rollout {name} was refused: {}",
                        cause.trigger().as_str(),
                        status.message
                    );
                    ctx.warn_once_as(
                        &view.reference(),
                        warnings::ROLLOUT_REFUSED,
                        warnings::BAD_ANNOTATION,
                        &note,
                    )
                    .await;
                }
                return Err(TriggerError::Api {
                    action: format!("creating rollout {namespace}/{name}"),
                    source,
                });
            }
        }
    }
    Err(TriggerError::NamesTaken {
        rollout: format!(
            "{namespace}/{}",
            trigger_rollout::rollout_name(&view.name, cause)
        ),
        tries: trigger_rollout::MAX_NAME_TRIES,
    })
}

/// Deletes the workload's finished trigger rollouts beyond its history limit (their requests go
/// with them); one already gone is fine.
async fn forget_old_rollouts(
    ctx: &TriggerContext,
    view: &WorkloadView,
) -> Result<(), TriggerError> {
    let old = trigger_rollout::beyond_history(
        &ctx.rollouts.state(),
        &view.id(),
        trigger_rollout::HISTORY_LIMIT,
    );
    let api: Api<ContainerRecreateRollout> = Api::namespaced(ctx.client.clone(), &view.namespace);
    for Doomed { name, uid } in old {
        // The UID read: a rollout made again under that name since is not the one to delete.
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::background()
        };
        match api.delete(&name, &params).await {
            Ok(_) => {
                info!(namespace = %view.namespace, %name, workload = %view.name, "deleted a trigger rollout beyond the workload's history limit")
            }
            // Gone, or another object under the name now (the precondition failed).
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {}
            Err(source) => {
                return Err(TriggerError::Api {
                    action: format!("deleting rollout {}/{name}", view.namespace),
                    source,
                });
            }
        }
    }
    Ok(())
}

/// Evaluates one workload; returns when to look at it again, if ever.
pub(super) async fn evaluate(
    ctx: &TriggerContext,
    key: &WorkloadKey,
) -> Result<Option<Duration>, TriggerError> {
    let Some(entry) = ctx.index().workload(key).cloned() else {
        return Ok(None);
    };
    let view = WorkloadView {
        kind: key.kind,
        namespace: key.namespace.clone(),
        name: key.name.clone(),
        uid: entry.uid.clone(),
    };
    let workload = view.reference();
    let (triggers, problems) =
        annotations::parse(&entry.annotations, ctx.settings.reloader_annotations);
    if problems.is_empty() {
        ctx.clear_warning(&entry.uid, warnings::BAD_ANNOTATION);
    } else {
        let note = warnings::bad_annotations_note(&problems);
        ctx.warn_once(&workload, warnings::BAD_ANNOTATION, &note)
            .await;
    }
    let not_read =
        annotations::reloader_not_read(&entry.annotations, ctx.settings.reloader_annotations);
    if not_read.is_empty() {
        ctx.clear_warning(&entry.uid, warnings::RELOADER_NOT_READ);
    } else {
        let note = format!(
            "crr does not read {}: only reloader.stakater.com/auto and the reload lists are honoured (docs/migrating-from-reloader.md)",
            not_read.join(", ")
        );
        ctx.warn_once(&workload, warnings::RELOADER_NOT_READ, &note)
            .await;
    }
    forget_old_rollouts(ctx, &view).await?;
    let mut again = None;
    if triggers.config_change.is_some() {
        again = config_change(ctx, key, &entry, &triggers, &view, &workload).await?;
    }
    if let Some(schedule) = &triggers.schedule {
        let next = scheduled(ctx, key, &entry, &triggers, schedule, &view, &workload).await?;
        again = sooner(again, next);
    }
    if let Some(restart) = &triggers.restart {
        let next =
            requested_restart(ctx, key, &entry, &triggers, restart, &view, &workload).await?;
        again = sooner(again, next);
    }
    Ok(again)
}

/// The sooner of two looks again.
fn sooner(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// A value of `crr.dev/restart-requested-at` the record has not acted on: one rollout of the
/// requested containers, then the value recorded (so that it never restarts again). A restart of
/// an earlier value that still runs is waited for. The restart window does not apply: it was
/// asked for.
async fn requested_restart(
    ctx: &TriggerContext,
    key: &WorkloadKey,
    entry: &WorkloadEntry,
    triggers: &Triggers,
    restart: &annotations::RestartRequest,
    view: &WorkloadView,
    workload: &ObjectReference,
) -> Result<Option<Duration>, TriggerError> {
    let done = ctx
        .records()
        .of(key, &entry.uid)
        .and_then(|record| record.restart_requested.clone());
    if done.as_deref() == Some(restart.value.as_str()) {
        return Ok(None);
    }
    if let Some(running) =
        trigger_rollout::running(&ctx.rollouts.state(), &view.id(), Trigger::Restart)
    {
        debug!(workload = ?key, %running, "a requested restart waits for the one that runs");
        return Ok(Some(config_change::WAIT_FOR_RUNNING));
    }
    let cause = Cause::Restart {
        value: restart.value.clone(),
        hash: super::hash::restart_value(&restart.value),
    };
    let containers = restart
        .containers
        .clone()
        .unwrap_or_else(|| entry.containers.clone());
    let rollout =
        trigger_rollout::trigger_rollout(view, containers, triggers.max_unavailable(), &cause);
    let (name, created) = create_rollout(ctx, view, &cause, rollout).await?;
    write_record(
        ctx,
        key,
        &entry.uid,
        Field::RestartRequested(&restart.value),
    )
    .await?;
    if created {
        let note = format!(
            "{}: rollout {name} recreates {} in place",
            cause.describe(),
            restart.containers.as_ref().map_or_else(
                || "every container".to_owned(),
                |containers| containers.join(", ")
            )
        );
        info!(workload = ?key, %note, "restart requested");
        ctx.events
            .publish(workload, EventType::Normal, "RestartRequested", &note)
            .await;
    }
    Ok(None)
}

async fn config_change(
    ctx: &TriggerContext,
    key: &WorkloadKey,
    entry: &WorkloadEntry,
    triggers: &Triggers,
    view: &WorkloadView,
    workload: &ObjectReference,
) -> Result<Option<Duration>, TriggerError> {
    let Some(trigger) = &triggers.config_change else {
        return Ok(None);
    };
    if let Some(used) = entry.references_refused {
        ctx.warn_once(
            workload,
            warnings::TOO_MANY_REFERENCES,
            &format!(
                "the config-change trigger refuses this workload: its template uses {used} ConfigMaps and Secrets, more than {MAX_REFERENCES}; their changes are not rolled out"
            ),
        )
        .await;
        return Ok(None);
    }
    ctx.clear_warning(&entry.uid, warnings::TOO_MANY_REFERENCES);
    if trigger.source == annotations::Source::Reloader {
        let reloaders: Vec<String> = locked(&ctx.reloaders)
            .iter()
            .map(|reloader| format!("{}/{}", reloader.namespace, reloader.name))
            .collect();
        if reloaders.is_empty() {
            ctx.clear_warning(&entry.uid, warnings::RELOADER_ALSO_ACTS);
        } else {
            ctx.warn_once(
                workload,
                warnings::RELOADER_ALSO_ACTS,
                &format!(
                    "Reloader runs in this cluster ({}) and acts on these annotations too, by replacing the pods that crr restarts in place: uninstall Reloader so that only crr acts (docs/migrating-from-reloader.md)",
                    reloaders.join(", ")
                ),
            )
            .await;
        }
    }
    let secrets_allowed = ctx.settings.secrets.allows(&key.namespace);
    let ignored: Vec<String> = entry
        .references
        .keys()
        .filter(|object| object.kind == ConfigKind::Secret && !secrets_allowed)
        .map(ToString::to_string)
        .collect();
    if ignored.is_empty() {
        ctx.clear_warning(&entry.uid, warnings::SECRETS_IGNORED);
    } else {
        ctx.warn_once(
            workload,
            warnings::SECRETS_IGNORED,
            &format!(
                "the config-change trigger ignores {}: crr may not read Secrets here (chart value triggers.secrets)",
                ignored.join(", ")
            ),
        )
        .await;
    }
    let counts = |object: &ConfigRef| {
        (object.kind == ConfigKind::ConfigMap || secrets_allowed)
            && trigger
                .only
                .as_ref()
                .is_none_or(|only| only.contains(object))
    };
    let mut current = BTreeMap::new();
    for object in entry.references.keys().filter(|object| counts(object)) {
        if let Some(hash) = current_hash(ctx, &key.namespace, object).await? {
            current.insert(object.clone(), hash);
        }
    }
    let record = ctx.records().of(key, &entry.uid).cloned();
    let recorded = record::recorded_hashes(record.as_ref(), &entry.annotations);
    let running =
        trigger_rollout::running(&ctx.rollouts.state(), &view.id(), Trigger::ConfigChange);
    let decision = config_change::decide(
        &entry.references,
        counts,
        &current,
        recorded.as_ref(),
        running.is_some(),
    );
    let pending_before = record
        .as_ref()
        .and_then(|record| record.pending_change.as_ref());
    let (changed, containers, record_after) = match decision {
        Decision::Nothing => {
            // Up to date by the annotation of before: it becomes the record. A change that
            // waited for the window and went back to the data rolled out waits no more.
            let migrating = record.is_none();
            if let (true, Some(recorded)) = (migrating || pending_before.is_some(), &recorded) {
                let field = Field::ConfigHashes {
                    hashes: recorded,
                    pending: None,
                };
                write_record(ctx, key, &entry.uid, field).await?;
            }
            return Ok(None);
        }
        Decision::Record { record } => {
            let field = Field::ConfigHashes {
                hashes: &record,
                pending: None,
            };
            write_record(ctx, key, &entry.uid, field).await?;
            return Ok(None);
        }
        Decision::Wait { again_after } => {
            let running = running.unwrap_or_default();
            debug!(workload = ?key, %running, "a config change waits for the running rollout");
            return Ok(Some(again_after));
        }
        Decision::Rollout {
            changed,
            containers,
            record,
        } => (changed, containers, record),
    };
    if let Some(window) = triggers.window.as_ref() {
        let now = Timestamp::now();
        if !window.is_open(now) {
            let Some(opens) = window.next_open(now) else {
                return Ok(Some(WINDOW_LOOK_AGAIN));
            };
            let wait = PendingWait {
                changed: &changed,
                recorded: recorded.as_ref(),
                before: pending_before,
                now,
                runs_at: opens,
                why: format!("waits for the restart window {window}"),
            };
            wait_pending(ctx, key, &entry.uid, workload, wait).await?;
            let until = crate::deadline::until(opens, Timestamp::now());
            return Ok(Some(until.min(WINDOW_LOOK_AGAIN)));
        }
    }
    if let Some((wait, why)) = hold(ctx, key, entry, &changed) {
        let now = Timestamp::now();
        let runs_at = jiff::SignedDuration::try_from(wait)
            .ok()
            .and_then(|wait| now.checked_add(wait).ok())
            .unwrap_or(now);
        let pending = PendingWait {
            changed: &changed,
            recorded: recorded.as_ref(),
            before: pending_before,
            now,
            runs_at,
            why: why.to_owned(),
        };
        wait_pending(ctx, key, &entry.uid, workload, pending).await?;
        return Ok(Some(wait));
    }
    let record = record_after;
    let cause = Cause::ConfigChange {
        changed,
        record: super::hash::record(&record),
    };
    let rollout = trigger_rollout::trigger_rollout(
        view,
        containers.iter().cloned().collect(),
        triggers.max_unavailable(),
        &cause,
    );
    let (name, created) = create_rollout(ctx, view, &cause, rollout).await?;
    let field = Field::ConfigHashes {
        hashes: &record,
        pending: None,
    };
    write_record(ctx, key, &entry.uid, field).await?;
    if created {
        let note = format!(
            "{}: rollout {name} recreates {} in place",
            cause.describe(),
            containers.into_iter().collect::<Vec<_>>().join(", ")
        );
        info!(workload = ?key, %note, "config change");
        ctx.events
            .publish(workload, EventType::Normal, "ConfigChanged", &note)
            .await;
    }
    Ok(None)
}

/// The longest a workload whose change waits for its window sleeps before it is looked at again
/// (the window's opening, found again each time, wakes it sooner).
const WINDOW_LOOK_AGAIN: Duration = Duration::from_secs(3600);

async fn scheduled(
    ctx: &TriggerContext,
    key: &WorkloadKey,
    entry: &WorkloadEntry,
    triggers: &Triggers,
    schedule: &annotations::Schedule,
    view: &WorkloadView,
    workload: &ObjectReference,
) -> Result<Option<Duration>, TriggerError> {
    let record = ctx.records().of(key, &entry.uid).cloned();
    let last = record::last_scheduled(record.as_ref(), &entry.annotations);
    let now = Timestamp::now();
    let running = trigger_rollout::running(&ctx.rollouts.state(), &view.id(), Trigger::Schedule);
    let step = schedule::step(
        schedule,
        last,
        now,
        ctx.settings.starting_deadline,
        running.is_some(),
        triggers.window.as_ref(),
    );
    let record_tick = |at: Timestamp| write_record(ctx, key, &entry.uid, Field::LastScheduled(at));
    let next = match step {
        Step::Begin => {
            record_tick(now).await?;
            schedule.next_after(now)
        }
        Step::Run { at } => {
            let containers = schedule
                .containers
                .clone()
                .unwrap_or_else(|| entry.containers.clone());
            let cause = Cause::Schedule { tick: at };
            let rollout = trigger_rollout::trigger_rollout(
                view,
                containers,
                triggers.max_unavailable(),
                &cause,
            );
            let (name, created) = create_rollout(ctx, view, &cause, rollout).await?;
            record_tick(at).await?;
            if created {
                let note = format!(
                    "schedule {:?}: rollout {name} started for the tick at {at}",
                    schedule.expression,
                );
                ctx.events
                    .publish(workload, EventType::Normal, "ScheduledRollout", &note)
                    .await;
            }
            schedule.next_after(Timestamp::now())
        }
        Step::Skip { at, why } => {
            record_tick(at).await?;
            let note = match why {
                Skipped::StillRunning => format!(
                    "schedule {:?}: the tick at {at} is skipped: rollout {} still runs",
                    schedule.expression,
                    running.unwrap_or_default()
                ),
                Skipped::OutsideWindow => format!(
                    "schedule {:?}: the tick at {at} is skipped: outside the restart window {}",
                    schedule.expression,
                    triggers
                        .window
                        .as_ref()
                        .map(ToString::to_string)
                        .unwrap_or_default()
                ),
                Skipped::TooLate => format!(
                    "schedule {:?}: the tick at {at} is skipped: missed by more than {}s",
                    schedule.expression,
                    ctx.settings.starting_deadline.as_secs()
                ),
            };
            ctx.events
                .publish(
                    workload,
                    EventType::Warning,
                    "ScheduledRolloutSkipped",
                    &note,
                )
                .await;
            schedule.next_after(Timestamp::now())
        }
        Step::Wait { until } => {
            // The tick of before, from the annotation of before: it becomes the record.
            if let (None, Some(last)) = (&record, last) {
                record_tick(last).await?;
            }
            until
        }
    };
    // Sleep until the next tick, at most a minute.
    let next = next.map(|next| crate::deadline::until(next, Timestamp::now()));
    Ok(Some(
        next.unwrap_or(Duration::from_secs(60))
            .min(Duration::from_secs(60)),
    ))
}

mod pending;

#[cfg(test)]
mod tests;
