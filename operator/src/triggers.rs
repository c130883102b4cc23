//! Triggers: rollouts started for a workload when a ConfigMap or Secret it uses changes, or on
//! a schedule, as its annotations ask (`annotations`). Every trigger creates a
//! ContainerRecreateRollout, so its work is visible, auditable and bounded by the same budgets.
//!
//! Pure decisions: `annotations` and `refs` (from `crr_crds::triggers`: what a workload asks
//! for, which containers use which object), `hash` (an object's data, hashed),
//! `config_change` (what changed since the record on the workload), `schedule` (which tick runs).

pub use crr_crds::triggers::{annotations, refs};
pub mod config_change;
pub mod context;
pub mod controller;
mod evaluate;
pub mod hash;
pub mod queue;
pub mod rollout;
pub mod schedule;
