//! preStop `httpGet` through hyper, the way the kubelet runs lifecycle HTTP hooks:
//!
//! - the request is built from the handler by [`HookRequest::new`] (pure): the path is
//!   percent-encoded where it holds bytes a request target may not (spaces, control characters,
//!   non-ASCII), as Go's `url.URL` does for the kubelet, so CR and LF can never end the request
//!   line; header names and values are validated by `http` and a bad one fails the hook with a
//!   message, never reaching the wire; a `Host` header given in the handler replaces the default;
//! - `scheme: HTTPS` runs over TLS **without certificate verification**, as the kubelet's hooks
//!   do (it has no CA to verify a pod's certificate against);
//! - redirects are not followed: a 3xx is the hook's answer (the kubelet follows only same-host
//!   redirects; following none means a hook never reaches a host its handler does not name);
//! - success is a 2xx or 3xx status. The body is never read, and an error names the request's
//!   URL (built here, so printable) and a status code or hyper's own error: no byte of the
//!   response reaches an Event.
//!
//! [`exchange`] speaks HTTP/1.1 over any byte stream, so the fuzz target `pre_stop_response`
//! feeds it arbitrary responses.

use std::sync::Arc;

use http::header::{ACCEPT, HOST, HeaderName, HeaderValue, USER_AGENT};
use http::{HeaderMap, Request, Uri};
use http_body_util::Empty;
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::hook_error::HookError;

/// The User-Agent a hook request carries unless its handler sets one (the kubelet sends
/// `kube-lifecycle/<version>`).
pub const USER_AGENT_VALUE: &str = "crr-node-daemon-lifecycle";

/// The most a response head may take before the hook fails ("message head is too large").
const MAX_RESPONSE_HEAD_BYTES: usize = 16 * 1024;

/// One hook request, validated: where to connect and what to send.
#[derive(Debug, Clone)]
pub struct HookRequest {
    pub host: String,
    pub port: u16,
    pub tls: bool,
    pub uri: Uri,
    pub headers: HeaderMap,
}

impl HookRequest {
    /// Builds the request of an `httpGet` handler. `scheme` is `HTTP` or `HTTPS` (any case,
    /// empty meaning HTTP); `host` is the handler's host or the pod's IP.
    pub fn new(
        scheme: Option<&str>,
        host: &str,
        port: u16,
        path: Option<&str>,
        headers: &[(String, String)],
    ) -> Result<Self, HookError> {
        let invalid = |what: String| HookError::InvalidHttpRequest(what);
        let tls = match scheme.map(str::to_ascii_lowercase).as_deref() {
            None | Some("" | "http") => false,
            Some("https") => true,
            Some(_) => {
                return Err(invalid(format!(
                    "scheme {:?} is not HTTP or HTTPS",
                    scheme.unwrap_or_default()
                )));
            }
        };
        let authority = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        let target = request_target(path.unwrap_or_default());
        let uri = Uri::builder()
            .scheme(if tls { "https" } else { "http" })
            .authority(authority.as_str())
            .path_and_query(target.as_str())
            .build()
            .map_err(|error| invalid(format!("URL {authority:?}{target:?}: {error}")))?;
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            let header_name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| invalid(format!("header name {name:?} is not a valid HTTP token")))?;
            let header_value = HeaderValue::from_str(value).map_err(|_| {
                invalid(format!(
                    "header {name:?} has a value with characters HTTP does not allow: {value:?}"
                ))
            })?;
            map.append(header_name, header_value);
        }
        if !map.contains_key(HOST) {
            let value = HeaderValue::from_str(&authority)
                .map_err(|_| invalid(format!("host {host:?} is not a valid Host header")))?;
            map.insert(HOST, value);
        }
        if !map.contains_key(USER_AGENT) {
            map.insert(USER_AGENT, HeaderValue::from_static(USER_AGENT_VALUE));
        }
        if !map.contains_key(ACCEPT) {
            map.insert(ACCEPT, HeaderValue::from_static("*/*"));
        }
        Ok(Self {
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
            port,
            tls,
            uri,
            headers: map,
        })
    }

    fn to_request(&self) -> Request<Empty<Bytes>> {
        let mut request = Request::get(self.uri.path_and_query().map_or("/", |p| p.as_str()))
            .body(Empty::new())
            .expect("a GET with a validated target always builds");
        *request.headers_mut() = self.headers.clone();
        request
    }

    fn error(&self, message: impl std::fmt::Display) -> HookError {
        HookError::Http {
            url: self.uri.to_string(),
            message: message.to_string(),
        }
    }
}

/// The request target of `path`: `/` when empty, a leading `/` added, and every byte outside
/// printable ASCII (and space) percent-encoded. `?` and `#` keep their meaning.
pub fn request_target(path: &str) -> String {
    let mut target = String::with_capacity(path.len() + 1);
    if !path.starts_with('/') {
        target.push('/');
    }
    for byte in path.bytes() {
        if byte.is_ascii_graphic()
            && !matches!(
                byte,
                b'"' | b'<' | b'>' | b'\\' | b'^' | b'`' | b'{' | b'|' | b'}'
            )
        {
            target.push(char::from(byte));
        } else {
            target.push_str(&format!("%{byte:02X}"));
        }
    }
    target
}

/// Sends the GET over `io` and returns once the response head is in: `Ok` for 2xx or 3xx.
pub async fn exchange<IO>(io: IO, request: &HookRequest) -> Result<u16, HookError>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::Builder::new()
        .max_buf_size(MAX_RESPONSE_HEAD_BYTES)
        .handshake::<_, Empty<Bytes>>(TokioIo::new(io))
        .await
        .map_err(|error| request.error(error))?;
    let mut connection = std::pin::pin!(connection);
    let mut send = std::pin::pin!(sender.send_request(request.to_request()));
    let response = tokio::select! {
        biased;
        response = &mut send => response,
        // The connection may end as soon as the response is in (the server closed it): the
        // response then waits in `send`; an error ends the hook.
        ended = &mut connection => match ended {
            Ok(()) => send.await,
            Err(error) => return Err(request.error(error)),
        },
    }
    .map_err(|error| request.error(error))?;
    let status = response.status().as_u16();
    if (200..400).contains(&status) {
        Ok(status)
    } else {
        Err(request.error(format!("status {status}")))
    }
}

/// Connects (TCP, then TLS without verification for HTTPS) and runs [`exchange`].
pub async fn get(request: &HookRequest) -> Result<u16, HookError> {
    let stream = tokio::net::TcpStream::connect((request.host.as_str(), request.port))
        .await
        .map_err(|error| request.error(error))?;
    stream.set_nodelay(true).ok();
    if !request.tls {
        return exchange(stream, request).await;
    }
    let server_name = rustls::pki_types::ServerName::try_from(request.host.clone())
        .map_err(|_| request.error("the host is neither an IP address nor a DNS name"))?;
    let connector = tokio_rustls::TlsConnector::from(unverified_tls_config());
    let stream = connector
        .connect(server_name, stream)
        .await
        .map_err(|error| request.error(format!("TLS: {error}")))?;
    exchange(stream, request).await
}

/// A client configuration that accepts any server certificate (signatures still checked, so
/// the handshake is real TLS): what the kubelet's `InsecureSkipVerify` hook client does.
fn unverified_tls_config() -> Arc<rustls::ClientConfig> {
    static CONFIG: std::sync::OnceLock<Arc<rustls::ClientConfig>> = std::sync::OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let config = rustls::ClientConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .expect("ring supports the default protocol versions")
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyServerCertificate(provider)))
                .with_no_client_auth();
            Arc::new(config)
        })
        .clone()
}

#[derive(Debug)]
struct AnyServerCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyServerCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    fn request(path: &str, headers: &[(&str, &str)]) -> Result<HookRequest, HookError> {
        let headers: Vec<(String, String)> = headers
            .iter()
            .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
            .collect();
        HookRequest::new(None, "127.0.0.1", 8080, Some(path), &headers)
    }

    #[test]
    fn crlf_in_the_path_is_encoded_and_never_ends_the_request_line() {
        let built = request("/drain\r\nX-Injected: yes", &[]).expect("encoded, not refused");
        assert_eq!(
            built.uri.path_and_query().expect("target").as_str(),
            "/drain%0D%0AX-Injected:%20yes"
        );
        assert_eq!(request_target(""), "/");
        assert_eq!(request_target("quit?now=1"), "/quit?now=1");
        assert_eq!(request_target("/caf\u{e9}"), "/caf%C3%A9");
    }

    #[test]
    fn crlf_in_a_header_fails_the_hook_with_a_message() {
        let error = request("/", &[("X-Drain", "now\r\nX-Injected: yes")])
            .expect_err("a CR LF value is refused");
        assert!(error.to_string().contains("X-Drain"), "{error}");
        assert!(!error.to_string().contains('\r'), "{error}");
        let error = request("/", &[("X Drain", "now")]).expect_err("a space in a name is refused");
        assert!(
            error.to_string().contains("not a valid HTTP token"),
            "{error}"
        );
    }

    #[test]
    fn schemes_hosts_and_default_headers() {
        let https = HookRequest::new(Some("HTTPS"), "::1", 8443, None, &[]).expect("https");
        assert!(https.tls);
        assert_eq!(https.uri.to_string(), "https://[::1]:8443/");
        assert_eq!(https.host, "::1");
        assert_eq!(https.headers[HOST], "[::1]:8443");
        assert_eq!(https.headers[USER_AGENT], USER_AGENT_VALUE);
        let error = HookRequest::new(Some("FTP"), "10.0.0.1", 21, None, &[]).expect_err("ftp");
        assert!(error.to_string().contains("FTP"), "{error}");
        let error = HookRequest::new(None, "bad host", 80, None, &[]).expect_err("space");
        assert!(matches!(error, HookError::InvalidHttpRequest(_)), "{error}");
        let custom = request("/", &[("Host", "app.example"), ("User-Agent", "mine")]).expect("ok");
        assert_eq!(custom.headers[HOST], "app.example");
        assert_eq!(custom.headers[USER_AGENT], "mine");
    }

    /// Serves one canned `response` on a duplex pipe; returns what the client sent.
    async fn over_pipe(response: &'static [u8]) -> (Result<u16, HookError>, String) {
        let (client, mut server) = tokio::io::duplex(64 * 1024);
        let request = request("/drain", &[("X-Drain", "now")]).expect("request");
        let serve = async move {
            let mut sent = vec![0u8; 4096];
            let read = server.read(&mut sent).await.expect("read");
            server.write_all(response).await.expect("write");
            server.shutdown().await.ok();
            String::from_utf8_lossy(&sent[..read]).into_owned()
        };
        let (outcome, sent) = tokio::join!(exchange(client, &request), serve);
        (outcome, sent)
    }

    #[tokio::test]
    async fn a_2xx_or_3xx_is_success_and_nothing_is_followed() {
        let (outcome, sent) = over_pipe(b"HTTP/1.1 204 No Content\r\n\r\n").await;
        assert_eq!(outcome, Ok(204));
        assert!(sent.starts_with("GET /drain HTTP/1.1\r\n"), "{sent}");
        assert!(
            sent.to_ascii_lowercase().contains("x-drain: now\r\n"),
            "{sent}"
        );
        assert!(
            sent.to_ascii_lowercase()
                .contains("host: 127.0.0.1:8080\r\n"),
            "{sent}"
        );
        let (outcome, _) = over_pipe(
            b"HTTP/1.1 302 Found\r\nLocation: http://elsewhere.invalid/\r\nContent-Length: 0\r\n\r\n",
        )
        .await;
        assert_eq!(outcome, Ok(302));
    }

    #[tokio::test]
    async fn errors_carry_the_status_or_hyper_s_reason_never_response_bytes() {
        let (outcome, _) = over_pipe(b"HTTP/1.1 503 Service Unavailable\r\n\r\n").await;
        let error = outcome.expect_err("5xx fails");
        assert_eq!(
            error.to_string(),
            "http GET http://127.0.0.1:8080/drain: status 503"
        );
        let (outcome, _) = over_pipe(b"\x1b[31mSECRET\r\n\r\nnot http at all").await;
        let error = outcome.expect_err("garbage fails").to_string();
        assert!(
            !error.contains("SECRET") && !error.contains('\u{1b}'),
            "{error}"
        );
        let (outcome, _) = over_pipe(b"").await;
        assert!(outcome.is_err());
    }

    #[tokio::test]
    async fn an_oversized_response_head_fails_instead_of_growing() {
        let (client, mut server) = tokio::io::duplex(64 * 1024);
        let request = request("/", &[]).expect("request");
        let serve = async move {
            let mut sent = vec![0u8; 4096];
            let _ = server.read(&mut sent).await;
            let mut head = b"HTTP/1.1 200 OK\r\n".to_vec();
            for index in 0..10_000 {
                head.extend_from_slice(
                    format!("X-Filler-{index}: {}\r\n", "a".repeat(40)).as_bytes(),
                );
            }
            let _ = server.write_all(&head).await;
        };
        let (outcome, ()) = tokio::join!(exchange(client, &request), serve);
        assert!(outcome.is_err(), "{outcome:?}");
    }

    /// A TLS server with a self-signed certificate no one trusts, answering `status` once.
    async fn self_signed_https_server(status: u16) -> (u16, tokio::task::JoinHandle<String>) {
        let certified = rcgen::generate_simple_self_signed(vec!["pod.invalid".to_owned()])
            .expect("certificate");
        let key = rustls::pki_types::PrivateKeyDer::try_from(certified.signing_key.serialize_der())
            .expect("key");
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(vec![certified.cert.der().clone()], key)
        .expect("server config");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let task = tokio::spawn(async move {
            let (stream, _) = listener.accept().await.expect("accept");
            let mut stream = acceptor.accept(stream).await.expect("handshake");
            let mut sent = vec![0u8; 4096];
            let read = stream.read(&mut sent).await.expect("read");
            let answer = format!("HTTP/1.1 {status} X\r\nContent-Length: 0\r\n\r\n");
            stream.write_all(answer.as_bytes()).await.expect("write");
            stream.shutdown().await.ok();
            String::from_utf8_lossy(&sent[..read]).into_owned()
        });
        (port, task)
    }

    #[tokio::test]
    async fn https_hooks_skip_certificate_verification_as_the_kubelet_does() {
        let (port, server) = self_signed_https_server(200).await;
        let request =
            HookRequest::new(Some("HTTPS"), "127.0.0.1", port, Some("/tls"), &[]).expect("request");
        assert_eq!(get(&request).await, Ok(200));
        assert!(
            server
                .await
                .expect("server")
                .starts_with("GET /tls HTTP/1.1")
        );
        let (port, _server) = self_signed_https_server(500).await;
        let request =
            HookRequest::new(Some("https"), "127.0.0.1", port, None, &[]).expect("request");
        let error = get(&request).await.expect_err("500 fails");
        assert!(error.to_string().ends_with("status 500"), "{error}");
    }

    #[tokio::test]
    async fn plain_http_against_a_listener_and_a_refused_port() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let server = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.expect("accept");
            let mut sent = vec![0u8; 4096];
            let _ = stream.read(&mut sent).await;
            stream
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                .await
                .expect("write");
        });
        let request = HookRequest::new(None, "127.0.0.1", port, None, &[]).expect("request");
        assert_eq!(get(&request).await, Ok(200));
        server.await.expect("server");
        let error = get(&request).await.expect_err("refused");
        assert!(matches!(error, HookError::Http { .. }), "{error}");
    }
}
