//! A fake payment provider on loopback that honours `Idempotency-Key` the way Stripe does, and
//! fails on request in the ways that matter to an agent: it commits and then loses the response,
//! fails before committing, rate-limits with `Retry-After`, or is slow.
//!
//! - `POST /v1/{kind}` (`charges`, `emails`, `orders`, `refunds`, …) with a JSON body commits one
//!   effect of that kind and answers `200` with `{"id": "...", "kind": ..., "request": ...}`.
//! - With an `Idempotency-Key` header, the first request's status and body are stored under the
//!   key; a later request with the same key and the same body gets them back with
//!   `Idempotent-Replayed: true` and commits nothing; the same key with another body gets `422`;
//!   the same key while the first is still executing gets `409`. All of this is idemkit's own
//!   tower layer (`idem_runtime::http::IdempotencyLayer`) over a memory store, not a map of the
//!   provider's: the provider dogfoods the server side of idemkit's HTTP support.
//! - `GET /v1/balance/{customer}` reads the sum of committed charges of a customer.
//!
//! The counts of committed effects are what examples and tests assert on.
//!
//! [`sms`] is the other kind of provider: an SMS gateway that sends a message per request whatever
//! key it carries, and can only be asked afterwards whether a message went out.

mod http;
pub mod model;
pub mod sms;

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Extension, Path, Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use idem_runtime::http::IdempotencyLayer;
use idem_runtime::{Idem, MemoryStore};
use serde_json::{Value, json};

/// One failure to inject into the next request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Commit the effect, then never answer: the client times out (the response is lost).
    DropAfterCommit,
    /// Answer `503` without committing anything.
    FailBeforeCommit,
    /// Answer `429` with `Retry-After: secs`, committing nothing.
    RateLimit {
        /// The `Retry-After` value in seconds.
        secs: u64,
    },
    /// Take this long to execute (the key is reserved meanwhile), then commit and answer.
    Latency(Duration),
}

#[derive(Default)]
struct Inner {
    /// Faults to apply, in order, one per request to a `POST` endpoint.
    faults: VecDeque<Fault>,
    /// Committed effects by kind.
    effects: HashMap<String, Vec<Value>>,
    next_id: u64,
    /// How long every effect takes to execute.
    latency: Duration,
}

/// A running fake provider. Dropping it stops the server.
pub struct FakeProvider {
    addr: SocketAddr,
    inner: Arc<Mutex<Inner>>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for FakeProvider {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl FakeProvider {
    /// Starts a provider on an ephemeral loopback port.
    pub async fn start() -> std::io::Result<Self> {
        let inner = Arc::new(Mutex::new(Inner::default()));
        // Where the idempotency layer keeps its records.
        let idem = Idem::new(MemoryStore::new());
        // Outermost first: faults, then Stripe's idempotency (idemkit's layer), then the effect.
        let create = post(create)
            .layer(IdempotencyLayer::new(idem).name("fake-provider"))
            .layer(axum::middleware::from_fn_with_state(inner.clone(), faults));
        let app = Router::new()
            .route("/v1/balance/{customer}", get(balance))
            .route("/v1/{kind}", create)
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(FakeProvider {
            addr,
            inner,
            server,
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Queues faults for the next requests, one each, in order.
    pub fn inject(&self, faults: impl IntoIterator<Item = Fault>) {
        self.lock().faults.extend(faults);
    }

    /// Makes every effect take `latency` to execute (the key is reserved meanwhile).
    pub fn set_latency(&self, latency: Duration) {
        self.lock().latency = latency;
    }

    /// How many effects of `kind` were committed.
    pub fn count(&self, kind: &str) -> usize {
        self.lock().effects.get(kind).map_or(0, Vec::len)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Applies the next queued fault around the idempotency layer, as the network and the provider's
/// front end would: a failure before commit answers before any key is looked at; a response lost
/// after commit is lost after the layer stored it; latency is the effect's own (the key is held
/// meanwhile).
async fn faults(
    State(inner): State<Arc<Mutex<Inner>>>,
    mut request: Request,
    next: Next,
) -> Response {
    let (fault, latency) = {
        let mut state = inner.lock().unwrap();
        (state.faults.pop_front(), state.latency)
    };
    match fault {
        Some(Fault::FailBeforeCommit) => {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                axum::Json(json!({"error": "unavailable"})),
            )
                .into_response();
        }
        Some(Fault::RateLimit { secs }) => {
            let mut response = (
                StatusCode::TOO_MANY_REQUESTS,
                axum::Json(json!({"error": "rate_limited"})),
            )
                .into_response();
            response
                .headers_mut()
                .insert("retry-after", HeaderValue::from(secs));
            return response;
        }
        _ => {}
    }
    let extra = match fault {
        Some(Fault::Latency(d)) => d,
        _ => Duration::ZERO,
    };
    request.extensions_mut().insert(Executing(latency + extra));
    let response = next.run(request).await;
    if fault == Some(Fault::DropAfterCommit) {
        // Committed (and stored under its key), but the response never arrives: the client
        // times out.
        std::future::pending::<()>().await;
    }
    response
}

/// How long the effect takes to execute.
#[derive(Clone, Copy)]
struct Executing(Duration);

/// Commits one effect of `kind`.
async fn create(
    State(inner): State<Arc<Mutex<Inner>>>,
    Path(kind): Path<String>,
    Extension(Executing(latency)): Extension<Executing>,
    axum::Json(request): axum::Json<Value>,
) -> Response {
    if !latency.is_zero() {
        // Executing: a request with the same key meanwhile gets 409.
        tokio::time::sleep(latency).await;
    }
    let body = {
        let mut state = inner.lock().unwrap();
        state.next_id += 1;
        let body = json!({"id": format!("{}_{}", kind.trim_end_matches('s'), state.next_id), "kind": kind, "request": request});
        state
            .effects
            .entry(kind.clone())
            .or_default()
            .push(body.clone());
        body
    };
    (StatusCode::OK, axum::Json(body)).into_response()
}

async fn balance(State(inner): State<Arc<Mutex<Inner>>>, Path(customer): Path<String>) -> Response {
    let state = inner.lock().unwrap();
    let cents: u64 = state
        .effects
        .get("charges")
        .into_iter()
        .flatten()
        .filter(|c| c["request"]["customer"] == customer.as_str())
        .filter_map(|c| c["request"]["amount_cents"].as_u64())
        .sum();
    axum::Json(json!({"customer": customer, "cents": cents})).into_response()
}

/// How a request to the provider failed, as a client sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderError {
    /// No connection was made: the request did not reach the provider.
    Connect,
    /// No answer in time: the request may or may not have been committed.
    Timeout,
    /// The connection broke after the request was sent: it may have been committed.
    Broken,
    /// The provider answered with an error status.
    Status {
        /// The HTTP status.
        code: u16,
        /// `Retry-After` in seconds, if given.
        retry_after: Option<u64>,
        /// The body.
        body: String,
    },
}

impl std::fmt::Display for ProviderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProviderError::Connect => f.write_str("could not connect to the provider"),
            ProviderError::Timeout => f.write_str("the provider did not answer in time"),
            ProviderError::Broken => f.write_str("the connection broke after the request was sent"),
            ProviderError::Status { code, body, .. } => {
                write!(f, "the provider answered {code}: {body}")
            }
        }
    }
}

impl std::error::Error for ProviderError {}

/// A provider's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The JSON body.
    pub body: Value,
    /// Whether the provider replayed a stored response (`Idempotent-Replayed: true`).
    pub replayed: bool,
}

/// A small HTTP client of the provider, with a request timeout.
#[derive(Debug, Clone)]
pub struct Client {
    http: http::Http,
    base: String,
}

impl Client {
    /// A client of the provider at `base`, giving up on a request after `timeout`.
    pub fn new(base: impl Into<String>, timeout: Duration) -> Self {
        Client {
            http: http::Http::new(timeout),
            base: base.into(),
        }
    }

    /// `POST /v1/{kind}` with `body`, and `Idempotency-Key: key` when given.
    pub async fn post(
        &self,
        kind: &str,
        key: Option<&str>,
        body: &Value,
    ) -> Result<Answer, ProviderError> {
        let url = format!("{}/v1/{kind}", self.base);
        let headers: &[(&str, &str)] = match key {
            Some(key) => &[("idempotency-key", key)],
            None => &[],
        };
        let json = serde_json::to_vec(body).map_err(|_| ProviderError::Broken)?;
        Self::answer(
            self.http
                .send(axum::http::Method::POST, &url, headers, Some(json))
                .await,
        )
    }

    /// `GET /v1/balance/{customer}`: the customer's charged cents.
    pub async fn balance(&self, customer: &str) -> Result<u64, ProviderError> {
        let url = format!("{}/v1/balance/{}", self.base, http::query_value(customer));
        let answer = Self::answer(
            self.http
                .send(axum::http::Method::GET, &url, &[], None)
                .await,
        )?;
        Ok(answer.body["cents"].as_u64().unwrap_or(0))
    }

    pub(crate) fn answer(
        sent: Result<http::Reply, ProviderError>,
    ) -> Result<Answer, ProviderError> {
        let reply = sent?;
        let replayed = reply.headers.get("idempotent-replayed").is_some();
        let retry_after = reply
            .headers
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        if !(200..300).contains(&reply.status) {
            return Err(ProviderError::Status {
                code: reply.status,
                retry_after,
                body: String::from_utf8_lossy(&reply.body).into_owned(),
            });
        }
        let body = serde_json::from_slice(&reply.body).map_err(|_| ProviderError::Broken)?;
        Ok(Answer { body, replayed })
    }
}
