//! Why a rollout reconcile failed, as the error policy and the metrics see it.

use crr_crds::status::NoResourceVersion;

use super::world::ReadError;
use crate::reconcile_errors::refusal;

/// Why a rollout reconcile failed; it is retried by the error policy.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A rollout without namespace (cannot happen for a namespaced resource read from the API).
    #[error("the ContainerRecreateRollout {name} has no namespace")]
    MissingNamespace {
        /// Rollout name.
        name: String,
    },
    /// The target's pods or budgets could not be read.
    #[error(transparent)]
    ReadWorld(#[from] ReadError),
    /// The rollout changed between our read and our status write: read again, decide again.
    #[error("{action} on {object}: it changed meanwhile, will decide again")]
    Conflict {
        /// What we tried.
        action: &'static str,
        /// `kind namespace/name`.
        object: String,
    },
    /// A write was refused or failed.
    #[error("{action} on {object}: {source}")]
    Write {
        /// What we tried.
        action: &'static str,
        /// `kind namespace/name`.
        object: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The Lease was lost within the reconcile; nothing more was written.
    #[error("lost the leader Lease during the reconcile")]
    NotLeader,
    /// The rollout has no resourceVersion to precondition its status write on.
    #[error(transparent)]
    Unversioned(#[from] NoResourceVersion),
}

impl Error {
    /// Every [`Error::kind`], so metrics export each one from the start.
    pub const KINDS: [&'static str; 6] = [
        "missing_namespace",
        "read_world",
        "conflict",
        "write",
        "not_leader",
        "unversioned",
    ];

    /// The API server's reason when it refused the call for good (403, 422): trying again
    /// changes nothing.
    pub fn refusal(&self) -> Option<String> {
        match self {
            Self::ReadWorld(ReadError::Api { source, .. }) | Self::Write { source, .. } => {
                refusal(source)
            }
            _ => None,
        }
    }

    /// A short label for metrics (one of [`Error::KINDS`]).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::MissingNamespace { .. } => "missing_namespace",
            Self::ReadWorld(_) => "read_world",
            Self::Conflict { .. } => "conflict",
            Self::Write { .. } => "write",
            Self::NotLeader => "not_leader",
            Self::Unversioned(_) => "unversioned",
        }
    }

    /// A write that failed: a 409 is [`Error::Conflict`] (read again, decide again), anything
    /// else [`Error::Write`].
    pub fn of_write(action: &'static str, object: String, source: kube::Error) -> Self {
        match &source {
            kube::Error::Api(status) if status.code == 409 => Self::Conflict { action, object },
            _ => Self::Write {
                action,
                object,
                source,
            },
        }
    }
}
