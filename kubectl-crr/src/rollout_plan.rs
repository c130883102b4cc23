//! `kubectl crr rollout ... --dry-run`: what a rollout would do, before it exists. The pods of the
//! target in the order the operator restarts them (`crr_crds::rollout_order`, the operator's own
//! order), how many may be unavailable at once and how many could start now, and each
//! PodDisruptionBudget that selects them with what it allows now. The text is a pure function
//! here with its tests; reading the pods and the budgets is [`read`].

use crr_crds::rollout::{ContainerRecreateRollout, Limit, target_name};
use crr_crds::rollout_order::{PodView, in_restart_order};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ListParams};
use kube::core::{Selector, SelectorExt as _};
use kube::{Client, ResourceExt as _};

use crate::error::Error;

/// A PodDisruptionBudget that selects some of the target's pods.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Budget {
    pub name: String,
    /// Its `status.disruptionsAllowed` now.
    pub allowed: i32,
    /// How many of the target's pods it selects.
    pub selects: usize,
}

/// What the dry run found: the target's pods in restart order and the budgets over them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub pods: Vec<PodView>,
    pub budgets: Vec<Budget>,
}

/// The plan as the user reads it; `mode` is `client` or `server` (the API server and the
/// webhook checked the rollout).
pub fn text(rollout: &ContainerRecreateRollout, plan: &Plan, limit: Limit, mode: &str) -> String {
    let name = rollout
        .metadata
        .name
        .clone()
        .or_else(|| {
            rollout
                .metadata
                .generate_name
                .as_ref()
                .map(|prefix| format!("{prefix}<random>"))
        })
        .unwrap_or_default();
    let mut out = format!(
        "containerrecreaterollout/{name} (dry run, {mode}): {}, containers {}\n",
        target_name(&rollout.spec.target),
        rollout.spec.containers.join(", ")
    );
    if plan.pods.is_empty() {
        out.push_str("no pods to restart: the rollout would complete at once\n");
        return out;
    }
    out.push_str(&format!(
        "{} pods, restarted in this order (not Ready first, then the highest StatefulSet ordinal, then the oldest):\n",
        plan.pods.len()
    ));
    let width = plan.pods.len().to_string().len();
    for (index, pod) in plan.pods.iter().enumerate() {
        let state = if pod.ready { "" } else { "  not Ready" };
        out.push_str(&format!("  {:>width$}  {}{state}\n", index + 1, pod.name));
    }
    let at_once = limit.resolve(plan.pods.len());
    let unavailable = plan.pods.iter().filter(|pod| !pod.ready).count();
    let ready_slots = at_once.saturating_sub(unavailable);
    let budget_slots = plan
        .budgets
        .iter()
        .map(|budget| usize::try_from(budget.allowed.max(0)).unwrap_or(0))
        .min();
    let now = match (rollout.spec.respect_disruption_budgets, budget_slots) {
        (Some(false), _) | (_, None) => ready_slots,
        (_, Some(slots)) => ready_slots.min(slots),
    };
    out.push_str(&format!(
        "at most {at_once} unavailable at once (maxUnavailable {limit} of {}); {unavailable} unavailable now: \
         {unavailable} not-Ready pod(s) and {now} Ready pod(s) can start now\n",
        plan.pods.len()
    ));
    for budget in &plan.budgets {
        let ignored = if rollout.spec.respect_disruption_budgets == Some(false) {
            " (ignored: --no-budgets)"
        } else {
            ""
        };
        out.push_str(&format!(
            "PodDisruptionBudget {}: allows {} disruption(s) now, selects {} of these pods{ignored}\n",
            budget.name, budget.allowed, budget.selects
        ));
    }
    out
}

/// Reads the target's pods (`selector`: the workload's selector or the rollout's) and the
/// PodDisruptionBudgets of the namespace that select any of them.
pub async fn read(client: Client, namespace: &str, selector: &Selector) -> Result<Plan, Error> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let params = ListParams::default().labels_from(selector);
    let pods = pods.list(&params).await?.items;
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(client, namespace);
    let mut found = Vec::new();
    for budget in budgets.list(&ListParams::default()).await?.items {
        let Some(selector) = budget
            .spec
            .as_ref()
            .and_then(|spec| spec.selector.clone())
            .and_then(|selector| Selector::try_from(selector).ok())
        else {
            continue;
        };
        let selects = pods
            .iter()
            .filter(|pod| selector.matches(pod.labels()))
            .count();
        if selects > 0 {
            found.push(Budget {
                name: budget.name_any(),
                allowed: budget
                    .status
                    .as_ref()
                    .map_or(0, |status| status.disruptions_allowed),
                selects,
            });
        }
    }
    Ok(Plan {
        pods: in_restart_order(&pods),
        budgets: found,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rollout(no_budgets: bool) -> ContainerRecreateRollout {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "crr.dev/v1alpha1", "kind": "ContainerRecreateRollout",
            "metadata": {"generateName": "web-app-", "namespace": "shop"},
            "spec": {"target": {"workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}},
                     "containers": ["app", "sidecar"],
                     "respectDisruptionBudgets": !no_budgets},
        }))
        .expect("a rollout")
    }

    fn pod(name: &str, ready: bool) -> PodView {
        PodView {
            name: name.to_owned(),
            uid: name.to_owned(),
            created: jiff::Timestamp::UNIX_EPOCH,
            ready,
            terminating: false,
            restartable: true,
            ordinal: None,
        }
    }

    fn plan() -> Plan {
        Plan {
            pods: vec![
                pod("web-c", false),
                pod("web-a", true),
                pod("web-b", true),
                pod("web-d", true),
            ],
            budgets: vec![Budget {
                name: "web".to_owned(),
                allowed: 1,
                selects: 4,
            }],
        }
    }

    #[test]
    fn the_plan_lists_the_order_the_slots_and_the_budgets() {
        let text = text(&rollout(false), &plan(), Limit::Percent(50), "client");
        assert_eq!(
            text,
            "containerrecreaterollout/web-app-<random> (dry run, client): Deployment/web, containers app, sidecar\n\
             4 pods, restarted in this order (not Ready first, then the highest StatefulSet ordinal, then the oldest):\n\
             \x20 1  web-c  not Ready\n\
             \x20 2  web-a\n\
             \x20 3  web-b\n\
             \x20 4  web-d\n\
             at most 2 unavailable at once (maxUnavailable 50% of 4); 1 unavailable now: 1 not-Ready pod(s) and 1 Ready pod(s) can start now\n\
             PodDisruptionBudget web: allows 1 disruption(s) now, selects 4 of these pods\n"
        );
    }

    #[test]
    fn a_budget_that_allows_nothing_holds_every_ready_pod_unless_ignored() {
        let mut held = plan();
        held.budgets[0].allowed = 0;
        let text_of = |no_budgets| text(&rollout(no_budgets), &held, Limit::Count(3), "server");
        assert!(
            text_of(false).contains("and 0 Ready pod(s) can start now"),
            "{}",
            text_of(false)
        );
        assert!(
            text_of(true).contains("and 2 Ready pod(s) can start now"),
            "{}",
            text_of(true)
        );
        assert!(text_of(true).contains("(ignored: --no-budgets)"));
        let empty = Plan {
            pods: Vec::new(),
            budgets: Vec::new(),
        };
        assert!(
            text(&rollout(false), &empty, Limit::Count(1), "client").contains("no pods to restart")
        );
    }
}
