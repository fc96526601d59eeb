//! The async-openai example's agent loop against the scripted model (issue 17 part 3): the model
//! calls `charge` twice with the same arguments after a lost response; the provider counts one
//! charge with idemkit's dispatcher and two with the hand-written one.

#[path = "../examples/openai/mod.rs"]
mod openai;

use serde_json::Value;

#[tokio::test]
async fn a_model_calling_charge_again_after_a_lost_response_charges_once_with_idemkit_twice_without()
 {
    let naive = openai::run(false).await.unwrap();
    let with = openai::run(true).await.unwrap();
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
        // The first call's response was lost: the model was told so.
        assert!(
            run.tool_messages[0].1.contains("did not answer in time"),
            "{}",
            run.tool_messages[0].1
        );
        // The tools the model saw were declared from the registry's schema.
        let tools = &run.requests[0]["tools"];
        assert_eq!(tools[0]["type"], "function");
        assert_eq!(tools[0]["function"]["name"], "charge");
        assert_eq!(
            tools[0]["function"]["parameters"]["required"],
            serde_json::json!(["customer_id", "purpose", "period", "amount_cents"])
        );
        assert_eq!(run.requests.len(), 3);
    }

    // idemkit's second call ran under the contract's golden key, which the provider had seen.
    // (S35: idemkit's tool message is the envelope every surface gives, the receipt its
    // `result`, beside the advice: ran, under that key.)
    let envelope: Value = serde_json::from_str(&with.tool_messages[1].1).unwrap();
    let receipt = &envelope["result"];
    assert_eq!(receipt["key"], "32e00e40-1a53-8058-93c7-e9d1adc8ecaa");
    assert_eq!(envelope["advice"]["state"], "ran");
    assert_eq!(
        envelope["advice"]["key"],
        "32e00e40-1a53-8058-93c7-e9d1adc8ecaa"
    );
    let naive_receipt: Value = serde_json::from_str(&naive.tool_messages[1].1).unwrap();
    assert!(naive_receipt["key"].is_null());
}
