//! What the service the layer wraps a handler in does with a request: let it through,
//! refuse it, or run it as one call of the executor (claimed, spawned apart from its connection,
//! recorded) and answer with the handler's response, a replay or a problem.

use crate::advice::Advice;
use crate::error::{Error, StoreErrorKind};
use crate::exec::Tool;
use crate::fingerprint::Fingerprint;
use crate::http::{IDEMPOTENCY_KEY, MAX_KEY_LENGTH, parse_sf_string};
use crate::key::IdempotencyKey;
use crate::scope::TaskScope;
use crate::sentences::{self, EFFECT_UNKNOWN};
use crate::told::explain::Explanation;
use bytes::Bytes;
use http::header::CONTENT_LENGTH;
use http::request::Parts;
use http::{Request, Response, StatusCode, response};
use http_body::Body;
use http_body_util::{Either, Full};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use super::BoxError;
use super::body::{Read, ResponseBody, Unread, problem, read_bounded, read_request};
use super::fingerprint::fingerprint;
use super::layer::{Config, IdempotencyService};
use super::stored::{Served, Stored};

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
        let mut inner = std::mem::replace(&mut self.inner, clone);
        // Each kind of request has a future of its own size: one let through holds the
        // handler's, a keyed one the layer's run.
        match admit(&self.config, req) {
            Admitted::Through(req) => {
                let handled = inner.call(req);
                Box::pin(async move {
                    let response = handled.await?;
                    Ok(response.map(|b| Either::Right(Either::Left(b))))
                })
            }
            Admitted::Answered(response) => Box::pin(std::future::ready(Ok(response))),
            Admitted::Keyed(keyed) => Box::pin(serve(self.config.clone(), inner, keyed)),
        }
    }
}

/// The bound the messages below state is [`MAX_KEY_LENGTH`].
const _: () = assert!(MAX_KEY_LENGTH == 255);

pub(super) fn client_key(headers: &http::HeaderMap) -> Result<Option<String>, &'static str> {
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

/// What the layer does with a request, decided before anything is awaited.
pub(super) enum Admitted<ReqBody, B> {
    /// Not the layer's (a method it does not key, no key where none is required): to the
    /// handler as it came.
    Through(Request<ReqBody>),
    /// Refused before anything ran: the layer's own answer.
    Answered(Response<ResponseBody<B>>),
    /// Keyed: to run through the executor.
    Keyed(Keyed<ReqBody>),
}

/// A keyed request, its body still to read.
pub(super) struct Keyed<ReqBody> {
    parts: Parts,
    body: ReqBody,
    client_key: String,
    scope: Option<String>,
}

pub(super) fn admit<ReqBody, B>(config: &Config, req: Request<ReqBody>) -> Admitted<ReqBody, B> {
    if !config.methods.contains(req.method()) {
        return Admitted::Through(req);
    }
    let client_key = match client_key(req.headers()) {
        Ok(Some(key)) => key,
        Ok(None) if !config.required => return Admitted::Through(req),
        Ok(None) => {
            return Admitted::Answered(problem(
                StatusCode::BAD_REQUEST,
                "Idempotency-Key is missing",
                "this operation is idempotent and requires an Idempotency-Key header",
                Advice::for_reason("key_missing", false, None),
            ));
        }
        Err(why) => {
            return Admitted::Answered(problem(
                StatusCode::BAD_REQUEST,
                "Idempotency-Key is malformed",
                why,
                Advice::for_reason("key_malformed", false, None),
            ));
        }
    };
    let (parts, body) = req.into_parts();
    let scope = match &config.scope {
        None => None,
        Some(scope) => match scope(&parts) {
            Some(scope) => Some(scope),
            None => {
                return Admitted::Answered(problem(
                    StatusCode::UNAUTHORIZED,
                    "No scope for the Idempotency-Key",
                    "keys are kept per principal, and this request has none",
                    Advice::for_reason("no_tenant", false, None),
                ));
            }
        },
    };
    Admitted::Keyed(Keyed {
        parts,
        body,
        client_key,
        scope,
    })
}

/// A keyed request: its body read, fingerprinted, and run as one call of the executor.
pub(super) async fn serve<S, ReqBody, ResBody>(
    config: Arc<Config>,
    inner: S,
    keyed: Keyed<ReqBody>,
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
    let Keyed {
        parts,
        body,
        client_key,
        scope,
    } = keyed;
    let too_large = || {
        problem(
            StatusCode::PAYLOAD_TOO_LARGE,
            "Request body too large",
            &format!(
                "a keyed request's body may be at most {} bytes",
                config.max_body
            ),
            Advice::for_reason("too_large", false, None),
        )
    };
    let declared = parts
        .headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|len| len > config.max_body as u64) {
        return Ok(too_large());
    }
    let body = match read_request(body, config.max_body).await {
        Ok(body) => body,
        Err(Unread::TooLarge) => return Ok(too_large()),
        Err(Unread::Broken) => {
            return Ok(problem(
                StatusCode::BAD_REQUEST,
                "Request body unreadable",
                "the request's body broke off before its end",
                Advice::for_reason("body_unreadable", false, None),
            ));
        }
    };
    let fingerprint = fingerprint(&parts, &body);
    let key = IdempotencyKey::derive(&config.name, &[("idempotency_key", &client_key.as_str())]);

    // S25: the run (claim, handler, its response collected, the record completed) is not the
    // connection's: a client that goes away, and hyper dropping this future, do not cut it off
    // (unless the layer is told to: `cancel_on_disconnect`).
    // It runs under what this task's calls run under (S26: the scoped runtime, the tenant, the
    // operation), the layer's scope as the tenant. The run's state (under a kilobyte for an
    // axum route: glibc's per-thread cache serves up to 1,032 bytes) is boxed where it is made,
    // and its wrappers once more: from then on a pointer moves, not the state.
    let run = Box::pin(run_keyed(
        config.clone(),
        key,
        fingerprint,
        Box::new((parts, body, inner)),
    ));
    let task = TaskScope::capture().tenant(scope.map(Arc::<str>::from));
    let mut run = Box::pin(tracing::Instrument::instrument(
        task.run(run),
        tracing::Span::current(),
    ));
    if config.cancel_on_disconnect {
        return run.await;
    }
    // Polled once here first: a run that ends in its first poll (a replay, a refusal, a handler
    // that never waits, on a store that answers at once) needs no task of its own, and nothing
    // can cut a poll short (a connection's future is dropped between polls, never inside one).
    // A run that waits goes on in a task of its own, apart from the connection, which waits for
    // its answer.
    let first = std::future::poll_fn(|cx| {
        let polled =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run.as_mut().poll(cx)));
        Poll::Ready(polled)
    })
    .await;
    let why = match first {
        Ok(Poll::Ready(answer)) => return answer,
        Ok(Poll::Pending) => match tokio::spawn(run).await {
            Ok(answer) => return answer,
            Err(e) => format!("the request's task ended: {e}"),
        },
        Err(panic) => format!("the request's run panicked: {}", panic_message(&*panic)),
    };
    // Not reached: the handler's panic is caught in its attempt; the layer's own would be a bug.
    Ok(unknown_outcome(&config, &key, &why))
}

/// One keyed request's run through the executor: the handler at most once per key (unless
/// [`IdempotencyLayer::handler_resends`](super::IdempotencyLayer::handler_resends)), its response stored, or the stored one replayed.
pub(super) async fn run_keyed<S, ReqBody, ResBody>(
    config: Arc<Config>,
    key: IdempotencyKey,
    fingerprint: Fingerprint,
    // Boxed: an async fn keeps its arguments' room for its whole life, beside the attempt that
    // takes them over (the run's future is moved, and allocated, whole).
    request: Box<(Parts, Bytes, S)>,
) -> Result<Response<ResponseBody<ResBody>>, S::Error>
where
    S: tower_service::Service<Request<ReqBody>, Response = Response<ResBody>> + Send,
    S::Future: Send,
    S::Error: Send,
    ReqBody: Body + From<Bytes> + Send,
    ResBody: Body<Data = Bytes> + Send,
    ResBody::Error: Into<BoxError>,
{
    // The handler's own response, when it ran in this request (absent: a replay). Boxed, as
    // the request above: the run's future is allocated and moved whole, and stays small.
    #[allow(clippy::type_complexity)]
    let first: Mutex<Option<Box<(response::Parts, ResponseBody<ResBody>)>>> = Mutex::new(None);
    let mut request = Some(request);
    let config_ref = &*config;
    let first_ref = &first;
    let attempt = move |key: IdempotencyKey| {
        let taken = request.take();
        let handled = async move {
            let Some(request) = taken else {
                unreachable!("idemkit: the layer runs a handler once per request")
            };
            let (mut parts, body, mut inner) = *request;
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
            *first_ref.lock().unwrap_or_else(|p| p.into_inner()) = Some(Box::new((head, body)));
            Ok(stored)
        };
        // A panic after the handler started is an unknown outcome, not the end of the task.
        // Boxed here, not in the block below: the attempt's future then holds a pointer, not the
        // handler's future (the executor's future, which holds the attempt's, is moved whole).
        let handled = CatchUnwind(Box::pin(handled));
        async move {
            handled
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
    // The record's key, as `idemkit resolve` takes it: the tenant's own, by the claim's rule (the
    // task's tenant, else the layer's runtime's).
    let tenant = crate::scope::call_tenant(Some(&config.idem));
    let record_key = crate::scope::record_key(key, tenant.as_deref());
    match result {
        Ok(stored) => Ok(match first {
            Some(first) => Response::from_parts(first.0, first.1),
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
pub(super) struct CatchUnwind<F>(Pin<Box<F>>);

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

pub(super) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".to_owned())
}

/// S25: the handler ran and its answer is unknown. Kept, never run again under the key (unless
/// the layer is told the handler is safe to re-run); an operator settles it.
pub(super) fn unknown_outcome<B>(
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
            "the request with this Idempotency-Key ran, and {why}: {EFFECT_UNKNOWN}. {then} {}. {key} is \
             the record's key, derived from the Idempotency-Key.",
            sentences::how_to_settle(key)
        ),
        // A layer told the handler is safe to re-run runs it again on a repeat.
        Advice::for_reason("ambiguous", config.handler_resends, Some(key.to_string())),
    )
}

/// What idemkit's refusal of a keyed request says to its client, in HTTP's terms (the record's
/// key only where an operator needs it).
pub(super) fn refusal<B>(config: &Config, e: &Error) -> Response<ResponseBody<B>> {
    let (status, title, detail) = match e {
        Error::KeyReuse { .. } => (
            StatusCode::UNPROCESSABLE_ENTITY,
            "Idempotency-Key is already used with another payload",
            format!(
                "this Idempotency-Key was first used for a request with another method, path, query or \
                 body; {}. Send a new request with a new key",
                sentences::was_not_run("the request")
            ),
        ),
        Error::InFlight { .. } => (
            StatusCode::CONFLICT,
            "A request with this Idempotency-Key is being processed",
            format!(
                "the first request with this Idempotency-Key has not finished; {}. Retry later with the \
                 same key: once the first finishes, its response is replayed",
                sentences::was_not_run("this one")
            ),
        ),
        Error::Ambiguous { key, .. } => {
            return unknown_outcome(
                config,
                key,
                "its answer is unknown (it panicked, its response broke off, or its process died)",
            );
        }
        Error::Unreplayable { key, reason, .. } => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "The request ran; its response cannot be replayed",
            format!(
                "the request with this Idempotency-Key ran, but its response was not kept to be replayed \
                 ({reason}); it will not be run again under this key (record {key})"
            ),
        ),
        // S33: done, and past its time-to-live: its response is no longer kept, and it is never
        // run again. 410 Gone: what the key named existed and is permanently gone; neither 409
        // (the draft's "being processed", which clients retry) nor 422 (another payload).
        Error::Expired { done, resolved, .. } => (
            StatusCode::GONE,
            "The request was done; its response is no longer kept",
            format!(
                "the request with this Idempotency-Key was {}. {}",
                sentences::done_not_kept(*done, *resolved),
                "Do not send it again; a new request needs a new Idempotency-Key"
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
                format!(
                    "{}: {source}. Retry with the same Idempotency-Key",
                    sentences::was_not_run("the request")
                ),
            )
        }
        _ => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "The request's outcome under this Idempotency-Key cannot be given",
            e.to_string(),
        ),
    };
    // The same advice a tool's caller gets of this error, with the record's key only where the
    // detail names it for an operator (a key reused, a request in flight and the store down are
    // the client's to act on, with its own Idempotency-Key).
    let mut advice = Explanation::of_error(e, &[]).advice;
    let unnamed = match e {
        Error::KeyReuse { .. } | Error::InFlight { .. } | Error::Expired { .. } => true,
        Error::Store { source, .. } => matches!(
            source.kind(),
            StoreErrorKind::Unavailable | StoreErrorKind::Other
        ),
        _ => false,
    };
    if unnamed {
        advice.key = None;
    }
    problem(status, title, &detail, advice)
}
