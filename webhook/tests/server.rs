//! The HTTPS server in-process: real TLS on loopback, the real router, pods as values. Shows the
//! endpoints answer through TLS 1.2 and 1.3, and that bodies which are malformed, oversize or
//! never finished get a clean answer instead of a panic or a hung connection.

mod support;

use std::time::Duration;

use crr_runtime::server::Limits;
use crr_webhook::routes;
use serde_json::json;
use support::{Served, create_review, response};
use tokio::io::AsyncWriteExt as _;

/// Nothing in these tests may take this long; reaching it means something hung.
const HANG: Duration = Duration::from_secs(20);

#[tokio::test]
async fn create_review_is_patched_over_tls_1_2_and_1_3() {
    let served = Served::start(true, Limits::default()).await;
    for versions in [
        &[&rustls::version::TLS12][..],
        &[&rustls::version::TLS13][..],
    ] {
        let mut connection = served
            .connect(served.client_config(versions))
            .await
            .expect("TLS handshake");
        // Two requests on one keep-alive connection.
        for uid in ["a", "b"] {
            let (status, body) = connection
                .post(routes::MUTATE_CRR, &create_review(uid))
                .await
                .expect("an answer");
            assert_eq!(status, 200);
            let answer = response(&body);
            assert_eq!(answer["uid"], uid);
            assert_eq!(answer["allowed"], true);
            assert_eq!(answer["patchType"], "JSONPatch");
        }
    }
    served.stop().await.expect("drained");
}

#[tokio::test]
async fn validating_endpoint_never_patches_and_feature_gate_denies() {
    let served = Served::start(false, Limits::default()).await;
    let mut connection = served
        .connect(served.client_config(&[&rustls::version::TLS13]))
        .await
        .expect("TLS handshake");
    for path in [routes::MUTATE_CRR, routes::VALIDATE_CRR] {
        let (status, body) = connection
            .post(path, &create_review("gate"))
            .await
            .expect("an answer");
        assert_eq!(status, 200, "{path}");
        let answer = response(&body);
        assert_eq!(answer["allowed"], false, "{path}");
        assert_eq!(answer["status"]["code"], 403, "{path}");
        assert!(answer.get("patch").is_none(), "{path}");
    }
    let metrics = crr_runtime::metrics::encode(&served.registry).expect("metrics");
    assert!(
        metrics.contains("crr_webhook_rejections_total{reason=\"FeatureGateDisabled\"} 2"),
        "{metrics}"
    );
}

#[tokio::test]
async fn malformed_bodies_get_an_invalid_review_not_an_http_error() {
    let served = Served::start(true, Limits::default()).await;
    let mut connection = served
        .connect(served.client_config(&[&rustls::version::TLS13]))
        .await
        .expect("TLS handshake");
    for path in [
        routes::MUTATE_CRR,
        routes::VALIDATE_CRR,
        routes::MUTATE_POD,
        crr_crds::CONVERSION_PATH,
    ] {
        for body in [
            &b"{not json"[..],
            b"",
            b"{\"kind\": \"AdmissionReview\"}",
            b"[1,2,3]",
        ] {
            let (status, answer) = tokio::time::timeout(HANG, connection.post(path, body))
                .await
                .expect("no hang")
                .expect("an answer");
            assert_eq!(status, 200, "{path} {:?}", String::from_utf8_lossy(body));
            let answer: serde_json::Value = serde_json::from_slice(&answer).expect("JSON");
            let result = answer["response"]["status"]["status"]
                .as_str()
                .or_else(|| answer["response"]["result"]["status"].as_str());
            assert_eq!(result, Some("Failure"), "{path}: {answer}");
        }
    }
}

#[tokio::test]
async fn oversize_bodies_are_refused_before_they_are_read() {
    let served = Served::start(true, Limits::default()).await;
    let mut connection = served
        .connect(served.client_config(&[&rustls::version::TLS13]))
        .await
        .expect("TLS handshake");
    let huge = vec![b' '; routes::CRR_BODY_LIMIT + 1];
    let (status, _) = tokio::time::timeout(HANG, connection.post(routes::MUTATE_CRR, &huge))
        .await
        .expect("no hang")
        .expect("an answer");
    assert_eq!(status, 413);
    // The server stays healthy for the next client.
    let mut next = served
        .connect(served.client_config(&[&rustls::version::TLS13]))
        .await
        .expect("TLS handshake");
    let (status, _) = next
        .post(routes::MUTATE_CRR, &create_review("after"))
        .await
        .expect("an answer");
    assert_eq!(status, 200);
}

#[tokio::test]
async fn a_body_that_never_arrives_times_out() {
    let limits = Limits {
        request: Duration::from_millis(300),
        ..Limits::default()
    };
    let served = Served::start(true, limits).await;
    let mut connection = served
        .connect(served.client_config(&[&rustls::version::TLS13]))
        .await
        .expect("TLS handshake");
    let stream = connection.stream.get_mut();
    stream
        .write_all(
            format!(
                "POST {} HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{{\"half",
                routes::MUTATE_CRR
            )
            .as_bytes(),
        )
        .await
        .expect("write");
    stream.flush().await.expect("flush");
    let (status, _) = tokio::time::timeout(HANG, connection.read_response())
        .await
        .expect("no hang")
        .expect("an answer");
    assert_eq!(status, 408);
}

#[tokio::test]
async fn pod_endpoint_adds_the_readiness_gate_to_labelled_pods() {
    let served = Served::start(true, Limits::default()).await;
    let mut connection = served
        .connect(served.client_config(&[&rustls::version::TLS12]))
        .await
        .expect("TLS handshake");
    let review = |labels: serde_json::Value| {
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "p", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": "default", "operation": "CREATE", "userInfo": {},
                "object": {"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"name": "p", "labels": labels},
                           "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
            }
        }))
        .expect("a review")
    };
    let (_, body) = connection
        .post(
            routes::MUTATE_POD,
            &review(json!({crr_crds::keys::LABEL_READINESS_GATE: "true"})),
        )
        .await
        .expect("an answer");
    assert_eq!(response(&body)["patchType"], "JSONPatch");
    let (_, body) = connection
        .post(routes::MUTATE_POD, &review(json!({"app": "web"})))
        .await
        .expect("an answer");
    let answer = response(&body);
    assert_eq!(answer["allowed"], true);
    assert!(answer.get("patch").is_none(), "{answer}");
}

#[tokio::test]
async fn conversion_endpoint_converts_over_tls() {
    let served = Served::start(true, Limits::default()).await;
    let mut connection = served
        .connect(served.client_config(&[&rustls::version::TLS13]))
        .await
        .expect("TLS handshake");
    let review = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
        "request": {"uid": "c", "desiredAPIVersion": "apps.kruise.io/v1alpha1", "objects": [
            {"apiVersion": "apps.kruise.io/v1beta1", "kind": "ContainerRecreateRequest",
             "metadata": {"name": "r", "namespace": "default"},
             "spec": {"podName": "web-0", "containers": [{"name": "app"}]}}
        ]}
    });
    let (status, body) = connection
        .post(
            crr_crds::CONVERSION_PATH,
            &serde_json::to_vec(&review).expect("JSON"),
        )
        .await
        .expect("an answer");
    assert_eq!(status, 200);
    let answer: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
    assert_eq!(answer["response"]["uid"], "c");
    assert_eq!(
        answer["response"]["convertedObjects"][0]["apiVersion"],
        "apps.kruise.io/v1alpha1"
    );
}

#[tokio::test]
async fn shutdown_lets_an_open_connection_finish_and_stops_accepting() {
    let served = Served::start(true, Limits::default()).await;
    let address = served.address;
    let mut connection = served
        .connect(served.client_config(&[&rustls::version::TLS13]))
        .await
        .expect("TLS handshake");
    let (status, _) = connection
        .post(routes::MUTATE_CRR, &create_review("before"))
        .await
        .expect("an answer");
    assert_eq!(status, 200);
    tokio::time::timeout(HANG, served.stop())
        .await
        .expect("drain returns")
        .expect("drained");
    assert!(
        tokio::net::TcpStream::connect(address).await.is_err(),
        "the listener is closed after shutdown"
    );
}

#[tokio::test]
async fn a_list_of_5000_retained_v1alpha1_requests_converts_in_one_review() {
    let served = Served::start(true, Limits::default()).await;
    let mut connection = served
        .connect(served.client_config(&[&rustls::version::TLS13]))
        .await
        .expect("TLS handshake");
    let objects: Vec<_> = (0..5000).map(support::retained_v1alpha1).collect();
    let review = serde_json::to_vec(&json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
        "request": {"uid": "list", "desiredAPIVersion": "apps.kruise.io/v1beta1", "objects": objects}
    }))
    .expect("JSON");
    assert!(
        review.len() < routes::CONVERT_BODY_LIMIT,
        "{} bytes",
        review.len()
    );
    let (status, body) =
        tokio::time::timeout(HANG, connection.post(crr_crds::CONVERSION_PATH, &review))
            .await
            .expect("no hang")
            .expect("an answer");
    assert_eq!(status, 200);
    let answer: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
    assert_eq!(
        answer["response"]["result"]["status"], "Success",
        "{}",
        answer["response"]["result"]
    );
    let converted = answer["response"]["convertedObjects"]
        .as_array()
        .expect("converted objects");
    assert_eq!(converted.len(), 5000);
    for (index, object) in converted.iter().enumerate() {
        assert_eq!(object["apiVersion"], "apps.kruise.io/v1beta1");
        assert_eq!(object["metadata"]["name"], format!("web-{index}-recreate"));
    }
    // The legacy annotation became the typed snapshot.
    assert_eq!(
        converted[4999]["status"]["containerStatusSnapshot"][0]["containerID"],
        "containerd://aaaa"
    );
}

#[tokio::test]
async fn each_endpoint_has_its_own_body_limit() {
    let served = Served::start(true, Limits::default()).await;
    let mut connection = served
        .connect(served.client_config(&[&rustls::version::TLS13]))
        .await
        .expect("TLS handshake");
    // A 1 MiB pod (a big annotation) is a pod the API server stores; its review is admitted.
    let big_pod = serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "big", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "default", "operation": "CREATE", "userInfo": {},
            "object": {"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": "p", "labels": {crr_crds::keys::LABEL_READINESS_GATE: "true"},
                                    "annotations": {"big": "x".repeat(1024 * 1024)}},
                       "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
        }
    }))
    .expect("JSON");
    let (status, body) = connection
        .post(routes::MUTATE_POD, &big_pod)
        .await
        .expect("an answer");
    assert_eq!(status, 200);
    assert_eq!(response(&body)["patchType"], "JSONPatch");
    // The same size is far beyond any CRR: refused before it is read.
    let (status, _) = connection
        .post(routes::MUTATE_CRR, &big_pod)
        .await
        .expect("an answer");
    assert_eq!(status, 413);
}

#[tokio::test]
async fn the_largest_body_of_each_endpoint_is_answered() {
    let served = Served::start(true, Limits::default()).await;
    let mut connection = served
        .connect(served.client_config(&[&rustls::version::TLS13]))
        .await
        .expect("TLS handshake");
    for (path, body) in support::largest_bodies() {
        let (status, answer) = tokio::time::timeout(HANG, connection.post(path, &body))
            .await
            .expect("no hang")
            .unwrap_or_else(|error| panic!("{path}, {} bytes: {error}", body.len()));
        assert_eq!(status, 200, "{path}: {} bytes", body.len());
        let answer: serde_json::Value = serde_json::from_slice(&answer).expect("JSON");
        let allowed_or_converted = answer["response"]["allowed"] == true
            || answer["response"]["result"]["status"] == "Success";
        assert!(allowed_or_converted, "{path}: {}", answer["response"]);
    }
}

/// Slow-loris: more connections than there are admission slots, each trickling a review body
/// one byte at a time. Bodies are read before a slot is taken, so none of them holds one: a
/// real review on a fresh connection is answered at once, and each trickler is cut off with 408
/// when its body's deadline passes.
#[tokio::test]
async fn trickling_bodies_hold_no_slot_and_a_real_review_is_answered() {
    let served = Served::start(true, Limits::default()).await;
    let review = create_review("trickled");
    let mut tricklers = Vec::new();
    for _ in 0..(routes::ADMISSION_CONCURRENCY * 3) {
        let mut connection = served
            .connect(served.client_config(&[&rustls::version::TLS13]))
            .await
            .expect("TLS handshake");
        let head = format!(
            "POST {} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            routes::MUTATE_CRR,
            review.len()
        );
        let stream = connection.stream.get_mut();
        stream.write_all(head.as_bytes()).await.expect("headers");
        stream.write_all(&review[..1]).await.expect("a first byte");
        stream.flush().await.expect("flush");
        tricklers.push(connection);
    }
    let trickled = tokio::spawn(async move {
        // One more byte a second on every connection, until the server cuts them off.
        let mut statuses = Vec::new();
        for mut connection in tricklers {
            let stream = connection.stream.get_mut();
            let _ = stream.write_all(b" ").await;
            let _ = stream.flush().await;
            statuses.push(connection);
        }
        let mut answers = Vec::new();
        for mut connection in statuses {
            let answer = tokio::time::timeout(HANG, connection.read_response()).await;
            answers.push(answer.ok().and_then(Result::ok).map(|(status, _)| status));
        }
        answers
    });
    let started = std::time::Instant::now();
    let mut connection = served
        .connect(served.client_config(&[&rustls::version::TLS13]))
        .await
        .expect("TLS handshake");
    let (status, body) = tokio::time::timeout(HANG, connection.post(routes::MUTATE_CRR, &review))
        .await
        .expect("no hang")
        .expect("an answer");
    assert_eq!(status, 200);
    assert_eq!(response(&body)["allowed"], true);
    assert!(
        started.elapsed() < routes::ADMISSION_BODY_DEADLINE,
        "the real review waited for the tricklers: {:?}",
        started.elapsed()
    );
    let answers = trickled.await.expect("tricklers");
    assert!(
        answers.iter().all(|status| *status == Some(408)),
        "every trickler is cut off with 408: {answers:?}"
    );
}

/// With a client CA, admission calls must present a certificate it signed: a direct call
/// without one gets 403 before its body is read; a certificate from another CA fails the
/// handshake; the API server's certificate is answered. Conversion, for which the API server
/// presents no certificate, is served without one.
#[tokio::test]
async fn with_a_client_ca_only_the_api_servers_certificate_gets_admission_answers() {
    let (client_ca, client_cert, client_key) = support::client_identity();
    let served = Served::start_with_client_ca(true, Limits::default(), Some(&client_ca)).await;
    let review = create_review("mtls");

    let mut anonymous = served
        .connect(served.client_config(&[&rustls::version::TLS13]))
        .await
        .expect("TLS handshake without a certificate");
    let (status, body) = anonymous
        .post(routes::MUTATE_CRR, &review)
        .await
        .expect("an answer");
    assert_eq!(status, 403, "{}", String::from_utf8_lossy(&body));
    assert!(
        !String::from_utf8_lossy(&body).contains("containerd://"),
        "nothing of the pod in the refusal"
    );
    let (status, _) = anonymous
        .post(routes::MUTATE_POD, b"{}")
        .await
        .expect("an answer");
    assert_eq!(status, 403, "the pod hook too");
    let conversion = serde_json::to_vec(&json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
        "request": {"uid": "c", "desiredAPIVersion": "apps.kruise.io/v1beta1", "objects": []}
    }))
    .unwrap();
    let (status, _) = anonymous
        .post(crr_crds::CONVERSION_PATH, &conversion)
        .await
        .expect("an answer");
    assert_eq!(status, 200, "conversion needs no certificate");

    let (other_ca, other_cert, other_key) = support::client_identity();
    let stranger = served
        .connect(support::client_config_with_identity(
            &served.bundle.ca_pem,
            &other_cert,
            &other_key,
        ))
        .await;
    let refused = match stranger {
        Err(_) => true,
        Ok(mut connection) => connection.post(routes::MUTATE_CRR, &review).await.is_err(),
    };
    assert!(
        refused,
        "a certificate of another CA ({}) is refused",
        other_ca.len()
    );

    let mut api_server = served
        .connect(support::client_config_with_identity(
            &served.bundle.ca_pem,
            &client_cert,
            &client_key,
        ))
        .await
        .expect("TLS handshake with the API server's certificate");
    let (status, body) = api_server
        .post(routes::MUTATE_CRR, &review)
        .await
        .expect("an answer");
    assert_eq!(status, 200);
    assert_eq!(response(&body)["allowed"], true);
}
