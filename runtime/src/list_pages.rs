//! One page of a list in memory at a time, per process: a layer of the API client.
//!
//! A list page is held whole before it is decoded (the client collects the body, then copies it
//! once more to decode it), and a tenant's objects can be 1.5 MB each. Every list a component
//! makes is paged, but its watches relist on their own schedule (a watch that fell too far
//! behind, an API server restart), and a sweep may run beside them: three pages of 20 fat pods
//! at once took the operator's leader from 45 to 110 MiB of its 128 MiB limit on the test bed.
//! This layer lets the body of one paged list through at a time; the others' requests are sent
//! and their headers read, but their bodies stay in the kernel's socket buffers (HTTP flow
//! control) until the page before them has been read. So what a component holds for lists is
//! about one page, whatever number of watches relist together.
//!
//! A paged list is a `GET` whose query carries `limit=` without `watch=` (every list crr makes
//! sets a page size: `watcher::Config::page_size`, `ListParams::limit`). Watches, single-object
//! reads and writes pass untouched. The permit goes with the response's body: it is released
//! when the body has been read to its end or dropped.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use http::{Method, Request, Response};
use http_body::{Body, Frame, SizeHint};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tower::{Layer, Service};

/// Whether `request` is a paged list (see the module's doc).
pub fn is_paged_list<B>(request: &Request<B>) -> bool {
    if request.method() != Method::GET {
        return false;
    }
    let Some(query) = request.uri().query() else {
        return false;
    };
    let has = |key: &str| {
        query
            .split('&')
            .any(|pair| pair.split_once('=').map_or(pair, |(name, _)| name) == key)
    };
    has("limit") && !has("watch")
}

/// The layer: lets `pages` list bodies through at once (one in every crr binary).
#[derive(Clone)]
pub struct ListPages {
    permits: Arc<Semaphore>,
}

impl ListPages {
    pub fn new(pages: usize) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(pages.max(1))),
        }
    }
}

impl<S> Layer<S> for ListPages {
    type Service = ListPagesService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ListPagesService {
            inner,
            permits: self.permits.clone(),
        }
    }
}

/// The service [`ListPages`] wraps around the client's stack.
pub struct ListPagesService<S> {
    inner: S,
    permits: Arc<Semaphore>,
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for ListPagesService<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ResBody: Send + 'static,
{
    type Response = Response<PageBody<ResBody>>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let permits = is_paged_list(&request).then(|| self.permits.clone());
        // The request goes out at once; only the reading of a page's body waits its turn.
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await?;
            let permit = match permits {
                // The semaphore is never closed: a failed acquire only reads without a permit.
                Some(permits) => permits.acquire_owned().await.ok(),
                None => None,
            };
            Ok(response.map(|inner| PageBody { inner, permit }))
        })
    }
}

/// A response body that holds its list permit until it has been read or dropped.
pub struct PageBody<B> {
    inner: B,
    permit: Option<OwnedSemaphorePermit>,
}

impl<B: Body + Unpin> Body for PageBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(None | Some(Err(_))) = polled {
            self.permit = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt as _, Full};

    fn get(uri: &str) -> Request<()> {
        Request::get(uri).body(()).unwrap()
    }

    #[test]
    fn only_paged_lists_take_a_permit() {
        assert!(is_paged_list(&get("/api/v1/pods?&limit=20")));
        assert!(is_paged_list(&get(
            "/api/v1/pods?labelSelector=a%3Db&limit=20&continue=abc"
        )));
        assert!(!is_paged_list(&get(
            "/api/v1/pods?&watch=true&timeoutSeconds=290&limit=20"
        )));
        assert!(!is_paged_list(&get("/api/v1/namespaces/a/pods/limit")));
        assert!(!is_paged_list(&get("/api/v1/pods?labelSelector=limit%3D1")));
        assert!(!is_paged_list(&get("/api/v1/pods")));
        let patch = Request::patch("/api/v1/pods?limit=1").body(()).unwrap();
        assert!(!is_paged_list(&patch));
    }

    /// A service answering every request at once with a body of `page`.
    struct Answering;

    impl Service<Request<()>> for Answering {
        type Response = Response<Full<bytes::Bytes>>;
        type Error = std::convert::Infallible;
        type Future = std::future::Ready<Result<Self::Response, Self::Error>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: Request<()>) -> Self::Future {
            std::future::ready(Ok(Response::new(Full::new(bytes::Bytes::from_static(
                b"page",
            )))))
        }
    }

    fn answering() -> ListPagesService<Answering> {
        ListPages::new(1).layer(Answering)
    }

    #[tokio::test]
    async fn a_second_page_is_handed_over_once_the_first_is_read() {
        let mut service = answering();
        let first = service.call(get("/api/v1/pods?limit=20")).await.unwrap();
        // A single-object read and a watch are not held back by the page in flight.
        let single = service
            .call(get("/api/v1/namespaces/a/pods/p"))
            .await
            .unwrap();
        assert!(single.into_body().permit.is_none());
        let watch = service
            .call(get("/api/v1/pods?watch=true&limit=20"))
            .await
            .unwrap();
        assert!(watch.into_body().permit.is_none());

        let mut second = std::pin::pin!(service.call(get("/api/v1/pods?limit=20&continue=x")));
        let pending = futures::poll!(second.as_mut());
        assert!(
            pending.is_pending(),
            "the second page came while the first was unread"
        );

        let body = first.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"page");
        let second = second.await.unwrap();
        assert!(second.body().permit.is_some());
        assert_eq!(
            &second.into_body().collect().await.unwrap().to_bytes()[..],
            b"page"
        );
    }

    #[tokio::test]
    async fn a_page_dropped_unread_frees_its_turn() {
        let mut service = answering();
        let first = service.call(get("/api/v1/pods?limit=20")).await.unwrap();
        drop(first);
        let second = service.call(get("/api/v1/pods?limit=20")).await.unwrap();
        assert!(second.body().permit.is_some());
    }
}
