//! The scripted model answers each chat-completions request with its script's next turn, in the
//! wire format, and keeps the requests.

use fake_provider::model::{ScriptedModel, ToolCall, Turn};
use serde_json::{Value, json};

async fn post(model: &ScriptedModel, body: Value) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("{}/chat/completions", model.api_base()))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

#[tokio::test]
async fn the_script_is_replayed_turn_by_turn_with_tool_calls_then_exhausted() {
    let args = json!({"customer_id": "cus_1", "amount_cents": 4200});
    let model = ScriptedModel::start(vec![
        Turn::ToolCalls(vec![ToolCall::new("call_1", "charge", &args)]),
        Turn::Text("Charged.".into()),
    ])
    .await
    .unwrap();
    let request = json!({"model": "gpt-test", "messages": [{"role": "user", "content": "charge"}]});

    let (status, first) = post(&model, request.clone()).await;
    assert_eq!(status, 200);
    assert_eq!(first["object"], "chat.completion");
    assert_eq!(first["model"], "gpt-test");
    let choice = &first["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    let call = &choice["message"]["tool_calls"][0];
    assert_eq!(call["id"], "call_1");
    assert_eq!(call["type"], "function");
    assert_eq!(call["function"]["name"], "charge");
    let sent: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(sent, args);

    let (_, second) = post(&model, request.clone()).await;
    assert_eq!(second["choices"][0]["finish_reason"], "stop");
    assert_eq!(second["choices"][0]["message"]["content"], "Charged.");

    let (status, third) = post(&model, request.clone()).await;
    assert_eq!(status, 500);
    assert_eq!(third["error"]["type"], "script_exhausted");

    assert_eq!(model.turns_answered(), 2);
    assert_eq!(
        model.requests(),
        vec![request.clone(), request.clone(), request]
    );
}
