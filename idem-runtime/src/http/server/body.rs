//! The bodies a response through the layer has: what the layer made or replayed, the handler's
//! own, or a handler's body streamed on after its first frames (`ResponseBody`, `Prefixed`).

use crate::advice::Advice;
use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderValue};
use http::{Response, StatusCode, response};
use http_body::Body;
use http_body_util::{BodyExt, Either, Full};
use std::pin::Pin;
use std::task::{Context, Poll};

/// The body of a response through the layer: what the layer made or replayed (`Left`: the first
/// response, collected to be stored, a replay, or the layer's own 4xx), or the handler's own,
/// untouched, for a request the layer lets through (`Right`).
pub type ResponseBody<B> = Either<Full<Bytes>, Either<B, Prefixed<B>>>;

/// A handler's response body streamed on after the layer read its first frames (it went over
/// [`IdempotencyLayer::max_response_bytes`](super::IdempotencyLayer::max_response_bytes)): those frames, then the rest as it comes.
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
pub(super) enum Read<B> {
    Whole(Bytes),
    Streamed(ResponseBody<B>, &'static str),
}

/// Reads `body` whole unless it is an event stream (`text/event-stream`), says it is longer than
/// `bound`, or turns out to be: those are handed on as they come.
pub(super) async fn read_bounded<B: Body<Data = Bytes>>(
    head: &response::Parts,
    body: B,
    bound: usize,
) -> Result<Read<B>, B::Error> {
    let event_stream = head
        .headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| starts_with_ignore_case(v.trim_start(), "text/event-stream"));
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
    // The usual body is one frame: kept as it is, neither queued nor copied.
    let mut first: Option<Bytes> = None;
    let mut more = std::collections::VecDeque::new();
    let mut len = 0;
    while let Some(frame) = body.frame().await {
        // Trailers are not stored (nor were they before a bound).
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        len += data.len();
        match first {
            None => first = Some(data),
            Some(_) => more.push_back(data),
        }
        if len > bound {
            let mut prefix = more;
            if let Some(first) = first {
                prefix.push_front(first);
            }
            let rest = Prefixed { prefix, rest: body };
            return Ok(Read::Streamed(Either::Right(Either::Right(rest)), over));
        }
    }
    Ok(Read::Whole(join(first, more, len)))
}

/// A body's frames joined: the first alone as it is, more than one copied into one buffer.
fn join(first: Option<Bytes>, more: std::collections::VecDeque<Bytes>, len: usize) -> Bytes {
    let Some(first) = first else {
        return Bytes::new();
    };
    if more.is_empty() {
        return first;
    }
    let mut whole = bytes::BytesMut::with_capacity(len);
    whole.extend_from_slice(&first);
    for data in more {
        whole.extend_from_slice(&data);
    }
    whole.freeze()
}

/// Why a keyed request's body was not read.
pub(super) enum Unread {
    /// Longer than the layer's `max_body`.
    TooLarge,
    /// It broke off before its end.
    Broken,
}

/// A keyed request's body, whole, if it is at most `bound` bytes (as `Limited` and `collect`
/// read it, without their queue and copy for the usual body of one frame). Trailers are not
/// kept (they are no part of the fingerprint).
pub(super) async fn read_request<B: Body>(body: B, bound: usize) -> Result<Bytes, Unread> {
    use bytes::Buf;
    let mut body = std::pin::pin!(body);
    let mut first: Option<Bytes> = None;
    let mut more = std::collections::VecDeque::new();
    let mut len = 0;
    while let Some(frame) = body.frame().await {
        let Ok(mut data) = frame.map_err(|_| Unread::Broken)?.into_data() else {
            continue;
        };
        len += data.remaining();
        if len > bound {
            return Err(Unread::TooLarge);
        }
        let data = data.copy_to_bytes(data.remaining());
        match first {
            None => first = Some(data),
            Some(_) => more.push_back(data),
        }
    }
    Ok(join(first, more, len))
}

/// Whether `text` starts with `prefix`, ASCII case ignored (a media type's case is not
/// significant), without a lowercased copy.
pub(super) fn starts_with_ignore_case(text: &str, prefix: &str) -> bool {
    text.as_bytes()
        .get(..prefix.len())
        .is_some_and(|head| head.eq_ignore_ascii_case(prefix.as_bytes()))
}

/// Whether `text` ends with `suffix`, ASCII case ignored (as [`starts_with_ignore_case`]).
pub(super) fn ends_with_ignore_case(text: &str, suffix: &str) -> bool {
    let text = text.as_bytes();
    text.len()
        .checked_sub(suffix.len())
        .is_some_and(|at| text[at..].eq_ignore_ascii_case(suffix.as_bytes()))
}

/// A response the layer makes itself (RFC 9457 problem details, as the draft's examples), with
/// the extension member `advice` (S35: [`Advice`], the same object every surface gives).
pub(super) fn problem<B>(
    status: StatusCode,
    title: &str,
    detail: &str,
    advice: Advice,
) -> Response<ResponseBody<B>> {
    let body = serde_json::json!({
        "type": "about:blank",
        "title": title,
        "status": status.as_u16(),
        "detail": detail,
        "advice": advice,
    });
    let mut response = Response::new(Either::Left(Full::new(Bytes::from(body.to_string()))));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    response
}
