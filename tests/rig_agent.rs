//! The rig example's agent loop against the scripted model (issue 17 part 2): the model calls
//! `charge` twice with the same arguments after a lost response; the provider counts one charge
//! with the `#[side_effect(rig)]` tool and two with the same tool without it. Also what rig's
//! envelope carries: a failure classified, a replay marked with its key.

#[path = "../examples/rig/mod.rs"]
mod rig;

use std::time::Duration;

use fake_provider::{FakeProvider, Fault};
use idemkit::{Idem, MemoryStore};
use rig_core::tool::PortableTool;
use serde_json::{Value, json};

const GOLDEN_KEY: &str = "32e00e40-1a53-8058-93c7-e9d1adc8ecaa";

#[tokio::test]
async fn a_model_calling_charge_again_after_a_lost_response_charges_once_with_idemkit_twice_without()
 {
    let naive = rig::run(false).await.unwrap();
    let with = rig::run(true).await.unwrap();
    println!(
        "charges without idemkit: {}, with: {}",
        naive.charges, with.charges
    );
    assert_eq!(naive.charges, 2, "the model's second call charges again");
    assert_eq!(
        with.charges, 1,
        "the second call reuses the first call's key"
    );

    for run in [&naive, &with] {
        assert_eq!(run.answer, "The subscription for 2026-11 is paid.");
        assert_eq!(run.requests.len(), 3, "rig's loop fed each result back");
        let ids: Vec<&str> = run
            .tool_messages
            .iter()
            .map(|(id, _)| id.as_str())
            .collect();
        assert_eq!(
            ids,
            ["call_k3Xq", "call_p8Zw"],
            "one tool message per tool call id"
        );
        // The model's two calls had the same arguments, under two call ids.
        let calls: Vec<&Value> = run.requests[2]["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "assistant")
            .flat_map(|m| m["tool_calls"].as_array().unwrap())
            .collect();
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0]["function"]["name"], "charge");
        let args = |c: &Value| -> Value {
            serde_json::from_str(c["function"]["arguments"].as_str().unwrap()).unwrap()
        };
        assert_eq!(args(calls[0]), args(calls[1]));
        assert_eq!(args(calls[0])["customer_id"], "cus_1");
        // The tool the model saw was declared by rig from the impl.
        let tools = &run.requests[0]["tools"];
        assert_eq!(tools[0]["function"]["name"], "charge");
    }

    // With idemkit the model was told the first call may have happened and a repeat is safe…
    let (_, first) = &with.tool_messages[0];
    assert!(
        first.contains("may or may not have taken effect"),
        "{first}"
    );
    assert!(first.contains("\"reason\":\"failed_ambiguous\""), "{first}");
    assert!(first.contains(GOLDEN_KEY), "{first}");
    // …and the second call ran under the same key (the contract's golden key), which the
    // provider had seen: it replayed its stored charge, and the model sees that with the key.
    let second: Value = serde_json::from_str(&with.tool_messages[1].1).unwrap();
    assert_eq!(second["idempotencyKey"], GOLDEN_KEY);
    assert_eq!(second["result"]["key"], GOLDEN_KEY);
    assert_eq!(second["result"]["provider_replayed"], true);
    assert_eq!(
        second["replayed"], false,
        "the body ran again, with the key"
    );

    // Without idemkit the second call made a new charge.
    let naive_second: Value = serde_json::from_str(&naive.tool_messages[1].1).unwrap();
    assert!(naive_second["key"].is_null());
    assert_eq!(naive_second["provider_replayed"], false);
}

fn args() -> rig::ChargeArgs {
    rig::ChargeArgs {
        customer_id: "cus_1".into(),
        purpose: "subscription".into(),
        period: "2026-11".into(),
        amount_cents: 4200,
    }
}

#[tokio::test]
async fn a_repeat_after_completion_is_replayed_from_the_record_and_says_so_with_its_key() {
    let provider = FakeProvider::start().await.unwrap();
    let charge = rig::Charge {
        provider: fake_provider::Client::new(provider.base_url(), Duration::from_secs(10)),
        idem: Idem::new(MemoryStore::new()),
    };
    let first = charge.call(args()).await.unwrap();
    assert_eq!(
        first.as_json().unwrap()["replayed"],
        false,
        "{}",
        first.render()
    );
    let again = charge.call(args()).await.unwrap();
    assert_eq!(provider.count("charges"), 1);
    let blocks = again.as_content();
    assert_eq!(blocks.len(), 2, "a note, then the result");
    let note = blocks[0].as_text().unwrap();
    assert!(
        note.starts_with("Replayed:") && note.contains(GOLDEN_KEY),
        "{note}"
    );
    let value = blocks[1].as_json().unwrap();
    assert_eq!(value["replayed"], true);
    assert_eq!(value["idempotencyKey"], GOLDEN_KEY);
    assert_eq!(value["result"], first.as_json().unwrap()["result"]);

    // The same key with another amount is refused before anything runs: not retryable.
    let other = rig::ChargeArgs {
        amount_cents: 9900,
        ..args()
    };
    let refused = charge.call(other).await.unwrap_err();
    assert_eq!(provider.count("charges"), 1);
    assert_eq!(refused.code(), Some("key_reuse"));
    assert_eq!(refused.retryable(), Some(false));
    assert_eq!(refused.kind(), rig_core::tool::ToolErrorKind::InvalidArgs);
}

#[tokio::test]
async fn a_lost_response_reaches_rig_as_a_retryable_failure_that_keeps_its_source() {
    let provider = FakeProvider::start().await.unwrap();
    provider.inject([Fault::DropAfterCommit]);
    let charge = rig::Charge {
        provider: fake_provider::Client::new(provider.base_url(), Duration::from_millis(300)),
        idem: Idem::new(MemoryStore::new()),
    };
    let error = charge.call(args()).await.unwrap_err();
    assert_eq!(error.code(), Some("failed_ambiguous"));
    assert_eq!(error.retryable(), Some(true));
    assert!(matches!(
        error.downcast_ref::<rig::PayError>(),
        Some(rig::PayError::Provider(
            fake_provider::ProviderError::Timeout
        ))
    ));
    let feedback = error.model_output().render();
    assert!(feedback.contains("is safe"), "{feedback}");
    assert!(
        error.model_output().as_content()[1].as_json().unwrap()
            == &json!({"error": "the provider did not answer in time", "reason": "failed_ambiguous", "idempotencyKey": GOLDEN_KEY})
    );
}
