//! `readiness_holders`: the `KruisePodReady` holder list the operator parses, formats and
//! merges (`crr_operator::readiness`).
//!
//! Oracles besides "never panics": any list that parses formats to its canonical form (sorted,
//! without duplicates), which parses back to itself and formats to the same text; and on a pod
//! whose condition carries arbitrary text, acquire then release behave as a lock: after acquire
//! the holder is recorded and the condition is False, a second acquire changes nothing, after
//! release the holder is gone, the condition is True exactly when no holder remains, and a
//! second release changes nothing.

use arbitrary::{Arbitrary, Unstructured};
use crr_crds::keys;
use crr_operator::readiness::{self, Holder};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, PodCondition, PodReadinessGate, PodSpec, PodStatus};

/// A condition message: arbitrary text or a list of holders.
#[derive(Arbitrary, Clone, Debug)]
pub enum Message {
    Text(String),
    Holders(Vec<(String, String)>),
    Absent,
}

/// One run: a pod's KruisePodReady condition and Ready condition, and the holder to take.
#[derive(Arbitrary, Clone, Debug)]
pub struct Input {
    pub message: Message,
    pub gate_status: String,
    pub gate_present: bool,
    pub ready_status: Option<String>,
    pub holder_namespace: String,
    pub holder_name: String,
    pub other_user_agent: Option<String>,
    pub now: i64,
}

fn canonical(holders: &[Holder]) -> Vec<Holder> {
    let mut sorted = holders.to_vec();
    sorted.sort();
    sorted.dedup();
    sorted
}

/// Parse → format → parse is stable for any text that parses.
fn check_round_trip(message: &str) {
    let Ok(holders) = readiness::parse_holders(Some(message)) else {
        return;
    };
    let formatted = readiness::format_holders(&holders);
    let reparsed = readiness::parse_holders(Some(&formatted))
        .unwrap_or_else(|error| panic!("formatted holders do not parse: {error}: {formatted}"));
    assert_eq!(reparsed, canonical(&holders), "{formatted}");
    assert_eq!(readiness::format_holders(&reparsed), formatted);
}

fn with_conditions(pod: &mut Pod, changes: Vec<PodCondition>) {
    let conditions = pod
        .status
        .get_or_insert_with(PodStatus::default)
        .conditions
        .get_or_insert_with(Vec::new);
    for change in changes {
        match conditions.iter_mut().find(|c| c.type_ == change.type_) {
            Some(existing) => *existing = change,
            None => conditions.push(change),
        }
    }
}

fn gate_status(pod: &Pod) -> Option<String> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == keys::POD_CONDITION_KRUISE_POD_READY)
        .map(|c| c.status.clone())
}

/// The structured run, with the oracles of the module comment.
pub fn run_structured(input: &Input) {
    let message = match &input.message {
        Message::Text(text) => Some(text.clone()),
        Message::Holders(entries) => Some(readiness::format_holders(
            &entries
                .iter()
                .map(|(user_agent, key)| Holder {
                    user_agent: user_agent.clone(),
                    key: key.clone(),
                })
                .collect::<Vec<_>>(),
        )),
        Message::Absent => None,
    };
    if let Some(message) = &message {
        check_round_trip(message);
    }
    let now = Timestamp::from_second(input.now.rem_euclid(253_402_207_199))
        .unwrap_or(Timestamp::UNIX_EPOCH);
    let mut conditions = Vec::new();
    if input.gate_present {
        conditions.push(PodCondition {
            type_: keys::POD_CONDITION_KRUISE_POD_READY.to_owned(),
            status: input.gate_status.clone(),
            message: message.clone(),
            ..PodCondition::default()
        });
    }
    if let Some(status) = &input.ready_status {
        conditions.push(PodCondition {
            type_: "Ready".to_owned(),
            status: status.clone(),
            ..PodCondition::default()
        });
    }
    let mut pod = Pod {
        spec: Some(PodSpec {
            readiness_gates: Some(vec![PodReadinessGate {
                condition_type: keys::POD_CONDITION_KRUISE_POD_READY.to_owned(),
            }]),
            ..PodSpec::default()
        }),
        status: Some(PodStatus {
            conditions: Some(conditions),
            ..PodStatus::default()
        }),
        ..Pod::default()
    };
    let _ = readiness::initial(&pod, now);
    let holder = match &input.other_user_agent {
        Some(user_agent) => Holder {
            user_agent: user_agent.clone(),
            key: format!("{}/{}", input.holder_namespace, input.holder_name),
        },
        None => Holder::for_crr(&input.holder_namespace, &input.holder_name),
    };

    let Ok(acquired) = readiness::acquire(&pod, &holder, now) else {
        // A list another component wrote and we cannot read is never overwritten.
        let _ = readiness::release(&pod, &holder, now);
        return;
    };
    if let Some(changes) = acquired {
        with_conditions(&mut pod, changes);
    }
    let held = readiness::holders(&pod).expect("our own list parses");
    assert!(held.contains(&holder), "acquire did not record the holder");
    assert_eq!(gate_status(&pod).as_deref(), Some("False"));
    assert_eq!(
        readiness::acquire(&pod, &holder, now).expect("our own list parses"),
        None,
        "a second acquire changed the pod"
    );

    let released = readiness::release(&pod, &holder, now)
        .expect("our own list parses")
        .expect("release finds the holder acquire recorded");
    with_conditions(&mut pod, vec![released]);
    let remaining = readiness::holders(&pod).expect("our own list parses");
    assert!(!remaining.contains(&holder), "release left the holder");
    assert_eq!(
        gate_status(&pod).as_deref(),
        Some(if remaining.is_empty() {
            "True"
        } else {
            "False"
        })
    );
    assert_eq!(
        readiness::release(&pod, &holder, now).expect("our own list parses"),
        None,
        "a second release changed the pod"
    );
}

/// The fuzz target: the bytes as a condition message, then as a structured input.
pub fn run(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        check_round_trip(text);
    }
    if let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) {
        run_structured(&input);
    }
}
