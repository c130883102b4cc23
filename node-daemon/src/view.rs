//! The node daemon's slim views: what its two watches keep of each object, declared here.
//!
//! | kind | scope | kept | measured (a fat object → its view) |
//! |---|---|---|---|
//! | ContainerRecreateRequest | its node's active ones (labels `node-name`, `active`) | name, namespace, uid, resourceVersion, creation and deletion times, crr's own labels; the spec without the injected `preStop` and `ports` copies; the status | 272,684 → 603 bytes of JSON (two containers; [`slim_request`]) |
//! | Pod | its node's (`spec.nodeName`) | what a recreate reads: identity, labels, containers' names, images, ports, lifecycle, restart policies, grace, addresses, statuses | 100 KB of env and annotations → under 2,000 bytes (`live_pod::slim_pod`) |
//!
//! What a tenant can make large and the daemon never reads goes before the object reaches the
//! store: annotations, `managedFields`, labels that are not crr's, and the request's copies of
//! the pod's preStop handlers and ports (the daemon runs the live pod's, never the request's).
//! The tests below measure a fat request and check that every decision reads its view as it
//! reads the whole request.

use crr_crds::v1beta1::ContainerRecreateRequest;

pub use crate::live_pod::slim_pod;

/// Requests per page of the request watch's lists. A page is held whole and copied once, and its
/// requests are decoded whole, before they are slimmed: three times its bytes at the peak of a
/// relist. 10 requests of the largest the webhook admits (256 KiB) are about 8 MB at that peak,
/// an eighth of the daemon's 64 Mi limit. (At the operator's 50, an API server restart under 250
/// queued requests of 190 KiB took a daemon to 75% of its limit on the test bed.)
pub const REQUEST_PAGE: u32 = 10;

/// Pods per page of the node's pod watch's lists. A page is held whole, and copied once, before
/// its pods are slimmed, and a pod can be 1.5 MB: 4 of the largest cost about 12 MB at the peak
/// of a relist, a fifth of the daemon's 64 Mi limit (kube's default page of 500 would hold a
/// whole node's 110 pods). The client reads one page at a time (`crr_runtime::list_pages`).
pub const POD_PAGE: u32 = 4;

/// Keeps of a request what the daemon decides on (`recreate`, `schedule`, `round`): see the
/// module's table. On top of what every store drops ([`crr_crds::slim::drop_tenant_bulk`]), the
/// daemon drops the finalizers: it neither reads nor writes them.
pub fn slim_request(crr: &mut ContainerRecreateRequest) {
    crr_crds::slim::drop_tenant_bulk(crr);
    crr.metadata.finalizers = None;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recreate::{self, RuntimeContainer, admitted_request};
    use crr_crds::v1beta1::{ContainerRecreateRequestStrategy, ProbeHandler};
    use k8s_openapi::api::core::v1::{ContainerPort, ExecAction};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kube::ResourceExt as _;

    /// A request a tenant made as large as admission lets it be: 100 KB of annotations, 50 KB
    /// of labels, a 50 KB preStop copy per container.
    fn fat_request() -> ContainerRecreateRequest {
        let strategy = ContainerRecreateRequestStrategy {
            min_started_seconds: 3,
            unready_grace_period_seconds: Some(2),
            ..Default::default()
        };
        let mut crr = admitted_request(&["app", "sidecar"], strategy);
        crr.metadata.uid = Some("crr-uid".into());
        crr.metadata.resource_version = Some("7".into());
        crr.metadata.creation_timestamp = Some(Time(jiff::Timestamp::now()));
        crr.metadata.annotations = Some([("big".to_owned(), "a".repeat(100_000))].into());
        let labels = crr.metadata.labels.get_or_insert_default();
        labels.insert(crr_crds::keys::LABEL_NODE_NAME.into(), "node-1".into());
        labels.insert(crr_crds::keys::LABEL_ACTIVE.into(), "true".into());
        for index in 0..800 {
            labels.insert(format!("tenant.example/label-{index}"), "v".repeat(60));
        }
        for container in &mut crr.spec.containers {
            container.pre_stop = Some(ProbeHandler {
                exec: Some(ExecAction {
                    command: Some(vec!["x".repeat(50_000)]),
                }),
                ..Default::default()
            });
            container.ports = Some(vec![ContainerPort {
                container_port: 8080,
                name: Some("http".into()),
                ..Default::default()
            }]);
        }
        crr
    }

    #[test]
    fn a_fat_request_is_kept_in_under_a_kilobyte_and_decided_the_same() {
        let whole = fat_request();
        let mut slim = whole.clone();
        slim_request(&mut slim);
        let bytes = |crr: &ContainerRecreateRequest| serde_json::to_vec(crr).unwrap().len();
        assert!(bytes(&whole) > 250_000, "{}", bytes(&whole));
        assert!(bytes(&slim) < 1_000, "{}: {slim:#?}", bytes(&slim));
        println!(
            "request: {} bytes whole, {} bytes kept",
            bytes(&whole),
            bytes(&slim)
        );
        // Every decision reads the view as it reads the whole request.
        let runtime = |name: &str| {
            Some(RuntimeContainer {
                id: format!("containerd://{name}-2"),
                restart_count: 1,
                running: true,
                started_at: Some(jiff::Timestamp::now()),
                owner: recreate::expected_owner(&whole, name),
            })
        };
        let now = jiff::Timestamp::now();
        let states = recreate::container_states(&whole, &runtime, now);
        assert_eq!(recreate::container_states(&slim, &runtime, now), states);
        assert_eq!(
            recreate::next_step(&slim, &states),
            recreate::next_step(&whole, &states)
        );
        for name in ["app", "sidecar"] {
            assert_eq!(
                recreate::expected_owner(&slim, name),
                recreate::expected_owner(&whole, name)
            );
        }
        assert_eq!(recreate::deadline(&slim), recreate::deadline(&whole));
        assert_eq!(
            recreate::unready_grace(&slim),
            recreate::unready_grace(&whole)
        );
        assert_eq!(recreate::needs_grace(&slim), recreate::needs_grace(&whole));
        assert_eq!(
            recreate::foreign_runtime(&slim, "containerd"),
            recreate::foreign_runtime(&whole, "containerd")
        );
        let mut crr_only = whole.labels().clone();
        crr_only.retain(|key, _| crr_crds::slim::is_crr_label(key));
        assert_eq!(slim.labels(), &crr_only);
        assert_eq!(crr_only.len(), 3, "{crr_only:?}");
        assert_eq!(slim.metadata.uid, whole.metadata.uid);
        assert_eq!(
            slim.metadata.resource_version,
            whole.metadata.resource_version
        );
        assert_eq!(slim.status, whole.status);
    }
}
