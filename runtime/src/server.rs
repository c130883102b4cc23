//! The one HTTP serving loop, plain or over TLS (rustls; HTTP/1.1), with time limits on every
//! stage and a drained shutdown. The webhook serves its routes with it over TLS, every binary
//! its admin routes in plain HTTP.
//!
//! A client that stalls (handshake, headers or body) loses its connection; it never holds the
//! server. Connections are capped in all and per peer address: one over a cap is closed at
//! once, so a flood of connections from a few peers cannot take every connection the server
//! will hold. At shutdown the listener closes, keep-alive connections close after their current
//! request, and in-flight requests get `Limits::drain` to finish.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::response::IntoResponse as _;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// How long an idle keep-alive connection is kept: longer than the 90 s after which Go's HTTP
/// clients (the API server calling webhooks, Prometheus scraping) close theirs, so that the
/// client, never the server, closes an idle connection and no call races a close. A stalled
/// client holds a connection this long; the connection caps bound how many.
pub const KEEP_ALIVE_IDLE: Duration = Duration::from_secs(100);

/// Time limits of a server.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// TLS handshake.
    pub handshake: Duration,
    /// Request headers. hyper counts this from the end of the previous answer, so it is also
    /// how long an idle keep-alive connection is kept: it must outlast the clients' own idle
    /// timeout ([`KEEP_ALIVE_IDLE`]), or a client reusing a connection just as the server closes
    /// it fails its call ("broken pipe").
    pub headers: Duration,
    /// One request, body read and answer included.
    pub request: Duration,
    /// Draining open connections at shutdown.
    pub drain: Duration,
    /// Connections open at once; a new one over it is closed at once.
    pub connections: usize,
    /// Connections open at once from one peer address; a new one over it is closed at once.
    pub connections_per_peer: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            handshake: Duration::from_secs(10),
            headers: KEEP_ALIVE_IDLE,
            // The API server gives a webhook at most 30 s.
            request: Duration::from_secs(30),
            drain: Duration::from_secs(20),
            connections: 1024,
            connections_per_peer: 1024,
        }
    }
}

/// The connections open now, in all and per peer address.
#[derive(Default)]
struct OpenConnections {
    per_peer: std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>,
}

/// One open connection, counted until dropped.
struct Counted {
    open: Arc<OpenConnections>,
    peer: std::net::IpAddr,
}

impl OpenConnections {
    /// Counts a new connection from `peer`, or `None` when it would go over a cap.
    fn admit(self: &Arc<Self>, peer: std::net::IpAddr, limits: &Limits) -> Option<Counted> {
        let mut per_peer = self
            .per_peer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let total: usize = per_peer.values().sum();
        let from_peer = per_peer.get(&peer).copied().unwrap_or(0);
        if total >= limits.connections || from_peer >= limits.connections_per_peer {
            return None;
        }
        *per_peer.entry(peer).or_insert(0) += 1;
        Some(Counted {
            open: self.clone(),
            peer,
        })
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        let mut per_peer = self
            .open
            .per_peer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(count) = per_peer.get_mut(&self.peer) {
            *count -= 1;
            if *count == 0 {
                per_peer.remove(&self.peer);
            }
        }
    }
}

/// Whether the client of a request's connection presented a TLS client certificate, which the
/// server's verifier accepted (a certificate it refuses ends the handshake). Every request of a
/// served router carries it as an extension; plain-HTTP connections carry `presented: false`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientCertificate {
    /// A verified client certificate came with the handshake.
    pub presented: bool,
}

/// Wraps every request of `router` in `limit`: a body that never arrives ends with 408.
pub fn with_request_timeout(router: Router, limit: Duration) -> Router {
    router.layer(axum::middleware::from_fn(
        move |request: axum::extract::Request, next: axum::middleware::Next| async move {
            match tokio::time::timeout(limit, next.run(request)).await {
                Ok(response) => response,
                Err(_) => (StatusCode::REQUEST_TIMEOUT, "request took too long").into_response(),
            }
        },
    ))
}

/// Serves `router` on `listener` (over TLS when `tls` is given) until `shutdown` resolves, then
/// drains and returns once in-flight requests are done or `limits.drain` has passed.
pub async fn serve(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    router: Router,
    shutdown: impl Future<Output = ()> + Send,
    limits: Limits,
) -> std::io::Result<()> {
    let acceptor = tls.map(TlsAcceptor::from);
    let router = with_request_timeout(router, limits.request);
    let graceful = GracefulShutdown::new();
    let open = Arc::new(OpenConnections::default());
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                // Out of file descriptors and the like: wait a moment rather than spin or die.
                Err(error) => {
                    tracing::warn!(%error, "accepting a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Some(counted) = open.admit(peer.ip(), &limits) else {
            tracing::debug!(%peer, "over the connection cap: closed");
            drop(stream);
            continue;
        };
        // An answer leaves as several TLS records; with Nagle's algorithm the later ones wait
        // for the client's delayed ACK (tens of milliseconds on loopback).
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%peer, %error, "setting TCP_NODELAY");
        }
        let acceptor = acceptor.clone();
        let router = router.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let _counted = counted;
            let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            builder
                .http1()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.headers);
            let result = match acceptor {
                Some(acceptor) => {
                    let tls = match tokio::time::timeout(limits.handshake, acceptor.accept(stream))
                        .await
                    {
                        Ok(Ok(tls)) => tls,
                        Ok(Err(error)) => {
                            tracing::debug!(%peer, %error, "TLS handshake failed");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!(%peer, "TLS handshake timed out");
                            return;
                        }
                    };
                    let presented = tls
                        .get_ref()
                        .1
                        .peer_certificates()
                        .is_some_and(|chain| !chain.is_empty());
                    let service = TowerToHyperService::new(
                        router.layer(axum::Extension(ClientCertificate { presented })),
                    );
                    watcher
                        .watch(builder.serve_connection(TokioIo::new(tls), service))
                        .await
                }
                None => {
                    let service = TowerToHyperService::new(
                        router.layer(axum::Extension(ClientCertificate::default())),
                    );
                    watcher
                        .watch(builder.serve_connection(TokioIo::new(stream), service))
                        .await
                }
            };
            if let Err(error) = result {
                tracing::debug!(%peer, %error, "connection ended with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(limits.drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(after = ?limits.drain, "connections still open after the drain period");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    async fn get_over_tcp(address: std::net::SocketAddr, request: &str) -> String {
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        answer
    }

    #[tokio::test]
    async fn serves_plain_http_and_stops_accepting_after_shutdown() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let router = Router::new().route("/hello", get(|| async { "hi" }));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(
            listener,
            None,
            router,
            async move {
                let _ = stopped.await;
            },
            Limits::default(),
        ));
        let answer = get_over_tcp(
            address,
            "GET /hello HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with("hi"), "{answer}");
        stop.send(()).unwrap();
        server.await.unwrap().unwrap();
        assert!(tokio::net::TcpStream::connect(address).await.is_err());
    }

    #[tokio::test]
    async fn connections_over_the_per_peer_cap_are_closed_at_once_and_counted_back() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let limits = Limits {
            connections_per_peer: 2,
            ..Limits::default()
        };
        let router = Router::new().route("/hello", get(|| async { "hi" }));
        tokio::spawn(serve(
            listener,
            None,
            router,
            std::future::pending(),
            limits,
        ));
        let held: Vec<_> =
            futures::future::join_all((0..2).map(|_| tokio::net::TcpStream::connect(address)))
                .await
                .into_iter()
                .map(Result::unwrap)
                .collect();
        // Give the server the time to count both.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut third = tokio::net::TcpStream::connect(address).await.unwrap();
        let _ = third
            .write_all(b"GET /hello HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await;
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), third.read_to_end(&mut answer))
            .await
            .expect("the third connection was closed at once");
        assert!(answer.is_empty(), "{}", String::from_utf8_lossy(&answer));
        drop(held);
        tokio::time::sleep(Duration::from_millis(100)).await;
        let answer = get_over_tcp(
            address,
            "GET /hello HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
        )
        .await;
        assert!(
            answer.starts_with("HTTP/1.1 200"),
            "closed connections count back: {answer}"
        );
    }

    #[tokio::test]
    async fn a_client_that_never_sends_headers_is_cut_off() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let limits = Limits {
            headers: Duration::from_millis(100),
            ..Limits::default()
        };
        tokio::spawn(serve(
            listener,
            None,
            Router::new(),
            std::future::pending(),
            limits,
        ));
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        stream.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
        let mut answer = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer))
            .await
            .expect("the server closed the stalled connection");
        assert!(read.is_ok());
    }

    /// hyper counts the header limit from the end of the previous answer: a keep-alive
    /// connection idle for less than it serves the next request, one idle for longer is closed.
    /// [`KEEP_ALIVE_IDLE`] rests on this.
    #[tokio::test]
    async fn an_idle_keep_alive_connection_lives_as_long_as_the_header_limit() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let limits = Limits {
            headers: Duration::from_millis(400),
            ..Limits::default()
        };
        let router = Router::new().route("/hello", get(|| async { "hi" }));
        tokio::spawn(serve(
            listener,
            None,
            router,
            std::future::pending(),
            limits,
        ));
        let request = b"GET /hello HTTP/1.1\r\nhost: x\r\n\r\n";
        async fn answer(stream: &mut tokio::net::TcpStream) -> String {
            let mut buffer = vec![0u8; 1024];
            let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buffer))
                .await
                .expect("an answer or a close")
                .unwrap_or(0);
            String::from_utf8_lossy(&buffer[..read]).into_owned()
        }
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        stream.write_all(request).await.unwrap();
        assert!(answer(&mut stream).await.starts_with("HTTP/1.1 200"));
        tokio::time::sleep(Duration::from_millis(150)).await;
        stream.write_all(request).await.unwrap();
        let second = answer(&mut stream).await;
        assert!(
            second.starts_with("HTTP/1.1 200"),
            "reused after 150 ms: {second:?}"
        );
        tokio::time::sleep(Duration::from_millis(900)).await;
        let _ = stream.write_all(request).await;
        let third = answer(&mut stream).await;
        assert!(third.is_empty(), "closed after 900 ms idle: {third:?}");
    }
}
