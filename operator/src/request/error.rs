//! Why a request reconcile failed, as the error policy and the metrics see it.

use crr_crds::status::NoResourceVersion;

use crate::readiness;
use crate::reconcile_errors::refusal;

/// Why a reconcile failed; it is retried by the error policy.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request without namespace (cannot happen for a namespaced resource read from the API).
    #[error("the ContainerRecreateRequest {name} has no namespace")]
    MissingNamespace {
        /// Request name.
        name: String,
    },
    /// The pod could not be read.
    #[error("reading pod {pod}: {source}")]
    ReadPod {
        /// `namespace/name`.
        pod: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The request could not be read (after a write found the cached copy stale).
    #[error("reading ContainerRecreateRequest {request}: {source}")]
    ReadRequest {
        /// `namespace/name`.
        request: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The rollout that made a request could not be read (before deleting the request by TTL).
    #[error("reading rollout {rollout}: {source}")]
    ReadRollout {
        /// `namespace/name`.
        rollout: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Someone else changed the object between our read and our write.
    #[error("{action} on {object}: it changed meanwhile, will retry")]
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
    /// The pod's readiness-gate holder list belongs to someone we cannot understand.
    #[error("taking pod {pod} out of endpoints: {source}")]
    UnreadableHolders {
        /// `namespace/name`.
        pod: String,
        /// Why.
        #[source]
        source: readiness::UnreadableHolders,
    },
    /// The Lease was lost within the reconcile; nothing more was written.
    #[error("lost the leader Lease during the reconcile")]
    NotLeader,
    /// The request has no resourceVersion to precondition a status write on.
    #[error(transparent)]
    Unversioned(#[from] NoResourceVersion),
}

impl Error {
    /// Every [`Error::kind`], so metrics export each one from the start.
    pub const KINDS: [&'static str; 9] = [
        "missing_namespace",
        "read_pod",
        "read_request",
        "read_rollout",
        "conflict",
        "write",
        "unreadable_holders",
        "not_leader",
        "unversioned",
    ];

    /// The API server's reason when it refused the call for good: 403 Forbidden (RBAC, an
    /// admission policy) or 422 Invalid. Trying again changes nothing.
    pub fn refusal(&self) -> Option<String> {
        match self {
            Self::ReadPod { source, .. }
            | Self::ReadRequest { source, .. }
            | Self::ReadRollout { source, .. }
            | Self::Write { source, .. } => refusal(source),
            _ => None,
        }
    }

    /// A short label for metrics (one of [`Error::KINDS`]).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::MissingNamespace { .. } => "missing_namespace",
            Self::ReadPod { .. } => "read_pod",
            Self::ReadRequest { .. } => "read_request",
            Self::ReadRollout { .. } => "read_rollout",
            Self::Conflict { .. } => "conflict",
            Self::Write { .. } => "write",
            Self::UnreadableHolders { .. } => "unreadable_holders",
            Self::NotLeader => "not_leader",
            Self::Unversioned(_) => "unversioned",
        }
    }
}
