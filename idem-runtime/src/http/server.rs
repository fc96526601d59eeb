//! The server side: a tower layer that gives an API the Idempotency-Key draft's semantics, run as
//! a side effect on idemkit's executor, so a keyed request is claimed, leased, renewed, fenced and
//! recorded exactly as a tool call is (and listed by `idemkit list`, shown by `idemkit show`).
//!
//! A keyed request is one call of a tool named by [`IdempotencyLayer::name`] (default `http`),
//! whose one key field is the client's key (`idempotency_key`, text) and whose fingerprint is the
//! request's method, path and query, and body (SHA-256). Its scope, when
//! [`IdempotencyLayer::scope`] gives one, is the call's tenant (S18): the record's key is the
//! tenant's own, and the handler runs under [`as_tenant`](crate::as_tenant), so tools it calls
//! are scoped too.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE, HeaderName, HeaderValue};
use http::request::Parts;
use http::{Method, Request, Response, StatusCode, response};
use http_body::Body;
use http_body_util::{BodyExt, Either, Full, LengthLimitError, Limited};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{IDEMPOTENCY_KEY, MAX_KEY_LENGTH, REPLAYED, parse_sf_string};
use crate::error::{Error, StoreErrorKind};
use crate::exec::Tool;
use crate::fingerprint::Fingerprint;
use crate::idem::{Idem, TaskScope};
use crate::key::IdempotencyKey;
use crate::retry::{Classify, Failure};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The body of a response through the layer: what the layer made or replayed (`Left`: the first
/// response, collected to be stored, a replay, or the layer's own 4xx), or the handler's own,
/// untouched, for a request the layer lets through (`Right`).
pub type ResponseBody<B> = Either<Full<Bytes>, Either<B, Prefixed<B>>>;

/// A handler's response body streamed on after the layer read its first frames (it went over
/// [`IdempotencyLayer::max_response_bytes`]): those frames, then the rest as it comes.
pub struct Prefixed<B> {
    prefix: std::collections::VecDeque<Bytes>,
    rest: Pin<Box<B>>,
}

impl<B> std::fmt::Debug for Prefixed<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prefixed")
            .field("prefix", &self.prefix.len())
            .finish_non_exhaustive()
    }
}

impl<B: Body<Data = Bytes>> Body for Prefixed<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, B::Error>>> {
        if let Some(data) = self.prefix.pop_front() {
            return Poll::Ready(Some(Ok(http_body::Frame::data(data))));
        }
        self.rest.as_mut().poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.prefix.is_empty() && self.rest.is_end_stream()
    }
}

/// A handler's response body as the layer hands it on: read whole, or streamed (not stored).
enum Read<B> {
    Whole(Bytes),
    Streamed(ResponseBody<B>, &'static str),
}

/// Reads `body` whole unless it is an event stream (`text/event-stream`), says it is longer than
/// `bound`, or turns out to be: those are handed on as they come.
async fn read_bounded<B: Body<Data = Bytes>>(
    head: &response::Parts,
    body: B,
    bound: usize,
) -> Result<Read<B>, B::Error> {
    let event_stream = head
        .headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim_start()
                .to_ascii_lowercase()
                .starts_with("text/event-stream")
        });
    if event_stream {
        return Ok(Read::Streamed(
            Either::Right(Either::Left(body)),
            "an event stream (`text/event-stream`)",
        ));
    }
    let over = "longer than the layer's `max_response_bytes`";
    if body.size_hint().lower() > bound as u64 {
        return Ok(Read::Streamed(Either::Right(Either::Left(body)), over));
    }
    let mut body = Box::pin(body);
    let mut prefix = std::collections::VecDeque::new();
    let mut len = 0;
    while let Some(frame) = body.frame().await {
        // Trailers are not stored (nor were they before a bound).
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        len += data.len();
        prefix.push_back(data);
        if len > bound {
            let rest = Prefixed { prefix, rest: body };
            return Ok(Read::Streamed(Either::Right(Either::Right(rest)), over));
        }
    }
    let mut whole = bytes::BytesMut::with_capacity(len);
    for data in prefix {
        whole.extend_from_slice(&data);
    }
    Ok(Read::Whole(whole.freeze()))
}

type Scope = dyn Fn(&Parts) -> Option<String> + Send + Sync;

/// A tower [`Layer`](tower_layer::Layer) implementing the server side of the Idempotency-Key
/// draft (draft-ietf-httpapi-idempotency-key-header-09) on idemkit's stores.
///
/// For a request whose method is one of [`methods`](IdempotencyLayer::methods) (default `POST`
/// and `PATCH`):
///
/// | request | answer |
/// | --- | --- |
/// | the first with its key | the handler's response; its status, [chosen headers](IdempotencyLayer::store_headers) and body are stored under the key and scope |
/// | the same key and payload again | the stored response, marked `Idempotent-Replayed: true`; the handler does not run |
/// | the same key, another method, path, query or body | `422`, the handler does not run |
/// | the same key while the first is running | `409` (or, with [`in_flight_wait`](IdempotencyLayer::in_flight_wait), the first's response once it is stored) |
/// | no key, where [required](IdempotencyLayer::require_key) | `400`; otherwise let through, not recorded |
/// | a key that is not an sf-string (nor a bare token), or given twice | `400` |
/// | a body over [`max_body_bytes`](IdempotencyLayer::max_body_bytes) | `413` |
/// | the store fails | `503`, the handler does not run (fail closed) |
/// | the handler started, then the client went away | the run goes on (it is spawned, detached from the connection): repeats wait or get `409`, then the replay |
/// | the handler panicked, or its body broke off | `500` saying it ran and how it is settled (`idemkit resolve`); never run again unless [`handler_resends`](IdempotencyLayer::handler_resends) |
/// | an empty key, or one over [`MAX_KEY_LENGTH`](super::MAX_KEY_LENGTH) | `400` stating the bound |
/// | a `text/event-stream` response, or one over [`max_response_bytes`](IdempotencyLayer::max_response_bytes) | streamed on, recorded as ran and not kept; repeats get `500` saying so |
///
/// The handler's response is not stored when its status is one that says nothing was done
/// (default: `429` and `503`, see [`stores`](IdempotencyLayer::stores)): it goes out as it is
/// and the key is released. While the handler runs its lease is renewed (S12); a handler whose
/// process dies leaves its record to be taken over once the lease ends (S8): the next request
/// with the key is told it ran and how it is settled (S25), or, with
/// [`handler_resends`](IdempotencyLayer::handler_resends), runs the handler again with the same
/// key, which the handler finds in the request's extensions as an [`IdempotencyKey`].
///
/// It wraps any tower service of `http::Request<B>` whose body `B` can be made from `Bytes`
/// (axum's `Body`, http-body-util's `Full`): a keyed body is read whole, then handed on.
///
/// ```
/// use axum::{Router, routing::post};
/// use idem_runtime::http::IdempotencyLayer;
/// use idem_runtime::{Idem, MemoryStore};
///
/// let layer = IdempotencyLayer::new(Idem::new(MemoryStore::new()))
///     .name("payments.charges")
///     .require_key(true)
///     // The authenticated principal, set by an auth layer outside this one.
///     .scope(|parts| parts.headers.get("x-account").and_then(|v| v.to_str().ok()).map(str::to_owned));
/// let app: Router = Router::new().route("/v1/charges", post(|| async { "charged" })).layer(layer);
/// # let _ = app;
/// ```
#[derive(Clone)]
#[must_use]
pub struct IdempotencyLayer {
    config: Arc<Config>,
}

#[derive(Clone)]
struct Config {
    idem: Idem,
    name: String,
    required: bool,
    methods: Vec<Method>,
    max_body: usize,
    max_response: usize,
    in_flight_wait: Duration,
    lease: Option<Duration>,
    ttl: Option<Duration>,
    stored_headers: Vec<HeaderName>,
    stores: fn(StatusCode) -> bool,
    scope: Option<Arc<Scope>>,
    handler_resends: bool,
    /// The run awaited in the request's own future (before S25), not spawned: the broken
    /// variant of the fault matrix only.
    attached: bool,
    /// Which layer this is (its clones, configured or not, are the same one), and where it was made.
    identity: Arc<std::panic::Location<'static>>,
}

impl std::fmt::Debug for IdempotencyLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = &self.config;
        f.debug_struct("IdempotencyLayer")
            .field("name", &c.name)
            .field("required", &c.required)
            .field("methods", &c.methods)
            .field("max_body", &c.max_body)
            .field("in_flight_wait", &c.in_flight_wait)
            .field("scoped", &c.scope.is_some())
            .field("handler_resends", &c.handler_resends)
            .finish_non_exhaustive()
    }
}

/// The default of [`IdempotencyLayer::stores`]: every status but `429` and `503`, which say the
/// request was not executed (Stripe saves no result for a request that did not start executing).
fn stored_unless_refused(status: StatusCode) -> bool {
    !matches!(
        status,
        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
    )
}

impl IdempotencyLayer {
    /// The layer, recording in `idem`'s store with its lease and ttl.
    ///
    /// Two layers (not clones of one) with the same [`name`](IdempotencyLayer::name) on the same
    /// store would share records (one's key replayed to, or refused on, the other's routes): the
    /// second one's [`layer`](tower_layer::Layer::layer), when the app is built, panics naming
    /// where both were made. Give each its own name.
    #[track_caller]
    pub fn new(idem: Idem) -> Self {
        IdempotencyLayer {
            config: Arc::new(Config {
                idem,
                name: "http".to_owned(),
                required: false,
                methods: vec![Method::POST, Method::PATCH],
                max_body: 1024 * 1024,
                max_response: 1024 * 1024,
                in_flight_wait: Duration::ZERO,
                lease: None,
                ttl: None,
                stored_headers: vec![
                    CONTENT_TYPE,
                    http::header::CONTENT_LANGUAGE,
                    http::header::LOCATION,
                    http::header::ETAG,
                ],
                stores: stored_unless_refused,
                scope: None,
                handler_resends: false,
                attached: false,
                identity: Arc::new(*std::panic::Location::caller()),
            }),
        }
    }

    fn with(mut self, f: impl FnOnce(&mut Config)) -> Self {
        // A layer configured after it was cloned gets a copy of its own.
        f(Arc::make_mut(&mut self.config));
        self
    }

    /// The tool name its records are kept under (default `http`): part of every key, and what
    /// `idemkit list --tool` filters by. The key of a request is then
    /// `idemkit key NAME idempotency_key=<the client's key>` (unscoped).
    pub fn name(self, name: impl Into<String>) -> Self {
        let name = name.into();
        self.with(|c| c.name = name)
    }

    /// Whether a request of these methods without a key is refused with `400` (`true`) or let
    /// through unrecorded (`false`, the default).
    pub fn require_key(self, required: bool) -> Self {
        self.with(|c| c.required = required)
    }

    /// The methods keys apply to (default `POST` and `PATCH`, the draft's non-idempotent ones);
    /// other requests pass through untouched.
    pub fn methods(self, methods: impl IntoIterator<Item = Method>) -> Self {
        let methods = methods.into_iter().collect();
        self.with(|c| c.methods = methods)
    }

    /// The scope of a request's key (S18), e.g. the authenticated principal: keys of two scopes
    /// never meet. A keyed request for which it answers `None` is refused with `401`.
    pub fn scope(self, scope: impl Fn(&Parts) -> Option<String> + Send + Sync + 'static) -> Self {
        self.with(|c| c.scope = Some(Arc::new(scope)))
    }

    /// Request bodies longer than this are refused with `413` (default 1 MiB): a keyed body is
    /// read whole, to fingerprint it, before the handler runs.
    pub fn max_body_bytes(self, bytes: usize) -> Self {
        self.with(|c| c.max_body = bytes)
    }

    /// Responses longer than this (as stored) are not stored to be replayed (default 1 MiB): the
    /// first request still gets its response; repeats get `500` saying the request was executed
    /// (S16).
    pub fn max_response_bytes(self, bytes: usize) -> Self {
        self.with(|c| c.max_response = bytes)
    }

    /// How long a repeat waits for the first request of its key to finish before `409` (default
    /// zero: `409` at once, as the draft has it); a repeat whose first finishes meanwhile gets its
    /// response.
    pub fn in_flight_wait(self, wait: Duration) -> Self {
        self.with(|c| c.in_flight_wait = wait)
    }

    /// How long a running request holds its key before another may take it over (default: the
    /// runtime's); renewed while the handler runs.
    pub fn lease(self, lease: Duration) -> Self {
        self.with(|c| c.lease = Some(lease))
    }

    /// How long responses are kept (default: the runtime's, 24 h): the key's expiry the draft
    /// asks a server to publish.
    pub fn ttl(self, ttl: Duration) -> Self {
        self.with(|c| c.ttl = Some(ttl))
    }

    /// The response headers stored with status and body, and replayed (default `Content-Type`,
    /// `Content-Language`, `Location`, `ETag`). Only values of visible ASCII are stored.
    pub fn store_headers(self, names: impl IntoIterator<Item = HeaderName>) -> Self {
        let names = names.into_iter().collect();
        self.with(|c| c.stored_headers = names)
    }

    /// Whether the handler is itself safe to re-run under the same key (default `false`): it
    /// deduplicates its own effects by the [`IdempotencyKey`] in the request's extensions (a
    /// unique constraint on it, a provider it passes the key to). With `true`, a request whose
    /// handler ran but whose answer is unknown (it panicked, its response broke off, its process
    /// died) runs the handler again on the next request with the key (S20's re-send); with
    /// `false` (S25) the record is kept and every such request is told the request ran and how an
    /// operator settles it (`idemkit resolve`).
    pub fn handler_resends(self, yes: bool) -> Self {
        self.with(|c| c.handler_resends = yes)
    }

    /// Runs the handler inside the request's own future, as the layer did before S25, so that a
    /// client that goes away cuts the run off. Not a stable API: it exists so that the fault
    /// matrix (`tests/surface_faults.rs`) can show that it catches issue 40's first hole
    /// re-introduced; nothing else should set it.
    #[doc(hidden)]
    pub fn attached_to_connection(self, yes: bool) -> Self {
        self.with(|c| c.attached = yes)
    }

    /// Which of the handler's statuses are stored and replayed (default: all but `429` and
    /// `503`). A response not stored goes out as it is and releases the key, so a retry runs the
    /// handler again.
    pub fn stores(self, stores: fn(StatusCode) -> bool) -> Self {
        self.with(|c| c.stores = stores)
    }
}

impl<S> tower_layer::Layer<S> for IdempotencyLayer {
    type Service = IdempotencyService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        register(&self.config);
        IdempotencyService {
            inner,
            config: self.config.clone(),
        }
    }
}

/// The layers in use: (store, name) → the layer, while it lives.
type Registered = Vec<(
    usize,
    String,
    std::sync::Weak<std::panic::Location<'static>>,
)>;
static LAYERS: Mutex<Registered> = Mutex::new(Vec::new());

/// Issue 39 item 8, as S21 is for tools: two layers with one name on one store are refused when
/// the second is applied, naming both places.
fn register(config: &Config) {
    let store = Arc::as_ptr(config.idem.store()).cast::<()>() as usize;
    let mut layers = LAYERS.lock().unwrap_or_else(|p| p.into_inner());
    layers.retain(|(_, _, layer)| layer.strong_count() > 0);
    let other = layers.iter().find_map(|(s, name, layer)| {
        let layer = layer.upgrade()?;
        (*s == store && *name == config.name && !Arc::ptr_eq(&layer, &config.identity))
            .then_some(layer)
    });
    if let Some(other) = other {
        panic!(
            "idemkit: two IdempotencyLayers named `{name}` on one store (made at {other} and at {this}) would share \
             their records: a key used on one's routes would be replayed or refused on the other's. Give each its \
             own `.name(\"…\")`, or apply one layer (clones of it are the same layer) to both routes",
            name = config.name,
            this = config.identity,
        );
    }
    if !layers.iter().any(|(s, name, layer)| {
        *s == store && *name == config.name && layer.as_ptr() == Arc::as_ptr(&config.identity)
    }) {
        layers.push((store, config.name.clone(), Arc::downgrade(&config.identity)));
    }
}

/// The service [`IdempotencyLayer`] wraps a handler in.
#[derive(Clone)]
pub struct IdempotencyService<S> {
    inner: S,
    config: Arc<Config>,
}

impl<S> std::fmt::Debug for IdempotencyService<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdempotencyService")
            .field("name", &self.config.name)
            .finish_non_exhaustive()
    }
}

impl<S, ReqBody, ResBody> tower_service::Service<Request<ReqBody>> for IdempotencyService<S>
where
    S: tower_service::Service<Request<ReqBody>, Response = Response<ResBody>>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
    S::Error: Send + 'static,
    ReqBody: Body + From<Bytes> + Send + 'static,
    ReqBody::Data: Send,
    ReqBody::Error: Into<BoxError>,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        // The clone made ready by `poll_ready` serves this request; its twin the next one.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(serve(self.config.clone(), inner, req))
    }
}

/// A response as stored: status, the chosen headers, the body.
#[derive(Serialize, Deserialize)]
struct Stored {
    status: u16,
    headers: Vec<(String, String)>,
    body: StoredBody,
}

/// A body as stored: as text when it is UTF-8 (JSON APIs: readable in `idemkit show`), else hex.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum StoredBody {
    Text(String),
    Hex(String),
    /// Streamed to the first request and not kept (why): the request ran; repeats are told so.
    Streamed(String),
}

impl Stored {
    fn of(parts: &response::Parts, names: &[HeaderName], body: &Bytes) -> Stored {
        let headers = names
            .iter()
            .flat_map(|name| {
                parts.headers.get_all(name).iter().filter_map(move |value| {
                    Some((name.as_str().to_owned(), value.to_str().ok()?.to_owned()))
                })
            })
            .collect();
        let body = match std::str::from_utf8(body) {
            Ok(text) => StoredBody::Text(text.to_owned()),
            Err(_) => StoredBody::Hex(hex(body)),
        };
        Stored {
            status: parts.status.as_u16(),
            headers,
            body,
        }
    }

    /// The record of a response streamed on, not kept.
    fn streamed(parts: &response::Parts, why: &str) -> Stored {
        Stored {
            status: parts.status.as_u16(),
            headers: Vec::new(),
            body: StoredBody::Streamed(why.to_owned()),
        }
    }

    /// The stored response, marked as a replay.
    fn replay<B>(self, key: &IdempotencyKey) -> Response<ResponseBody<B>> {
        let body = match self.body {
            StoredBody::Text(text) => Bytes::from(text),
            StoredBody::Hex(hex) => Bytes::from(unhex(&hex)),
            StoredBody::Streamed(why) => {
                return problem(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "The request ran; its response was streamed and is not kept",
                    &format!(
                        "the request with this Idempotency-Key ran (status {}), and its response, {why}, went to the \
                         first request as it came, not kept to be replayed; it will not be run again under this key \
                         (record {key})",
                        self.status
                    ),
                );
            }
        };
        let mut response = Response::new(Either::Left(Full::new(body)));
        *response.status_mut() =
            StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let headers = response.headers_mut();
        for (name, value) in self.headers {
            if let (Ok(name), Ok(value)) =
                (HeaderName::try_from(name), HeaderValue::try_from(value))
            {
                headers.append(name, value);
            }
        }
        headers.insert(REPLAYED, HeaderValue::from_static("true"));
        response
    }
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

fn unhex(hex: &str) -> Vec<u8> {
    (0..hex.len() / 2)
        .filter_map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok())
        .collect()
}

/// What a handler's run came to when it is not a response to store.
enum Served<E, B> {
    /// A response the handler says did nothing (`stores` refused its status): released.
    NotStored(Box<(response::Parts, ResponseBody<B>)>),
    /// The handler failed without a response: it may have done anything.
    Inner(E),
    /// The handler's response body broke off: it ran, and may have done anything.
    Body(BoxError),
    /// The handler panicked: it ran, and may have done anything.
    Panicked(String),
    /// idemkit refused or ended the call.
    Idem(Error),
}

impl<E, B> Classify for Served<E, B> {
    fn classify(&self) -> Failure {
        match self {
            Served::NotStored(..) | Served::Idem(_) => Failure::Permanent,
            Served::Inner(_) | Served::Body(_) | Served::Panicked(_) => Failure::Ambiguous,
        }
    }
}

impl<E, B> From<Error> for Served<E, B> {
    fn from(e: Error) -> Self {
        Served::Idem(e)
    }
}

/// The request's fingerprint: method, path and query, body. A JSON body (`application/json`,
/// `…+json`) counts by its canonical form (object keys sorted, whitespace insignificant, as a
/// tool's arguments are fingerprinted), a form body (`application/x-www-form-urlencoded`) by its
/// decoded pairs sorted by name; any other body, or one that does not parse, by its bytes.
fn fingerprint(parts: &Parts, body: &[u8]) -> Fingerprint {
    let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let essence = parts
        .headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|v| v.trim().to_ascii_lowercase())
        .unwrap_or_default();
    let canonical = if essence == "application/json" || essence.ends_with("+json") {
        serde_json::from_slice::<serde_json::Value>(body)
            .ok()
            .map(|json| Fingerprint::of_value(&json))
    } else if essence == "application/x-www-form-urlencoded" {
        Some(form_fingerprint(body))
    } else {
        None
    };
    // Bytes keep the first version's tag, so records of byte bodies still match.
    let (tag, body) = match &canonical {
        Some(canonical) => (
            b"idemkit:http:v2:canonical".as_slice(),
            canonical.0.as_slice(),
        ),
        None => (b"idemkit:http:v1".as_slice(), body),
    };
    let mut hasher = Sha256::new();
    for part in [
        tag,
        parts.method.as_str().as_bytes(),
        target.as_bytes(),
        body,
    ] {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part);
    }
    Fingerprint(hasher.finalize().into())
}

/// A form body's pairs, percent-decoded and sorted by name (a name given twice keeps its
/// values' order), as a JSON list of pairs.
fn form_fingerprint(body: &[u8]) -> Fingerprint {
    let mut pairs: Vec<(String, String)> = body
        .split(|&b| b == b'&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let mut halves = pair.splitn(2, |&b| b == b'=');
            let name = form_decode(halves.next().unwrap_or_default());
            (name, form_decode(halves.next().unwrap_or_default()))
        })
        .collect();
    pairs.sort_by(|a, b| a.0.cmp(&b.0));
    Fingerprint::of_value(&serde_json::json!(pairs))
}

/// `application/x-www-form-urlencoded` decoding: `+` is a space, `%XX` a byte.
fn form_decode(part: &[u8]) -> String {
    let mut out = Vec::with_capacity(part.len());
    let mut i = 0;
    while i < part.len() {
        match part[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < part.len() => {
                match std::str::from_utf8(&part[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The bound the messages below state is [`MAX_KEY_LENGTH`].
const _: () = assert!(MAX_KEY_LENGTH == 255);

fn client_key(headers: &http::HeaderMap) -> Result<Option<String>, &'static str> {
    let mut values = headers.get_all(IDEMPOTENCY_KEY).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err("the request has more than one Idempotency-Key header");
    }
    let raw = value.as_bytes().trim_ascii();
    if raw.is_empty() || raw == b"\"\"" {
        return Err(
            "the Idempotency-Key is empty: a key is 1 to 255 characters of printable ASCII",
        );
    }
    let key = parse_sf_string(raw).ok_or(
        "the Idempotency-Key header is not a structured-field string (a quoted key of printable ASCII)",
    )?;
    if key.len() > MAX_KEY_LENGTH {
        return Err(
            "the Idempotency-Key is too long: a key is 1 to 255 characters of printable ASCII",
        );
    }
    Ok(Some(key))
}

/// A response the layer makes itself (RFC 9457 problem details, as the draft's examples).
fn problem<B>(status: StatusCode, title: &str, detail: &str) -> Response<ResponseBody<B>> {
    let body = serde_json::json!({
        "type": "about:blank",
        "title": title,
        "status": status.as_u16(),
        "detail": detail,
    });
    let mut response = Response::new(Either::Left(Full::new(Bytes::from(body.to_string()))));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    response
}

async fn serve<S, ReqBody, ResBody>(
    config: Arc<Config>,
    mut inner: S,
    req: Request<ReqBody>,
) -> Result<Response<ResponseBody<ResBody>>, S::Error>
where
    S: tower_service::Service<Request<ReqBody>, Response = Response<ResBody>> + Send + 'static,
    S::Future: Send,
    S::Error: Send + 'static,
    ReqBody: Body + From<Bytes> + Send + 'static,
    ReqBody::Data: Send,
    ReqBody::Error: Into<BoxError>,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    let through = |response: Response<ResBody>| response.map(|b| Either::Right(Either::Left(b)));
    if !config.methods.contains(req.method()) {
        return inner.call(req).await.map(through);
    }
    let client_key = match client_key(req.headers()) {
        Ok(Some(key)) => key,
        Ok(None) if !config.required => return inner.call(req).await.map(through),
        Ok(None) => {
            return Ok(problem(
                StatusCode::BAD_REQUEST,
                "Idempotency-Key is missing",
                "this operation is idempotent and requires an Idempotency-Key header",
            ));
        }
        Err(why) => {
            return Ok(problem(
                StatusCode::BAD_REQUEST,
                "Idempotency-Key is malformed",
                why,
            ));
        }
    };
    let (parts, body) = req.into_parts();
    let scope = match &config.scope {
        None => None,
        Some(scope) => match scope(&parts) {
            Some(scope) => Some(scope),
            None => {
                return Ok(problem(
                    StatusCode::UNAUTHORIZED,
                    "No scope for the Idempotency-Key",
                    "keys are kept per principal, and this request has none",
                ));
            }
        },
    };
    let too_large = || {
        problem(
            StatusCode::PAYLOAD_TOO_LARGE,
            "Request body too large",
            &format!(
                "a keyed request's body may be at most {} bytes",
                config.max_body
            ),
        )
    };
    let declared = parts
        .headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|len| len > config.max_body as u64) {
        return Ok(too_large());
    }
    let body = match Limited::new(body, config.max_body).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => return Ok(too_large()),
        Err(_) => {
            return Ok(problem(
                StatusCode::BAD_REQUEST,
                "Request body unreadable",
                "the request's body broke off before its end",
            ));
        }
    };
    let fingerprint = fingerprint(&parts, &body);
    let key = IdempotencyKey::derive(&config.name, &[("idempotency_key", &client_key.as_str())]);

    // S25: the run (claim, handler, its response collected, the record completed) is not the
    // connection's: a client that goes away, and hyper dropping this future, do not cut it off.
    // It runs under what this task's calls run under (S26: the scoped runtime, the tenant, the
    // operation), the layer's scope as the tenant. Boxed where it is made: the scope's wrappers
    // and the spawned task then move a pointer, not the run's state (kilobytes, copied a dozen
    // times per request).
    let run = Box::pin(run_keyed(
        config.clone(),
        key,
        fingerprint,
        parts,
        body,
        inner,
    ));
    let task = TaskScope::capture().tenant(scope.map(Arc::<str>::from));
    let run = task.run(run);
    let run = tracing::Instrument::instrument(run, tracing::Span::current());
    if config.attached {
        return run.await;
    }
    match tokio::spawn(run).await {
        Ok(answer) => answer,
        // Not reached: the handler's panic is caught in its attempt; the layer's own would be a bug.
        Err(e) => Ok(unknown_outcome(
            &config,
            &key,
            &format!("the request's task ended: {e}"),
        )),
    }
}

/// One keyed request's run through the executor: the handler at most once per key (unless
/// [`IdempotencyLayer::handler_resends`]), its response stored, or the stored one replayed.
async fn run_keyed<S, ReqBody, ResBody>(
    config: Arc<Config>,
    key: IdempotencyKey,
    fingerprint: Fingerprint,
    parts: Parts,
    body: Bytes,
    inner: S,
) -> Result<Response<ResponseBody<ResBody>>, S::Error>
where
    S: tower_service::Service<Request<ReqBody>, Response = Response<ResBody>> + Send,
    S::Future: Send,
    S::Error: Send,
    ReqBody: Body + From<Bytes> + Send,
    ResBody: Body<Data = Bytes> + Send,
    ResBody::Error: Into<BoxError>,
{
    // The record's key, as `idemkit resolve` takes it.
    let record_key = crate::idem::task_tenant().map_or(key, |t| key.for_tenant(&t));
    // The handler's own response head, when it ran in this request (absent: a replay).
    let first: Mutex<Option<(response::Parts, ResponseBody<ResBody>)>> = Mutex::new(None);
    let mut request = Some((parts, body, inner));
    let config_ref = &*config;
    let first_ref = &first;
    let attempt = move |key: IdempotencyKey| {
        let taken = request.take();
        let handled = async move {
            let Some((mut parts, body, mut inner)) = taken else {
                unreachable!("idemkit: the layer runs a handler once per request")
            };
            // The handler may key what it does itself (a unique constraint on it).
            parts.extensions.insert(key);
            let response = inner
                .call(Request::from_parts(parts, ReqBody::from(body)))
                .await
                .map_err(Served::Inner)?;
            let (head, body) = response.into_parts();
            let read = read_bounded(&head, body, config_ref.max_response)
                .await
                .map_err(|e| Served::Body(e.into()))?;
            let (stored, body) = match read {
                Read::Whole(body) => (
                    Stored::of(&head, &config_ref.stored_headers, &body),
                    Either::Left(Full::new(body)),
                ),
                // Recorded as ran, its response not kept: never run again, never replayed.
                Read::Streamed(body, why) => (Stored::streamed(&head, why), body),
            };
            if !(config_ref.stores)(head.status) {
                return Err(Served::NotStored(Box::new((head, body))));
            }
            *first_ref.lock().unwrap_or_else(|p| p.into_inner()) = Some((head, body));
            Ok(stored)
        };
        // A panic after the handler started is an unknown outcome, not the end of the task.
        async move {
            CatchUnwind(Box::pin(handled))
                .await
                .unwrap_or_else(|panic| Err(Served::Panicked(panic_message(&*panic))))
        }
    };
    let mut tool = Tool::new(&config.name)
        .idem(&config.idem)
        .max_attempts(1)
        .resend(config.handler_resends)
        .in_flight_wait(config.in_flight_wait)
        // The body is bounded as it is read; its stored form may be longer (hex for bytes that are
        // not UTF-8, the headers, the marker of a streamed response).
        .max_outcome_bytes(config.max_response.saturating_mul(2).saturating_add(4096));
    if let Some(lease) = config.lease {
        tool = tool.lease(lease);
    }
    if let Some(ttl) = config.ttl {
        tool = tool.ttl(ttl);
    }
    let result: Result<Stored, Served<S::Error, ResBody>> =
        tool.run_keyed(key, fingerprint, attempt).await;
    let first = first.into_inner().unwrap_or_else(|p| p.into_inner());
    match result {
        Ok(stored) => Ok(match first {
            Some((head, body)) => Response::from_parts(head, body),
            None => stored.replay(&record_key),
        }),
        Err(Served::NotStored(first)) => Ok(Response::from_parts(first.0, first.1)),
        Err(Served::Inner(e)) => Err(e),
        Err(Served::Body(e)) => Ok(unknown_outcome(
            &config,
            &record_key,
            &format!("its response broke off ({e})"),
        )),
        Err(Served::Panicked(why)) => Ok(unknown_outcome(
            &config,
            &record_key,
            &format!("its handler panicked ({why})"),
        )),
        Err(Served::Idem(e)) => Ok(refusal(&config, &e)),
    }
}

/// Polls a future, catching a panic in it (`futures::FutureExt::catch_unwind` without the crate).
struct CatchUnwind<F>(Pin<Box<F>>);

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, Box<dyn std::any::Any + Send>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = self.0.as_mut();
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| inner.poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(out)) => Poll::Ready(Ok(out)),
            Err(panic) => Poll::Ready(Err(panic)),
        }
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".to_owned())
}

/// S25: the handler ran and its answer is unknown. Kept, never run again under the key (unless
/// the layer is told the handler is safe to re-run); an operator settles it.
fn unknown_outcome<B>(
    config: &Config,
    key: &IdempotencyKey,
    why: &str,
) -> Response<ResponseBody<B>> {
    let then = if config.handler_resends {
        "The layer is told the handler is safe to re-run: a request with the same Idempotency-Key runs it again."
    } else {
        "It will not be run again under this Idempotency-Key; until an operator settles it, a request with the same key gets this answer."
    };
    problem(
        StatusCode::INTERNAL_SERVER_ERROR,
        "The request ran; its outcome is unknown",
        &format!(
            "the request with this Idempotency-Key ran, and {why}: its effect may have happened. {then} \
             To settle it, look the effect up, then `idemkit resolve {key} applied --outcome JSON` or \
             `idemkit resolve {key} not-applied` (the record's key)."
        ),
    )
}

/// What idemkit's refusal of a keyed request says to its client, in HTTP's terms (the record's
/// key only where an operator needs it).
fn refusal<B>(config: &Config, e: &Error) -> Response<ResponseBody<B>> {
    let (status, title, detail) = match e {
        Error::KeyReuse { .. } => (
            StatusCode::UNPROCESSABLE_ENTITY,
            "Idempotency-Key is already used with another payload",
            "this Idempotency-Key was first used for a request with another method, path, query or \
             body; the request was not run. Send a new request with a new key"
                .to_owned(),
        ),
        Error::InFlight { .. } => (
            StatusCode::CONFLICT,
            "A request with this Idempotency-Key is being processed",
            "the first request with this Idempotency-Key has not finished; this one was not run. \
             Retry later with the same key: once the first finishes, its response is replayed"
                .to_owned(),
        ),
        Error::Ambiguous { key, .. } => {
            return unknown_outcome(config, key, "its answer is unknown (it panicked, its response broke off, or its process died)");
        }
        Error::Unreplayable { key, reason, .. } => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "The request ran; its response cannot be replayed",
            format!(
                "the request with this Idempotency-Key ran, but its response was not kept to be replayed \
                 ({reason}); it will not be run again under this key (record {key})"
            ),
        ),
        // Fail closed: nothing ran; a retry may find the store back. (A record that cannot be
        // read, corrupt or of another version, is not a retry's to fix: 500, below.)
        Error::Store { source, .. }
            if matches!(
                source.kind(),
                StoreErrorKind::Unavailable | StoreErrorKind::Other
            ) =>
        {
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "The idempotency store is unavailable",
                format!("the request was not run: {source}. Retry with the same Idempotency-Key"),
            )
        }
        _ => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "The request's outcome under this Idempotency-Key cannot be given",
            e.to_string(),
        ),
    };
    problem(status, title, &detail)
}

#[cfg(test)]
mod tests {
    use http::StatusCode;

    use super::refusal;
    use crate::error::{Error, StoreError, StoreErrorKind};

    /// A store that cannot be reached is worth a retry (503); a record that cannot be read is
    /// not (500): an earlier request may have run, and only an operator can tell.
    #[test]
    fn a_store_failure_is_503_only_when_a_retry_can_help() {
        let status = |kind| {
            let e = Error::Store {
                tool: "http".to_owned(),
                key: None,
                source: StoreError::new(kind, "x"),
            };
            let config =
                super::IdempotencyLayer::new(crate::Idem::new(crate::MemoryStore::new())).config;
            refusal::<http_body_util::Empty<bytes::Bytes>>(&config, &e).status()
        };
        assert_eq!(
            status(StoreErrorKind::Unavailable),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(
            status(StoreErrorKind::Corrupt),
            StatusCode::INTERNAL_SERVER_ERROR
        );
        assert_eq!(
            status(StoreErrorKind::Incompatible),
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }
}
