//! Why a preStop hook failed: one type for every kind of hook (`pre_stop` runs them, `http_hook`
//! sends the `httpGet` ones). The caller reports it in a `FailedPreStopHook` Event, and the kill
//! goes on.

/// A preStop hook that did not succeed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HookError {
    #[error("exec exited with code {code}: {output}")]
    ExecFailed { code: i32, output: String },
    #[error("timed out after {0}s")]
    Timeout(u64),
    #[error("named port {0} not found in the container's ports")]
    UnknownPort(String),
    #[error("invalid httpGet handler: {0}")]
    InvalidHttpRequest(String),
    #[error("http GET {url}: {message}")]
    Http { url: String, message: String },
    #[error("tcp connect to {address}: {message}")]
    Tcp { address: String, message: String },
    #[error("no address to connect to: the handler names no host and the pod has no IP")]
    NoAddress,
    #[error("the handler has no action")]
    Empty,
    #[error("runtime: {0}")]
    Runtime(String),
}
