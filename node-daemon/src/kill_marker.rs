//! The kill marker: the status message a container's state carries from the moment the daemon
//! announces a kill until it records `isKilled`. A daemon restarted in between reads it back to
//! learn which container it was about to stop, and so never kills that container's replacement.
//!
//! This module owns the wire text (`killing container <id>`); `round` writes it and `recreate`
//! reads it. It does not decide whether the kill happened (`recreate::container_states` does).
//! Only the node daemon writes or reads it; the operator and kubectl-crr show it as any message.

use std::fmt;

/// What comes before the container ID in the message.
const PREFIX: &str = "killing container ";

/// A kill the daemon announced and may or may not have carried out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KillMarker {
    /// The container about to be stopped, `<runtime>://<id>` as the runtime reports it.
    pub container_id: String,
}

impl KillMarker {
    pub fn new(container_id: impl Into<String>) -> Self {
        Self {
            container_id: container_id.into(),
        }
    }

    /// The status message that announces the kill.
    pub fn format(&self) -> String {
        self.to_string()
    }

    /// The kill a status message announces; `None` for any other message.
    pub fn parse(message: &str) -> Option<Self> {
        message.strip_prefix(PREFIX).map(Self::new)
    }
}

impl fmt::Display for KillMarker {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{PREFIX}{}", self.container_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_formatted_marker_parses_back_to_the_same_container() {
        for id in ["containerd://app-1", "cri-o://0123abcd", "docker://x y"] {
            let marker = KillMarker::new(id);
            assert_eq!(KillMarker::parse(&marker.format()), Some(marker.clone()));
            assert_eq!(marker.to_string(), marker.format());
        }
    }

    #[test]
    fn the_wire_text_is_what_earlier_daemons_wrote() {
        // Requests in flight across an upgrade carry the old daemon's text.
        assert_eq!(
            KillMarker::new("containerd://app-1").format(),
            "killing container containerd://app-1"
        );
        assert_eq!(
            KillMarker::parse("killing container containerd://app-1"),
            Some(KillMarker::new("containerd://app-1"))
        );
    }

    #[test]
    fn other_messages_are_not_markers() {
        for message in [
            "",
            "killing",
            "killing container",
            "Killing container containerd://app-1",
            " killing container containerd://app-1",
            "kill container error: rpc error",
            "not found container on Node",
            "container app failed: killing container containerd://app-1",
        ] {
            assert_eq!(KillMarker::parse(message), None, "{message:?}");
        }
    }
}
