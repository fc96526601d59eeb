//! The tower side of `http`: an axum app behind `IdempotencyLayer`, driven by a real HTTP client
//! (reqwest) through each case of the Idempotency-Key draft (draft-09), and in process (tower's
//! `oneshot`, tokio's clock paused) through the lease cases: a slow handler keeps its key, a
//! crashed one's key is taken over once its lease ends.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Extension, State};
use axum::http::{Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use idem_runtime::http::{IdempotencyLayer, REPLAYED};
use idem_runtime::store::RecordState;
use idem_runtime::{Idem, IdempotencyKey, MemoryStore, Records};
use tokio::sync::{Notify, watch};
use tower::ServiceExt;

/// The handler's side: how many times it ran, and gates for the slow route.
struct Handler {
    runs: AtomicU32,
    /// Notified when the slow route has started.
    entered: Notify,
    /// The slow route answers once this is true (every run waiting, a crashed one's too, sees it).
    release: watch::Sender<bool>,
    /// The route `/flaky` answers 503 while this is above zero.
    unavailable: AtomicU32,
}

impl Default for Handler {
    fn default() -> Self {
        Handler {
            runs: AtomicU32::new(0),
            entered: Notify::new(),
            release: watch::channel(false).0,
            unavailable: AtomicU32::new(0),
        }
    }
}

type Shared = Arc<Handler>;

/// `201`, `Location`, an unstored header, and the request echoed with the run's number.
async fn charge(
    State(h): State<Shared>,
    key: Option<Extension<IdempotencyKey>>,
    body: Bytes,
) -> Response {
    let n = h.runs.fetch_add(1, SeqCst) + 1;
    let key = key
        .map(|Extension(key)| key.to_string())
        .unwrap_or_default();
    let body = format!(
        r#"{{"charge":{n},"key":"{key}","request":{}}}"#,
        String::from_utf8_lossy(&body)
    );
    (
        StatusCode::CREATED,
        [
            ("content-type", "application/json"),
            ("location", "/v1/charges/ch_1"),
            ("x-per-response", "not stored"),
        ],
        body,
    )
        .into_response()
}

async fn slow(State(h): State<Shared>) -> Response {
    let mut released = h.release.subscribe();
    h.entered.notify_one();
    released.wait_for(|r| *r).await.unwrap();
    let n = h.runs.fetch_add(1, SeqCst) + 1;
    format!("slow {n}").into_response()
}

async fn flaky(State(h): State<Shared>) -> Response {
    if h.unavailable.load(SeqCst) > 0 {
        h.unavailable.fetch_sub(1, SeqCst);
        return (StatusCode::SERVICE_UNAVAILABLE, "try again").into_response();
    }
    let n = h.runs.fetch_add(1, SeqCst) + 1;
    format!("flaky {n}").into_response()
}

/// A body that is not UTF-8 (stored as hex).
async fn binary(State(h): State<Shared>) -> Vec<u8> {
    let n = h.runs.fetch_add(1, SeqCst) as u8;
    vec![0xff, 0x00, 0xfe, n]
}

fn app(layer: IdempotencyLayer, h: &Shared) -> Router {
    Router::new()
        .route("/v1/charges", post(charge))
        .route("/v1/refunds", post(charge))
        .route("/slow", post(slow))
        .route("/flaky", post(flaky))
        .route("/binary", post(binary))
        .layer(layer)
        .with_state(h.clone())
}

struct Served {
    base: String,
    handler: Shared,
    store: Arc<MemoryStore>,
    http: reqwest::Client,
}

fn layer_on(store: &Arc<MemoryStore>) -> IdempotencyLayer {
    IdempotencyLayer::new(Idem::builder().shared_store(store.clone()).build().unwrap())
}

async fn serve(configure: impl FnOnce(IdempotencyLayer) -> IdempotencyLayer) -> Served {
    let store = Arc::new(MemoryStore::new());
    let handler = Shared::default();
    let app = app(configure(layer_on(&store)), &handler);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Served {
        base,
        handler,
        store,
        http: reqwest::Client::new(),
    }
}

impl Served {
    async fn post(&self, path: &str, key: Option<&str>, body: &str) -> reqwest::Response {
        let mut request = self
            .http
            .post(format!("{}{path}", self.base))
            .body(body.to_owned());
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        request.send().await.unwrap()
    }

    fn runs(&self) -> u32 {
        self.handler.runs.load(SeqCst)
    }
}

fn replayed(response: &reqwest::Response) -> bool {
    response
        .headers()
        .get(REPLAYED)
        .is_some_and(|v| v == "true")
}

#[tokio::test]
async fn draft_first_request_runs_the_handler_and_its_response_goes_out_whole() {
    let s = serve(|l| l).await;
    let first = s
        .post("/v1/charges", Some(r#""k-1""#), r#"{"cents":42}"#)
        .await;
    assert_eq!(first.status(), StatusCode::CREATED);
    assert!(!replayed(&first));
    assert_eq!(first.headers()["location"], "/v1/charges/ch_1");
    assert_eq!(first.headers()["x-per-response"], "not stored");
    let key = IdempotencyKey::derive("http", &[("idempotency_key", &"k-1")]);
    assert_eq!(
        first.text().await.unwrap(),
        format!(r#"{{"charge":1,"key":"{key}","request":{{"cents":42}}}}"#)
    );
    assert_eq!(s.runs(), 1);
}

#[tokio::test]
async fn draft_a_repeat_gets_the_stored_response_marked_as_a_replay() {
    let s = serve(|l| l).await;
    let first = s
        .post("/v1/charges", Some(r#""k-1""#), r#"{"cents":42}"#)
        .await;
    let first_body = first.text().await.unwrap();
    for _ in 0..2 {
        let again = s
            .post("/v1/charges", Some(r#""k-1""#), r#"{"cents":42}"#)
            .await;
        assert_eq!(again.status(), StatusCode::CREATED);
        assert!(replayed(&again));
        assert_eq!(again.headers()["content-type"], "application/json");
        assert_eq!(again.headers()["location"], "/v1/charges/ch_1");
        assert!(
            again.headers().get("x-per-response").is_none(),
            "only chosen headers are stored"
        );
        assert_eq!(again.text().await.unwrap(), first_body);
    }
    assert_eq!(s.runs(), 1);
}

#[tokio::test]
async fn draft_a_bare_token_key_works_like_its_quoted_form() {
    let s = serve(|l| l).await;
    s.post("/v1/charges", Some("k-1"), "{}").await;
    let again = s.post("/v1/charges", Some(r#""k-1""#), "{}").await;
    assert!(replayed(&again));
    assert_eq!(s.runs(), 1);
}

#[tokio::test]
async fn a_body_that_is_not_utf8_is_replayed_byte_for_byte() {
    let s = serve(|l| l).await;
    let first = s
        .post("/binary", Some("\"b\""), "")
        .await
        .bytes()
        .await
        .unwrap();
    let again = s.post("/binary", Some("\"b\""), "").await;
    assert!(replayed(&again));
    assert_eq!(first.as_ref(), [0xff, 0x00, 0xfe, 0x00]);
    assert_eq!(again.bytes().await.unwrap(), first);
}

#[tokio::test]
async fn draft_the_same_key_with_another_payload_is_422() {
    let s = serve(|l| l).await;
    s.post("/v1/charges", Some(r#""k-1""#), r#"{"cents":42}"#)
        .await;
    for (path, body) in [
        ("/v1/charges", r#"{"cents":43}"#),
        ("/v1/refunds", r#"{"cents":42}"#),
    ] {
        let reused = s.post(path, Some(r#""k-1""#), body).await;
        assert_eq!(
            reused.status(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "{path} {body}"
        );
        assert_eq!(reused.headers()["content-type"], "application/problem+json");
        assert!(!replayed(&reused));
    }
    assert_eq!(s.runs(), 1);
}

#[tokio::test]
async fn draft_the_same_key_while_the_first_is_in_flight_is_409() {
    let s = serve(|l| l).await;
    let first = {
        let (http, url) = (s.http.clone(), format!("{}/slow", s.base));
        tokio::spawn(async move {
            http.post(url)
                .header("Idempotency-Key", "\"k\"")
                .send()
                .await
        })
    };
    s.handler.entered.notified().await;
    let second = s.post("/slow", Some("\"k\""), "").await;
    assert_eq!(second.status(), StatusCode::CONFLICT);
    assert_eq!(second.headers()["content-type"], "application/problem+json");
    s.handler.release.send_replace(true);
    let first = first.await.unwrap().unwrap();
    assert_eq!(first.text().await.unwrap(), "slow 1");
    let third = s.post("/slow", Some("\"k\""), "").await;
    assert!(replayed(&third));
    assert_eq!(third.text().await.unwrap(), "slow 1");
    assert_eq!(s.runs(), 1);
}

#[tokio::test]
async fn with_an_in_flight_wait_a_repeat_waits_for_the_first_and_gets_its_response() {
    let s = serve(|l| l.in_flight_wait(Duration::from_secs(60))).await;
    let first = {
        let (http, url) = (s.http.clone(), format!("{}/slow", s.base));
        tokio::spawn(async move {
            http.post(url)
                .header("Idempotency-Key", "\"k\"")
                .send()
                .await
        })
    };
    s.handler.entered.notified().await;
    let second = {
        let (http, url) = (s.http.clone(), format!("{}/slow", s.base));
        tokio::spawn(async move {
            http.post(url)
                .header("Idempotency-Key", "\"k\"")
                .send()
                .await
        })
    };
    // The second is waiting (not refused: without the wait it would have its 409 at once).
    // Its request has time to reach the layer; it must still be open, however long that took
    // (so this check cannot fail on a slow machine, only if the repeat is answered early).
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !second.is_finished(),
        "the repeat was answered while the first ran"
    );
    s.handler.release.send_replace(true);
    let first = first.await.unwrap().unwrap();
    let second = second.await.unwrap().unwrap();
    assert!(!replayed(&first));
    assert!(replayed(&second));
    assert_eq!(second.text().await.unwrap(), "slow 1");
    assert_eq!(s.runs(), 1);
}

#[tokio::test]
async fn draft_a_missing_key_is_400_where_required_and_let_through_where_not() {
    let required = serve(|l| l.require_key(true)).await;
    let missing = required.post("/v1/charges", None, "{}").await;
    assert_eq!(missing.status(), StatusCode::BAD_REQUEST);
    assert!(
        missing
            .text()
            .await
            .unwrap()
            .contains("Idempotency-Key is missing")
    );
    assert_eq!(required.runs(), 0);

    let optional = serve(|l| l).await;
    for _ in 0..2 {
        let through = optional.post("/v1/charges", None, "{}").await;
        assert_eq!(through.status(), StatusCode::CREATED);
        assert!(!replayed(&through));
    }
    assert_eq!(optional.runs(), 2, "unkeyed requests are not recorded");
}

#[tokio::test]
async fn draft_a_malformed_or_repeated_key_header_is_400() {
    let s = serve(|l| l).await;
    let malformed = s.post("/v1/charges", Some("\"open"), "{}").await;
    assert_eq!(malformed.status(), StatusCode::BAD_REQUEST);
    let twice = s
        .http
        .post(format!("{}/v1/charges", s.base))
        .header("Idempotency-Key", "\"a\"")
        .header("Idempotency-Key", "\"b\"")
        .send()
        .await
        .unwrap();
    assert_eq!(twice.status(), StatusCode::BAD_REQUEST);
    assert_eq!(s.runs(), 0);
}

#[tokio::test]
async fn a_body_over_the_bound_is_413_and_the_handler_does_not_run() {
    let s = serve(|l| l.max_body_bytes(16)).await;
    let large = s.post("/v1/charges", Some("\"k\""), &"x".repeat(17)).await;
    assert_eq!(large.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let small = s.post("/v1/charges", Some("\"k\""), &"x".repeat(16)).await;
    assert_eq!(small.status(), StatusCode::CREATED);
    assert_eq!(s.runs(), 1);
}

#[tokio::test]
async fn s18_keys_of_two_scopes_never_meet() {
    let s = serve(|l| {
        l.scope(|parts| {
            parts
                .headers
                .get("x-account")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        })
    })
    .await;
    let post = |account: Option<&'static str>, body: &'static str| {
        let mut request = s
            .http
            .post(format!("{}/v1/charges", s.base))
            .header("Idempotency-Key", "\"same\"")
            .body(body);
        if let Some(account) = account {
            request = request.header("x-account", account);
        }
        request.send()
    };
    let acme = post(Some("acme"), r#"{"cents":1}"#).await.unwrap();
    let globex = post(Some("globex"), r#"{"cents":2}"#).await.unwrap();
    assert_eq!(
        (acme.status(), globex.status()),
        (StatusCode::CREATED, StatusCode::CREATED)
    );
    assert!(!replayed(&globex), "another scope's record is not replayed");
    assert!(globex.text().await.unwrap().contains(r#""cents":2"#));
    let acme_again = post(Some("acme"), r#"{"cents":1}"#).await.unwrap();
    assert!(replayed(&acme_again));
    let nobody = post(None, r#"{"cents":1}"#).await.unwrap();
    assert_eq!(nobody.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(s.runs(), 2);
    let key = IdempotencyKey::derive("http", &[("idempotency_key", &"same")]);
    let acme_record = s.store.get(&key.for_tenant("acme")).await.unwrap().unwrap();
    assert_eq!(acme_record.tenant.as_deref(), Some("acme"));
}

#[tokio::test]
async fn a_response_saying_nothing_was_done_is_not_stored_and_the_key_is_released() {
    let s = serve(|l| l).await;
    s.handler.unavailable.store(1, SeqCst);
    let busy = s.post("/flaky", Some("\"k\""), "").await;
    assert_eq!(busy.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(!replayed(&busy));
    assert_eq!(busy.text().await.unwrap(), "try again");
    let retry = s.post("/flaky", Some("\"k\""), "").await;
    assert_eq!((retry.status(), replayed(&retry)), (StatusCode::OK, false));
    let again = s.post("/flaky", Some("\"k\""), "").await;
    assert!(replayed(&again));
    assert_eq!(again.text().await.unwrap(), "flaky 1");
}

#[tokio::test]
async fn records_are_the_operators_like_a_tool_calls() {
    let s = serve(|l| l.name("payments.charges")).await;
    s.post("/v1/charges", Some("\"k-9\""), "{}").await;
    let key = IdempotencyKey::derive("payments.charges", &[("idempotency_key", &"k-9")]);
    let record = s
        .store
        .get(&key)
        .await
        .unwrap()
        .expect("the request's record");
    assert_eq!(record.tool, "payments.charges");
    let RecordState::Completed { outcome } = &record.state else {
        panic!("{:?}", record.state)
    };
    let stored: serde_json::Value = serde_json::from_slice(outcome).unwrap();
    assert_eq!(stored["status"], 201);
    assert_eq!(
        stored["headers"][1],
        serde_json::json!(["location", "/v1/charges/ch_1"])
    );
    // A JSON body is kept as that JSON (issue 42: not as a string of it).
    assert_eq!(stored["body"]["json"]["charge"], 1);
    // Forgotten by the operator (`idemkit forget`), the key runs again.
    s.store.forget(&key, false).await.unwrap();
    let after = s.post("/v1/charges", Some("\"k-9\""), "{}").await;
    assert!(!replayed(&after));
    assert_eq!(s.runs(), 2);
}

fn keyed(path: &str) -> Request<Body> {
    Request::post(path)
        .header("idempotency-key", "\"lease\"")
        .body(Body::empty())
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn s12_a_handler_slower_than_its_lease_keeps_its_key() {
    let store = Arc::new(MemoryStore::new());
    let handler = Shared::default();
    let app = app(layer_on(&store).lease(Duration::from_secs(1)), &handler);
    let first = tokio::spawn(app.clone().oneshot(keyed("/slow")));
    handler.entered.notified().await;
    // Ten leases later, renewed all along: a repeat finds it running.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let second = app.clone().oneshot(keyed("/slow")).await.unwrap();
    assert_eq!(second.status(), StatusCode::CONFLICT);
    handler.release.send_replace(true);
    let first = first.await.unwrap().unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    let third = app.oneshot(keyed("/slow")).await.unwrap();
    assert_eq!(third.headers()[REPLAYED], "true");
    assert_eq!(handler.runs.load(SeqCst), 1);
}

/// The first request's process dies inside the handler: the thread its runtime runs on stops
/// for good (the handler blocks it), so its run is never polled again nor dropped: no clean-up,
/// no renewal, as after a SIGKILL. Returns once the handler has started.
async fn crash_inside_the_handler(app: &Router, handler: &Shared) {
    let crashed = app.clone();
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(crashed.oneshot(keyed("/freeze")))
    });
    handler.entered.notified().await;
}

/// The first run notifies `entered`, then blocks its thread for good (a process that died);
/// later runs answer.
async fn freeze(State(h): State<Shared>) -> Response {
    let n = h.runs.fetch_add(1, SeqCst) + 1;
    if n > 1 {
        return format!("ran {n}").into_response();
    }
    h.entered.notify_one();
    loop {
        std::thread::park();
    }
}

fn crash_routes(layer: IdempotencyLayer, h: &Shared) -> Router {
    Router::new()
        .route("/freeze", post(freeze))
        .layer(layer)
        .with_state(h.clone())
}

/// S8 with S25: a crashed handler's key is taken over once its lease ends, and since its handler
/// started, the request is told it ran and how it is settled; the handler does not run again.
#[tokio::test]
async fn s8_s25_a_crashed_handlers_key_is_taken_over_and_it_is_not_run_again() {
    let store = Arc::new(MemoryStore::new());
    let handler = Shared::default();
    let app = crash_routes(layer_on(&store).lease(Duration::from_secs(1)), &handler);
    crash_inside_the_handler(&app, &handler).await;
    // Past the lease (waited for, not timed: any longer wait sees the same).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = app.clone().oneshot(keyed("/freeze")).await.unwrap();
    says_it_ran_and_how_it_is_settled(after).await;
    assert_eq!(handler.runs.load(SeqCst), 1, "the handler ran again");
}

/// S8 with `handler_resends(true)`: the handler says it is safe to re-run, so a crashed
/// handler's key, taken over once its lease ends, runs it again with the same key.
#[tokio::test]
async fn s8_with_handler_resends_a_crashed_handlers_key_is_taken_over_and_run_again() {
    let store = Arc::new(MemoryStore::new());
    let handler = Shared::default();
    let layer = layer_on(&store)
        .lease(Duration::from_secs(1))
        .handler_resends(true);
    let app = crash_routes(layer, &handler);
    crash_inside_the_handler(&app, &handler).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = app.clone().oneshot(keyed("/freeze")).await.unwrap();
    assert_eq!(after.status(), StatusCode::OK);
    assert!(after.headers().get(REPLAYED).is_none());
    let replay = app.oneshot(keyed("/freeze")).await.unwrap();
    assert_eq!(replay.headers()[REPLAYED], "true");
    let body = axum::body::to_bytes(replay.into_body(), 1 << 10)
        .await
        .unwrap();
    assert_eq!(body, "ran 2");
    assert_eq!(handler.runs.load(SeqCst), 2);
}

/// The effect first, then waits for the release (a handler whose client may go away meanwhile).
async fn charge_then_wait(State(h): State<Shared>) -> Response {
    let n = h.runs.fetch_add(1, SeqCst) + 1;
    let mut released = h.release.subscribe();
    h.entered.notify_one();
    released.wait_for(|r| *r).await.unwrap();
    (StatusCode::CREATED, format!("charged {n}")).into_response()
}

/// The effect, then a panic (the first run only).
async fn charge_then_panic(State(h): State<Shared>) -> Response {
    let n = h.runs.fetch_add(1, SeqCst) + 1;
    assert!(n > 1, "the handler panics after its effect");
    (StatusCode::CREATED, format!("charged {n}")).into_response()
}

/// The effect, then a response whose body breaks off (the first run only).
async fn charge_then_break(State(h): State<Shared>) -> Response {
    let n = h.runs.fetch_add(1, SeqCst) + 1;
    if n > 1 {
        return (StatusCode::CREATED, format!("charged {n}")).into_response();
    }
    let chunks: Vec<Result<Bytes, std::io::Error>> = vec![
        Ok(Bytes::from_static(b"{\"charge\":")),
        Err(std::io::Error::other("the handler's stream failed")),
    ];
    let body = Body::from_stream(futures_util::stream::iter(chunks));
    (StatusCode::CREATED, body).into_response()
}

fn unknown_outcome_routes(layer: IdempotencyLayer, h: &Shared) -> Router {
    Router::new()
        .route("/wait", post(charge_then_wait))
        .route("/panic", post(charge_then_panic))
        .route("/break", post(charge_then_break))
        .layer(layer)
        .with_state(h.clone())
}

fn keyed_as(path: &str, key: &str) -> Request<Body> {
    Request::post(path)
        .header("idempotency-key", key)
        .body(Body::empty())
        .unwrap()
}

/// What a response whose handler ran but whose answer is unknown must say: that it ran, and how
/// it is settled; never to retry (a retry would not run it).
async fn says_it_ran_and_how_it_is_settled(response: Response) -> String {
    assert!(
        !response.status().is_success(),
        "{:?}: an unknown outcome is not a success",
        response.status()
    );
    assert!(response.headers().get(REPLAYED).is_none());
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    let body = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    let body = String::from_utf8(body.to_vec()).unwrap();
    assert!(body.contains("ran"), "{body}");
    assert!(body.contains("idemkit resolve"), "{body}");
    assert!(!body.to_lowercase().contains("retry with"), "{body}");
    body
}

/// A keyed request to `/wait` behind `layer` whose client goes away (its future dropped) once
/// the handler is in; the handler released; the retry's response.
async fn client_goes_away_then_retry(layer: IdempotencyLayer, handler: &Shared) -> Response {
    let app = unknown_outcome_routes(layer, handler);
    let mut first = Box::pin(app.clone().oneshot(keyed_as("/wait", "\"gone\"")));
    tokio::select! {
        _ = &mut first => panic!("the handler answered before it was released"),
        _ = handler.entered.notified() => {}
    }
    drop(first); // the client disconnected
    handler.release.send_replace(true);
    app.oneshot(keyed_as("/wait", "\"gone\"")).await.unwrap()
}

/// S25: the client goes away while its handler runs (hyper drops the service's future). The
/// handler's run is not the connection's: it finishes, and the retry (waiting while it runs)
/// gets its response, the handler run once.
#[tokio::test]
async fn s25_a_handler_whose_client_went_away_is_not_run_again() {
    let store = Arc::new(MemoryStore::new());
    let handler = Shared::default();
    let layer = layer_on(&store).in_flight_wait(Duration::from_secs(600));
    let retry = client_goes_away_then_retry(layer, &handler).await;
    assert_eq!(handler.runs.load(SeqCst), 1, "the handler ran again");
    assert_eq!(retry.status(), StatusCode::CREATED);
    assert_eq!(retry.headers()[REPLAYED], "true");
    let body = axum::body::to_bytes(retry.into_body(), 1 << 20)
        .await
        .unwrap();
    assert_eq!(body, "charged 1");
}

/// S25 with `cancel_on_disconnect(true)`: the run is the connection's. The client goes away
/// while its handler runs: the handler is dropped there (released later, it does not finish),
/// and the record is kept as unknown. The retry is told it ran and how it is settled, and does
/// not run it; with `handler_resends(true)` as well, the retry runs it again.
#[tokio::test]
async fn s25_cancel_on_disconnect_drops_the_handler_with_its_client_and_keeps_it_unknown() {
    for resends in [false, true] {
        let store = Arc::new(MemoryStore::new());
        let handler = Shared::default();
        let layer = layer_on(&store)
            .in_flight_wait(Duration::from_secs(600))
            .cancel_on_disconnect(true)
            .handler_resends(resends);
        let retry = client_goes_away_then_retry(layer, &handler).await;
        if resends {
            assert_eq!(
                handler.runs.load(SeqCst),
                2,
                "the handler was not run again"
            );
            assert_eq!(retry.status(), StatusCode::CREATED);
            assert!(retry.headers().get(REPLAYED).is_none());
            let body = axum::body::to_bytes(retry.into_body(), 1 << 20)
                .await
                .unwrap();
            assert_eq!(body, "charged 2");
        } else {
            assert_eq!(handler.runs.load(SeqCst), 1, "the handler ran again");
            says_it_ran_and_how_it_is_settled(retry).await;
        }
    }
}

/// S25: the handler panics after its effect. The retry does not run it again; both answers say
/// it ran and that `idemkit resolve` settles it.
#[tokio::test]
async fn s25_a_handler_that_panicked_after_its_effect_is_not_run_again() {
    let store = Arc::new(MemoryStore::new());
    let handler = Shared::default();
    let app = unknown_outcome_routes(layer_on(&store), &handler);
    // Spawned: on the old code the panic reaches the caller of the service.
    let first = tokio::spawn(app.clone().oneshot(keyed_as("/panic", "\"p\""))).await;
    let retry = app
        .clone()
        .oneshot(keyed_as("/panic", "\"p\""))
        .await
        .unwrap();
    assert_eq!(handler.runs.load(SeqCst), 1, "the handler ran again");
    says_it_ran_and_how_it_is_settled(retry).await;
    says_it_ran_and_how_it_is_settled(first.expect("the layer answers a panic").unwrap()).await;
}

/// S25: the handler's response body breaks off after its effect. The retry does not run it
/// again, and the first answer does not ask for one.
#[tokio::test]
async fn s25_a_handler_whose_response_broke_off_is_not_run_again() {
    let store = Arc::new(MemoryStore::new());
    let handler = Shared::default();
    let app = unknown_outcome_routes(layer_on(&store), &handler);
    let first = app
        .clone()
        .oneshot(keyed_as("/break", "\"b\""))
        .await
        .unwrap();
    says_it_ran_and_how_it_is_settled(first).await;
    let retry = app
        .clone()
        .oneshot(keyed_as("/break", "\"b\""))
        .await
        .unwrap();
    assert_eq!(handler.runs.load(SeqCst), 1, "the handler ran again");
    says_it_ran_and_how_it_is_settled(retry).await;
}

/// S18 and S25 together: a runtime made for one tenant (`Idem::builder().tenant(..)`) and a layer
/// with no scope of its own. The record is the tenant's, so the key the 500 names (the one an
/// operator gives `idemkit resolve`) must be that record's key, in both of the layer's modes.
/// Failed before with `handler_resends(true)`: the layer named the key without the runtime's
/// tenant, a key the store does not hold (it derived the record's key from the task's tenant
/// only; the claim, from the task's, else the runtime's).
#[tokio::test]
async fn s25_the_unknown_outcome_names_the_key_of_the_record_under_the_runtimes_tenant() {
    let store = Arc::new(MemoryStore::new());
    let idem = Idem::builder()
        .shared_store(store.clone())
        .tenant("acme")
        .build()
        .unwrap();
    for resends in [false, true] {
        // The handler panics in its first run only: one of its own per mode.
        let handler = Shared::default();
        let layer = IdempotencyLayer::new(idem.clone()).handler_resends(resends);
        let app = unknown_outcome_routes(layer, &handler);
        let client_key = format!("t-{resends}");
        let answer = app
            .clone()
            .oneshot(keyed_as("/panic", &format!("\"{client_key}\"")))
            .await
            .unwrap();
        let body = says_it_ran_and_how_it_is_settled(answer).await;
        let key = IdempotencyKey::derive("http", &[("idempotency_key", &client_key.as_str())]);
        let record = store
            .get(&key.for_tenant("acme"))
            .await
            .unwrap()
            .expect("the record is the runtime's tenant's");
        assert_eq!(record.tenant.as_deref(), Some("acme"));
        assert!(
            body.contains(&record.key.to_string()),
            "the answer names {} (the record's key): {body}",
            record.key
        );
        assert!(
            !body.contains(&key.to_string()),
            "the answer names the key without the tenant, which no record has: {body}"
        );
    }
}

/// A tool's error for the handler below.
#[derive(Debug)]
struct InnerError;

impl idem_runtime::Classify for InnerError {
    fn classify(&self) -> idem_runtime::Failure {
        idem_runtime::Failure::Permanent
    }
}

impl From<idem_runtime::Error> for InnerError {
    fn from(_: idem_runtime::Error) -> Self {
        InnerError
    }
}

/// A handler that calls a tool of the runtime in force (no `.idem(..)` of its own).
async fn calls_a_tool() -> Response {
    let done: Result<String, InnerError> = idem_runtime::Tool::new("inner")
        .side_effect(&[("order", &1u32)], &(), |_key| async {
            Ok("done".to_owned())
        })
        .await;
    match done {
        Ok(text) => (StatusCode::CREATED, text).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e:?}")).into_response(),
    }
}

/// S26: the layer's run moves to a task of its own (S25); the runtime scoped around the service
/// (`Idem::scope`) goes with it, as the tenant and the operation do, so a tool the handler calls
/// records in that runtime's store, not in another (the installed or default one). Failed before:
/// the inner record was not in the scoped store.
#[tokio::test]
async fn s26_a_handler_behind_the_layer_calls_its_tools_on_the_runtime_scoped_around_it() {
    let layer_store = Arc::new(MemoryStore::new());
    let tools_store = Arc::new(MemoryStore::new());
    let tools = Idem::builder()
        .shared_store(tools_store.clone())
        .build()
        .unwrap();
    let app = Router::new()
        .route("/inner", post(calls_a_tool))
        .layer(layer_on(&layer_store));
    let response = tools
        .scope(app.oneshot(keyed_as("/inner", "\"scoped\"")))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let key = IdempotencyKey::derive("inner", &[("order", &1u32)]);
    let record = tools_store.get(&key).await.unwrap();
    assert!(
        record.is_some_and(|r| matches!(r.state, RecordState::Completed { .. })),
        "the handler's tool did not record in the runtime scoped around the service"
    );
}

/// S29: an empty key, or one over the documented bound, is refused with `400` saying the bound;
/// never one record shared by all such requests.
#[tokio::test]
async fn s29_an_empty_or_too_long_key_is_400_stating_the_bound() {
    let s = serve(|l| l).await;
    let longest = "k".repeat(idem_runtime::http::MAX_KEY_LENGTH);
    let too_long = format!("\"{longest}k\"");
    for key in ["\"\"", too_long.as_str()] {
        let refused = s.post("/v1/charges", Some(key), "{}").await;
        assert_eq!(refused.status(), StatusCode::BAD_REQUEST, "{key}");
        let body = refused.text().await.unwrap();
        assert!(body.contains("1 to 255 characters"), "{body}");
    }
    assert_eq!(s.runs(), 0);
    let at_the_bound = s.post("/v1/charges", Some(&longest), "{}").await;
    assert_eq!(at_the_bound.status(), StatusCode::CREATED);
}

/// Issue 39 item 4: a JSON body counts by its canonical form (keys in any order, any
/// whitespace): the same payload re-sent replays; another value is still `422`. A form body
/// counts by its pairs, whatever their order.
#[tokio::test]
async fn a_json_or_form_body_re_sent_in_another_order_replays_and_another_value_is_422() {
    let s = serve(|l| l).await;
    let post = |key: &'static str, content_type: &'static str, body: &'static str| {
        s.http
            .post(format!("{}/v1/charges", s.base))
            .header("Idempotency-Key", key)
            .header("content-type", content_type)
            .body(body)
            .send()
    };
    let json = "application/json; charset=utf-8";
    post(
        "\"j\"",
        json,
        r#"{"cents":42,"customer":{"id":"cus_1","tags":["a","b"]}}"#,
    )
    .await
    .unwrap();
    let reordered = post(
        "\"j\"",
        json,
        "{ \"customer\" : { \"tags\": [\"a\", \"b\"], \"id\": \"cus_1\" },\n  \"cents\": 42 }",
    )
    .await
    .unwrap();
    assert!(replayed(&reordered), "{}", reordered.status());
    let other = post(
        "\"j\"",
        json,
        r#"{"cents":43,"customer":{"id":"cus_1","tags":["a","b"]}}"#,
    )
    .await
    .unwrap();
    assert_eq!(other.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let order = post(
        "\"j\"",
        json,
        r#"{"cents":42,"customer":{"id":"cus_1","tags":["b","a"]}}"#,
    )
    .await
    .unwrap();
    assert_eq!(
        order.status(),
        StatusCode::UNPROCESSABLE_ENTITY,
        "a list's order counts"
    );

    let form = "application/x-www-form-urlencoded";
    post("\"f\"", form, "amount=42&customer=cus%5F1&note=a+b")
        .await
        .unwrap();
    let reordered = post("\"f\"", form, "note=a%20b&customer=cus_1&amount=42")
        .await
        .unwrap();
    assert!(replayed(&reordered), "{}", reordered.status());
    let other = post("\"f\"", form, "amount=43&customer=cus_1&note=a+b")
        .await
        .unwrap();
    assert_eq!(other.status(), StatusCode::UNPROCESSABLE_ENTITY);

    // Any other body counts by its bytes.
    post("\"t\"", "text/plain", "a b").await.unwrap();
    let spaced = post("\"t\"", "text/plain", "a  b").await.unwrap();
    assert_eq!(spaced.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(s.runs(), 3);
}

/// Issue 52 finding 7: a JSON body's integer beyond 64 bits was fingerprinted as the `f64` it
/// rounds to, so `…617` after `…616` under one key was answered with `…616`'s response. It
/// counts by its exact value: another amount is `422`; the same amount, spelled otherwise, is
/// the same payload.
#[tokio::test]
async fn issue52_amounts_that_differ_past_a_doubles_precision_are_two_payloads() {
    let s = serve(|l| l).await;
    let post = |body: &'static str| {
        s.http
            .post(format!("{}/v1/charges", s.base))
            .header("Idempotency-Key", "\"wei\"")
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let first = post(r#"{"amount_wei": 18446744073709551616}"#)
        .await
        .unwrap();
    assert_eq!(first.status(), StatusCode::CREATED);
    for other in [
        r#"{"amount_wei": 18446744073709551617}"#,
        r#"{"amount_wei": 18446744073709551616.000000000000000001}"#,
        r#"{"amount_wei": 1.8446744073709552e19}"#,
    ] {
        let reused = post(other).await.unwrap();
        assert!(!replayed(&reused), "{other}");
        assert_eq!(
            reused.status(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "{other}: {}",
            reused.text().await.unwrap()
        );
    }
    let same = post(r#"{ "amount_wei": 1.8446744073709551616e19 }"#)
        .await
        .unwrap();
    assert!(replayed(&same), "{}", same.status());
    assert_eq!(s.runs(), 1);
}

/// Issue 39 item 8: the 422 a client gets speaks HTTP: no "tool", no internal key.
#[tokio::test]
async fn a_422_speaks_http_not_the_runtimes_terms() {
    let s = serve(|l| l).await;
    s.post("/v1/charges", Some("\"k\""), "{}").await;
    let reused = s.post("/v1/refunds", Some("\"k\""), "{}").await;
    assert_eq!(reused.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let body = reused.text().await.unwrap();
    let key = IdempotencyKey::derive("http", &[("idempotency_key", &"k")]);
    assert!(!body.contains("tool"), "{body}");
    assert!(!body.contains(key.as_str()), "{body}");
    assert!(body.contains("new key"), "{body}");
}

/// Issue 39 item 8: two layers with the default name on one store would share records (`/b`
/// getting `/a`'s 422): refused when the app is built, naming both places. One layer on both
/// routes, or a name each, is fine.
#[test]
fn two_layers_with_one_name_on_one_store_are_refused_when_the_app_is_built() {
    let store = Arc::new(MemoryStore::new());
    let handler = Shared::default();
    let one = layer_on(&store);
    let routes = || {
        Router::new()
            .route("/a", post(charge))
            .route("/b", post(charge))
    };
    let _both: Router = routes().layer(one.clone()).with_state(handler.clone());
    let _named: Router = routes()
        .layer(layer_on(&store).name("refunds"))
        .with_state(handler.clone());
    let _other_store: Router = routes()
        .layer(layer_on(&Arc::new(MemoryStore::new())))
        .with_state(handler.clone());
    let second = std::panic::catch_unwind(|| {
        let _: Router = Router::new()
            .route("/b", post(charge))
            .layer(layer_on(&store))
            .with_state(handler.clone());
    });
    let message = *second.expect_err("refused").downcast::<String>().unwrap();
    assert!(
        message.contains("two IdempotencyLayers named `http` on one store"),
        "{message}"
    );
    assert!(message.contains("http_server.rs"), "{message}");
    drop(one);
    drop(_both);
}

/// `data: 1`, then `data: 2` once released: an event stream.
async fn events(State(h): State<Shared>) -> Response {
    h.runs.fetch_add(1, SeqCst);
    let released = h.release.subscribe();
    let stream = futures_util::stream::unfold((0, released), |(n, mut released)| async move {
        match n {
            0 => {}
            1 => released.wait_for(|r| *r).await.map(drop).ok()?,
            _ => return None,
        }
        let event = Bytes::from(format!("data: {}\n\n", n + 1));
        Some((Ok::<_, std::io::Error>(event), (n + 1, released)))
    });
    (
        [("content-type", "text/event-stream")],
        Body::from_stream(stream),
    )
        .into_response()
}

/// 30 bytes in three chunks, no `Content-Length`.
async fn chunked(State(h): State<Shared>) -> Response {
    h.runs.fetch_add(1, SeqCst);
    let chunks = (0..3).map(|i| Ok::<_, std::io::Error>(Bytes::from(format!("chunk {i}..."))));
    Body::from_stream(futures_util::stream::iter(chunks)).into_response()
}

fn streaming_routes(layer: IdempotencyLayer, h: &Shared) -> Router {
    Router::new()
        .route("/events", post(events))
        .route("/chunked", post(chunked))
        .layer(layer)
        .with_state(h.clone())
}

/// A keyed event stream (SSE) is not buffered: its first event reaches the client while the
/// handler still streams; the request is recorded as ran, its response not kept, and a repeat
/// is told so; the handler is not run again. (The clock is paused: were the layer to buffer the
/// stream, the hour's timeout would fire at once, the runtime having nothing else to do.)
#[tokio::test(start_paused = true)]
async fn an_event_stream_on_a_keyed_route_is_streamed_and_recorded_as_ran_not_kept() {
    let store = Arc::new(MemoryStore::new());
    let handler = Shared::default();
    let app = streaming_routes(layer_on(&store), &handler);
    let first = tokio::time::timeout(
        Duration::from_secs(3600),
        app.clone().oneshot(keyed_as("/events", "\"sse\"")),
    )
    .await
    .expect("the head came before the stream ended")
    .unwrap();
    let mut body = first.into_body();
    let event = http_body_util::BodyExt::frame(&mut body)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(event.into_data().unwrap(), "data: 1\n\n");
    handler.release.send_replace(true);
    let rest = axum::body::to_bytes(body, 1 << 10).await.unwrap();
    assert_eq!(rest, "data: 2\n\n");

    let repeat = app.oneshot(keyed_as("/events", "\"sse\"")).await.unwrap();
    assert_eq!(repeat.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let text = axum::body::to_bytes(repeat.into_body(), 1 << 20)
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&text);
    assert!(text.contains("streamed and is not kept"), "{text}");
    assert!(text.contains("event stream"), "{text}");
    assert_eq!(handler.runs.load(SeqCst), 1);
}

/// A response over `max_response_bytes` is handed on as it comes, never buffered past the
/// bound: the first request gets all of it, repeats are told it ran and was not kept.
#[tokio::test]
async fn a_response_over_the_bound_is_streamed_whole_and_recorded_as_ran_not_kept() {
    let store = Arc::new(MemoryStore::new());
    let handler = Shared::default();
    let app = streaming_routes(layer_on(&store).max_response_bytes(16), &handler);
    let first = app
        .clone()
        .oneshot(keyed_as("/chunked", "\"big\""))
        .await
        .unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    let body = axum::body::to_bytes(first.into_body(), 1 << 10)
        .await
        .unwrap();
    assert_eq!(body, "chunk 0...chunk 1...chunk 2...");
    let repeat = app.oneshot(keyed_as("/chunked", "\"big\"")).await.unwrap();
    let text = axum::body::to_bytes(repeat.into_body(), 1 << 20)
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&text);
    assert!(text.contains("streamed and is not kept"), "{text}");
    assert!(text.contains("max_response_bytes"), "{text}");
    assert_eq!(handler.runs.load(SeqCst), 1);
}

/// S33: a repeat after the record's time-to-live does not run the handler: 410 Gone, a problem
/// that says when it was done and that its response is no longer kept.
#[tokio::test]
async fn s33_a_repeat_after_the_ttl_is_410_and_the_handler_does_not_run_again() {
    let s = serve(|l| {
        l.lease(Duration::from_millis(500))
            .ttl(Duration::from_millis(1000))
    })
    .await;
    let first = s
        .post("/v1/charges", Some(r#""k-33""#), r#"{"cents":42}"#)
        .await;
    assert_eq!(first.status(), StatusCode::CREATED);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let late = s
        .post("/v1/charges", Some(r#""k-33""#), r#"{"cents":42}"#)
        .await;
    assert_eq!(late.status(), StatusCode::GONE);
    assert_eq!(late.headers()["content-type"], "application/problem+json");
    let problem: serde_json::Value = late.json().await.unwrap();
    let detail = problem["detail"].as_str().unwrap();
    assert!(
        detail.contains("done on ") && detail.contains("its result is no longer kept"),
        "{detail}"
    );
    assert_eq!(s.runs(), 1, "the handler did not run again");
    let other = s
        .post("/v1/charges", Some(r#""k-33""#), r#"{"cents":99}"#)
        .await;
    assert_eq!(
        other.status(),
        StatusCode::UNPROCESSABLE_ENTITY,
        "another payload: key reuse"
    );
    assert_eq!(s.runs(), 1);
}
