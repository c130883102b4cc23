//! A tenant of a shared cluster, as crr's users run them: a namespace of its own, a
//! ServiceAccount with the `edit` ClusterRole there and a Role on crr's rollouts there, and
//! nothing else. Scenarios act as it with `kubectl --as`, so that the API server's own RBAC and
//! admission decide what it may do, never the test.

use std::process::Output;

use kube::Client;
use kube::api::{Api, DeleteParams};
use serde_json::{Value, json};

use crate::{Ctx, check, create_namespace, kubectl_with_stdin};

/// The tenant's ServiceAccount's name in its namespace.
const ACCOUNT: &str = "tenant";

/// A tenant: its namespace and the user it acts as.
pub struct Tenant {
    /// Its namespace (`e2e-<scenario>-<suffix>`).
    pub namespace: String,
    /// `system:serviceaccount:<namespace>:tenant`.
    pub user: String,
}

impl Tenant {
    /// A new namespace for `scenario` with the tenant's ServiceAccount and its two bindings.
    pub async fn new(admin: &Client, scenario: &str) -> anyhow::Result<Self> {
        let namespace = create_namespace(admin, scenario).await?;
        let objects = json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "ServiceAccount",
             "metadata": {"name": ACCOUNT, "namespace": namespace}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
             "metadata": {"name": "tenant-edit", "namespace": namespace},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                         "name": "edit"},
             "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": namespace}]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
             "metadata": {"name": "tenant-rollouts", "namespace": namespace},
             "rules": [{"apiGroups": ["crr.dev"], "resources": ["containerrecreaterollouts"],
                        "verbs": ["get", "list", "watch", "create", "update", "patch",
                                  "delete"]}]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
             "metadata": {"name": "tenant-rollouts", "namespace": namespace},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                         "name": "tenant-rollouts"},
             "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": namespace}]},
        ]});
        let text = serde_json::to_string(&objects)?;
        let output = kubectl_with_stdin(&["apply", "-f", "-"], Some(&text)).await?;
        check(output.status.success(), || {
            format!(
                "the tenant's RBAC in {namespace}: {}",
                String::from_utf8_lossy(&output.stderr)
            )
        })?;
        let user = format!("system:serviceaccount:{namespace}:{ACCOUNT}");
        Ok(Self { namespace, user })
    }

    /// `kubectl --as <the tenant> -n <its namespace> args`, `stdin` written to it.
    pub async fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> anyhow::Result<Output> {
        let mut full = vec!["--as", self.user.as_str(), "-n", self.namespace.as_str()];
        full.extend_from_slice(args);
        kubectl_with_stdin(&full, stdin).await
    }

    /// `kubectl apply` of `object` as the tenant, in its namespace; an error if refused.
    pub async fn apply(&self, object: &Value) -> anyhow::Result<()> {
        let text = serde_json::to_string(object)?;
        let output = self.kubectl(&["apply", "-f", "-"], Some(&text)).await?;
        check(output.status.success(), || {
            format!(
                "kubectl --as {} apply: {}",
                self.user,
                String::from_utf8_lossy(&output.stderr)
            )
        })
    }

    /// The admin's view of the tenant's namespace (to read and wait, never to act for it).
    pub fn observed(&self, admin: &Client) -> Ctx {
        Ctx {
            client: admin.clone(),
            namespace: self.namespace.clone(),
        }
    }

    /// Deletes the tenant's namespace (unless `CRR_KEEP_NAMESPACES=1`).
    pub async fn remove(self, admin: &Client) {
        if std::env::var("CRR_KEEP_NAMESPACES").as_deref() == Ok("1") {
            return;
        }
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(admin.clone());
        let _ = namespaces
            .delete(&self.namespace, &DeleteParams::default())
            .await;
    }
}
