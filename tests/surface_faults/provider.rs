//! The matrix's provider: an HTTP server on loopback that does **not** deduplicate (every request
//! it takes is one effect, whatever key it carries), counting effects per operation and keeping
//! the `Idempotency-Key` each came with; and what the callers' bodies do around it (hang, panic,
//! break their reply after the effect), scripted per operation.
//!
//! One provider serves the whole test binary (each cell's operations are its own), on a thread
//! of its own, so that a child process (the SIGKILL cells) reaches the same one.

use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, LazyLock, Mutex, OnceLock};

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use idemkit::http::{HttpError, IdempotentRequest};
use idemkit::{Classify, Explanation, Failure, IdempotencyKey, Verified};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::{Notify, watch};

/// Where a child process finds the parent's provider.
pub const PROVIDER_ENV: &str = "IDEMKIT_MATRIX_PROVIDER";

/// One effect the provider made: the key it was sent with (`None`: no `Idempotency-Key`).
#[derive(Debug, Clone)]
pub struct Effect {
    pub key: Option<String>,
}

/// How the provider answers the next request of an operation (then `Ok` again).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// Makes the effect, answers its receipt.
    Ok,
    /// Makes the effect, and the answer is lost on the way back: `502` (a gateway's word for it).
    Lost,
    /// Makes the effect, and answers a receipt that serializes but does not read back.
    Broken,
}

/// What the caller's body does right after the provider made the effect (once, then nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum After {
    Nothing,
    /// Says so ([`Gate::reached`]; a child prints `EFFECT op`), then waits for [`release`].
    Hang,
    Panic,
    /// The HTTP handler answers a body that breaks off.
    BreakBody,
}

#[derive(Default)]
struct State {
    effects: HashMap<String, Vec<Effect>>,
    replies: HashMap<String, Reply>,
}

static STATE: LazyLock<Arc<Mutex<State>>> = LazyLock::new(Default::default);
static AFTER: LazyLock<Mutex<HashMap<String, After>>> = LazyLock::new(Default::default);
static GATES: LazyLock<Mutex<HashMap<String, Arc<Gate>>>> = LazyLock::new(Default::default);
/// The keys each verification was made under (`current_key` when the verify closure ran).
static VERIFIED_UNDER: LazyLock<Mutex<HashMap<String, Vec<Option<IdempotencyKey>>>>> =
    LazyLock::new(Default::default);
static BASE: OnceLock<String> = OnceLock::new();
/// No pooled connections: the client is shared by tests on runtimes of their own.
static HTTP: LazyLock<reqwest::Client> = LazyLock::new(|| {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .expect("a reqwest client")
});

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The provider's base URL: the parent's (a child is told it), started on first use.
pub fn base() -> &'static str {
    BASE.get_or_init(|| {
        if let Ok(base) = std::env::var(PROVIDER_ENV) {
            return base;
        }
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("the provider's runtime");
            rt.block_on(async move {
                let app = Router::new()
                    .route("/effect/{op}", post(effect))
                    .route("/effects/{op}", get(effects_of));
                let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
                    .await
                    .expect("a loopback port");
                tx.send(format!("http://{}", listener.local_addr().unwrap()))
                    .unwrap();
                axum::serve(listener, app).await.unwrap();
            });
        });
        rx.recv().expect("the provider started")
    })
}

async fn effect(Path(op): Path<String>, headers: HeaderMap) -> Response {
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim_matches('"').to_owned());
    let (reply, n) = {
        let mut state = lock(&STATE);
        let reply = state.replies.remove(&op).unwrap_or(Reply::Ok);
        let effects = state.effects.entry(op.clone()).or_default();
        effects.push(Effect { key });
        (reply, effects.len())
    };
    match reply {
        Reply::Ok => axum::Json(json!({"id": format!("rcpt:{op}#{n}")})).into_response(),
        Reply::Broken => axum::Json(json!({"id": format!("broken:{op}#{n}")})).into_response(),
        Reply::Lost => (StatusCode::BAD_GATEWAY, "the response was lost").into_response(),
    }
}

async fn effects_of(Path(op): Path<String>) -> axum::Json<Value> {
    let n = effects(&op).len();
    let id = (n > 0).then(|| format!("rcpt:{op}#{n}"));
    axum::Json(json!({"count": n, "id": id}))
}

/// The effects the provider made for `op` (in this process's provider: the parent's).
pub fn effects(op: &str) -> Vec<Effect> {
    lock(&STATE).effects.get(op).cloned().unwrap_or_default()
}

/// Scripts the provider's next answer for `op`.
pub fn reply(op: &str, reply: Reply) {
    lock(&STATE).replies.insert(op.to_owned(), reply);
}

/// Scripts what the caller's body does after `op`'s next effect.
pub fn after(op: &str, after: After) {
    lock(&AFTER).insert(op.to_owned(), after);
}

/// The keys `op`'s verifications were made under.
pub fn verified_under(op: &str) -> Vec<Option<IdempotencyKey>> {
    lock(&VERIFIED_UNDER).get(op).cloned().unwrap_or_default()
}

/// Where a hanging body says it made its effect, and waits to be released.
#[derive(Debug)]
pub struct Gate {
    pub reached: Notify,
    release: watch::Sender<bool>,
}

pub fn gate(op: &str) -> Arc<Gate> {
    lock(&GATES)
        .entry(op.to_owned())
        .or_insert_with(|| {
            Arc::new(Gate {
                reached: Notify::new(),
                release: watch::channel(false).0,
            })
        })
        .clone()
}

/// Lets `op`'s hanging body (and any later one) go on.
pub fn release(op: &str) {
    gate(op).release.send_replace(true);
}

/// What the caller's body does after its effect: as scripted for `op`.
pub async fn after_effect(op: &str) -> After {
    let after = lock(&AFTER).remove(op).unwrap_or(After::Nothing);
    match after {
        After::Hang => {
            let gate = gate(op);
            gate.reached.notify_one();
            if std::env::var_os(super::CHILD_ENV).is_some() {
                let mut out = std::io::stdout().lock();
                writeln!(out, "EFFECT {op}").unwrap();
                out.flush().unwrap();
            }
            let mut released = gate.release.subscribe();
            let _ = released.wait_for(|r| *r).await;
        }
        After::Panic => panic!("matrix: the body panics after the effect of {op}"),
        After::Nothing | After::BreakBody => {}
    }
    after
}

/// A receipt that reads back unless the provider broke it (S16's outcome that serializes and
/// does not deserialize).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawReceipt")]
pub struct Receipt {
    pub id: String,
}

#[derive(Deserialize)]
pub struct RawReceipt {
    id: String,
}

impl TryFrom<RawReceipt> for Receipt {
    type Error = String;
    fn try_from(raw: RawReceipt) -> Result<Self, String> {
        if raw.id.starts_with("broken:") {
            return Err(format!("receipt {} does not read back", raw.id));
        }
        Ok(Receipt { id: raw.id })
    }
}

/// Every surface's tool error.
#[derive(Debug)]
pub enum PayError {
    Http(HttpError),
    Idem(idemkit::Error),
    /// The provider answered this status to a request sent without `send_idempotent`.
    Upstream(u16),
}

impl std::fmt::Display for PayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PayError::Http(e) => e.fmt(f),
            PayError::Idem(e) => e.fmt(f),
            PayError::Upstream(status) => write!(f, "the provider answered {status}"),
        }
    }
}

impl std::error::Error for PayError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PayError::Http(e) => Some(e),
            PayError::Idem(e) => Some(e),
            PayError::Upstream(_) => None,
        }
    }
}

impl From<HttpError> for PayError {
    fn from(e: HttpError) -> Self {
        PayError::Http(e)
    }
}

impl From<idemkit::Error> for PayError {
    fn from(e: idemkit::Error) -> Self {
        PayError::Idem(e)
    }
}

impl Classify for PayError {
    fn classify(&self) -> Failure {
        match self {
            PayError::Http(e) => e.classify(),
            PayError::Idem(_) => Failure::Permanent,
            PayError::Upstream(_) => Failure::Ambiguous,
        }
    }
}

impl PayError {
    /// The stable word for what the caller was told (idemkit's reasons, as models are told them).
    pub fn reason(&self) -> String {
        match self {
            PayError::Idem(e) => Explanation::of_error(e, &[]).reason.to_owned(),
            PayError::Http(HttpError::NoCall) => "no_call".to_owned(),
            PayError::Http(e) => format!("http_{:?}", e.classify()).to_lowercase(),
            PayError::Upstream(status) => format!("upstream_{status}"),
        }
    }
}

fn url(op: &str) -> String {
    format!("{}/effect/{op}", base())
}

/// The charge of `op`: the request is built here, when this is called (what `send_idempotent`
/// reads the current key at), and sent when the future is polled. Then the scripted `after`.
pub fn send(
    op: &str,
    amount: u64,
) -> impl Future<Output = Result<Receipt, PayError>> + Send + 'static {
    let sent = HTTP
        .post(url(op))
        .json(&json!({ "amount": amount }))
        .send_idempotent();
    let op = op.to_owned();
    async move {
        let response = sent.await?;
        let raw: RawReceipt = response.json().await.map_err(HttpError::from)?;
        after_effect(&op).await;
        Ok(Receipt { id: raw.id })
    }
}

/// The charge of `op` sent with `key` as its `Idempotency-Key`, named rather than current: what a
/// remote MCP tool does with the key its request's `_meta` carries (the MCP client's surface).
/// Then the scripted `after`.
pub fn send_keyed(
    op: &str,
    amount: u64,
    key: Option<String>,
) -> impl Future<Output = Result<Receipt, PayError>> + Send + 'static {
    let mut request = HTTP.post(url(op)).json(&json!({ "amount": amount }));
    if let Some(key) = key {
        request = request.header("idempotency-key", format!("\"{key}\""));
    }
    let op = op.to_owned();
    async move {
        let response = request.send().await.map_err(HttpError::from)?;
        if !response.status().is_success() {
            return Err(PayError::Upstream(response.status().as_u16()));
        }
        let raw: RawReceipt = response.json().await.map_err(HttpError::from)?;
        after_effect(&op).await;
        Ok(Receipt { id: raw.id })
    }
}

/// The same charge's response as text, for the HTTP handler (which relays it).
pub fn send_text(op: &str) -> impl Future<Output = Result<String, HttpError>> + Send + 'static {
    let sent = HTTP.post(url(op)).json(&json!({})).send_idempotent();
    async move { Ok(sent.await?.text().await?) }
}

/// `Tool::verify`'s look-up of `op` at the provider; what key was current when it was built is
/// kept ([`verified_under`]).
pub fn look_up(
    op: &str,
) -> impl Future<Output = Result<Verified<Receipt>, PayError>> + Send + 'static {
    lock(&VERIFIED_UNDER)
        .entry(op.to_owned())
        .or_default()
        .push(idemkit::http::current_key());
    let asked = HTTP.get(format!("{}/effects/{op}", base())).send();
    async move {
        let found: Value = asked
            .await
            .map_err(HttpError::from)?
            .json()
            .await
            .map_err(HttpError::from)?;
        Ok(match found["id"].as_str() {
            Some(id) => Verified::Applied(Receipt { id: id.to_owned() }),
            None => Verified::NotApplied,
        })
    }
}
