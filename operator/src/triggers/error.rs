//! Why a trigger evaluation failed, as the retry loop and the metrics see it.

/// Why an evaluation failed: it is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum TriggerError {
    /// An API call failed.
    #[error("{action}: {source}")]
    Api {
        /// What was tried.
        action: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Every name a trigger's rollout may take is held by rollouts that are not an earlier try
    /// of it (rollouts that ended, kept for their TTL, or someone else's).
    #[error(
        "rollout {rollout}: its first {tries} names are held by other rollouts; delete finished ones to free them"
    )]
    NamesTaken {
        /// The first name, with its namespace.
        rollout: String,
        /// How many names were tried.
        tries: u32,
    },
}

impl TriggerError {
    /// Every [`TriggerError::kind`], so metrics export each one from the start.
    pub const KINDS: [&'static str; 2] = ["api", "names_taken"];

    /// A short label for metrics (one of [`TriggerError::KINDS`]).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Api { .. } => "api",
            Self::NamesTaken { .. } => "names_taken",
        }
    }
}

/// Turns an API error into a [`TriggerError`] saying what was tried.
pub fn api_error(action: impl Into<String>) -> impl FnOnce(kube::Error) -> TriggerError {
    let action = action.into();
    move |source| TriggerError::Api { action, source }
}
