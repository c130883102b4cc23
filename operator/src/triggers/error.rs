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
}

impl TriggerError {
    /// Every [`TriggerError::kind`], so metrics export each one from the start.
    pub const KINDS: [&'static str; 1] = ["api"];

    /// A short label for metrics (one of [`TriggerError::KINDS`]).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Api { .. } => "api",
        }
    }
}

/// Turns an API error into a [`TriggerError`] saying what was tried.
pub fn api_error(action: impl Into<String>) -> impl FnOnce(kube::Error) -> TriggerError {
    let action = action.into();
    move |source| TriggerError::Api { action, source }
}
