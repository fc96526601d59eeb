//! What a remote call answers: its reply ([`RemoteReply`]), and what a model reads of its end
//! ([`for_model`]), the one place a remote call's end is rendered for a model, from the runtime's
//! explanations and sentences.

use crate::told::advice::Advice;
use crate::{Explanation, IdempotencyKey, ToolKind};
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::json;

use super::failure::CallError;

/// A remote tool's answer, and how this call got it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RemoteReply {
    /// The tool's answer as its server gave it (for a replay, as it was recorded). An answer
    /// with `isError: true` is the tool's own and is not recorded: a repeat sends the call again.
    pub result: CallToolResult,
    /// The key the call ran under (`None` for a read).
    pub key: Option<IdempotencyKey>,
    /// Whether the answer is an earlier call's, recorded; nothing was sent.
    pub replayed: bool,
}

/// The result `_meta` entry that carries the [`Advice`] (S35) of a remote call that ended with the
/// tool's own answer: the answer's content and structured content stay the server's, as its
/// output schema says, and the advice goes beside them. A refusal or an unknown outcome carries
/// it as idemkit's own MCP tools do, in the structured error (`"advice"`).
pub const ADVICE_META: &str = "idemkit/advice";

/// A remote call's end as an MCP result for a model: the tool's own answer as its server gave
/// it (a replay starts with the sentence that says so: nothing was done again), or, when idemkit
/// refused the call or its outcome is unknown, a tool error (`isError: true`) with the
/// explanation's sentence first, then `{"error", "reason", "retryable", "idempotencyKey"}` as
/// idemkit's own MCP tools answer (the reasons are [`Explanation`]'s). `kind` is the tool's
/// (a read's failures promise no key); `key_fields` name its key fields for the model.
pub fn for_model(
    ended: &Result<RemoteReply, CallError>,
    kind: ToolKind,
    key_fields: &[String],
) -> CallToolResult {
    match ended {
        Ok(reply) => {
            let mut out = reply.result.clone();
            let key = reply.key.map(|k| k.to_string());
            if reply.replayed {
                let note = crate::told::sentences::replayed(key.as_deref());
                out.content.insert(0, ContentBlock::text(note));
            }
            let advice = match (kind, reply.replayed) {
                (ToolKind::ReadOnly, _) => Advice::read(),
                (ToolKind::SideEffect, true) => Advice::replayed(key),
                (ToolKind::SideEffect, false) => Advice::ran(key),
            };
            let meta = out.meta.get_or_insert_with(Default::default);
            meta.0.insert(ADVICE_META.to_owned(), json!(advice));
            out
        }
        Err(CallError::Idem(e)) => {
            let fields: Vec<&str> = key_fields.iter().map(String::as_str).collect();
            let told = Explanation::of_error(e, &fields);
            let key = key_of_error(e);
            super::super::failed(e.to_string(), &told, key)
        }
        // Nothing claimed or sent: what to correct, as `JsonToolsServer` says of such arguments.
        Err(error @ CallError::InvalidArguments { .. }) => {
            let text = error.to_string();
            let mut out = CallToolResult::structured_error(json!({
                "error": text,
                "reason": "invalid_arguments",
                "retryable": false,
                "advice": Advice::for_reason("invalid_arguments", false, None),
            }));
            out.content.insert(0, ContentBlock::text(text));
            out
        }
        Err(error @ CallError::Upstream { key, failure, .. }) => {
            let told = Explanation::of_failure(*failure, kind, None);
            super::super::failed(error.to_string(), &told, key.map(|k| k.to_string()))
        }
    }
}

/// The key an idemkit error names, where it names one.
fn key_of_error(e: &crate::Error) -> Option<String> {
    use crate::Error;
    match e {
        Error::KeyReuse { key, .. }
        | Error::InFlight { key, .. }
        | Error::LeaseLost { key, .. }
        | Error::Ambiguous { key, .. }
        | Error::Unreplayable { key, .. }
        | Error::Expired { key, .. } => Some(key.to_string()),
        Error::Store { key, .. } => key.map(|k| k.to_string()),
        _ => None,
    }
}
