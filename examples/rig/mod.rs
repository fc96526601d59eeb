//! An agent on rig's own agent loop (rig-agent 0.44) and its OpenAI chat-completions client,
//! driven by a scripted model on loopback: the model calls `charge`, the provider commits and
//! loses the response, the model calls `charge` again with the same arguments (under a new tool
//! call id, as real models do). The idemkit agent's `charge` is a rig `PortableTool` whose `call`
//! carries `#[side_effect(key = "args.customer_id, args.purpose, args.period", rig)]`; the naive
//! agent's is the same tool without it.
#![allow(dead_code)]

use std::time::Duration;

use fake_provider::model::ScriptedModel;
use fake_provider::{FakeProvider, Fault, ProviderError};
use idemkit::rig::{ToolExecutionError, ToolOutput};
use idemkit::{Idem, IdempotencyKey, side_effect, store::MemoryStore};
use rig_agent::AgentBuilder;
use rig_core::providers::openai::OpenAIConfig;
use rig_core::tool::PortableTool;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[path = "../chat/mod.rs"]
mod chat;
pub use chat::{PayError, Run, script};

/// The arguments the model writes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChargeArgs {
    /// The customer.
    pub customer_id: String,
    /// What the charge is for.
    pub purpose: String,
    /// The billing period.
    pub period: String,
    /// The amount in cents.
    pub amount_cents: u64,
}

/// What a charge returns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Receipt {
    /// The provider's charge id.
    pub charge_id: String,
    /// The key the charge was made with (none for the naive agent).
    pub key: Option<String>,
    /// Whether the provider answered with the response it stored for this key (`Idempotent-Replayed`).
    pub provider_replayed: bool,
}

const DESCRIPTION: &str = "Charges a customer once per purpose and period (amount in cents).";

fn parameters() -> Value {
    json!({
        "type": "object",
        "properties": {
            "customer_id": {"type": "string"},
            "purpose": {"type": "string"},
            "period": {"type": "string"},
            "amount_cents": {"type": "integer", "minimum": 0},
        },
        "required": ["customer_id", "purpose", "period", "amount_cents"],
        "additionalProperties": false,
    })
}

async fn post_charge(
    provider: &fake_provider::Client,
    key: Option<&str>,
    args: &ChargeArgs,
) -> Result<Receipt, ProviderError> {
    let body = json!({"customer": args.customer_id, "purpose": args.purpose, "period": args.period, "amount_cents": args.amount_cents});
    let answer = provider.post("charges", key, &body).await?;
    Ok(Receipt {
        charge_id: answer.body["id"].as_str().unwrap_or_default().to_owned(),
        key: key.map(str::to_owned),
        provider_replayed: answer.replayed,
    })
}

/// `charge` with idemkit: the key comes from the arguments that identify the operation.
pub struct Charge {
    /// The provider's client.
    pub provider: fake_provider::Client,
    /// Where outcomes are recorded.
    pub idem: Idem,
}

impl PortableTool for Charge {
    const NAME: &'static str = "charge";
    type Args = ChargeArgs;
    type Output = ToolOutput;
    type Error = ToolExecutionError;

    fn description(&self) -> String {
        DESCRIPTION.into()
    }

    fn parameters(&self) -> Value {
        parameters()
    }

    /// One attempt per call: the agent loop, not the tool, decides to call again, which is the
    /// case this example shows (a lost response reaches the model as an error).
    #[side_effect(
        key = "args.customer_id, args.purpose, args.period",
        rig,
        idem = self.idem,
        max_attempts = 1
    )]
    async fn call(&self, key: &IdempotencyKey, args: ChargeArgs) -> Result<Receipt, PayError> {
        post_charge(&self.provider, Some(key.as_str()), &args)
            .await
            .map_err(PayError::Provider)
    }
}

/// The same tool without idemkit: what a hand-written rig tool does.
pub struct ChargeNaive {
    /// The provider's client.
    pub provider: fake_provider::Client,
}

impl PortableTool for ChargeNaive {
    const NAME: &'static str = "charge";
    type Args = ChargeArgs;
    type Output = Receipt;
    type Error = ProviderError;

    fn description(&self) -> String {
        DESCRIPTION.into()
    }

    fn parameters(&self) -> Value {
        parameters()
    }

    async fn call(&self, args: ChargeArgs) -> Result<Receipt, ProviderError> {
        post_charge(&self.provider, None, &args).await
    }
}

/// Runs the scripted conversation through rig's agent against a provider that loses the first
/// charge's response after committing it; with idemkit's `charge` or the naive one.
pub async fn run(with_idemkit: bool) -> Result<Run, Box<dyn std::error::Error>> {
    let provider = FakeProvider::start().await?;
    provider.inject([Fault::DropAfterCommit]);
    // The provider never answers a dropped response: the client's timeout ends the wait.
    let client = fake_provider::Client::new(provider.base_url(), Duration::from_millis(300));
    let model = ScriptedModel::start(script()).await?;
    // rig's OpenAI chat-completions client, on its reqwest transport, at the scripted model.
    let openai = OpenAIConfig::new("sk-scripted")
        .with_base_url(model.api_base())
        .client();
    let builder = AgentBuilder::new(openai.chat("gpt-4o-mini"));
    let builder = if with_idemkit {
        builder.tool(Charge {
            provider: client,
            idem: Idem::new(MemoryStore::new()),
        })
    } else {
        builder.tool(ChargeNaive { provider: client })
    };
    let agent = builder.build();
    let response = agent
        .prompt("Charge cus_1 42.00 for the 2026-11 subscription.")
        .max_turns(8)
        .run()
        .await?;

    let requests = model.requests();
    // What rig sent back for each tool call: the tool messages of the last request.
    let tool_messages = requests
        .last()
        .and_then(|r| r["messages"].as_array())
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            let content = match &m["content"] {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            (
                m["tool_call_id"].as_str().unwrap_or_default().to_owned(),
                content,
            )
        })
        .collect();
    Ok(Run {
        charges: provider.count("charges"),
        tool_messages,
        answer: response.output(),
        requests,
    })
}
