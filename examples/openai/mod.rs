//! An agent written with async-openai's real client, its loop driven by a scripted model on
//! loopback: the model calls `charge`, the provider commits and loses the response, the model
//! calls `charge` again with the same arguments (under a new `tool_call_id`, as real models do).
//! The tools are declared from idemkit's registry (`JsonTools::chat_tools`) and the model's
//! `tool_calls` are dispatched through `JsonTools::call`; the naive agent declares the same tools
//! and dispatches by hand, with no key.
#![allow(dead_code)]

use std::future::Future;
use std::time::Duration;

use async_openai::Client;
use async_openai::config::OpenAIConfig;
use async_openai::types::chat::{
    ChatCompletionMessageToolCalls, ChatCompletionRequestAssistantMessageArgs,
    ChatCompletionRequestMessage, ChatCompletionRequestToolMessageArgs,
    ChatCompletionRequestUserMessageArgs, ChatCompletionTools, CreateChatCompletionRequestArgs,
};
use fake_provider::model::ScriptedModel;
use fake_provider::{FakeProvider, Fault};
use idemkit::{Idem, IdempotencyKey, json::JsonTools, side_effect, store::MemoryStore};
use serde::{Deserialize, Serialize};
use serde_json::json;

#[path = "../chat/mod.rs"]
mod chat;
pub use chat::{PayError, Run, script};

tokio::task_local! {
    /// The provider the agent's tools call: a tool called from JSON is a free function, so it
    /// reaches its client through the task that runs the agent.
    static PROVIDER: fake_provider::Client;
}

/// What a charge returns to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Receipt {
    /// The provider's charge id.
    pub charge_id: String,
    /// The key the charge was made with (none for the naive agent).
    pub key: Option<String>,
}

/// Charges a customer once per purpose and period (amount in cents).
///
/// One attempt per call: the agent loop, not the tool, decides to call again, which is the case
/// this example shows (a lost response reaches the model as an error).
#[side_effect(key = "customer_id, purpose, period", json, max_attempts = 1)]
pub async fn charge(
    key: &IdempotencyKey,
    customer_id: &str,
    purpose: &str,
    period: &str,
    amount_cents: u64,
) -> Result<Receipt, PayError> {
    let body = json!({"customer": customer_id, "purpose": purpose, "period": period, "amount_cents": amount_cents});
    let answer = PROVIDER
        .with(|p| p.clone())
        .post("charges", Some(key.as_str()), &body)
        .await
        .map_err(PayError::Provider)?;
    Ok(Receipt {
        charge_id: answer.body["id"].as_str().unwrap_or_default().to_owned(),
        key: Some(key.to_string()),
    })
}

/// The same charge without idemkit: what a hand-written dispatcher does.
async fn charge_naive(arguments: &str) -> Result<Receipt, String> {
    #[derive(Deserialize)]
    struct Args {
        customer_id: String,
        purpose: String,
        period: String,
        amount_cents: u64,
    }
    let a: Args = serde_json::from_str(arguments).map_err(|e| e.to_string())?;
    let body = json!({"customer": a.customer_id, "purpose": a.purpose, "period": a.period, "amount_cents": a.amount_cents});
    let answer = PROVIDER
        .with(|p| p.clone())
        .post("charges", None, &body)
        .await
        .map_err(|e| e.to_string())?;
    Ok(Receipt {
        charge_id: answer.body["id"].as_str().unwrap_or_default().to_owned(),
        key: None,
    })
}

/// The agent's loop over async-openai's client: ask, run the requested tools through
/// `dispatch`, send their results back, until the model answers with text.
async fn agent_loop<F, Fut>(
    client: &Client<OpenAIConfig>,
    tools: Vec<ChatCompletionTools>,
    dispatch: F,
) -> Result<(String, Vec<(String, String)>), Box<dyn std::error::Error>>
where
    F: Fn(String, String) -> Fut,
    Fut: Future<Output = String>,
{
    let mut messages: Vec<ChatCompletionRequestMessage> = vec![
        ChatCompletionRequestUserMessageArgs::default()
            .content("Charge cus_1 42.00 for the 2026-11 subscription.")
            .build()?
            .into(),
    ];
    let mut tool_messages = Vec::new();
    for _turn in 0..8 {
        let request = CreateChatCompletionRequestArgs::default()
            .model("gpt-4o-mini")
            .messages(messages.clone())
            .tools(tools.clone())
            .build()?;
        let response = client.chat().create(request).await?;
        let message = response
            .choices
            .into_iter()
            .next()
            .ok_or("no choice")?
            .message;
        let Some(calls) = message.tool_calls.filter(|c| !c.is_empty()) else {
            return Ok((message.content.unwrap_or_default(), tool_messages));
        };
        messages.push(
            ChatCompletionRequestAssistantMessageArgs::default()
                .tool_calls(calls.clone())
                .build()?
                .into(),
        );
        for call in calls {
            let ChatCompletionMessageToolCalls::Function(call) = call else {
                continue;
            };
            let content = dispatch(call.function.name, call.function.arguments).await;
            tool_messages.push((call.id.clone(), content.clone()));
            messages.push(
                ChatCompletionRequestToolMessageArgs::default()
                    .tool_call_id(call.id)
                    .content(content)
                    .build()?
                    .into(),
            );
        }
    }
    Err("the model did not finish".into())
}

/// Runs the scripted conversation against a provider that loses the first charge's response
/// after committing it; with idemkit (`JsonTools`) or with the naive dispatcher.
pub async fn run(with_idemkit: bool) -> Result<Run, Box<dyn std::error::Error>> {
    let provider = FakeProvider::start().await?;
    provider.inject([Fault::DropAfterCommit]);
    // The provider never answers a dropped response: the client's timeout ends the wait.
    let client = fake_provider::Client::new(provider.base_url(), Duration::from_millis(300));
    let model = ScriptedModel::start(script()).await?;
    let openai = Client::with_config(
        OpenAIConfig::new()
            .with_api_base(model.api_base())
            .with_api_key("sk-scripted"),
    );

    // Declared from the registry's schemas, in both agents: the model sees the same tools.
    let json_tools = JsonTools::only(["charge"])?;
    let tools: Vec<ChatCompletionTools> = serde_json::from_value(json_tools.chat_tools())?;

    let (answer, tool_messages) = if with_idemkit {
        let idem = Idem::new(MemoryStore::new());
        let dispatch = |name: String, arguments: String| {
            let (tools, idem) = (&json_tools, &idem);
            async move {
                match idem.scope(tools.call(&name, &arguments)).await {
                    Ok(reply) => reply.content(),
                    // For the model: what went wrong, whether to correct the call, and the
                    // advice (S35) for the host.
                    Err(e) => e.content(),
                }
            }
        };
        PROVIDER
            .scope(client, agent_loop(&openai, tools, dispatch))
            .await?
    } else {
        let dispatch = |name: String, arguments: String| async move {
            match name.as_str() {
                "charge" => match charge_naive(&arguments).await {
                    Ok(receipt) => serde_json::to_string(&receipt).unwrap_or_default(),
                    Err(e) => format!("`charge` failed: {e}"),
                },
                other => format!("there is no tool named `{other}`"),
            }
        };
        PROVIDER
            .scope(client, agent_loop(&openai, tools, dispatch))
            .await?
    };
    Ok(Run {
        charges: provider.count("charges"),
        tool_messages,
        answer,
        requests: model.requests(),
    })
}
