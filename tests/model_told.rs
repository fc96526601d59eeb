//! What a model is told (docs/protocol.md, S19/S20): every `idemkit::Error`
//! variant gets its own answer on every surface (MCP tool result, rig's `ToolExecutionError`,
//! the [`Explanation`] JSON calls carry): a stable reason, whether calling again can help, and
//! "not run" only where idemkit refused the call before any attempt. Where the effect may have
//! happened, the answer says so, says calling again will not do it twice, and names what
//! settles it (the tool's `verify`, an operator's `idemkit resolve`), with the key.
//!
//! The surfaces end to end (a real call ending each way) are in `mcp_server.rs`,
//! `rig_agent.rs` and `json_calls.rs`.
#![cfg(all(feature = "rmcp", feature = "rig"))]

use std::time::Duration;

use idemkit::{Classify, Error, Explanation, Failure, IdempotencyKey, StoreError};
use serde_json::Value;

#[derive(Debug)]
struct ToolError(Error);

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for ToolError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

impl Classify for ToolError {
    fn classify(&self) -> Failure {
        Failure::Permanent
    }
}

fn key() -> IdempotencyKey {
    IdempotencyKey::derive("refund", &[("order_id", &"ord_1")])
}

/// How a variant ended, for the model: refused before any attempt, or its outcome unknown, or
/// done earlier.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Told {
    NotRun,
    Unknown,
    Done,
    Failed,
}

/// Every variant the runtime has, with the answer each surface must give.
fn variants() -> Vec<(Error, &'static str, bool, Told)> {
    let tool = || "refund".to_owned();
    let key = key();
    vec![
        (
            Error::KeyReuse { tool: tool(), key },
            "key_reuse",
            false,
            Told::NotRun,
        ),
        (
            Error::InFlight {
                tool: tool(),
                key,
                waited: Duration::from_secs(5),
            },
            "in_flight",
            true,
            Told::NotRun,
        ),
        (
            Error::Store {
                tool: tool(),
                key: Some(key),
                source: StoreError::unavailable("connection refused"),
            },
            "store_unavailable",
            true,
            Told::NotRun,
        ),
        (
            Error::Store {
                tool: tool(),
                key: Some(key),
                source: StoreError::corrupt("the outcome does not deserialize"),
            },
            "store_unreadable",
            false,
            Told::NotRun,
        ),
        (
            Error::LeaseLost {
                tool: tool(),
                key,
                attempts: 1,
                why: "taken over",
            },
            "lease_lost",
            false,
            Told::Unknown,
        ),
        (
            Error::Ambiguous {
                tool: tool(),
                key,
                attempts: 3,
                last: Failure::Permanent,
            },
            "ambiguous",
            false,
            Told::Unknown,
        ),
        // An earlier call's outcome is unknown and this call did not send it again (S20).
        (
            Error::Ambiguous {
                tool: tool(),
                key,
                attempts: 0,
                last: Failure::Ambiguous,
            },
            "ambiguous",
            false,
            Told::Unknown,
        ),
        (
            Error::Unreplayable {
                tool: tool(),
                key,
                reason: "NaN is no JSON number".into(),
            },
            "unreplayable",
            false,
            Told::Done,
        ),
        // S33: done earlier, its record past its ttl: a tombstone.
        (
            Error::Expired {
                tool: tool(),
                key,
                done: std::time::UNIX_EPOCH + Duration::from_secs(1_764_806_400),
                resolved: false,
            },
            "expired",
            false,
            Told::Done,
        ),
        (
            Error::Arguments {
                tool: tool(),
                source: serde_json::from_str::<u8>("x").unwrap_err(),
            },
            "invalid_arguments",
            false,
            Told::NotRun,
        ),
        (
            Error::Settings {
                tool: tool(),
                reason: "its ttl is shorter than its lease".into(),
            },
            "settings",
            false,
            Told::NotRun,
        ),
        (
            Error::NoTenant { tool: tool() },
            "no_tenant",
            false,
            Told::NotRun,
        ),
        (
            Error::NotConfigured {
                tool: tool(),
                reason: "no store".into(),
            },
            "not_configured",
            false,
            Told::NotRun,
        ),
        (
            Error::NoRuntime {
                reason: "outside any call".into(),
            },
            "no_runtime",
            false,
            Told::Failed,
        ),
        (
            Error::DuplicateTool {
                tool: tool(),
                first: "src/billing.rs:12 (app::billing)".into(),
                second: "src/shop.rs:40 (app::shop)".into(),
            },
            "duplicate_tool",
            false,
            Told::NotRun,
        ),
    ]
}

/// The variant at `i` of [`variants`], twice (errors are not `Clone`).
fn variant(i: usize) -> ((Error, &'static str, bool, Told), Error) {
    (variants().swap_remove(i), variants().swap_remove(i).0)
}

/// The sentence says what the reason and `told` promise, and names the key where the error has
/// one for the operation.
fn check_text(text: &str, error: &Error, reason: &str, told: Told) {
    let key = key().to_string();
    match told {
        Told::NotRun => assert!(text.starts_with("Not run"), "{reason}: {text}"),
        Told::Unknown => {
            assert!(!text.contains("Not run"), "{reason}: {text}");
            assert!(text.starts_with("Outcome unknown"), "{reason}: {text}");
            assert!(text.contains("may or may not"), "{reason}: {text}");
            assert!(text.contains("will not do it twice"), "{reason}: {text}");
            assert!(text.contains("`verify`"), "{reason}: {text}");
            assert!(
                text.contains(&format!("idemkit resolve {key} applied --outcome JSON"))
                    && text.contains(&format!("idemkit resolve {key} not-applied")),
                "{reason}: {text}"
            );
        }
        Told::Done => {
            assert!(!text.contains("Not run"), "{reason}: {text}");
            assert!(
                text.starts_with("Already done") && text.contains("will not be done again"),
                "{reason}: {text}"
            );
        }
        Told::Failed => assert!(!text.contains("Not run"), "{reason}: {text}"),
    }
    let names_key = matches!(
        error,
        Error::KeyReuse { .. }
            | Error::InFlight { .. }
            | Error::LeaseLost { .. }
            | Error::Ambiguous { .. }
            | Error::Unreplayable { .. }
            | Error::Expired { .. }
    ) || matches!(error, Error::Store { source, .. } if source.kind() != idemkit::StoreErrorKind::Unavailable);
    if names_key {
        assert!(text.contains(&key), "{reason}: the key in {text}");
    }
}

#[test]
fn issue30_5_every_error_variant_has_its_own_reason_and_sentence() {
    let mut reasons = std::collections::BTreeSet::new();
    for (error, reason, retryable, told) in variants() {
        let explained = Explanation::of_error(&error, &["order_id"]);
        assert_eq!(
            (explained.reason, explained.retryable),
            (reason, retryable),
            "{error:?}"
        );
        check_text(&explained.text, &error, reason, told);
        reasons.insert(reason);
    }
    // One word each (the two `ambiguous` cases share theirs, and nothing else does).
    assert_eq!(reasons.len(), variants().len() - 1);
}

/// S33: a repeat after the ttl is told, on MCP and rig as in `Error`'s text, that it was done on
/// the date the store kept, that its result is no longer kept, and that calling again does nothing;
/// never "Not run" (it ran), never retryable.
#[test]
fn s33_mcp_rig_and_the_error_tell_the_model_it_was_done_on_the_date_and_is_not_kept() {
    let expired = || Error::Expired {
        tool: "refund".into(),
        key: key(),
        done: std::time::UNIX_EPOCH + Duration::from_secs(1_764_806_400),
        resolved: false,
    };
    let said = expired().to_string();
    let out =
        idemkit::mcp::side_effect_output::<(), _>(Err(ToolError(expired())), None, &["order_id"])
            .unwrap();
    let mcp = out.content[0].as_text().unwrap().text.clone();
    assert_eq!(out.structured_content.unwrap()["reason"], "expired");
    let rig = idemkit::rig::tool_error(ToolError(expired()), None, &["order_id"]);
    assert_eq!(
        (rig.code(), rig.retryable()),
        (Some("expired"), Some(false))
    );
    let rig = rig.model_output().as_content()[0]
        .as_text()
        .unwrap()
        .to_owned();
    for text in [&said, &mcp, &rig] {
        assert!(
            text.contains("done on 2025-12-04T00:00:00.000Z; its result is no longer kept"),
            "{text}"
        );
        assert!(!text.contains("Not run"), "{text}");
    }
}

#[test]
fn issue30_5_s20_mcp_tells_the_model_the_outcome_is_unknown_never_not_run() {
    for i in 0..variants().len() {
        let ((error, reason, retryable, told), again) = variant(i);
        let out =
            idemkit::mcp::side_effect_output::<(), _>(Err(ToolError(error)), None, &["order_id"])
                .unwrap();
        assert_eq!(out.is_error, Some(true));
        let structured = out.structured_content.clone().unwrap();
        assert_eq!(structured["reason"], reason, "{again:?}");
        assert_eq!(structured["retryable"], retryable, "{again:?}");
        assert_eq!(structured["error"], again.to_string());
        let sentence = &out.content[0].as_text().unwrap().text;
        check_text(sentence, &again, reason, told);
    }
}

#[test]
fn issue30_5_s20_rig_tells_the_model_the_outcome_is_unknown_and_a_repeat_is_no_retry() {
    for i in 0..variants().len() {
        let ((error, reason, retryable, told), again) = variant(i);
        let envelope = idemkit::rig::tool_error(ToolError(error), None, &["order_id"]);
        assert_eq!(envelope.code(), Some(reason), "{again:?}");
        assert_eq!(envelope.retryable(), Some(retryable), "{again:?}");
        let kind = if reason == "key_reuse" {
            rig_core::tool::ToolErrorKind::InvalidArgs
        } else {
            rig_core::tool::ToolErrorKind::Other
        };
        assert_eq!(envelope.kind(), kind, "{again:?}");
        let blocks = envelope.model_output().as_content();
        let sentence = blocks[0].as_text().unwrap();
        let feedback: &Value = blocks[1].as_json().unwrap();
        assert_eq!(feedback["reason"], reason);
        check_text(sentence, &again, reason, told);
        // The tool's error stays the envelope's source.
        assert!(envelope.downcast_ref::<ToolError>().is_some());
    }
}

/// Issue 44: each sentence idemkit says about how a call ended is written once
/// (`idem_runtime::sentences`), and every surface takes it from there. One ambiguous failure,
/// the same record, on four surfaces: the HTTP layer's problem+json, an MCP tool result, rig's
/// `ToolExecutionError` and idemkit's own error text all carry the same sentence saying that
/// the effect may or may not have happened and the same sentence saying how it is settled.
#[cfg(feature = "tower")]
mod one_wording {
    use std::sync::Arc;

    use axum::Router;
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use axum::routing::post;
    use idem_runtime::sentences;
    use idemkit::http::IdempotencyLayer;
    use idemkit::{Error, Failure, Idem, IdempotencyKey, MemoryStore};
    use tower::ServiceExt;

    use super::ToolError;

    /// The handler acts, then panics: its answer is unknown, and the record is kept as ambiguous.
    async fn charge_then_panic() -> &'static str {
        panic!("after the charge")
    }

    /// The problem+json body a repeat of the request gets once its first run's outcome is unknown.
    async fn http_problem(key: &str) -> String {
        let store = Arc::new(MemoryStore::new());
        let layer = IdempotencyLayer::new(Idem::builder().shared_store(store).build().unwrap());
        let app = Router::new()
            .route("/charge", post(charge_then_panic))
            .layer(layer);
        let request = || {
            Request::post("/charge")
                .header("idempotency-key", key)
                .body(Body::empty())
                .unwrap()
        };
        let first = tokio::spawn(app.clone().oneshot(request())).await;
        drop(first);
        let again = app.oneshot(request()).await.unwrap();
        assert_eq!(again.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(again.headers()["content-type"], "application/problem+json");
        let body = axum::body::to_bytes(again.into_body(), 1 << 20)
            .await
            .unwrap();
        let problem: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(problem["title"], "The request ran; its outcome is unknown");
        problem["detail"].as_str().unwrap().to_owned()
    }

    /// The same failure as idemkit reports it to a tool: the record of `key` is ambiguous and this
    /// call sent nothing.
    fn ambiguous(key: IdempotencyKey) -> Error {
        Error::Ambiguous {
            tool: "http".into(),
            key,
            attempts: 0,
            last: Failure::Ambiguous,
        }
    }

    #[tokio::test]
    async fn issue44_http_mcp_rig_and_the_error_carry_the_same_sentences_for_one_ambiguous_failure()
    {
        // The HTTP layer's record of Idempotency-Key `pay-1` (its tool name is `http`).
        let key = IdempotencyKey::derive("http", &[("idempotency_key", &"pay-1")]);
        let settle = sentences::how_to_settle(key);
        let effect = sentences::EFFECT_UNKNOWN;

        let http = http_problem("pay-1").await;

        let mcp = idemkit::mcp::side_effect_output::<(), _>(
            Err(ToolError(ambiguous(key))),
            None,
            &["idempotency_key"],
        )
        .unwrap();
        assert_eq!(mcp.is_error, Some(true));
        let mcp = serde_json::to_string(&mcp.content).unwrap();

        let rig = idemkit::rig::tool_error(ToolError(ambiguous(key)), None, &["idempotency_key"]);
        let rig = rig.model_output().render();

        let error = ambiguous(key).to_string();

        for (surface, text) in [
            ("http", &http),
            ("mcp", &mcp),
            ("rig", &rig),
            ("error", &error),
        ] {
            assert!(text.contains(&settle), "{surface}: {settle:?} in {text}");
            assert!(text.contains(effect), "{surface}: {effect:?} in {text}");
            assert!(!text.contains(sentences::NOT_RUN), "{surface}: {text}");
        }
    }

    /// The sentence a model reads before a replayed result is the table's, on MCP and rig alike.
    #[test]
    fn issue44_the_replayed_sentence_is_written_once() {
        let note = sentences::replayed(Some("k"));
        assert_eq!(idemkit::__private::replayed_note(Some("k")), note);
        assert!(note.starts_with("Replayed:") && note.contains("nothing was done again"));
    }
}
