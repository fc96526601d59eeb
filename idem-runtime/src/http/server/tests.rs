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
