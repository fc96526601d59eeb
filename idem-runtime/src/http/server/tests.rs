use http::StatusCode;

use super::service::refusal;
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

/// The response `body` as the layer stores it (its outcome's JSON, sealed as the executor seals
/// it), and as a repeat gets it back.
fn stored_and_replayed(body: &[u8]) -> (serde_json::Value, bytes::Bytes) {
    let (head, _) = http::Response::new(()).into_parts();
    let stored = super::stored::Stored::of(&head, &[], &bytes::Bytes::copy_from_slice(body));
    let mut outcome = serde_json::to_vec(&stored).unwrap();
    crate::store::Outcome::seal(&mut outcome, "Stored");
    let json = serde_json::from_slice(&outcome).unwrap();
    let replayed = replay(&outcome);
    (json, replayed)
}

fn replay(outcome: &[u8]) -> bytes::Bytes {
    use http_body_util::BodyExt;
    let stored: super::stored::Stored = serde_json::from_slice(outcome).unwrap();
    let key = crate::IdempotencyKey::derive("t", &[("k", &"v")]);
    let response = stored.replay::<http_body_util::Empty<bytes::Bytes>>(&key);
    let body = response.into_body();
    now(body.collect())
        .unwrap_or_else(|_| unreachable!("a stored body is whole"))
        .to_bytes()
}

/// Polls a future that is ready at once (a `Full` body's collection).
fn now<F: std::future::Future>(fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match fut.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(out) => out,
        std::task::Poll::Pending => panic!("a stored body is ready at once"),
    }
}

/// A body that is one JSON text is kept as that JSON (no string of it to unescape at each
/// replay); anything else, whitespace around JSON too, as text or hex, byte for byte.
#[test]
fn issue42_a_json_body_is_kept_as_json_and_every_body_is_replayed_byte_for_byte() {
    let json = br#"{"id":"ch_1","request":{"customer":"cus_\"1\"","amount_cents":4200}}"#;
    let (stored, replayed) = stored_and_replayed(json);
    assert_eq!(
        stored["body"]["json"],
        serde_json::json!({"id": "ch_1", "request": {"customer": "cus_\"1\"", "amount_cents": 4200}})
    );
    assert_eq!(&replayed[..], json);
    // Kept as written: its own spacing and key order, not re-encoded.
    let spaced = b"[1, {\"b\" : 2,\"a\":1.50}]";
    let (stored, replayed) = stored_and_replayed(spaced);
    assert!(stored["body"]["json"].is_array());
    assert_eq!(&replayed[..], spaced);
    for text in [
        &b"{\"id\":1}\n"[..],
        b" 42",
        b"flaky 1",
        b"{\"unclosed\":",
        b"",
    ] {
        let (stored, replayed) = stored_and_replayed(text);
        assert!(stored["body"]["text"].is_string(), "{stored}");
        assert_eq!(&replayed[..], text);
    }
    let (stored, replayed) = stored_and_replayed(b"\xff\x00{}");
    assert_eq!(stored["body"]["hex"], "ff007b7d");
    assert_eq!(&replayed[..], b"\xff\x00{}");
}

/// Records written before JSON bodies were kept as JSON (as text) still replay.
#[test]
fn issue42_a_json_body_stored_as_text_by_an_earlier_version_still_replays() {
    let earlier = br#"{"status":201,"headers":[["content-type","application/json"]],"body":{"text":"{\"charge\":1}"}}"#;
    assert_eq!(&replay(earlier)[..], br#"{"charge":1}"#);
}

/// A request's fingerprint is in every stored record of it, so none may ever change: computed
/// on the path that parsed a JSON body into a `serde_json::Value`. A JSON body by its canonical
/// form (a repeated key's last value, escapes decoded, `-0.0` as `0.0`), a form by its sorted
/// pairs, anything else (a JSON body that does not parse too) by its bytes.
#[test]
fn request_fingerprints_are_pinned() {
    let hex = |method: &str, uri: &str, content_type: &str, body: &str| {
        let (parts, ()) = http::Request::builder()
            .method(method)
            .uri(uri)
            .header(http::header::CONTENT_TYPE, content_type)
            .body(())
            .unwrap()
            .into_parts();
        super::fingerprint::fingerprint(&parts, body.as_bytes()).to_hex()
    };
    // Canonically `{"a":{"y":true,"z":null},"b":{"k\"":12345678901234567890}}` (checked by hand).
    let json_body = "{ \"b\": [1, -0.0, 1e3, \"\\u00e9\\n\"], \"a\": {\"z\": null, \"y\": true},\n \"b\": {\"k\\\"\": 12345678901234567890} }";
    let cases = [
        (
            "json",
            hex(
                "POST",
                "/v1/charges?x=1",
                "application/json; charset=utf-8",
                json_body,
            ),
            "7eb73e26b40d5107d3136f74fe16018ca7b8fc9c8c1176b4a6ab64324623e316",
        ),
        (
            "+json",
            hex(
                "PUT",
                "/v1/charges",
                "application/merge-patch+json",
                json_body,
            ),
            "1f61dfd5ae7be4501566e7cc57fddbb74fe4ab5218e1a9bba81f75e0778081d0",
        ),
        (
            "json that does not parse",
            hex("POST", "/v1/charges", "application/json", "{\"a\":1}x"),
            "539da5971eb6f80f4d36b138bfb9df29a029e54b655f5402acb2ad02888f954f",
        ),
        (
            "form",
            hex(
                "POST",
                "/v1/charges",
                "application/x-www-form-urlencoded",
                "b=2&a=%C3%A9+1&b=1",
            ),
            "8ac9386e77ff32aa8035b1dc42ee19ed536b6a6838376658bb56d50e692b39e8",
        ),
        (
            "bytes",
            hex("POST", "/v1/charges", "text/plain", "{\"b\":1,\"a\":2}"),
            "58a59e3a6ea386d07bc3d80abb963588c3f7552897d798b115c48cb0d5b2efa6",
        ),
    ];
    let wrong: Vec<String> = cases
        .iter()
        .filter(|(_, got, want)| got != want)
        .map(|(name, got, _)| format!("{name:?}: {got}"))
        .collect();
    assert!(
        wrong.is_empty(),
        "changed fingerprints:\n{}",
        wrong.join("\n")
    );
}

/// A body of frames `parts` (an `Err` part: the body breaks off there).
fn framed(
    parts: Vec<Result<&'static str, &'static str>>,
) -> http_body_util::StreamBody<
    impl futures_util::Stream<Item = Result<http_body::Frame<bytes::Bytes>, super::BoxError>>,
> {
    http_body_util::StreamBody::new(futures_util::stream::iter(parts.into_iter().map(|p| {
        p.map(|data| http_body::Frame::data(bytes::Bytes::from_static(data.as_bytes())))
            .map_err(super::BoxError::from)
    })))
}

/// A keyed request's body is read whole, frames joined in order, up to the layer's bound; one
/// longer, or one that breaks off, is told apart (413, 400).
#[test]
fn issue42_a_request_body_is_read_whole_within_its_bound() {
    use super::body::{Unread, read_request};
    let read = |parts, bound| now(read_request(framed(parts), bound));
    assert!(matches!(read(vec![Ok("{\"a\":1}")], 7), Ok(b) if b == "{\"a\":1}"));
    assert!(matches!(read(vec![Ok("ab"), Ok(""), Ok("cd"), Ok("e")], 5), Ok(b) if b == "abcde"));
    assert!(matches!(read(vec![], 0), Ok(b) if b.is_empty()));
    assert!(matches!(
        read(vec![Ok("ab"), Ok("cd")], 3),
        Err(Unread::TooLarge)
    ));
    assert!(matches!(
        read(vec![Ok("ab"), Err("reset")], 10),
        Err(Unread::Broken)
    ));
}

/// A handler's response body is kept whole within the bound, its frames joined in order; past
/// the bound it is handed on as it comes, the frames read so far first, in their order.
#[test]
fn issue42_a_response_body_is_kept_whole_or_handed_on_in_order() {
    use super::body::{Read, read_bounded};
    use http_body_util::BodyExt;
    let (head, ()) = http::Response::new(()).into_parts();
    let read = |parts, bound| {
        now(read_bounded(&head, framed(parts), bound)).unwrap_or_else(|_| panic!("no error"))
    };
    let Read::Whole(whole) = read(vec![Ok("ab"), Ok("cd")], 4) else {
        panic!("within its bound, a body is kept whole")
    };
    assert_eq!(whole, "abcd");
    let Read::Whole(one) = read(vec![Ok("abcd")], 4) else {
        panic!("within its bound, a body is kept whole")
    };
    assert_eq!(one, "abcd");
    let Read::Streamed(on, _) = read(vec![Ok("ab"), Ok("cd"), Ok("ef"), Ok("gh")], 5) else {
        panic!("past its bound, a body is handed on")
    };
    let handed = now(on.collect())
        .unwrap_or_else(|_| panic!("no error"))
        .to_bytes();
    assert_eq!(handed, "abcdefgh");
}

/// A media type's case is not significant (RFC 9110 §8.3.1): `Application/JSON` and `…+JSON`
/// bodies are fingerprinted by their canonical JSON, as their lowercase spellings are.
#[test]
fn a_media_types_case_does_not_change_the_fingerprint() {
    let fp = |content_type: &str, body: &str| {
        let (parts, ()) = http::Request::post("/v1/charges")
            .header(http::header::CONTENT_TYPE, content_type)
            .body(())
            .unwrap()
            .into_parts();
        super::fingerprint::fingerprint(&parts, body.as_bytes())
    };
    let canonical = fp("application/json", r#"{"a":1,"b":2}"#);
    assert_eq!(fp("Application/JSON", r#"{ "b": 2, "a": 1 }"#), canonical);
    assert_eq!(
        fp("application/merge-patch+json", r#"{"b":2,"a":1}"#),
        fp(
            "Application/Merge-Patch+JSON; charset=utf-8",
            r#"{ "a": 1, "b": 2 }"#
        )
    );
    // Not JSON by its type: its bytes count, so another spelling is another payload.
    assert_ne!(
        fp("text/plain", r#"{ "b": 2, "a": 1 }"#),
        fp("text/plain", r#"{"a":1,"b":2}"#)
    );
}
