//! Rolling recreate across pods: which pod's request to create next so that at most
//! `max_unavailable` pods are being recreated at once.
//!
//! A pod occupies a slot from the moment its request is about to be created until the request
//! has succeeded **and** the pod is Ready again (when readiness is required), so a finished
//! request whose pod is still coming back does not let the next one start. The first failure
//! (a refused create or a failed request) halts the batch: no new request is created, the ones
//! in flight are followed to the end.
//!
//! Pure state fed with what the watch loop observes; it never talks to the cluster.

use crate::progress::Outcome;

/// Where one pod of the batch is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodState {
    /// Not started.
    Queued,
    /// Its request is being created.
    Creating,
    /// Its request exists and is not finished.
    InFlight { request: String },
    /// Its request succeeded; waiting for the pod to be Ready again.
    AwaitingReady { request: String },
    /// Recreated and Ready.
    Done { request: String },
    /// The request could not be created or did not recreate every container.
    Failed {
        request: Option<String>,
        reason: String,
    },
}

impl PodState {
    fn occupies_slot(&self) -> bool {
        matches!(
            self,
            PodState::Creating | PodState::InFlight { .. } | PodState::AwaitingReady { .. }
        )
    }
}

/// Counts for the final report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Summary {
    pub succeeded: usize,
    pub failed: usize,
    pub in_flight: usize,
    pub not_started: usize,
}

/// The scheduler of one batch.
#[derive(Debug, Clone)]
pub struct Scheduler {
    pods: Vec<(String, PodState)>,
    max_unavailable: usize,
    require_ready: bool,
    halted: bool,
}

impl Scheduler {
    /// A batch over `pods` (in the order given) with at most `max_unavailable` (at least 1) in
    /// flight; `require_ready` keeps a slot until the pod is Ready again.
    pub fn new(pods: Vec<String>, max_unavailable: usize, require_ready: bool) -> Self {
        Self {
            pods: pods
                .into_iter()
                .map(|pod| (pod, PodState::Queued))
                .collect(),
            max_unavailable: max_unavailable.max(1),
            require_ready,
            halted: false,
        }
    }

    /// The pods whose requests should be created now; they are marked `Creating`.
    pub fn admit(&mut self) -> Vec<String> {
        let mut admitted = Vec::new();
        if self.halted {
            return admitted;
        }
        let mut free = self.max_unavailable.saturating_sub(self.occupied());
        for (pod, state) in &mut self.pods {
            if free == 0 {
                break;
            }
            if *state == PodState::Queued {
                *state = PodState::Creating;
                admitted.push(pod.clone());
                free -= 1;
            }
        }
        admitted
    }

    /// The request for `pod` was created with this name.
    pub fn created(&mut self, pod: &str, request: &str) {
        if let Some(state) = self.state_mut(pod)
            && *state == PodState::Creating
        {
            *state = PodState::InFlight {
                request: request.to_owned(),
            };
        }
    }

    /// The request for `pod` could not be created.
    pub fn create_failed(&mut self, pod: &str, reason: &str) {
        if let Some(state) = self.state_mut(pod) {
            *state = PodState::Failed {
                request: None,
                reason: reason.to_owned(),
            };
            self.halted = true;
        }
    }

    /// The request of `pod` was seen with `outcome`; `pod_ready` is the pod's Ready condition as
    /// last seen.
    pub fn observed(&mut self, pod: &str, outcome: &Outcome, pod_ready: bool) {
        let require_ready = self.require_ready;
        let Some(state) = self.state_mut(pod) else {
            return;
        };
        let PodState::InFlight { request } = state else {
            return;
        };
        let request = request.clone();
        match outcome {
            Outcome::Running => {}
            Outcome::Succeeded if pod_ready || !require_ready => {
                *state = PodState::Done { request };
            }
            Outcome::Succeeded => *state = PodState::AwaitingReady { request },
            Outcome::Failed(reason) => {
                *state = PodState::Failed {
                    request: Some(request),
                    reason: reason.clone(),
                };
                self.halted = true;
            }
        }
    }

    /// The pod's readiness changed (or it is gone: `ready` true releases its slot as well, there
    /// is nothing left to wait for).
    pub fn pod_ready(&mut self, pod: &str, ready: bool) {
        if let Some(state) = self.state_mut(pod)
            && let PodState::AwaitingReady { request } = state
            && ready
        {
            *state = PodState::Done {
                request: request.clone(),
            };
        }
    }

    /// The request of `pod` was deleted before anyone saw it finish.
    pub fn request_gone(&mut self, pod: &str) {
        if let Some(state) = self.state_mut(pod)
            && let PodState::InFlight { request } = state
        {
            *state = PodState::Failed {
                request: Some(request.clone()),
                reason: "the request was deleted before it completed".to_owned(),
            };
            self.halted = true;
        }
    }

    /// How many pods hold a slot.
    pub fn occupied(&self) -> usize {
        self.pods
            .iter()
            .filter(|(_, state)| state.occupies_slot())
            .count()
    }

    /// Nothing in flight and nothing more will start.
    pub fn is_finished(&self) -> bool {
        self.occupied() == 0
            && (self.halted
                || self
                    .pods
                    .iter()
                    .all(|(_, state)| *state != PodState::Queued))
    }

    /// Whether a failure stopped the batch.
    pub fn is_halted(&self) -> bool {
        self.halted
    }

    /// The pod whose request has this name.
    pub fn pod_of(&self, request_name: &str) -> Option<&str> {
        self.pods.iter().find_map(|(pod, state)| match state {
            PodState::InFlight { request }
            | PodState::AwaitingReady { request }
            | PodState::Done { request }
            | PodState::Failed {
                request: Some(request),
                ..
            } if request == request_name => Some(pod.as_str()),
            _ => None,
        })
    }

    /// Every pod with its state, in batch order.
    pub fn pods(&self) -> &[(String, PodState)] {
        &self.pods
    }

    /// The counts.
    pub fn summary(&self) -> Summary {
        let mut summary = Summary::default();
        for (_, state) in &self.pods {
            match state {
                PodState::Queued => summary.not_started += 1,
                PodState::Done { .. } => summary.succeeded += 1,
                PodState::Failed { .. } => summary.failed += 1,
                _ => summary.in_flight += 1,
            }
        }
        summary
    }

    fn state_mut(&mut self, pod: &str) -> Option<&mut PodState> {
        self.pods
            .iter_mut()
            .find(|(name, _)| name == pod)
            .map(|(_, state)| state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pods(names: &[&str]) -> Vec<String> {
        names.iter().map(|name| (*name).to_owned()).collect()
    }

    /// Drives a batch where every request succeeds, checking the slot limit after each step.
    fn run_to_end(max_unavailable: usize, names: &[&str]) -> Vec<Vec<String>> {
        let mut scheduler = Scheduler::new(pods(names), max_unavailable, true);
        let mut waves = Vec::new();
        loop {
            let admitted = scheduler.admit();
            assert!(scheduler.occupied() <= max_unavailable);
            for pod in &admitted {
                scheduler.created(pod, &format!("{pod}-crr"));
            }
            if admitted.is_empty() {
                break;
            }
            for pod in &admitted {
                scheduler.observed(pod, &Outcome::Succeeded, false);
                assert!(
                    scheduler.admit().is_empty(),
                    "slot freed before the pod is Ready"
                );
            }
            for pod in &admitted {
                scheduler.pod_ready(pod, true);
            }
            waves.push(admitted);
        }
        assert!(scheduler.is_finished());
        assert_eq!(scheduler.summary().succeeded, names.len());
        waves
    }

    #[test]
    fn never_more_than_max_unavailable_in_flight() {
        assert_eq!(
            run_to_end(1, &["a", "b", "c"]),
            [pods(&["a"]), pods(&["b"]), pods(&["c"])]
        );
        assert_eq!(
            run_to_end(2, &["a", "b", "c"]),
            [pods(&["a", "b"]), pods(&["c"])]
        );
        assert_eq!(run_to_end(5, &["a", "b"]), [pods(&["a", "b"])]);
    }

    #[test]
    fn slot_is_freed_by_whichever_request_finishes_first() {
        let mut scheduler = Scheduler::new(pods(&["a", "b", "c"]), 2, false);
        assert_eq!(scheduler.admit(), pods(&["a", "b"]));
        scheduler.created("a", "a-1");
        scheduler.created("b", "b-1");
        scheduler.observed("b", &Outcome::Running, true);
        assert!(scheduler.admit().is_empty());
        scheduler.observed("b", &Outcome::Succeeded, false);
        assert_eq!(scheduler.admit(), pods(&["c"]), "readiness not required");
        assert_eq!(scheduler.pod_of("b-1"), Some("b"));
    }

    #[test]
    fn creating_counts_against_the_limit() {
        let mut scheduler = Scheduler::new(pods(&["a", "b"]), 1, true);
        assert_eq!(scheduler.admit(), pods(&["a"]));
        assert!(scheduler.admit().is_empty(), "a is still being created");
        assert!(!scheduler.is_finished());
    }

    #[test]
    fn failure_halts_the_batch_but_in_flight_requests_finish() {
        let mut scheduler = Scheduler::new(pods(&["a", "b", "c", "d"]), 2, true);
        scheduler.admit();
        scheduler.created("a", "a-1");
        scheduler.created("b", "b-1");
        scheduler.observed(
            "a",
            &Outcome::Failed("kill container error".to_owned()),
            true,
        );
        assert!(scheduler.is_halted());
        assert!(scheduler.admit().is_empty());
        assert!(!scheduler.is_finished(), "b is still in flight");
        scheduler.observed("b", &Outcome::Succeeded, true);
        assert!(scheduler.is_finished());
        assert_eq!(
            scheduler.summary(),
            Summary {
                succeeded: 1,
                failed: 1,
                in_flight: 0,
                not_started: 2
            }
        );
    }

    #[test]
    fn refused_create_halts_and_frees_the_slot() {
        let mut scheduler = Scheduler::new(pods(&["a", "b"]), 1, true);
        scheduler.admit();
        scheduler.create_failed("a", "Error from server (BadRequest): denied");
        assert!(scheduler.is_finished());
        assert_eq!(scheduler.summary().failed, 1);
        assert_eq!(scheduler.summary().not_started, 1);
    }

    #[test]
    fn deleted_request_counts_as_failed() {
        let mut scheduler = Scheduler::new(pods(&["a"]), 1, true);
        scheduler.admit();
        scheduler.created("a", "a-1");
        scheduler.request_gone("a");
        assert!(scheduler.is_finished());
        assert!(matches!(scheduler.pods()[0].1, PodState::Failed { .. }));
    }

    #[test]
    fn late_events_do_not_move_a_finished_pod() {
        let mut scheduler = Scheduler::new(pods(&["a"]), 1, false);
        scheduler.admit();
        scheduler.created("a", "a-1");
        scheduler.observed("a", &Outcome::Succeeded, true);
        scheduler.observed("a", &Outcome::Failed("stale".to_owned()), true);
        scheduler.request_gone("a");
        assert_eq!(
            scheduler.pods()[0].1,
            PodState::Done {
                request: "a-1".to_owned()
            }
        );
    }

    #[test]
    fn empty_batch_is_finished_at_once() {
        let mut scheduler = Scheduler::new(Vec::new(), 1, true);
        assert!(scheduler.admit().is_empty());
        assert!(scheduler.is_finished());
    }
}
