//! A fake SMS gateway on loopback that does **not** deduplicate: every request sends a message,
//! whatever key it carries, like most e-mail, SMS and webhook senders. It fails on request (sends
//! and then loses the response, fails before sending, loses the request unsent, or sends and
//! never answers) and can be asked whether a message went out, which is all a client can do to
//! settle an unknown outcome.
//!
//! - `POST /v1/messages` with a JSON body `{"to", "text", "message_id"?, "idempotency_key"?}` sends
//!   one message and answers `200` with it as sent: `{"sid": "SM…", "to", "text", "message_id",
//!   "idempotency_key"}`. `message_id` (chosen by the client) and `idempotency_key` are plain
//!   fields the gateway stores with the message and lets the client search by; neither stops a
//!   second message from going out. An `Idempotency-Key` header is ignored.
//! - `GET /v1/messages?message_id=X` or `?idempotency_key=K` answers `{"messages": [...]}`, the
//!   messages sent with that field, oldest first: "did message X go out?".
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use std::time::Duration;
//! use fake_provider::sms::{Lookup, Message, SmsClient, SmsFault, SmsGateway};
//!
//! let gateway = SmsGateway::start().await.unwrap();
//! let client = SmsClient::new(gateway.base_url(), Duration::from_secs(5));
//! let message = Message::new("+15550100", "Your order ord_7 has shipped").message_id("ord_7-shipped");
//! gateway.inject([SmsFault::DropAfterSend]);
//! assert!(client.send(&message).await.is_err()); // sent, but the response was lost
//! client.send(&message).await.unwrap(); // a retry sends it again: no deduplication
//! assert_eq!(gateway.sent(), 2);
//! let found = client.lookup(Lookup::MessageId("ord_7-shipped")).await.unwrap();
//! assert_eq!(found.len(), 2);
//! # });
//! ```

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::ProviderError;

/// One failure to inject into the next `POST /v1/messages`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmsFault {
    /// Send the message, then cut the connection before the answer: the client sees the request
    /// fail after it was sent ([`ProviderError::Broken`]), and the message went out.
    DropAfterSend,
    /// Answer `503` without sending anything.
    FailBeforeSend,
    /// Cut the connection without sending anything: the client sees the same failure as for
    /// [`SmsFault::DropAfterSend`] ([`ProviderError::Broken`]), and nothing went out.
    DropBeforeSend,
    /// Send the message, then never answer: the client waits until its timeout (or until its
    /// process is killed).
    HangAfterSend,
}

/// How [`SmsGateway::fail_lookups`] makes lookups fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Lookups {
    #[default]
    Answer,
    Fail,
}

/// A message as the gateway sent it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sent {
    /// The gateway's id of the message (`SM1`, `SM2`, …): a new one per message sent.
    pub sid: String,
    /// The recipient.
    pub to: String,
    /// The text.
    pub text: String,
    /// The client's id of the message, if it gave one.
    #[serde(default)]
    pub message_id: Option<String>,
    /// The idempotency key the client passed as a plain field, if any.
    #[serde(default)]
    pub idempotency_key: Option<String>,
}

/// A message to send.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// The recipient.
    pub to: String,
    /// The text.
    pub text: String,
    /// An id of the client's choosing, to look the message up by later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    /// An idempotency key, stored with the message as a plain field: the gateway does not
    /// deduplicate by it, but can be searched by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

impl Message {
    /// A message of `text` to `to`, with no id or key.
    pub fn new(to: impl Into<String>, text: impl Into<String>) -> Self {
        Message {
            to: to.into(),
            text: text.into(),
            message_id: None,
            idempotency_key: None,
        }
    }

    /// With the client's id of the message.
    #[must_use]
    pub fn message_id(mut self, id: impl Into<String>) -> Self {
        self.message_id = Some(id.into());
        self
    }

    /// With an idempotency key as a plain field.
    #[must_use]
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }
}

/// What to look messages up by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup<'a> {
    /// The client's id of the message.
    MessageId(&'a str),
    /// The idempotency key passed as a plain field.
    IdempotencyKey(&'a str),
}

#[derive(Default)]
struct Inner {
    faults: VecDeque<SmsFault>,
    sent: Vec<Sent>,
    lookups: Lookups,
}

/// A running fake SMS gateway. Dropping it stops the server.
pub struct SmsGateway {
    addr: SocketAddr,
    inner: Arc<Mutex<Inner>>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for SmsGateway {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl SmsGateway {
    /// Starts a gateway on an ephemeral loopback port.
    pub async fn start() -> std::io::Result<Self> {
        let inner = Arc::new(Mutex::new(Inner::default()));
        let app = Router::new()
            .route("/v1/messages", post(send).get(lookup))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(SmsGateway {
            addr,
            inner,
            server,
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Queues faults for the next sends, one each, in order.
    pub fn inject(&self, faults: impl IntoIterator<Item = SmsFault>) {
        self.lock().faults.extend(faults);
    }

    /// While `yes`, lookups answer `503`: a client cannot tell whether a message went out.
    pub fn fail_lookups(&self, yes: bool) {
        self.lock().lookups = if yes { Lookups::Fail } else { Lookups::Answer };
    }

    /// How many messages were sent.
    pub fn sent(&self) -> usize {
        self.lock().sent.len()
    }

    /// The messages sent, in order.
    pub fn messages(&self) -> Vec<Sent> {
        self.lock().sent.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn locked(inner: &Mutex<Inner>) -> std::sync::MutexGuard<'_, Inner> {
    inner.lock().unwrap_or_else(|p| p.into_inner())
}

async fn send(
    State(inner): State<Arc<Mutex<Inner>>>,
    axum::Json(message): axum::Json<Message>,
) -> Response {
    let fault = locked(&inner).faults.pop_front();
    match fault {
        Some(SmsFault::FailBeforeSend) => {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                axum::Json(json!({"error": "unavailable"})),
            )
                .into_response();
        }
        // Nothing goes out; the client cannot tell.
        Some(SmsFault::DropBeforeSend) => return cut(),
        _ => {}
    }
    let sent = {
        let mut state = locked(&inner);
        let sent = Sent {
            sid: format!("SM{}", state.sent.len() + 1),
            to: message.to,
            text: message.text,
            message_id: message.message_id,
            idempotency_key: message.idempotency_key,
        };
        state.sent.push(sent.clone());
        sent
    };
    match fault {
        // Sent, but the answer never arrives.
        Some(SmsFault::DropAfterSend) => cut(),
        Some(SmsFault::HangAfterSend) => std::future::pending().await,
        _ => (StatusCode::OK, axum::Json(sent)).into_response(),
    }
}

/// A response whose body fails at once: the server cuts the connection, and the client gets no
/// answer (the same as a connection reset after the request was sent).
fn cut() -> Response {
    struct Cut;
    impl HttpBody for Cut {
        type Data = Bytes;
        type Error = std::io::Error;
        fn poll_frame(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<http_body::Frame<Bytes>, std::io::Error>>> {
            Poll::Ready(Some(Err(std::io::Error::from(
                std::io::ErrorKind::ConnectionReset,
            ))))
        }
    }
    Response::new(Body::new(Cut))
}

#[derive(Deserialize)]
struct LookupQuery {
    message_id: Option<String>,
    idempotency_key: Option<String>,
}

async fn lookup(
    State(inner): State<Arc<Mutex<Inner>>>,
    Query(query): Query<LookupQuery>,
) -> Response {
    let state = locked(&inner);
    if state.lookups == Lookups::Fail {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(json!({"error": "lookups unavailable"})),
        )
            .into_response();
    }
    let found: Vec<&Sent> = match (&query.message_id, &query.idempotency_key) {
        (Some(id), None) => state
            .sent
            .iter()
            .filter(|s| s.message_id.as_ref() == Some(id))
            .collect(),
        (None, Some(key)) => state
            .sent
            .iter()
            .filter(|s| s.idempotency_key.as_ref() == Some(key))
            .collect(),
        _ => {
            let body = json!({"error": "give exactly one of message_id and idempotency_key"});
            return (StatusCode::BAD_REQUEST, axum::Json(body)).into_response();
        }
    };
    axum::Json(json!({"messages": found})).into_response()
}

/// A small HTTP client of the gateway, with a request timeout.
#[derive(Debug, Clone)]
pub struct SmsClient {
    http: crate::http::Http,
    base: String,
}

impl SmsClient {
    /// A client of the gateway at `base`, giving up on a request after `timeout`.
    pub fn new(base: impl Into<String>, timeout: Duration) -> Self {
        SmsClient {
            http: crate::http::Http::new(timeout),
            base: base.into(),
        }
    }

    /// `POST /v1/messages`: sends `message` (again, if it was sent before).
    pub async fn send(&self, message: &Message) -> Result<Sent, ProviderError> {
        let url = format!("{}/v1/messages", self.base);
        let json = serde_json::to_vec(message).map_err(|_| ProviderError::Broken)?;
        let answer = crate::Client::answer(
            self.http
                .send(axum::http::Method::POST, &url, &[], Some(json))
                .await,
        )?;
        serde_json::from_value(answer.body).map_err(|_| ProviderError::Broken)
    }

    /// `GET /v1/messages?…`: the messages sent with that id or key, oldest first (empty: none
    /// went out).
    pub async fn lookup(&self, by: Lookup<'_>) -> Result<Vec<Sent>, ProviderError> {
        let (name, value) = match by {
            Lookup::MessageId(id) => ("message_id", id),
            Lookup::IdempotencyKey(key) => ("idempotency_key", key),
        };
        let url = format!(
            "{}/v1/messages?{name}={}",
            self.base,
            crate::http::query_value(value)
        );
        let answer = crate::Client::answer(
            self.http
                .send(axum::http::Method::GET, &url, &[], None)
                .await,
        )?;
        serde_json::from_value(answer.body["messages"].clone()).map_err(|_| ProviderError::Broken)
    }
}
