//! A response as the store keeps it (status, chosen headers, body) and how it is replayed.

use crate::advice::Advice;
use crate::error::Error;
use crate::failure::{Classify, Failure};
use crate::http::REPLAYED;
use crate::key::IdempotencyKey;
use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::{Response, StatusCode, response};
use http_body_util::{Either, Full};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::BoxError;
use super::body::{ResponseBody, problem};

/// A response as stored: status, the chosen headers, the body.
#[derive(Serialize, Deserialize)]
pub(super) struct Stored {
    status: u16,
    headers: Vec<(String, String)>,
    body: StoredBody,
}

/// A body as stored: as the JSON it is when it is one JSON text exactly (JSON APIs), else as
/// text when it is UTF-8 (readable in `idemkit show` either way), else hex.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum StoredBody {
    /// Kept as it came, not as a string of it: a replay copies it once instead of unescaping it
    /// (a string of JSON escapes every quote), and the record reads as the API's own JSON.
    Json(Box<RawValue>),
    Text(String),
    Hex(String),
    /// Streamed to the first request and not kept (why): the request ran; repeats are told so.
    Streamed(String),
}

impl Stored {
    pub(super) fn of(parts: &response::Parts, names: &[HeaderName], body: &Bytes) -> Stored {
        let headers = names
            .iter()
            .flat_map(|name| {
                parts.headers.get_all(name).iter().filter_map(move |value| {
                    Some((name.as_str().to_owned(), value.to_str().ok()?.to_owned()))
                })
            })
            .collect();
        let body = match json_text(body) {
            Some(json) => StoredBody::Json(json),
            None => match std::str::from_utf8(body) {
                Ok(text) => StoredBody::Text(text.to_owned()),
                Err(_) => StoredBody::Hex(hex(body)),
            },
        };
        Stored {
            status: parts.status.as_u16(),
            headers,
            body,
        }
    }

    /// The record of a response streamed on, not kept.
    pub(super) fn streamed(parts: &response::Parts, why: &str) -> Stored {
        Stored {
            status: parts.status.as_u16(),
            headers: Vec::new(),
            body: StoredBody::Streamed(why.to_owned()),
        }
    }

    /// The stored response, marked as a replay.
    pub(super) fn replay<B>(self, key: &IdempotencyKey) -> Response<ResponseBody<B>> {
        let body = match self.body {
            StoredBody::Json(json) => Bytes::from(Box::<str>::from(json).into_boxed_bytes()),
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
                    Advice::for_reason("unreplayable", false, Some(key.to_string())),
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

/// `body` as JSON to keep as it is, when it is one JSON text and nothing else (whitespace
/// around it would be lost: such a body is kept as text, byte for byte).
fn json_text(body: &[u8]) -> Option<Box<RawValue>> {
    let json: &RawValue = serde_json::from_slice(body).ok()?;
    (json.get().len() == body.len()).then(|| json.to_owned())
}

pub(super) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

pub(super) fn unhex(hex: &str) -> Vec<u8> {
    (0..hex.len() / 2)
        .filter_map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok())
        .collect()
}

/// What a handler's run came to when it is not a response to store.
pub(super) enum Served<E, B> {
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
