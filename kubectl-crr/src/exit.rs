//! How a command ended, as the process's exit code (README: 0 done, 1 error, 2 usage, 3 a
//! container or pod was not recreated, 4 the timeout passed).

/// How the command ended, as an exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Success = 0,
    Error = 1,
    Usage = 2,
    RecreateFailed = 3,
    TimedOut = 4,
}
