//! The API client of a component, and the field manager its writes carry, so that
//! `managedFields` shows which component wrote what.

use k8s_openapi::NamespaceResourceScope;
use kube::api::{ApiResource, PatchParams};
use kube::{Api, Client, Resource};

/// How many list pages a component reads at once ([`crate::list_pages`]).
pub const LIST_PAGES_AT_ONCE: usize = 1;

/// A kube client plus the field manager of every write this component makes.
#[derive(Clone)]
pub struct ApiClient {
    client: Client,
    field_manager: &'static str,
}

impl ApiClient {
    /// Connects with the usual inference (in-cluster service account, else `KUBECONFIG`),
    /// reading one list page at a time ([`crate::list_pages`]).
    pub async fn infer(field_manager: &'static str) -> Result<Self, kube::Error> {
        let config = kube::Config::infer()
            .await
            .map_err(kube::Error::InferConfig)?;
        let client = kube::client::ClientBuilder::try_from(config)?
            .with_layer(&crate::list_pages::ListPages::new(LIST_PAGES_AT_ONCE))
            .build();
        Ok(Self::new(client, field_manager))
    }

    /// Wraps an existing client (tests build one over a mock service).
    pub fn new(client: Client, field_manager: &'static str) -> Self {
        Self {
            client,
            field_manager,
        }
    }

    /// The client (cheap to clone).
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// This component's field manager.
    pub fn field_manager(&self) -> &'static str {
        self.field_manager
    }

    /// Patch parameters naming this component's field manager.
    pub fn patch_params(&self) -> PatchParams {
        patch_params(self.field_manager)
    }
}

/// Patch parameters naming `field_manager`.
pub fn patch_params(field_manager: &'static str) -> PatchParams {
    PatchParams {
        field_manager: Some(field_manager.to_owned()),
        ..PatchParams::default()
    }
}

/// The `Api` of `K` in `namespace`, or in every namespace when `None` (a component watching
/// one namespace, or the cluster).
pub fn namespaced_or_all<K>(client: Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match namespace {
        Some(namespace) => Api::namespaced(client, namespace),
        None => Api::all(client),
    }
}

/// [`namespaced_or_all`] for a kind known at run time (its `ApiResource`, as `DynamicObject`
/// or a projection decoded from any kind takes it).
pub fn namespaced_or_all_with<K>(
    client: Client,
    namespace: Option<&str>,
    resource: &ApiResource,
) -> Api<K>
where
    K: Resource<DynamicType = ApiResource, Scope = kube::core::DynamicResourceScope>,
{
    match namespace {
        Some(namespace) => Api::namespaced_with(client, namespace, resource),
        None => Api::all_with(client, resource),
    }
}
