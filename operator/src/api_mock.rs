//! A scripted API server for the unit tests of every wing (tower-test mock): each step checks
//! method and path and answers as the API server would.

use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};

/// The test's side of the mocked API server.
pub type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

/// A client that talks to the returned handle.
pub fn client() -> (Client, Handle) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    (Client::new(service, "default"), handle)
}

/// A response with `body` as JSON.
pub fn respond(status: StatusCode, body: &impl serde::Serialize) -> Response<Body> {
    Response::builder()
        .status(status)
        .body(Body::from(serde_json::to_vec(body).expect("serializable")))
        .expect("response")
}

/// Checks that no further call comes (within 50 ms).
pub async fn expect_nothing_more(handle: &mut Handle) {
    let next = tokio::time::timeout(Duration::from_millis(50), handle.next_request()).await;
    assert!(
        !matches!(next, Ok(Some(_))),
        "no further API call was expected"
    );
}

/// A `Status` failure as the API server sends it.
pub fn api_status(code: u16, reason: &str) -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": reason, "reason": reason, "code": code,
    })
}

/// Takes the next request, checks method and path, returns its JSON body and the responder.
pub async fn expect(
    handle: &mut Handle,
    method: Method,
    path: &str,
) -> (Value, tower_test::mock::SendResponse<Response<Body>>) {
    let (request, send) = tokio::time::timeout(Duration::from_secs(5), handle.next_request())
        .await
        .unwrap_or_else(|_| panic!("no request; expected {method} {path}"))
        .expect("service dropped");
    assert_eq!(request.method(), method, "method of the request to {path}");
    assert_eq!(request.uri().path(), path);
    let bytes = request
        .into_body()
        .collect_bytes()
        .await
        .expect("request body");
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).expect("JSON request body")
    };
    (body, send)
}
