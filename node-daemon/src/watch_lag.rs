//! When a round reads a pod past this node's pod watch: the runtime says a killed container's
//! successor runs, and the watched pod still does not show it ([`LaggingPodReads`]).
//!
//! A recreate completes on the kubelet's word that the new container is Ready, and the daemon
//! takes that word from its node's pod watch. Normally the watch delivers the kubelet's status
//! well within a second. Under load the API server's watch cache can fall seconds behind: on the
//! test bed, a tenant's 1 MB pods kept both cores busy and the kubelet's status reached the
//! daemon 15 s after the API server took it, while the daemon, idle, waited. The runtime tells
//! the daemon when the successor started; the kubelet reports a started container within about
//! a second (its relist). So a watched pod that still lacks the successor's ID
//! [`BEHIND_AFTER`] after it started is behind, and the round reads the pod once from the API
//! server, then again at doubling intervals while the watch stays behind. With a watch in step
//! there is no read at all.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;

/// How long after the runtime started a successor the watched pod may lack it before the pod
/// is read from the API server.
pub const BEHIND_AFTER: Duration = Duration::from_secs(2);
/// The longest interval between two reads of one successor's pod.
const MOST_BETWEEN_READS: Duration = Duration::from_secs(8);
/// A successor's record is dropped this long after its last read (its request ended).
const FORGET_AFTER: Duration = Duration::from_secs(600);

/// Whether `pod`'s status shows the container `name` (regular or init) with the runtime ID
/// `id` (`<runtime>://<id>`, as the kubelet reports it).
pub fn shows_container(pod: &Pod, name: &str, id: &str) -> bool {
    let Some(status) = pod.status.as_ref() else {
        return false;
    };
    status
        .container_statuses
        .iter()
        .flatten()
        .chain(status.init_container_statuses.iter().flatten())
        .any(|status| status.name == name && status.container_id.as_deref() == Some(id))
}

/// The reads made past the watch, per successor container: when the last was, and the interval
/// to the next.
#[derive(Debug, Default)]
pub struct LaggingPodReads {
    reads: Mutex<HashMap<String, (Instant, Duration)>>,
}

impl LaggingPodReads {
    /// Whether to read the pod of the successor `id` now: it has run `running_for` by the
    /// runtime's clock, and the watched pod does not show it. The first read comes at
    /// [`BEHIND_AFTER`]; each later one after twice the interval before it, up to
    /// [`MOST_BETWEEN_READS`]. Records the read when it says yes.
    pub fn due(&self, id: &str, running_for: Duration, now: Instant) -> bool {
        if running_for < BEHIND_AFTER {
            return false;
        }
        let mut reads = self.reads();
        reads.retain(|_, (last, _)| now.saturating_duration_since(*last) < FORGET_AFTER);
        match reads.get_mut(id) {
            None => {
                reads.insert(id.to_owned(), (now, BEHIND_AFTER));
                true
            }
            Some((last, interval)) if now.saturating_duration_since(*last) >= *interval => {
                *last = now;
                *interval = (*interval * 2).min(MOST_BETWEEN_READS);
                true
            }
            Some(_) => false,
        }
    }

    /// How long until [`due`](Self::due) says yes for the successor `id`, which has run
    /// `running_for` by the runtime's clock: zero when it would now.
    pub fn next_read_in(&self, id: &str, running_for: Duration, now: Instant) -> Duration {
        match self.reads().get(id) {
            None => BEHIND_AFTER.saturating_sub(running_for),
            Some((last, interval)) => (*last + *interval).saturating_duration_since(now),
        }
    }

    /// How many successors have a read recorded.
    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.reads().len()
    }

    fn reads(&self) -> MutexGuard<'_, HashMap<String, (Instant, Duration)>> {
        self.reads.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{ContainerStatus, PodStatus};

    use super::*;

    #[test]
    fn reads_start_after_the_bound_and_double_to_the_cap() {
        let reads = LaggingPodReads::default();
        let start = Instant::now();
        let at = |seconds: u64| start + Duration::from_secs(seconds);
        let running = |seconds: u64| Duration::from_secs(seconds);
        assert!(!reads.due("c://new", running(1), at(1)), "within the bound");
        assert!(reads.due("c://new", running(2), at(2)));
        assert!(!reads.due("c://new", running(3), at(3)));
        assert!(
            reads.due("c://new", running(4), at(4)),
            "2 s after the first"
        );
        assert!(!reads.due("c://new", running(7), at(7)));
        assert!(
            reads.due("c://new", running(8), at(8)),
            "4 s after the second"
        );
        assert!(
            reads.due("c://new", running(16), at(16)),
            "8 s after the third"
        );
        assert!(
            !reads.due("c://new", running(23), at(23)),
            "capped at 8 s, not 16"
        );
        assert!(reads.due("c://new", running(24), at(24)));
        // Another successor has its own schedule.
        assert!(reads.due("c://other", running(2), at(24)));
        assert_eq!(reads.tracked(), 2);
    }

    #[test]
    fn the_next_read_is_timed_to_the_schedule_reads_keep() {
        let reads = LaggingPodReads::default();
        let start = Instant::now();
        let at = |millis: u64| start + Duration::from_millis(millis);
        let running = Duration::from_millis;
        assert_eq!(
            reads.next_read_in("c://new", running(500), at(500)),
            Duration::from_millis(1500),
            "the first read comes at the bound"
        );
        assert_eq!(
            reads.next_read_in("c://new", running(2500), at(2500)),
            Duration::ZERO
        );
        assert!(reads.due("c://new", running(2000), at(2000)));
        let next = reads.next_read_in("c://new", running(2500), at(2500));
        assert_eq!(next, Duration::from_millis(1500), "2 s after the first");
        assert!(!reads.due("c://new", running(3999), at(3999)));
        assert!(reads.due("c://new", running(4000), at(4000)));
        assert_eq!(
            reads.next_read_in("c://new", running(4000), at(4000)),
            Duration::from_secs(4),
            "then 4 s after the second"
        );
    }

    #[test]
    fn records_of_ended_requests_are_dropped() {
        let reads = LaggingPodReads::default();
        let start = Instant::now();
        assert!(reads.due("c://old", Duration::from_secs(2), start));
        let later = start + FORGET_AFTER + Duration::from_secs(1);
        assert!(reads.due("c://new", Duration::from_secs(2), later));
        assert_eq!(reads.tracked(), 1);
    }

    #[test]
    fn a_pod_shows_a_container_by_name_and_runtime_id() {
        let pod = Pod {
            status: Some(PodStatus {
                container_statuses: Some(vec![ContainerStatus {
                    name: "app".to_owned(),
                    container_id: Some("containerd://new".to_owned()),
                    ..ContainerStatus::default()
                }]),
                init_container_statuses: Some(vec![ContainerStatus {
                    name: "proxy".to_owned(),
                    container_id: Some("containerd://side".to_owned()),
                    ..ContainerStatus::default()
                }]),
                ..PodStatus::default()
            }),
            ..Pod::default()
        };
        assert!(shows_container(&pod, "app", "containerd://new"));
        assert!(!shows_container(&pod, "app", "containerd://old"));
        assert!(shows_container(&pod, "proxy", "containerd://side"));
        assert!(!shows_container(&pod, "other", "containerd://new"));
        assert!(!shows_container(&Pod::default(), "app", "containerd://new"));
    }
}
