//! What can go wrong, named for the user: each variant's message is what `kubectl crr` prints.
//! Messages from the API server (an admission webhook's denial, a missing permission) are kept
//! verbatim, prefixed like kubectl prefixes them (`Error from server (Forbidden): ...`).

use std::fmt;

/// Every error of the plugin.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("pod {name:?} not found in namespace {namespace:?}")]
    PodNotFound { namespace: String, name: String },
    #[error("no pods in namespace {namespace:?} match the selector {selector:?}")]
    NoPodsMatch { namespace: String, selector: String },
    #[error(
        "container {container:?} is not in pod {pod} (its containers: {})",
        available.join(", ")
    )]
    ContainerNotInPod {
        pod: String,
        container: String,
        available: Vec<String>,
    },
    #[error("container {name:?} is named more than once")]
    DuplicateContainer { name: String },
    #[error("cannot recreate containers of pod {pod}: {reason}")]
    PodNotRecreatable { pod: String, reason: String },
    /// The request would break an admission rule (`crr_crds::rules`); the webhook's message.
    #[error("cannot recreate containers of pod {pod}: {rule}")]
    RuleBroken {
        pod: String,
        rule: crr_crds::rules::Violation,
    },
    #[error("invalid {flag}: {message}")]
    InvalidFlag { flag: &'static str, message: String },
    #[error("containerrecreaterequest {name:?} not found in namespace {namespace:?}")]
    RequestNotFound { namespace: String, name: String },
    #[error("containerrecreaterollout {name:?} not found in namespace {namespace:?}")]
    RolloutNotFound { namespace: String, name: String },
    /// `workload` as `deployment/web`.
    #[error("no containerrecreaterollout of {workload} in namespace {namespace:?}")]
    NoRolloutOf { namespace: String, workload: String },
    #[error("containerrecreaterollout {name:?} is {phase}: a finished rollout cannot be {verb}")]
    RolloutFinished {
        name: String,
        phase: String,
        verb: &'static str,
    },
    #[error(
        "containerrecreaterollout {name:?} is {phase}: only a finished rollout can be retried (wait for it, or abort it: kubectl crr rollout abort {name})"
    )]
    RolloutNotFinished { name: String, phase: String },
    #[error("containerrecreaterollout {name:?}: {why}; nothing to retry")]
    NothingToRetry { name: String, why: String },
    /// `kind` in lower case: `deployment "web" not found in namespace "shop"`.
    #[error("{kind} {name:?} not found in namespace {namespace:?}")]
    WorkloadNotFound {
        namespace: String,
        kind: String,
        name: String,
    },
    /// The API server (or an admission webhook through it) refused; its message verbatim.
    #[error("{0}")]
    Server(ServerError),
    #[error("cannot load the kubeconfig: {0}")]
    Kubeconfig(String),
    #[error("cannot reach the Kubernetes API: {0}")]
    Connection(String),
    #[error("the watch of {what} failed: {message}")]
    Watch { what: String, message: String },
    #[error("cannot write the output: {0}")]
    Output(String),
}

/// A refusal by the API server: reason (`Forbidden`, `BadRequest`, ...), code and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerError {
    pub code: u16,
    pub reason: String,
    pub message: String,
}

impl fmt::Display for ServerError {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let reason = if self.reason.is_empty() {
            self.code.to_string()
        } else {
            self.reason.clone()
        };
        write!(
            formatter,
            "Error from server ({}): {}",
            crate::printable::printable(&reason),
            crate::printable::printable(&self.message)
        )
    }
}

impl Error {
    /// Whether this is the API server saying "not found".
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::Server(server) if server.code == 404)
    }
}

impl From<kube::Error> for Error {
    fn from(error: kube::Error) -> Self {
        match error {
            kube::Error::Api(status) => Error::Server(ServerError {
                code: status.code,
                reason: status.reason.clone(),
                message: status.message.clone(),
            }),
            kube::Error::InferConfig(error) => Error::Kubeconfig(error.to_string()),
            kube::Error::Auth(error) => Error::Connection(error.to_string()),
            other => Error::Connection(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webhook_denial_is_passed_through_verbatim() {
        let status = kube::core::Status {
            code: 400,
            reason: "BadRequest".to_owned(),
            message: "admission webhook \"mcontainerrecreaterequest.kb.io\" denied the request: \
                      no found Pod named web-0"
                .to_owned(),
            ..Default::default()
        };
        let error = Error::from(kube::Error::Api(Box::new(status)));
        assert_eq!(
            error.to_string(),
            "Error from server (BadRequest): admission webhook \"mcontainerrecreaterequest.kb.io\" \
             denied the request: no found Pod named web-0"
        );
    }

    #[test]
    fn missing_permission_reads_like_kubectl() {
        let status = kube::core::Status {
            code: 403,
            reason: "Forbidden".to_owned(),
            message: "containerrecreaterequests.apps.kruise.io is forbidden: User \"dev\" cannot \
                      create resource"
                .to_owned(),
            ..Default::default()
        };
        let error = Error::from(kube::Error::Api(Box::new(status)));
        assert!(
            error
                .to_string()
                .starts_with("Error from server (Forbidden): ")
        );
        assert!(!error.is_not_found());
    }
}
