//! The layer: its settings (`IdempotencyLayer`, `Config`), the refusal of two layers with one
//! name on one store, and the service it wraps a handler in (`IdempotencyService`; what that
//! does with a request is `service`'s).

use crate::idem::Idem;
use http::header::{CONTENT_TYPE, HeaderName};
use http::request::Parts;
use http::{Method, StatusCode};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub(super) type Scope = dyn Fn(&Parts) -> Option<String> + Send + Sync;

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
/// | the handler started, then the client went away | the run goes on (it is spawned, detached from the connection): repeats wait or get `409`, then the replay (unless [`cancel_on_disconnect`](IdempotencyLayer::cancel_on_disconnect)) |
/// | the handler panicked, or its body broke off | `500` saying it ran and how it is settled (`idemkit resolve`); never run again unless [`handler_resends`](IdempotencyLayer::handler_resends) |
/// | an empty key, or one over [`MAX_KEY_LENGTH`](crate::http::MAX_KEY_LENGTH) | `400` stating the bound |
/// | a `text/event-stream` response, or one over [`max_response_bytes`](IdempotencyLayer::max_response_bytes) | streamed on, recorded as ran and not kept; repeats get `500` saying so |
///
/// The handler's response is not stored when its status is one that says nothing was done
/// (default: `429` and `503`, see [`stores`](IdempotencyLayer::stores)): it goes out as it is
/// and the key is released. While the handler runs its lease is renewed (S12); a handler whose
/// process dies leaves its record to be taken over once the lease ends (S8): the next request
/// with the key is told it ran and how it is settled (S25), or, with
/// [`handler_resends`](IdempotencyLayer::handler_resends), runs the handler again with the same
/// key, which the handler finds in the request's extensions as an [`IdempotencyKey`](crate::IdempotencyKey).
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
    pub(super) config: Arc<Config>,
}

#[derive(Clone)]
pub(super) struct Config {
    pub(super) idem: Idem,
    pub(super) name: String,
    pub(super) required: bool,
    pub(super) methods: Vec<Method>,
    pub(super) max_body: usize,
    pub(super) max_response: usize,
    pub(super) in_flight_wait: Duration,
    pub(super) lease: Option<Duration>,
    pub(super) ttl: Option<Duration>,
    pub(super) stored_headers: Vec<HeaderName>,
    pub(super) stores: fn(StatusCode) -> bool,
    pub(super) scope: Option<Arc<Scope>>,
    pub(super) handler_resends: bool,
    /// The run awaited in the request's own future, not spawned
    /// ([`IdempotencyLayer::cancel_on_disconnect`]).
    pub(super) cancel_on_disconnect: bool,
    /// Which layer this is (its clones, configured or not, are the same one), and where it was made.
    pub(super) identity: Arc<std::panic::Location<'static>>,
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
            .field("cancel_on_disconnect", &c.cancel_on_disconnect)
            .finish_non_exhaustive()
    }
}

/// The default of [`IdempotencyLayer::stores`]: every status but `429` and `503`, which say the
/// request was not executed (Stripe saves no result for a request that did not start executing).
pub(super) fn stored_unless_refused(status: StatusCode) -> bool {
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
                cancel_on_disconnect: false,
                identity: Arc::new(*std::panic::Location::caller()),
            }),
        }
    }

    pub(super) fn with(mut self, f: impl FnOnce(&mut Config)) -> Self {
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
    /// deduplicates its own effects by the [`IdempotencyKey`](crate::IdempotencyKey) in the request's extensions (a
    /// unique constraint on it, a provider it passes the key to). With `true`, a request whose
    /// handler ran but whose answer is unknown (it panicked, its response broke off, its process
    /// died) runs the handler again on the next request with the key (S20's re-send); with
    /// `false` (S25) the record is kept and every such request is told the request ran and how an
    /// operator settles it (`idemkit resolve`).
    pub fn handler_resends(self, yes: bool) -> Self {
        self.with(|c| c.handler_resends = yes)
    }

    /// Whether a keyed request's run is cut off when its client goes away (default `false`).
    ///
    /// By default the run (claim, handler, response stored) is spawned, detached from the
    /// connection (S25): a client that goes away, or a timeout layer outside this one, does not
    /// stop it, and a repeat gets its stored response. With `true` the run is awaited in the
    /// request's own future instead: when hyper (or a timeout) drops that future, the handler
    /// is dropped where it stands, and the record is kept as unknown, as after a panic. That
    /// saves the handler's work when nobody waits for it (a long generation, a slow report),
    /// and suits a handler that is itself safe to re-run
    /// ([`handler_resends(true)`](Self::handler_resends): it deduplicates its own effects by
    /// the key), whose next request then runs it again. Without `handler_resends`, every
    /// request whose client went away is kept as unknown: the repeat is told it ran and how it
    /// is settled (`idemkit resolve`), never run again.
    ///
    /// A handler that cannot deduplicate its effects must not have both: the surface × fault
    /// matrix (`tests/surface_faults.rs`) counts two effects for a client that went away with
    /// `cancel_on_disconnect(true)` and `handler_resends(true)`.
    pub fn cancel_on_disconnect(self, yes: bool) -> Self {
        self.with(|c| c.cancel_on_disconnect = yes)
    }

    /// Which of the handler's statuses are stored and replayed (default: all but `429` and
    /// `503`). A response not stored goes out as it is and releases the key, so a retry runs the
    /// handler again.
    pub fn stores(self, stores: fn(StatusCode) -> bool) -> Self {
        self.with(|c| c.stores = stores)
    }
}

/// The layers in use: (store, name) → the layer, while it lives.
pub(super) type Registered = Vec<(
    usize,
    String,
    std::sync::Weak<std::panic::Location<'static>>,
)>;
pub(super) static LAYERS: Mutex<Registered> = Mutex::new(Vec::new());

/// Issue 39 item 8, as S21 is for tools: two layers with one name on one store are refused when
/// the second is applied, naming both places.
pub(super) fn register(config: &Config) {
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

/// The service [`IdempotencyLayer`] wraps a handler in.
#[derive(Clone)]
pub struct IdempotencyService<S> {
    pub(super) inner: S,
    pub(super) config: Arc<Config>,
}

impl<S> std::fmt::Debug for IdempotencyService<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdempotencyService")
            .field("name", &self.config.name)
            .finish_non_exhaustive()
    }
}
