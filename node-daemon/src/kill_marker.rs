//! The kill marker: the status message earlier daemons wrote in a container's state when they
//! announced a kill, until they recorded `isKilled`. This daemon announces nothing (a state's
//! message tells only outcomes, as upstream's), but a request in flight across an upgrade may
//! still carry one: `recreate` reads it back to learn which container the earlier daemon was
//! about to stop, so that `forceRecreate` never kills that container's replacement.
//!
//! This module owns the wire text (`killing container <id>`); only `recreate` reads it (tests
//! format it to play an earlier daemon). It does not decide whether the kill happened
//! (`recreate::container_states` does).

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
