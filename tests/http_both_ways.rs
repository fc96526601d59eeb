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
    /// `resend = true` says the server deduplicates by it (S20).
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
