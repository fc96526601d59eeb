//! What the two chat-API agent examples (`openai_agent`, `rig_agent`) share: the tools' error,
//! the scripted model's conversation, and what one run of an agent did.
#![allow(dead_code)]

use fake_provider::ProviderError;
use fake_provider::model::{ToolCall, Turn};
use idemkit::{Classify, Failure};
use serde_json::{Value, json};

/// What can go wrong when a tool calls the provider.
#[derive(Debug)]
pub enum PayError {
    /// The provider, or the way to it, failed.
    Provider(ProviderError),
    /// idemkit refused to run the tool.
    Idem(idemkit::Error),
}

impl std::fmt::Display for PayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PayError::Provider(e) => e.fmt(f),
            PayError::Idem(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for PayError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PayError::Provider(e) => Some(e),
            PayError::Idem(e) => Some(e),
        }
    }
}

impl From<idemkit::Error> for PayError {
    fn from(e: idemkit::Error) -> Self {
        PayError::Idem(e)
    }
}

impl Classify for PayError {
    fn classify(&self) -> Failure {
        match self {
            PayError::Provider(ProviderError::Connect) => Failure::Transient,
            // Sent, no answer: it may have happened.
            PayError::Provider(_) => Failure::Ambiguous,
            PayError::Idem(e) => e.classify(),
        }
    }
}

/// The model's script: `charge`, then `charge` again with the same arguments under a new call
/// id (after the first came back as an error), then a final answer.
pub fn script() -> Vec<Turn> {
    let args = json!({"customer_id": "cus_1", "purpose": "subscription", "period": "2026-11", "amount_cents": 4200});
    vec![
        Turn::ToolCalls(vec![ToolCall::new("call_k3Xq", "charge", &args)]),
        Turn::ToolCalls(vec![ToolCall::new("call_p8Zw", "charge", &args)]),
        Turn::Text("The subscription for 2026-11 is paid.".into()),
    ]
}

/// What one run of the agent did.
#[derive(Debug, Clone)]
pub struct Run {
    /// Charges the provider committed.
    pub charges: usize,
    /// Each tool call's id and the content the agent sent back to the model for it.
    pub tool_messages: Vec<(String, String)>,
    /// The model's final answer.
    pub answer: String,
    /// The requests the model received.
    pub requests: Vec<Value>,
}
