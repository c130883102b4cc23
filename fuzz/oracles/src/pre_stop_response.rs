//! `pre_stop_response`: the node daemon's preStop `httpGet` (`crr_node_daemon::http_hook`)
//! reading whatever a pod answers.
//!
//! The bytes are the server's side of the connection, written after the request is read; a
//! structured input also varies the handler (scheme, host, path and headers with any text).
//! Oracles besides "never panics": a request that builds has a request target and headers free
//! of CR, LF and other control bytes (no injection); the exchange ends (the pipe closes); `Ok`
//! only for a status in 200..400; an error's text has no control characters (it is the URL we
//! built plus a status code or hyper's own message; `http_hook`'s unit tests check that response
//! text does not reach it).

use arbitrary::{Arbitrary, Unstructured};
use crr_node_daemon::http_hook::{self, HookRequest};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

#[derive(Arbitrary, Debug)]
pub struct Handler {
    pub https: Option<bool>,
    pub host: Option<String>,
    pub port: u16,
    pub path: Option<String>,
    pub headers: Vec<(String, String)>,
}

fn check_request(request: &HookRequest) {
    let target = request.uri.path_and_query().map_or("/", |p| p.as_str());
    assert!(target.starts_with('/'), "target {target:?}");
    assert!(
        !target
            .bytes()
            .any(|byte| byte.is_ascii_control() || byte == b' '),
        "target {target:?}"
    );
    for (name, value) in &request.headers {
        assert!(!name.as_str().bytes().any(|byte| byte.is_ascii_control()));
        assert!(
            !value
                .as_bytes()
                .iter()
                .any(|byte| *byte == b'\r' || *byte == b'\n'),
            "{name}: {value:?}"
        );
    }
}

fn check_exchange(request: &HookRequest, response: &[u8]) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let response = response.to_vec();
    let outcome = runtime.block_on(async {
        let (client, mut server) = tokio::io::duplex(8 * 1024);
        let serve = async move {
            let mut sent = vec![0u8; 8 * 1024];
            let _ = server.read(&mut sent).await;
            let _ = server.write_all(&response).await;
            let _ = server.shutdown().await;
        };
        let (outcome, ()) = tokio::join!(http_hook::exchange(client, request), serve);
        outcome
    });
    match outcome {
        Ok(status) => assert!((200..400).contains(&status), "status {status}"),
        Err(error) => {
            let text = error.to_string();
            assert!(!text.chars().any(char::is_control), "{text:?}");
        }
    }
}

pub fn run(data: &[u8]) {
    let plain = HookRequest::new(None, "127.0.0.1", 8080, Some("/drain"), &[]).expect("request");
    check_exchange(&plain, data);
    let mut input = Unstructured::new(data);
    let Ok(handler) = Handler::arbitrary(&mut input) else {
        return;
    };
    let scheme = handler
        .https
        .map(|https| if https { "HTTPS" } else { "HTTP" });
    let host = handler.host.as_deref().unwrap_or("10.0.0.1");
    if let Ok(request) = HookRequest::new(
        scheme,
        host,
        handler.port,
        handler.path.as_deref(),
        &handler.headers,
    ) {
        check_request(&request);
        check_exchange(&request, input.take_rest());
    }
}
