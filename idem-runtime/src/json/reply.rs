//! What a JSON call answers: a tool's definition for a chat API (`ToolDefinition`), its reply
//! (`JsonReply`) or why it failed (`JsonCallError`).

use crate::key::IdempotencyKey;
use crate::observe::CallInfo;
use crate::registry::ToolKind;
use crate::told::advice::Advice;
use crate::told::explain::{Explanation, success_envelope};
use crate::told::sentences::{replayed, was_not_run};
use serde_json::{Value, json};
use std::fmt;

/// One tool as a chat API declares it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ToolDefinition {
    /// The name the model calls it by (the tool's name, part of its keys).
    pub name: &'static str,
    /// Its doc comment.
    pub description: &'static str,
    /// Read-only or side effect.
    pub kind: ToolKind,
    /// The JSON Schema of its arguments: an object with `properties` and `required`, unknown
    /// properties refused (`additionalProperties: false`).
    pub parameters: Value,
    /// `destructive = ..` on the attribute (MCP's `destructiveHint`, when served there).
    pub destructive: Option<bool>,
    /// `open_world = ..` on the attribute (MCP's `openWorldHint`, when served there).
    pub open_world: Option<bool>,
}

impl ToolDefinition {
    /// `{"type": "function", "function": {"name", "description", "parameters"}}`: an element of
    /// a chat-completions request's `tools`.
    pub fn to_chat_tool(&self) -> Value {
        json!({
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            }
        })
    }
}

/// What a tool called from JSON returned.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct JsonReply {
    /// The tool's `T`, as JSON.
    pub value: Value,
    /// What happened in the call: key, attempts, whether it was replayed.
    pub info: Option<CallInfo>,
}

impl JsonReply {
    /// Whether the result is the stored outcome of an earlier call (the body did not run).
    pub fn replayed(&self) -> bool {
        self.info.as_ref().is_some_and(|i| i.replayed)
    }

    /// The key the call ran under (`None` for read-only tools).
    pub fn key(&self) -> Option<&IdempotencyKey> {
        self.info.as_ref().and_then(|i| i.key.as_ref())
    }

    /// What the model is told of the call, for programs (S35): `ran` or `replayed`, with the
    /// key; a read's is `ran` with no key. See [`advice`](crate::advice).
    pub fn advice(&self) -> Advice {
        match (self.info.as_ref(), self.key()) {
            (Some(info), Some(key)) if info.replayed => Advice::replayed(Some(key.to_string())),
            (_, Some(key)) => Advice::ran(Some(key.to_string())),
            (_, None) => Advice::read(),
        }
    }

    /// A chat API's tool message content: the envelope every surface gives a model,
    /// `{"result": …, "replayed": bool, "idempotencyKey": "…", "advice": {…}}` (a read's:
    /// `{"result": …, "advice": {…}}`) as JSON text, after the sentence a replay starts with
    /// (on a line of its own).
    pub fn content(&self) -> String {
        let key = self.key().map(|k| k.to_string());
        let envelope = success_envelope(
            self.value.clone(),
            key.as_deref().map(|k| (self.replayed(), Some(k))),
        );
        if self.replayed() {
            format!("{}\n{envelope}", replayed(key.as_deref()))
        } else {
            envelope.to_string()
        }
    }
}

/// Why a call from JSON returned no value. Its `Display` is written for the model: send it back
/// as the tool message, and the model can correct its call.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum JsonCallError {
    /// No tool of this dispatcher has that name; nothing ran.
    UnknownTool {
        /// The name the model asked for.
        name: String,
        /// The names it could have asked for.
        known: Vec<&'static str>,
    },
    /// The arguments' JSON text is longer than the bound; nothing ran and it was not parsed.
    ArgumentsTooLarge {
        /// The tool.
        tool: &'static str,
        /// Their length in bytes.
        len: usize,
        /// The bound in bytes.
        limit: usize,
    },
    /// The arguments are not JSON, not an object, or do not match the tool's parameters; nothing
    /// ran.
    InvalidArguments {
        /// The tool.
        tool: &'static str,
        /// What is wrong (serde's message: "missing field `period`", "invalid type: …").
        message: String,
    },
    /// The tool was called and returned its error (which may be idemkit's own, such as a key
    /// reused with other arguments).
    Failed {
        /// The tool.
        tool: &'static str,
        /// The error's text.
        message: String,
        /// What happened in the call (boxed: it is most of the error's size).
        info: Option<Box<CallInfo>>,
        /// What the model is told: whether the effect may have happened, whether calling again
        /// can help (`retryable`), and the reason as a stable word (`key_reuse`, `ambiguous`,
        /// `lease_lost`, … see [`Explanation`]).
        explanation: Box<Explanation>,
    },
    /// Two tools of this program marked `json` share the name: the model's call cannot say which
    /// it means, so neither is listed or run under it. Give each a distinct `name = "..."`.
    DuplicateTool {
        /// The shared name.
        name: &'static str,
        /// Where each is defined (`file:line (module)`, or the path of its arguments' type).
        places: Vec<String>,
    },
}

impl JsonCallError {
    /// Whether the tool was called (only [`JsonCallError::Failed`]); the other errors ran nothing.
    pub fn called(&self) -> bool {
        matches!(self, JsonCallError::Failed { .. })
    }

    /// A stable word for why: [`Explanation`]'s reason for a failed call, else `unknown_tool`,
    /// `invalid_arguments` (too large, not JSON, not the parameters) or `duplicate_tool`.
    pub fn reason(&self) -> &'static str {
        match self {
            JsonCallError::UnknownTool { .. } => "unknown_tool",
            JsonCallError::ArgumentsTooLarge { .. } | JsonCallError::InvalidArguments { .. } => {
                "invalid_arguments"
            }
            JsonCallError::Failed { explanation, .. } => explanation.reason,
            JsonCallError::DuplicateTool { .. } => "duplicate_tool",
        }
    }

    /// The same answer for programs (S35): a failed call's [`Explanation::advice`], else
    /// `not_run` (nothing ran, and no record was read). See [`advice`](crate::advice).
    pub fn advice(&self) -> Advice {
        match self {
            JsonCallError::Failed { explanation, .. } => explanation.advice.clone(),
            other => Advice::for_reason(other.reason(), false, None),
        }
    }

    /// A chat API's tool message content: this error's text (what the model reads first), then,
    /// on a line of its own, `{"advice": {…}}`.
    pub fn content(&self) -> String {
        format!("{self}\n{}", serde_json::json!({ "advice": self.advice() }))
    }
}

impl fmt::Display for JsonCallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JsonCallError::UnknownTool { name, known } => write!(
                f,
                "there is no tool named `{name}`; nothing was run. The tools are: {}",
                known.join(", ")
            ),
            JsonCallError::ArgumentsTooLarge { tool, len, limit } => write!(
                f,
                "the arguments for `{tool}` are {len} bytes, over the limit of {limit}; {}. Call it again \
                 with only the parameters its schema names",
                was_not_run("the tool")
            ),
            JsonCallError::InvalidArguments { tool, message } => write!(
                f,
                "invalid arguments for `{tool}`: {message}; {}. Call it again with a JSON object that \
                 matches its parameters schema",
                was_not_run("the tool")
            ),
            JsonCallError::Failed {
                tool,
                message,
                explanation,
                ..
            } => write!(f, "`{tool}` failed: {message}\n{}", explanation.text),
            JsonCallError::DuplicateTool { name, places } => write!(
                f,
                "two tools of this program are named `{name}` ({}), so a call of `{name}` cannot say which it \
                 means; neither was run. Calling again will not help: the program must give each a distinct \
                 `name = \"...\"`",
                places.join(" and ")
            ),
        }
    }
}

impl std::error::Error for JsonCallError {}
