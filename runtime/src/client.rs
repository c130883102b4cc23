//! The API client of a component, and the field manager its writes carry, so that
//! `managedFields` shows which component wrote what.

use k8s_openapi::NamespaceResourceScope;
use kube::api::{ApiResource, PatchParams};
use kube::{Api, Client, Resource};

/// How many list pages a component reads at once ([`crate::list_pages`]).
pub const LIST_PAGES_AT_ONCE: usize = 1;

/// How long a TCP connection to the API server may take to open (kube's default: 30 s). It is
/// milliseconds in a healthy cluster; a connection that hangs (its SYN dropped while the API
/// server's Service is being reprogrammed) is abandoned and retried by the caller instead of
/// holding an admission review past its deadline or a watch's reconnect for 30 s.
pub const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

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
        let mut config = kube::Config::infer()
            .await
            .map_err(kube::Error::InferConfig)?;
        config.connect_timeout = Some(CONNECT_TIMEOUT);
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

/// Whether `error` is a connection that could not be made: the request never reached the API
/// server, so reading again is safe. Right after the API server restarts, in-cluster clients
/// see this for a moment (its `kubernetes` Service has no endpoint until it registers again).
pub fn is_connect_error(error: &kube::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(error) = source {
        if let Some(client) = error.downcast_ref::<hyper_util::client::legacy::Error>() {
            return client.is_connect();
        }
        source = error.source();
    }
    false
}

/// Delays between the tries of [`read_retrying_connect`]; the last try starts within
/// [`CONNECT_RETRY_BUDGET`], so that a read and its retries fit an admission review's time limit.
pub const CONNECT_RETRIES: [std::time::Duration; 4] = [
    std::time::Duration::from_millis(200),
    std::time::Duration::from_millis(400),
    std::time::Duration::from_millis(800),
    std::time::Duration::from_millis(1600),
];

/// No try of [`read_retrying_connect`] starts later than this after the first.
pub const CONNECT_RETRY_BUDGET: std::time::Duration = std::time::Duration::from_secs(3);

/// Runs `read` (a GET or LIST: never a write) again after [`CONNECT_RETRIES`] while its
/// connection cannot be made, as long as the next try starts within [`CONNECT_RETRY_BUDGET`];
/// any other outcome is returned as it is.
pub async fn read_retrying_connect<T, F, Fut>(mut read: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let started = tokio::time::Instant::now();
    let mut delays = CONNECT_RETRIES.iter();
    loop {
        match read().await {
            Err(error) if is_connect_error(&error) => match delays.next() {
                Some(delay) if started.elapsed() + *delay <= CONNECT_RETRY_BUDGET => {
                    tracing::debug!(%error, ?delay, "API server unreachable; reading again");
                    tokio::time::sleep(*delay).await;
                }
                _ => return Err(error),
            },
            done => return done,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A client of a loopback port where nothing listens.
    fn unreachable() -> Client {
        let url: http::Uri = "http://127.0.0.1:9".parse().expect("uri");
        Client::try_from(kube::Config::new(url)).expect("client")
    }

    #[tokio::test]
    async fn a_refused_connection_is_a_connect_error_and_is_read_again() {
        let api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(unreachable(), "default");
        let error = api.get_opt("p").await.expect_err("nothing listens");
        assert!(is_connect_error(&error), "{error:?}");
        tokio::time::pause();
        let mut tries = 0;
        let read = read_retrying_connect(|| {
            tries += 1;
            let api = api.clone();
            async move { api.get_opt("p").await }
        })
        .await;
        assert!(read.is_err());
        // 0, 0.2, 0.6 and 1.4 s; the fifth would start at 3.0 s plus the time the tries took.
        assert_eq!(tries, CONNECT_RETRIES.len());
    }

    #[tokio::test(start_paused = true)]
    async fn no_try_starts_past_the_budget() {
        let api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(unreachable(), "default");
        let started = tokio::time::Instant::now();
        let mut tries = Vec::new();
        let read = read_retrying_connect(|| {
            tries.push(started.elapsed());
            let api = api.clone();
            async move {
                // Each try takes a second to be refused, as a hung connection would.
                tokio::time::sleep(Duration::from_secs(1)).await;
                api.get_opt("p").await
            }
        })
        .await;
        assert!(read.is_err());
        assert!(
            tries.iter().all(|at| *at <= CONNECT_RETRY_BUDGET),
            "{tries:?}"
        );
        assert_eq!(tries.len(), 3, "{tries:?}");
    }

    #[test]
    fn an_answer_of_the_api_server_is_no_connect_error() {
        let status = kube::core::Status::failure("not found", "NotFound").boxed();
        assert!(!is_connect_error(&kube::Error::Api(status)));
    }
}
