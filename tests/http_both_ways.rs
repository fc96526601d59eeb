//! HTTP both ways through the facade: a `#[side_effect]` tool that never touches its key sends
//! it with `send_idempotent`, to an axum app behind `IdempotencyLayer`; a response lost after the
//! server stored it is retried with the same key and replayed, the handler having run once.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
use std::time::Duration;

use axum::Router;
use axum::extract::{Extension, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::post;
use idemkit::http::{HttpError, IdempotencyLayer, IdempotentRequest, REPLAYED};
use idemkit::{Classify, Failure, Idem, IdempotencyKey, MemoryStore, observe, side_effect};

#[derive(Debug)]
enum ShopError {
    Http(HttpError),
    Idem(#[allow(dead_code)] Box<idemkit::Error>),
}

impl From<HttpError> for ShopError {
    fn from(e: HttpError) -> Self {
        ShopError::Http(e)
    }
}

impl From<idemkit::Error> for ShopError {
    fn from(e: idemkit::Error) -> Self {
        ShopError::Idem(Box::new(e))
    }
}

impl Classify for ShopError {
    fn classify(&self) -> Failure {
        match self {
            ShopError::Http(e) => e.classify(),
            ShopError::Idem(_) => Failure::Permanent,
        }
    }
}

struct Shop {
    http: reqwest::Client,
    base: String,
}

impl Shop {
    /// Places an order once. The tool does not take the key: `send_idempotent` sends it, and
    /// `resend = true` says so explicitly (S20; the default for such a body, below).
    #[side_effect(key = "order", name = "shop.place", resend = true, max_attempts = 3)]
    async fn place(&self, order: &str) -> Result<String, ShopError> {
        let response = self
            .http
            .post(format!("{}/orders", self.base))
            .body(format!(r#"{{"order":"{order}"}}"#))
            .send_idempotent()
            .await?;
        let replayed = response.headers().contains_key(REPLAYED);
        let text = response.text().await.map_err(HttpError::from)?;
        Ok(format!("{text} replayed={replayed}"))
    }

    /// The same without `resend`: sending the key with `send_idempotent` passes it on, which
    /// turns S20's re-sending on as taking the `&IdempotencyKey` would (issue 51 #4).
    #[side_effect(key = "order", name = "shop.place_by_default", max_attempts = 3)]
    async fn place_by_default(&self, order: &str) -> Result<String, ShopError> {
        let response = self
            .http
            .post(format!("{}/orders", self.base))
            .body(format!(r#"{{"order":"{order}"}}"#))
            .send_idempotent()
            .await?;
        let replayed = response.headers().contains_key(REPLAYED);
        let text = response.text().await.map_err(HttpError::from)?;
        Ok(format!("{text} replayed={replayed}"))
    }

    /// The same with `resend = false`, which still says no.
    #[side_effect(
        key = "order",
        name = "shop.place_once",
        max_attempts = 3,
        resend = false
    )]
    async fn place_once(&self, order: &str) -> Result<String, ShopError> {
        let response = self
            .http
            .post(format!("{}/orders", self.base))
            .body(format!(r#"{{"order":"{order}"}}"#))
            .send_idempotent()
            .await?;
        Ok(response.text().await.map_err(HttpError::from)?)
    }
}

#[derive(Default)]
struct Server {
    /// Times the handler ran.
    runs: AtomicU32,
    /// Responses to lose (after the layer stored them).
    lose: AtomicU32,
}

async fn place(State(s): State<Arc<Server>>, Extension(key): Extension<IdempotencyKey>) -> String {
    let n = s.runs.fetch_add(1, SeqCst) + 1;
    format!("order {n} under {key}")
}

/// Outside the layer: the network losing a response the server stored.
async fn lossy(State(s): State<Arc<Server>>, request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    if s.lose.load(SeqCst) > 0 {
        s.lose.fetch_sub(1, SeqCst);
        std::future::pending::<()>().await;
    }
    response
}

async fn start(server: &Arc<Server>) -> String {
    let layer = IdempotencyLayer::new(Idem::new(MemoryStore::new())).name("shop.orders");
    let app = Router::new()
        .route(
            "/orders",
            post(place)
                .layer(layer)
                .layer(axum::middleware::from_fn_with_state(server.clone(), lossy)),
        )
        .with_state(server.clone());
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    base
}

#[tokio::test]
async fn a_lost_response_is_retried_with_the_same_key_and_replayed_by_the_layer() {
    let server = Arc::new(Server::default());
    server.lose.store(1, SeqCst);
    let shop = Shop {
        http: reqwest::Client::builder()
            // Long against real work on a loaded machine: only the deliberately lost response
            // waits it out.
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap(),
        base: start(&server).await,
    };
    let agent = Idem::new(MemoryStore::new());
    let (placed, info) = agent.scope(observe(shop.place("o-1"))).await;
    let info = info.unwrap();
    // The client's key, the layer's record key: one derived from the other, both stable.
    let client_key = IdempotencyKey::derive("shop.place", &[("order", &"o-1")]);
    let server_key =
        IdempotencyKey::derive("shop.orders", &[("idempotency_key", &client_key.as_str())]);
    assert_eq!(
        placed.unwrap(),
        format!("order 1 under {server_key} replayed=true")
    );
    assert_eq!((info.key, info.attempts), (Some(client_key), 2));
    assert_eq!(server.runs.load(SeqCst), 1);
    // The agent re-running the step replays its own record: no request at all.
    let again = agent.scope(shop.place("o-1")).await.unwrap();
    assert_eq!(again, format!("order 1 under {server_key} replayed=true"));
    assert_eq!(server.runs.load(SeqCst), 1);
}

/// A shop on a server of its own that loses its first response.
async fn lossy_shop() -> (Arc<Server>, Shop) {
    let server = Arc::new(Server::default());
    server.lose.store(1, SeqCst);
    let shop = Shop {
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap(),
        base: start(&server).await,
    };
    (server, shop)
}

/// Issue 51 #4, S20: a tool that does not take its key but sends it with `send_idempotent`
/// passes it on, so an attempt whose response was lost is sent again under that key without
/// `resend = true`: the server replays it, the handler having run once (before: the call ended
/// `Error::Ambiguous`, waiting for an operator).
#[tokio::test]
async fn s20_a_body_that_sends_its_key_with_send_idempotent_is_resent() {
    let (server, shop) = lossy_shop().await;
    let agent = Idem::new(MemoryStore::new());
    let (placed, info) = agent.scope(observe(shop.place_by_default("o-2"))).await;
    let placed = placed.unwrap();
    assert!(
        placed.starts_with("order 1 under ") && placed.ends_with(" replayed=true"),
        "{placed}"
    );
    assert_eq!(info.unwrap().attempts, 2);
    assert_eq!(server.runs.load(SeqCst), 1);
}

/// Issue 51 #4, S20: `resend = false` still overrides it: the lost response ends the call
/// `Error::Ambiguous`, nothing sent again.
#[tokio::test]
async fn s20_resend_false_overrides_send_idempotent() {
    let (server, shop) = lossy_shop().await;
    let agent = Idem::new(MemoryStore::new());
    let (placed, info) = agent.scope(observe(shop.place_once("o-3"))).await;
    match placed {
        Err(ShopError::Idem(e)) if matches!(*e, idemkit::Error::Ambiguous { .. }) => {}
        other => panic!("expected Error::Ambiguous, got {other:?}"),
    }
    assert_eq!(info.unwrap().attempts, 1);
    assert_eq!(server.runs.load(SeqCst), 1);
}
