//! Which pod readiness reports wake a rollout: a pod's `Ready` turning True or False in a
//! namespace where a rollout runs. A running rollout that waits for its restarted pods to be
//! Ready again is woken by the pod watch's report, not found by its poll (`decide::READY_POLL`,
//! now only the fallback when a report is lost).
//!
//! Pure: fed the reports (`pod_view::PodReadiness`) and whether their namespace has a running
//! rollout; it remembers each pod's last readiness only in such namespaces, and forgets a
//! namespace once no rollout runs there, so memory follows the rollouts at work.

use std::collections::HashMap;

use crate::pod_view::PodReadiness;

/// The last readiness seen of each pod, by namespace, where rollouts run.
#[derive(Debug, Default)]
pub struct ReadyFlips {
    seen: HashMap<String, HashMap<String, bool>>,
}

impl ReadyFlips {
    /// Whether `report` should wake the rollouts of its namespace (`running`: one runs there).
    /// A pod seen for the first time wakes them only when it is Ready (one that is not cannot
    /// free a slot); after that every change wakes them.
    pub fn wakes(&mut self, report: &PodReadiness, running: bool) -> bool {
        if !running {
            self.seen.remove(&report.namespace);
            return false;
        }
        let pods = self.seen.entry(report.namespace.clone()).or_default();
        let before = pods.insert(report.uid.clone(), report.ready);
        match before {
            Some(before) => before != report.ready,
            None => report.ready,
        }
    }

    /// How many pods are remembered.
    pub fn len(&self) -> usize {
        self.seen.values().map(HashMap::len).sum()
    }

    /// Whether no pod is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(namespace: &str, uid: &str, ready: bool) -> PodReadiness {
        PodReadiness {
            namespace: namespace.into(),
            name: format!("pod-{uid}"),
            uid: uid.into(),
            ready,
        }
    }

    #[test]
    fn a_pod_turning_ready_or_unready_wakes_and_a_repeat_does_not() {
        let mut flips = ReadyFlips::default();
        assert!(
            !flips.wakes(&report("ns", "a", false), true),
            "first seen unready"
        );
        assert!(
            !flips.wakes(&report("ns", "a", false), true),
            "the same again"
        );
        assert!(flips.wakes(&report("ns", "a", true), true), "turned Ready");
        assert!(
            !flips.wakes(&report("ns", "a", true), true),
            "a status write, still Ready"
        );
        assert!(
            flips.wakes(&report("ns", "a", false), true),
            "turned unready"
        );
        assert!(
            flips.wakes(&report("ns", "b", true), true),
            "first seen Ready"
        );
    }

    #[test]
    fn only_namespaces_with_a_running_rollout_are_remembered() {
        let mut flips = ReadyFlips::default();
        assert!(!flips.wakes(&report("quiet", "a", true), false));
        assert!(flips.is_empty());
        flips.wakes(&report("busy", "a", false), true);
        flips.wakes(&report("busy", "b", true), true);
        assert_eq!(flips.len(), 2);
        // The rollout there finished: the namespace is forgotten at its next report.
        assert!(!flips.wakes(&report("busy", "a", true), false));
        assert!(flips.is_empty());
    }
}
