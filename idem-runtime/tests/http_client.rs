//! The reqwest client side of `http`: a request sent inside a side effect carries the call's key
//! as `Idempotency-Key` (draft-09: an sf-string), and each way a request can fail is classified
//! for the retry policy, against a local axum server.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, post};
use idem_runtime::http::{HttpError, IdempotentRequest, current_key};
use idem_runtime::{Classify, Failure, Idem, IdempotencyKey, MemoryStore, Tool};
use serde::Deserialize;

/// What the server saw: the `Idempotency-Key` of each request, in order.
type Seen = Arc<Mutex<Vec<Option<String>>>>;

#[derive(Deserialize)]
struct Answer {
    retry_after: Option<String>,
}

async fn status(
    State(seen): State<Seen>,
    Path(code): Path<u16>,
    Query(answer): Query<Answer>,
    headers: HeaderMap,
) -> Response {
    let key = headers
        .get("idempotency-key")
        .map(|v| v.to_str().unwrap().to_owned());
    seen.lock().unwrap().push(key.clone());
    let mut response =
        (StatusCode::from_u16(code).unwrap(), key.unwrap_or_default()).into_response();
    if let Some(after) = answer.retry_after {
        response
            .headers_mut()
            .insert("retry-after", HeaderValue::try_from(after).unwrap());
    }
    response
}

/// Answers 503 with `Retry-After: 0` to the first request, 200 to the others.
async fn flaky(State(seen): State<Seen>, headers: HeaderMap) -> Response {
    let key = headers
        .get("idempotency-key")
        .map(|v| v.to_str().unwrap().to_owned());
    let mut seen = seen.lock().unwrap();
    seen.push(key);
    if seen.len() == 1 {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [("retry-after", "0")],
            "busy",
        )
            .into_response();
    }
    (StatusCode::OK, "done").into_response()
}

struct Server {
    base: String,
    seen: Seen,
}

async fn server() -> Server {
    let seen = Seen::default();
    let app = Router::new()
        .route("/status/{code}", any(status))
        .route("/flaky", post(flaky))
        .route("/hang", post(std::future::pending::<()>))
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Server { base, seen }
}

#[derive(Debug)]
enum CallError {
    Http(HttpError),
    /// Sent, but the answer was lost.
    Lost,
    Idem(#[allow(dead_code)] idem_runtime::Error),
}

impl From<HttpError> for CallError {
    fn from(e: HttpError) -> Self {
        CallError::Http(e)
    }
}

impl From<idem_runtime::Error> for CallError {
    fn from(e: idem_runtime::Error) -> Self {
        CallError::Idem(e)
    }
}

impl Classify for CallError {
    fn classify(&self) -> Failure {
        match self {
            CallError::Http(e) => e.classify(),
            CallError::Lost => Failure::Ambiguous,
            CallError::Idem(_) => Failure::Permanent,
        }
    }
}

/// Sends `POST url` once, from inside a side effect of one attempt: what came back as text.
async fn send_once(http: &reqwest::Client, url: &str) -> Result<String, CallError> {
    let idem = Idem::new(MemoryStore::new());
    Tool::new("send")
        .idem(&idem)
        .max_attempts(1)
        .side_effect(&[("url", &url)], &(), |_key| {
            let sent = http.post(url).send_idempotent();
            async move { Ok(sent.await?.text().await.map_err(HttpError::from)?) }
        })
        .await
}

fn failure_of(result: Result<String, CallError>) -> Failure {
    match result {
        Err(e @ CallError::Http(_)) => e.classify(),
        other => panic!("expected an HTTP failure, got {other:?}"),
    }
}

#[tokio::test]
async fn a_request_inside_a_side_effect_carries_the_calls_key_as_an_sf_string() {
    let server = server().await;
    let http = reqwest::Client::new();
    let url = format!("{}/status/200", server.base);
    let echoed = send_once(&http, &url).await.unwrap();
    let key = IdempotencyKey::derive("send", &[("url", &url.as_str())]);
    assert_eq!(echoed, format!("\"{key}\""));
    assert_eq!(*server.seen.lock().unwrap(), [Some(format!("\"{key}\""))]);
}

#[tokio::test]
async fn a_key_the_tool_set_is_replaced_not_doubled() {
    let server = server().await;
    let http = reqwest::Client::new();
    let url = format!("{}/status/200", server.base);
    let idem = Idem::new(MemoryStore::new());
    let echoed: Result<String, CallError> = Tool::new("send")
        .idem(&idem)
        .side_effect(&[("n", &1u8)], &(), |key| {
            let sent = http
                .post(&url)
                .header("Idempotency-Key", "minted-by-hand")
                .send_idempotent();
            async move {
                let text = sent.await?.text().await.map_err(HttpError::from)?;
                Ok(format!("{key}|{text}"))
            }
        })
        .await;
    let (key, text) = echoed.as_ref().unwrap().split_once('|').unwrap();
    assert_eq!(text, format!("\"{key}\""));
}

#[tokio::test]
async fn outside_any_side_effect_nothing_is_sent_and_the_error_says_so() {
    let server = server().await;
    let http = reqwest::Client::new();
    assert_eq!(current_key(), None);
    let err = http
        .post(format!("{}/status/200", server.base))
        .send_idempotent()
        .await
        .unwrap_err();
    assert!(matches!(err, HttpError::NoCall), "{err:?}");
    assert_eq!(err.classify(), Failure::Permanent);
    assert!(err.to_string().contains("outside any side effect"));
    assert!(server.seen.lock().unwrap().is_empty());
}

#[tokio::test]
async fn an_explicit_key_is_sent_quoted_outside_any_call() {
    let server = server().await;
    let key = IdempotencyKey::derive("charge", &[("order", &7u32)]);
    let text = reqwest::Client::new()
        .post(format!("{}/status/200", server.base))
        .idempotency_key(&key)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(text, format!("\"{key}\""));
}

#[tokio::test]
async fn connection_refused_before_sending_is_transient() {
    // Port 1 on loopback: nothing listens there (a port freed by another test could be taken
    // again by a parallel one).
    let failure = failure_of(send_once(&reqwest::Client::new(), "http://127.0.0.1:1/x").await);
    assert_eq!(failure, Failure::Transient);
}

#[tokio::test]
async fn a_timeout_after_sending_is_ambiguous() {
    let server = server().await;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let failure = failure_of(send_once(&http, &format!("{}/hang", server.base)).await);
    assert_eq!(failure, Failure::Ambiguous);
}

#[tokio::test]
async fn a_connection_closed_after_sending_is_ambiguous() {
    // Reads the request, then closes the connection without an answer.
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        use std::io::Read;
        let (mut socket, _) = listener.accept().unwrap();
        let mut buf = [0u8; 4096];
        let _ = socket.read(&mut buf);
        drop(socket);
    });
    let failure = failure_of(send_once(&reqwest::Client::new(), &format!("http://{addr}/x")).await);
    assert_eq!(failure, Failure::Ambiguous);
}

#[tokio::test]
async fn each_status_is_classified_as_the_draft_and_stripe_say() {
    let server = server().await;
    let http = reqwest::Client::new();
    let cases: &[(&str, Failure)] = &[
        (
            "429?retry_after=3",
            Failure::RetryAfter(Duration::from_secs(3)),
        ),
        ("429", Failure::Transient),
        (
            "503?retry_after=2",
            Failure::RetryAfter(Duration::from_secs(2)),
        ),
        ("503", Failure::Transient),
        ("409", Failure::Ambiguous),
        (
            "409?retry_after=1",
            Failure::RetryAfter(Duration::from_secs(1)),
        ),
        ("422", Failure::Permanent),
        ("400", Failure::Permanent),
        ("404", Failure::Permanent),
        ("500", Failure::Ambiguous),
        ("502", Failure::Ambiguous),
        ("504", Failure::Ambiguous),
        ("501", Failure::Permanent),
    ];
    for (path, expected) in cases {
        let result = send_once(&http, &format!("{}/status/{path}", server.base)).await;
        assert_eq!(failure_of(result), *expected, "status {path}");
    }
}

#[tokio::test]
async fn a_422_is_surfaced_as_key_reuse() {
    let server = server().await;
    let url = format!("{}/status/422", server.base);
    let Err(CallError::Http(err)) = send_once(&reqwest::Client::new(), &url).await else {
        panic!("expected a 422")
    };
    let HttpError::KeyReuse { key, .. } = &err else {
        panic!("expected KeyReuse, got {err:?}")
    };
    assert_eq!(
        *key,
        IdempotencyKey::derive("send", &[("url", &url.as_str())])
    );
    assert!(err.to_string().contains("another payload"), "{err}");
}

#[tokio::test]
async fn a_503_with_retry_after_is_retried_with_the_same_key_and_succeeds() {
    let server = server().await;
    let http = reqwest::Client::new();
    let idem = Idem::new(MemoryStore::new());
    let url = format!("{}/flaky", server.base);
    let result: Result<String, CallError> = Tool::new("flaky")
        .idem(&idem)
        .max_attempts(3)
        .side_effect(&[("n", &1u8)], &(), |_key| {
            let sent = http.post(&url).send_idempotent();
            async move { Ok(sent.await?.text().await.map_err(HttpError::from)?) }
        })
        .await;
    assert_eq!(result.unwrap(), "done");
    let seen = server.seen.lock().unwrap().clone();
    let key = IdempotencyKey::derive("flaky", &[("n", &1u8)]);
    assert_eq!(
        seen,
        [Some(format!("\"{key}\"")), Some(format!("\"{key}\""))]
    );
}

#[tokio::test]
async fn a_boxed_error_holding_an_http_error_classifies_as_it() {
    let server = server().await;
    let url = format!("{}/status/503?retry_after=4", server.base);
    let Err(CallError::Http(err)) = send_once(&reqwest::Client::new(), &url).await else {
        panic!("expected a 503")
    };
    let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(err);
    assert_eq!(
        boxed.classify(),
        Failure::RetryAfter(Duration::from_secs(4))
    );
}

/// A verified tool (`Tool::verify`, S19) that charges `customer` through `url`: its closure
/// builds the request before its future is polled, as `send_once` does.
async fn verified_charge(
    http: &reqwest::Client,
    url: &str,
    customer: &str,
) -> Result<String, CallError> {
    Tool::new("charge_verified")
        .max_attempts(1)
        .resend(false)
        .verify(|_key| async { Ok(idem_runtime::Verified::NotApplied) })
        .side_effect(&[("customer", &customer)], &(), |_key| {
            let sent = http.post(url).send_idempotent();
            async move { Ok(sent.await?.text().await.map_err(HttpError::from)?) }
        })
        .await
}

/// S26 (issue 40 #4): `Tool::verify(..).side_effect(..)` makes the call's key current while
/// its closure makes the attempt, as `Tool::side_effect` does: a request built there is keyed
/// (it was `HttpError::NoCall`).
#[tokio::test]
async fn s26_a_verified_tools_closure_sends_under_the_calls_key() {
    let server = server().await;
    let http = reqwest::Client::new();
    let url = format!("{}/status/200", server.base);
    let idem = Idem::new(MemoryStore::new());
    let echoed = idem
        .scope(verified_charge(&http, &url, "cus_a"))
        .await
        .unwrap();
    let key = IdempotencyKey::derive("charge_verified", &[("customer", &"cus_a")]);
    assert_eq!(echoed, format!("\"{key}\""));
}

/// S26 (issue 40 #4): verified calls inside another call's body (as every handler behind the
/// layer is) each send under their own key, never the outer call's: two customers, two keys,
/// each record its own receipt.
#[tokio::test]
async fn s26_verified_calls_nested_in_another_call_send_under_their_own_keys() {
    let server = server().await;
    let http = reqwest::Client::new();
    let url = format!("{}/status/200", server.base);
    let idem = Idem::new(MemoryStore::new());
    let (a, b) = idem
        .scope(async {
            Tool::new("outer")
                .max_attempts(1)
                .side_effect(&[("batch", &1u32)], &(), |_key| async {
                    let a = verified_charge(&http, &url, "cus_a").await?;
                    let b = verified_charge(&http, &url, "cus_b").await?;
                    Ok::<_, CallError>((a, b))
                })
                .await
        })
        .await
        .unwrap();
    let key_a = IdempotencyKey::derive("charge_verified", &[("customer", &"cus_a")]);
    let key_b = IdempotencyKey::derive("charge_verified", &[("customer", &"cus_b")]);
    assert_eq!(
        *server.seen.lock().unwrap(),
        [Some(format!("\"{key_a}\"")), Some(format!("\"{key_b}\""))]
    );
    assert_eq!((a, b), (format!("\"{key_a}\""), format!("\"{key_b}\"")));
    // Each record holds its own receipt: a repeat of cus_b replays cus_b's.
    let again = idem
        .scope(verified_charge(&http, &url, "cus_b"))
        .await
        .unwrap();
    assert_eq!(again, format!("\"{key_b}\""));
    assert_eq!(server.seen.lock().unwrap().len(), 2, "replayed, not sent");
}

/// S26: the verify function runs with its call's key current, both where its future is made
/// and while it is polled, also inside another call's body.
#[tokio::test]
async fn s26_a_verify_function_sees_its_calls_key() {
    let idem = Idem::new(MemoryStore::new());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let inner = || {
        let seen = Arc::clone(&seen);
        Tool::new("notify")
            .max_attempts(1)
            .resend(false)
            .verify(move |key| {
                let made = current_key();
                let seen = Arc::clone(&seen);
                async move {
                    seen.lock().unwrap().push((key, made, current_key()));
                    Ok(idem_runtime::Verified::Applied(7u32))
                }
            })
            .side_effect(&[("order", &"ord_1")], &(), |_key| async {
                Err::<u32, _>(CallError::Lost)
            })
    };
    let outer = Tool::new("outer_verify").max_attempts(1).side_effect(
        &[("batch", &2u32)],
        &(),
        |_key| async { inner().await },
    );
    let got: Result<u32, CallError> = idem.scope(outer).await;
    assert_eq!(got.unwrap(), 7);
    let key = IdempotencyKey::derive("notify", &[("order", &"ord_1")]);
    assert_eq!(*seen.lock().unwrap(), [(key, Some(key), Some(key))]);
}
