//! MCP tools served with [rmcp](https://docs.rs/rmcp) (feature `rmcp`), and remote MCP tools called
//! through an rmcp client ([`IdempotentClient`]).
//!
//! Write `#[side_effect(...)]` or `#[read_only]` **above** rmcp's `#[tool]` on a tool method, and
//! `#[classified_tools]` above `#[tool_router]` on the impl block:
//!
//! ```
//! use idemkit::{Idem, IdempotencyKey, classified_tools, read_only, side_effect, store::MemoryStore};
//! use rmcp::handler::server::wrapper::Parameters;
//! use rmcp::{tool, tool_router};
//! # #[derive(Debug)] struct PayError;
//! # impl std::fmt::Display for PayError {
//! #     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { f.write_str("declined") }
//! # }
//! # impl std::error::Error for PayError {}
//! # impl idemkit::Classify for PayError {
//! #     fn classify(&self) -> idemkit::Failure { idemkit::Failure::Permanent }
//! # }
//! # impl From<idemkit::Error> for PayError { fn from(_: idemkit::Error) -> Self { PayError } }
//! # #[derive(Debug, serde::Serialize, serde::Deserialize)] struct Receipt { key: String }
//! # struct Provider;
//! # impl Provider {
//! #     async fn charge(&self, key: &str, _: &ChargeReq) -> Result<Receipt, PayError> {
//! #         Ok(Receipt { key: key.to_owned() })
//! #     }
//! # }
//! # #[derive(Clone, serde::Serialize, serde::Deserialize, rmcp::schemars::JsonSchema)]
//! # #[schemars(crate = "rmcp::schemars")]
//! # struct ChargeReq { customer_id: String, purpose: String, period: String, cents: u64 }
//! # #[derive(Clone, serde::Serialize, serde::Deserialize, rmcp::schemars::JsonSchema)]
//! # #[schemars(crate = "rmcp::schemars")]
//! # struct BalanceReq { customer_id: String }
//! struct Payments { provider: Provider, idem: Idem }
//!
//! #[classified_tools] // every #[tool] below must be #[side_effect] or #[read_only]
//! #[tool_router]
//! impl Payments {
//!     /// Charges a customer once per purpose and period.
//!     #[side_effect(key = "req.customer_id, req.purpose, req.period", idem = self.idem, destructive = false)]
//!     #[tool]
//!     async fn charge(&self, key: &IdempotencyKey, req: Parameters<ChargeReq>) -> Result<Receipt, PayError> {
//!         self.provider.charge(key.as_str(), &req.0).await
//!     }
//!
//!     /// The customer's balance.
//!     #[read_only]
//!     #[tool]
//!     async fn balance(&self, Parameters(req): Parameters<BalanceReq>) -> Result<u64, PayError> {
//!         Ok(req.customer_id.len() as u64)
//!     }
//! }
//!
//! let tools = Payments::tool_router().list_all();
//! let charge = tools.iter().find(|t| t.name == "charge").unwrap();
//! let hints = charge.annotations.as_ref().unwrap();
//! assert_eq!((hints.read_only_hint, hints.idempotent_hint), (Some(false), Some(true)));
//! # let _ = Payments { provider: Provider, idem: Idem::new(MemoryStore::new()) };
//! ```
//!
//! - **Order**: our attribute goes above `#[tool]`. Attributes expand top to bottom, so ours sees
//!   the `async fn` as written and rewrites `#[tool(...)]` before rmcp reads it. Below `#[tool]` it
//!   would get rmcp's boxed future instead, which is a compile error saying to move it up.
//! - **Annotations** come from the attribute: `#[read_only]` → `readOnlyHint: true`;
//!   `#[side_effect]` → `readOnlyHint: false, idempotentHint: true`, and `destructiveHint` /
//!   `openWorldHint` from `destructive = bool` / `open_world = bool`. A hint written in
//!   `#[tool(annotations(...))]` that contradicts them, or that does not exist, is a compile error; a
//!   `title` is kept.
//! - **Key fields** are fields of the request: `req.customer_id` for `req: Parameters<ChargeReq>`
//!   (the wrapper reads `req.0.customer_id`), or the names bound by
//!   `Parameters(ChargeReq { customer_id, .. })`. The other fields of the request are the
//!   fingerprint, so the same key fields with another amount are refused, not run.
//! - **Results**: the method serves [`ToolOutput`] (rmcp's `Result<CallToolResult, ErrorData>`).
//!   A success carries `{"result": …, "replayed": bool, "idempotencyKey": "…", "advice": {…}}` as
//!   structured content and as text, and a replay says so in a sentence the model reads first. Every failure
//!   — the tool's own, [`Error::KeyReuse`](crate::Error::KeyReuse), [`Error::InFlight`](crate::Error::InFlight), a store failure — is a tool error
//!   (`isError: true`) that says what happened and whether calling again helps, never a protocol
//!   error: `{"error": …, "reason": …, "retryable": bool, "idempotencyKey": …, "advice": {…}}`
//!   after a sentence for the model (the reasons are [`Explanation`]'s; the advice, the same on
//!   every surface, is [`Advice`](crate::Advice)). "Not run" is
//!   said only of a call refused before any attempt; when the outcome is unknown
//!   ([`Error::Ambiguous`](crate::Error::Ambiguous), [`Error::LeaseLost`](crate::Error::LeaseLost))
//!   the model is told the effect may have happened, that calling again will not do it twice, and
//!   what settles it (the tool's `verify`, or an operator's `idemkit resolve`).
//! - **Operations the host names**: a tool with no natural key takes an
//!   [`OperationId`](crate::OperationId) parameter, which rmcp's router never sees; serve the
//!   handler in [`Operations`], and each request runs as the operation its `_meta` names
//!   (`{"idemkit/operation": "plan-42/step-3"}`, [`OPERATION_META`]): the client (the agent's
//!   host) names it from its own durable state, never the model.
//! - **One definition for JSON and MCP**: a free function marked `json` is served over MCP by
//!   [`JsonToolsServer`] with the name, description and record it has in
//!   [`JsonTools`](crate::json::JsonTools) (feature `json`).
//! - **Errors**: the tool's error type is a `std::error::Error`, `anyhow::Error` (feature
//!   `anyhow`) or `Box<dyn Error + Send + Sync>`; the error it holds is searched for idemkit's
//!   own, to name the reason.
//! - **`#[classified_tools]`** on the impl block fails the build for a `#[tool]` method that is
//!   neither `#[side_effect]` nor `#[read_only]`.
//! - **Tools you call**: [`IdempotentClient`] is the client side, for tools of a remote MCP server
//!   you did not write: `tools/call` through an rmcp client's peer, keyed on the argument fields
//!   named per tool ([`RemoteTool`]), its key sent in `_meta` ([`IDEMPOTENCY_KEY_META`]), recorded
//!   and replayed by the same executor; [`for_model`] renders a call's end for a model.
//! - **Tenants**: a server that knows its client wraps its handler in [`Tenanted`], which runs
//!   each request under the tenant it reads from the request's [`RequestContext`](rmcp::service::RequestContext) (an
//!   authenticated principal the transport put in its extensions, or the client named in the
//!   handshake), so the tools need no [`as_tenant`](crate::as_tenant) of their own: two clients
//!   calling `charge` with equal arguments are two operations, and neither is ever answered with
//!   the other's outcome (S18).

use std::error::Error as StdError;

use crate::{CallInfo, Classify, Explanation, Failure, ToolKind};
use rmcp::ErrorData;
use rmcp::model::{CallToolResult, ContentBlock};
use serde::Serialize;
use serde_json::{self, Value, json};

mod client;
#[cfg(feature = "json")]
mod json_server;
mod operations;
mod tenants;

pub use self::client::{
    ADVICE_META, CallError, DEFAULT_TIMEOUT, IDEMPOTENCY_KEY_META, IdempotentClient, RemoteReply,
    RemoteTool, RemoteVerify, for_model,
};
#[cfg(feature = "json")]
#[cfg_attr(docsrs, doc(cfg(feature = "json")))]
pub use self::json_server::JsonToolsServer;
pub use self::operations::{OPERATION_META, Operations};
pub use self::tenants::Tenanted;

/// What an idemkit MCP tool method returns to rmcp's router.
pub type ToolOutput = Result<CallToolResult, ErrorData>;

/// The MCP result of one call of a `#[side_effect]` tool: its outcome marked `replayed` (with a
/// sentence saying so first) or, on failure, a tool error that explains it. `info` is what
/// [`observe`](crate::observe) saw of the call; `key_fields` name the key fields for the model.
pub fn side_effect_output<T, E>(
    result: Result<T, E>,
    info: Option<CallInfo>,
    key_fields: &[&str],
) -> ToolOutput
where
    T: Serialize,
    E: StdError + Classify + 'static,
{
    side_effect_output_as(result, info, key_fields, |e| e)
}

/// [`side_effect_output`] for an error type seen as a `std::error::Error` through `as_error`
/// (`anyhow::Error`, `Box<dyn Error + Send + Sync>`, which are not one themselves).
pub(crate) fn side_effect_output_as<T, E>(
    result: Result<T, E>,
    info: Option<CallInfo>,
    key_fields: &[&str],
    as_error: fn(&E) -> &(dyn StdError + 'static),
) -> ToolOutput
where
    T: Serialize,
    E: Classify,
{
    let key = info
        .as_ref()
        .and_then(|i| i.key.as_ref())
        .map(|k| k.to_string());
    let replayed = info.as_ref().is_some_and(|i| i.replayed);
    match result {
        Ok(value) => Ok(success(to_value(&value)?, Some((replayed, key.as_deref())))),
        Err(e) => Ok(failure(
            as_error(&e),
            e.classify(),
            ToolKind::SideEffect,
            info.as_ref(),
            key,
            key_fields,
        )),
    }
}

/// The MCP result of one call of a `#[read_only]` tool.
pub fn read_only_output<T, E>(result: Result<T, E>) -> ToolOutput
where
    T: Serialize,
    E: StdError + Classify + 'static,
{
    read_only_output_as(result, |e| e)
}

/// [`read_only_output`] for an error type seen as a `std::error::Error` through `as_error`.
pub(crate) fn read_only_output_as<T, E>(
    result: Result<T, E>,
    as_error: fn(&E) -> &(dyn StdError + 'static),
) -> ToolOutput
where
    T: Serialize,
    E: Classify,
{
    match result {
        Ok(value) => Ok(success(to_value(&value)?, None)),
        Err(e) => Ok(failure(
            as_error(&e),
            e.classify(),
            ToolKind::ReadOnly,
            None,
            None,
            &[],
        )),
    }
}

/// A success as MCP carries it: the one envelope (`success_envelope`) as structured content,
/// after the one sentence a replay starts with.
fn success(result: Value, side_effect: Option<(bool, Option<&str>)>) -> CallToolResult {
    let mut out =
        CallToolResult::structured(crate::told::explain::success_envelope(result, side_effect));
    if let Some((true, key)) = side_effect {
        let note = crate::told::sentences::replayed(key);
        out.content.insert(0, ContentBlock::text(note));
    }
    out
}

fn to_value<T: Serialize>(value: &T) -> Result<Value, ErrorData> {
    serde_json::to_value(value).map_err(|e| {
        ErrorData::internal_error(format!("the tool's result did not serialize: {e}"), None)
    })
}

/// An error's text as an MCP client reads it: a missing operation is the client's to send, in
/// the request's `_meta` (the runtime's own text tells a Rust host to use `operation_scope`).
fn for_the_client(reason: &str, error: String) -> String {
    if reason == "no_operation" {
        format!(
            "idemkit: this tool acts once per operation, which the MCP client names, and this request named none; \
             the tool was not run. Send the operation's name in the request's `_meta`: \
             `\"_meta\": {{\"{OPERATION_META}\": \"plan-42/step-3\"}}`, named from the client's own durable state \
             (the plan step, the ticket), never by the model"
        )
    } else {
        error
    }
}

/// A tool error: why, in words a model can act on, then the error itself, its reason (a stable
/// word, see [`Explanation`]) and whether calling again can help.
fn failure(
    e: &(dyn StdError + 'static),
    failure: Failure,
    kind: ToolKind,
    info: Option<&CallInfo>,
    key: Option<String>,
    key_fields: &[&str],
) -> CallToolResult {
    let told = Explanation::of(e, failure, kind, info, key_fields);
    failed(e.to_string(), &told, key)
}

/// A failure as MCP carries it, for `#[tool]` methods and `JsonToolsServer` alike: the
/// explanation's sentence first, then `{"error", "reason", "retryable", "idempotencyKey",
/// "advice"}` (the advice names the key where the explanation's error did not).
fn failed(error: String, told: &Explanation, key: Option<String>) -> CallToolResult {
    let mut advice = told.advice.clone();
    if advice.key.is_none() {
        advice.key.clone_from(&key);
    }
    let mut out = CallToolResult::structured_error(json!({
        "error": for_the_client(told.reason, error),
        "reason": told.reason,
        "retryable": told.retryable,
        "idempotencyKey": key,
        "advice": advice,
    }));
    out.content.insert(0, ContentBlock::text(told.text.clone()));
    out
}
