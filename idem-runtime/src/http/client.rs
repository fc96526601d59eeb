//! The client side: a reqwest request sent inside a side effect carries the call's key, and what
//! comes back is classified for the retry policy. For reqwest 0.13 (the feature `reqwest` is
//! built with it): a `RequestBuilder` of another reqwest version is another type, and the error
//! then says so (see [`IdempotentRequest`]).
//!
//! An extension trait on `reqwest::RequestBuilder`, not `reqwest-middleware`: the key is the
//! attempt's, known where the request is sent (inside the body), so nothing needs to sit in a
//! client's stack; the tool keeps its plain `reqwest::Client` (any builder, any TLS), nothing new
//! is compiled (reqwest-middleware brings its own crate, `anyhow` and a boxed middleware chain per
//! request), and a request sent outside any call fails where it is written, with
//! [`HttpError::NoCall`], instead of a middleware silently sending it unkeyed.

use std::future::Future;
use std::time::{Duration, SystemTime};

use reqwest::header::{HeaderMap, HeaderValue, RETRY_AFTER};
use reqwest::{RequestBuilder, Response, StatusCode};

use super::{IDEMPOTENCY_KEY, sf_string};
use crate::failure::{Classify, Failure};
use crate::key::IdempotencyKey;
use crate::told::advice::Advice;

/// The key of the side-effect attempt whose body is running here, or `None` outside any: what
/// [`IdempotentRequest::send_idempotent`] sends.
///
/// Set by the executor while it polls an attempt's body, on that thread: a task the body spawns
/// does not see it (pass the key on, or send from the body itself).
pub fn current_key() -> Option<IdempotencyKey> {
    crate::scope::current::current_key()
}

/// Sends a reqwest request with an idempotency key, and classifies what comes back.
///
/// Implemented for reqwest **0.13**'s `RequestBuilder` (the reqwest idemkit's feature `reqwest`
/// is built with). A program that depends on another reqwest (0.12) has two reqwest versions in
/// its build, and its `RequestBuilder` does not have these methods: the compiler's error says
/// that it is not reqwest 0.13's. `cargo tree -d -i reqwest` shows which crates bring which
/// version; depend on `reqwest = "0.13"`.
///
/// ```no_run
/// use idem_runtime::http::{HttpError, IdempotentRequest};
/// use idem_runtime::{Classify, Failure, Idem, MemoryStore, Tool};
///
/// #[derive(Debug)]
/// enum PayError { Http(HttpError), Idem(idem_runtime::Error) }
/// impl From<HttpError> for PayError { fn from(e: HttpError) -> Self { PayError::Http(e) } }
/// impl From<idem_runtime::Error> for PayError { fn from(e: idem_runtime::Error) -> Self { PayError::Idem(e) } }
/// impl Classify for PayError {
///     fn classify(&self) -> Failure {
///         match self {
///             PayError::Http(e) => e.classify(), // 409, 422, 429, 5xx, timeouts: as the draft says
///             PayError::Idem(e) => e.classify(),
///         }
///     }
/// }
///
/// # async fn run() -> Result<(), PayError> {
/// let http = reqwest::Client::new();
/// let idem = Idem::new(MemoryStore::new());
/// let receipt: Result<String, PayError> = Tool::new("charge")
///     .idem(&idem)
///     .side_effect(&[("customer_id", &"cus_1")], &4200u64, |_key| {
///         // `Idempotency-Key: "<the call's key>"` is added here; the tool writes nothing.
///         let sent = http.post("https://api.example.com/v1/charges").send_idempotent();
///         async move { Ok(sent.await?.text().await.map_err(HttpError::from)?) }
///     })
///     .await;
/// # Ok(()) }
/// ```
pub trait IdempotentRequest: sealed::Reqwest013RequestBuilder + Sized {
    /// This request with `Idempotency-Key: "<key>"` (draft-09: an sf-string), replacing any
    /// such header already set.
    fn idempotency_key(self, key: &IdempotencyKey) -> RequestBuilder;

    /// Sends this request with the current attempt's key ([`current_key`]) as its
    /// `Idempotency-Key`, and answers the response if its status is a success, else an
    /// [`HttpError`] classified for the retry policy.
    ///
    /// The key is read when this is called, which must be inside a side effect's body (the
    /// closure `Tool::side_effect` runs, or a `#[side_effect]` function): called anywhere else it
    /// sends nothing and answers [`HttpError::NoCall`].
    ///
    /// A `#[side_effect]` tool whose body sends this way passes its key on, as one that takes the
    /// `&IdempotencyKey` does: an attempt whose outcome is unknown is sent again under the same
    /// key (S20's default; `resend = false` says otherwise). The attribute sees the call in the
    /// body's own code only: a tool that sends from a helper function says `resend = true`.
    fn send_idempotent(self) -> impl Future<Output = Result<Response, HttpError>> + Send;
}

mod sealed {
    /// What [`IdempotentRequest`](super::IdempotentRequest) is implemented for: the
    /// `RequestBuilder` of reqwest 0.13, the reqwest idemkit is built with. The trait is
    /// implemented through this bound rather than for the type itself, so that a request builder
    /// of another reqwest (0.12: another type) finds the method and its error names the version
    /// to use, instead of "no method named `send_idempotent`". A supertrait of it too, so that
    /// the trait stays sealed.
    #[diagnostic::on_unimplemented(
        message = "idemkit's `IdempotentRequest` (`.send_idempotent()`) works on the `RequestBuilder` of reqwest 0.13, and this `{Self}` is not one",
        label = "not a `reqwest::RequestBuilder` of reqwest 0.13",
        note = "idemkit's `reqwest` feature is built with reqwest 0.13; a `RequestBuilder` of another reqwest version (e.g. 0.12) is another type, and two reqwest versions may be in your build (`cargo tree -d -i reqwest` shows them): depend on `reqwest = \"0.13\"`"
    )]
    pub trait Reqwest013RequestBuilder {
        fn into_builder(self) -> reqwest::RequestBuilder;
    }

    impl Reqwest013RequestBuilder for reqwest::RequestBuilder {
        fn into_builder(self) -> reqwest::RequestBuilder {
            self
        }
    }
}

impl<R: sealed::Reqwest013RequestBuilder> IdempotentRequest for R {
    fn idempotency_key(self, key: &IdempotencyKey) -> RequestBuilder {
        // `headers` replaces a header of the same name (`header` would add a second one).
        let mut header = HeaderMap::with_capacity(1);
        header.insert(IDEMPOTENCY_KEY, header_value(key));
        self.into_builder().headers(header)
    }

    fn send_idempotent(self) -> impl Future<Output = Result<Response, HttpError>> + Send {
        let keyed = current_key().map(|key| (key, self.idempotency_key(&key)));
        async move {
            let Some((key, request)) = keyed else {
                return Err(HttpError::NoCall);
            };
            let response = request.send().await.map_err(HttpError::Transport)?;
            check(key, response).await
        }
    }
}

fn header_value(key: &IdempotencyKey) -> HeaderValue {
    let quoted = sf_string(key.as_str()).expect("idemkit: a key is 36 ASCII characters");
    HeaderValue::try_from(quoted).expect("idemkit: a quoted key is a valid header value")
}

/// The response, or what its status means.
async fn check(key: IdempotencyKey, response: Response) -> Result<Response, HttpError> {
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let retry_after = retry_after(response.headers(), SystemTime::now());
    // The body says what the server objected to; a body that breaks off is reported as far as
    // it came (the status decides the failure, not the body).
    let body = response.text().await.unwrap_or_default();
    if status == StatusCode::UNPROCESSABLE_ENTITY {
        return Err(HttpError::KeyReuse { key, body });
    }
    Err(HttpError::Status {
        status,
        retry_after,
        body,
    })
}

/// `Retry-After` (RFC 9110 §10.2.3): delay-seconds, or an HTTP-date taken relative to `now` (a
/// date already past is no wait).
fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Why an idempotent request did not succeed, classified for the retry policy
/// ([`Classify`]):
///
/// | what | failure |
/// | --- | --- |
/// | [`NoCall`](HttpError::NoCall): sent outside a side effect | `Permanent` (nothing sent) |
/// | no connection made (refused, DNS, connect timeout, TLS) | `Transient` (nothing sent) |
/// | the request could not be built (bad URL, header) | `Permanent` (nothing sent) |
/// | a timeout, reset or broken body after the request went out | `Ambiguous` |
/// | 429 or 503 with `Retry-After` | `RetryAfter(it)` |
/// | 429 or 503 without | `Transient` |
/// | 409: the first request of this key is still in flight | `RetryAfter(it)` if given, else `Ambiguous` (wait, then ask again with the same key) |
/// | 422: the key was used with another payload ([`KeyReuse`](HttpError::KeyReuse)) | `Permanent` |
/// | 501, 505: the server cannot do this at all | `Permanent` |
/// | any other 5xx (500, 502, 504, …) | `Ambiguous`: it may have happened; the key makes the retry safe |
/// | any other 4xx, a 3xx not followed | `Permanent` |
///
/// 409 is ambiguous, not transient: the server is executing a request of this key, so the effect
/// may happen, and a call whose attempts run out must keep its record (S6, S14), not release it.
/// 5xx follows Stripe's practice (its SDKs retry 500, 502, 503, 504 with the same key; the draft
/// is silent on 5xx): only 503 says the request was not executed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HttpError {
    /// Sent outside any side effect: there is no key to send, and the request was not sent.
    #[error(
        "idemkit: an idempotent request was sent outside any side effect, so there is no key to send with it; it was \
         not sent. Send it from inside a `#[side_effect]` function's body (or `Tool::side_effect`'s closure), or set \
         the key yourself with `.idempotency_key(&key)`"
    )]
    NoCall,
    /// reqwest failed: no response came (see the table for which failures these are).
    #[error("idemkit: the request failed: {0}")]
    Transport(#[source] reqwest::Error),
    /// 422: the server saw this key before with another payload (Stripe's `idempotency_error`,
    /// draft-09 §2.7); the request was not executed.
    #[error(
        "idemkit: the server refused key {key} (422): an earlier request with this key had another payload; it was \
         not executed. A key names one operation: if this is a new operation, add the field that tells it apart to \
         the tool's key; if it is a retry, send the same request. The server said: {body}"
    )]
    KeyReuse {
        /// The key sent.
        key: IdempotencyKey,
        /// The response body.
        body: String,
    },
    /// Any other status that is not a success.
    #[error("idemkit: the server answered {status}: {body}")]
    Status {
        /// The status.
        status: StatusCode,
        /// The `Retry-After` it gave, as a wait from when it came.
        retry_after: Option<Duration>,
        /// The response body.
        body: String,
    },
}

impl HttpError {
    /// The advice a server running idemkit's layer gave beside its problem (S35, the problem's
    /// `advice` member): what happened to the request, whether sending it again with the same key
    /// is safe, whether a new key would be, when to retry. `None` where the failure has no
    /// response, or the server's body carries no advice.
    pub fn advice(&self) -> Option<Advice> {
        let body = match self {
            HttpError::KeyReuse { body, .. } | HttpError::Status { body, .. } => body,
            HttpError::NoCall | HttpError::Transport(_) => return None,
        };
        let problem: serde_json::Value = serde_json::from_str(body).ok()?;
        serde_json::from_value(problem.get(crate::told::advice::MEMBER)?.clone()).ok()
    }
}

impl From<reqwest::Error> for HttpError {
    /// A reqwest error met after the response came (reading its body): classified like one
    /// from sending.
    fn from(e: reqwest::Error) -> Self {
        HttpError::Transport(e)
    }
}

impl Classify for HttpError {
    fn classify(&self) -> Failure {
        match self {
            HttpError::NoCall | HttpError::KeyReuse { .. } => Failure::Permanent,
            HttpError::Transport(e) if e.is_connect() => Failure::Transient,
            HttpError::Transport(e) if e.is_builder() => Failure::Permanent,
            HttpError::Transport(_) => Failure::Ambiguous,
            HttpError::Status {
                status,
                retry_after,
                ..
            } => match (*status, *retry_after) {
                (StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE, Some(d)) => {
                    Failure::RetryAfter(d)
                }
                (StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE, None) => {
                    Failure::Transient
                }
                (StatusCode::CONFLICT, Some(d)) => Failure::RetryAfter(d),
                (StatusCode::CONFLICT, None) => Failure::Ambiguous,
                (StatusCode::NOT_IMPLEMENTED | StatusCode::HTTP_VERSION_NOT_SUPPORTED, _) => {
                    Failure::Permanent
                }
                (s, _) if s.is_server_error() => Failure::Ambiguous,
                _ => Failure::Permanent,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Duration, HeaderMap, HeaderValue, RETRY_AFTER, SystemTime, retry_after};
    use super::{HttpError, StatusCode};
    use crate::told::advice::State;

    /// S35: the client reads the advice of an idemkit server's problem, and none from another
    /// server's body.
    #[test]
    fn s35_a_client_reads_the_advice_beside_an_idemkit_servers_problem() {
        let problem = serde_json::json!({
            "type": "about:blank",
            "title": "A request with this Idempotency-Key is being processed",
            "status": 409,
            "detail": "the first request with this Idempotency-Key has not finished",
            "advice": {"state": "running_elsewhere", "reason": "in_flight", "sameKeySafe": true,
                       "newKeySafe": false, "retryable": true, "retryAfterSeconds": null, "key": null},
        });
        let error = HttpError::Status {
            status: StatusCode::CONFLICT,
            retry_after: None,
            body: problem.to_string(),
        };
        let advice = error.advice().unwrap();
        assert_eq!(advice.state, State::RunningElsewhere);
        assert!(advice.retryable && !advice.new_key_safe);
        let other = HttpError::Status {
            status: StatusCode::CONFLICT,
            retry_after: None,
            body: r#"{"error": "conflict"}"#.into(),
        };
        assert_eq!(other.advice(), None);
        assert_eq!(HttpError::NoCall.advice(), None);
    }

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let mut headers = HeaderMap::new();
        assert_eq!(retry_after(&headers, now), None);
        headers.insert(RETRY_AFTER, HeaderValue::from_static("7"));
        assert_eq!(retry_after(&headers, now), Some(Duration::from_secs(7)));
        let later = httpdate::fmt_http_date(now + Duration::from_secs(30));
        headers.insert(RETRY_AFTER, HeaderValue::try_from(later).unwrap());
        assert_eq!(retry_after(&headers, now), Some(Duration::from_secs(30)));
        let past = httpdate::fmt_http_date(now - Duration::from_secs(30));
        headers.insert(RETRY_AFTER, HeaderValue::try_from(past).unwrap());
        assert_eq!(retry_after(&headers, now), Some(Duration::ZERO));
        headers.insert(RETRY_AFTER, HeaderValue::from_static("soon"));
        assert_eq!(retry_after(&headers, now), None);
    }
}
