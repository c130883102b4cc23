//! Which of a pod's requests the daemon works on next, as a function of the requests: one per
//! pod at a time, Recreating first, then oldest; the others that have no phase yet are to be
//! shown Pending. No I/O here: `worker` reads the requests and writes the Pending phases.
//!
//! It does not decide what a request's round does (`recreate`, `round`).

use crr_crds::v1beta1::{ContainerRecreateRequest, Phase};

use crate::round::must_leave_alone;

/// What a pod's next round works on.
#[derive(Debug, PartialEq)]
pub struct PodTurn {
    /// The request whose round runs now.
    pub next: ContainerRecreateRequest,
    /// Requests that wait behind it and have no phase yet: to be marked Pending.
    pub to_mark_pending: Vec<ContainerRecreateRequest>,
}

/// The order a pod's active requests are served in: Recreating first, then oldest first (by
/// creation time, a request without one first), then by name.
pub fn order(requests: &mut [ContainerRecreateRequest]) {
    requests.sort_by_key(|crr| {
        (
            crr.phase() != Some(Phase::Recreating),
            crr.metadata.creation_timestamp.as_ref().map(|time| time.0),
            crr.metadata.name.clone(),
        )
    });
}

/// The pod's next turn, from its requests as the daemon currently knows them; `None` when every
/// one is finished (completed or being deleted).
pub fn next_turn(requests: impl IntoIterator<Item = ContainerRecreateRequest>) -> Option<PodTurn> {
    let mut candidates: Vec<ContainerRecreateRequest> = requests
        .into_iter()
        .filter(|crr| !must_leave_alone(crr))
        .collect();
    order(&mut candidates);
    let mut candidates = candidates.into_iter();
    let next = candidates.next()?;
    let to_mark_pending = candidates.filter(|crr| crr.phase().is_none()).collect();
    Some(PodTurn {
        next,
        to_mark_pending,
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crr_crds::v1beta1::ContainerRecreateRequestStatus;

    /// A request of the pod named `name`, created at `second`, in `phase`.
    fn request(name: &str, second: i64, phase: Option<Phase>) -> ContainerRecreateRequest {
        let mut crr = crate::recreate::admitted_request(&["app"], Default::default());
        crr.metadata.name = Some(name.into());
        crr.metadata.creation_timestamp = Some(Time(
            jiff::Timestamp::from_second(second).expect("a valid time"),
        ));
        crr.status = Some(ContainerRecreateRequestStatus {
            phase,
            ..Default::default()
        });
        crr
    }

    fn name(crr: &ContainerRecreateRequest) -> &str {
        crr.metadata.name.as_deref().unwrap_or_default()
    }

    fn names(requests: &[ContainerRecreateRequest]) -> Vec<&str> {
        requests.iter().map(name).collect()
    }

    #[test]
    fn requests_of_a_pod_are_served_recreating_first_then_oldest() {
        let mut requests = vec![
            request("new", 30, None),
            request("old", 10, Some(Phase::Pending)),
            request("busy", 20, Some(Phase::Recreating)),
        ];
        order(&mut requests);
        assert_eq!(names(&requests), ["busy", "old", "new"]);
    }

    #[test]
    fn the_recreating_request_goes_on_before_older_ones() {
        let turn = next_turn([
            request("old", 10, Some(Phase::Pending)),
            request("busy", 20, Some(Phase::Recreating)),
        ])
        .expect("a turn");
        assert_eq!(name(&turn.next), "busy");
    }

    #[test]
    fn without_a_recreating_request_the_oldest_goes() {
        let turn = next_turn([
            request("new", 30, None),
            request("old", 10, None),
            request("middle", 20, Some(Phase::Pending)),
        ])
        .expect("a turn");
        assert_eq!(name(&turn.next), "old");
    }

    #[test]
    fn requests_created_in_the_same_second_go_by_name() {
        let turn = next_turn([request("b", 10, None), request("a", 10, None)]).expect("a turn");
        assert_eq!(name(&turn.next), "a");
    }

    #[test]
    fn a_request_without_a_creation_time_goes_first() {
        let mut unknown = request("unknown", 0, None);
        unknown.metadata.creation_timestamp = None;
        let turn = next_turn([request("old", 10, None), unknown]).expect("a turn");
        assert_eq!(name(&turn.next), "unknown");
    }

    #[test]
    fn finished_requests_are_passed_over() {
        let mut deleting = request("deleting", 5, Some(Phase::Recreating));
        deleting.metadata.deletion_timestamp = deleting.metadata.creation_timestamp.clone();
        let turn = next_turn([
            request("completed", 1, Some(Phase::Completed)),
            deleting,
            request("open", 30, None),
        ])
        .expect("a turn");
        assert_eq!(name(&turn.next), "open");
        assert!(turn.to_mark_pending.is_empty());
    }

    #[test]
    fn a_pod_whose_requests_are_all_finished_has_no_turn() {
        assert_eq!(
            next_turn([request("done", 1, Some(Phase::Completed))]),
            None
        );
        assert_eq!(next_turn([]), None);
    }

    #[test]
    fn only_waiting_requests_without_a_phase_are_marked_pending() {
        let turn = next_turn([
            request("busy", 20, Some(Phase::Recreating)),
            request("fresh", 30, None),
            request("shown", 10, Some(Phase::Pending)),
            request("newest", 40, None),
        ])
        .expect("a turn");
        assert_eq!(name(&turn.next), "busy");
        assert_eq!(
            names(&turn.to_mark_pending),
            ["fresh", "newest"],
            "in serving order, the one already Pending left alone"
        );
    }

    #[test]
    fn the_next_request_is_never_marked_pending_itself() {
        let turn = next_turn([request("only", 10, None)]).expect("a turn");
        assert_eq!(name(&turn.next), "only");
        assert!(turn.to_mark_pending.is_empty());
    }
}
