//! The OpenTelemetry example, asserted (issue 44): through the usual bridges, each call is one
//! span carrying its tool, key, outcome and whether it was verified or replayed, and idemkit's
//! counters arrive as OpenTelemetry sums, all in the SDK's in-memory exporters.

#[path = "../examples/opentelemetry.rs"]
mod example;

use idemkit::{Idem, IdempotencyKey, MemoryStore};

#[tokio::test]
async fn one_span_per_call_with_tool_key_outcome_and_verification_and_the_counters() {
    let exported = Idem::new(MemoryStore::new())
        .scope(example::traced_calls())
        .await
        .unwrap();
    let calls: Vec<_> = exported.calls().collect();
    assert_eq!(calls.len(), 3, "one span per call: {:#?}", exported.spans);
    let field = |i: usize, name| example::attribute(calls[i], name);
    let key7 = IdempotencyKey::derive("send_text", &[("order_id", &7u64)]).to_string();
    let key8 = IdempotencyKey::derive("send_text", &[("order_id", &8u64)]).to_string();
    // `verified` is set only on a call whose unknown outcome verify found applied.
    for (i, key, outcome, verified, replayed) in [
        (0, &key7, "verified", Some("true"), "false"),
        (1, &key7, "replayed", None, "true"),
        (2, &key8, "completed", None, "false"),
    ] {
        assert_eq!(field(i, "tool").as_deref(), Some("send_text"), "call {i}");
        assert_eq!(field(i, "key").as_deref(), Some(key.as_str()), "call {i}");
        assert_eq!(field(i, "outcome").as_deref(), Some(outcome), "call {i}");
        assert_eq!(field(i, "verified").as_deref(), verified, "call {i}");
        assert_eq!(field(i, "replayed").as_deref(), Some(replayed), "call {i}");
    }

    let calls_total = exported.counter("idemkit_calls_total");
    for outcome in ["verified", "replayed", "completed"] {
        let point = vec![
            "kind=side_effect".to_owned(),
            format!("outcome={outcome}"),
            "tool=send_text".to_owned(),
        ];
        assert!(
            calls_total.contains(&(point.clone(), 1)),
            "no {point:?} = 1 in {calls_total:?}"
        );
    }
    let verifications = exported.counter("idemkit_verifications_total");
    assert!(
        verifications.contains(&(
            vec!["answer=applied".to_owned(), "tool=send_text".to_owned()],
            1
        )),
        "{verifications:?}"
    );
    let attempts = exported.counter("idemkit_attempts_total");
    assert!(
        attempts.contains(&(
            vec!["kind=side_effect".to_owned(), "tool=send_text".to_owned()],
            2
        )),
        "two bodies ran (order 7's first attempt, order 8's): {attempts:?}"
    );
}
