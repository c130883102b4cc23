//! The trigger annotations of a workload (`annotations`) and what its pod template uses
//! (`refs`): read by the operator's triggers and by `kubectl crr triggers`.

pub mod annotations;
pub mod refs;
pub mod window;
