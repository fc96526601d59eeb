//! rig tools (feature `rig`, [rig-core](https://docs.rs/rig-core) 0.44).
//!
//! Write `#[side_effect(key = "...", rig)]` or `#[read_only(rig)]` on the `call` of a
//! [`PortableTool`](rig_core::tool::PortableTool) impl, with the tool's own types in the
//! signature, and declare rig's output and error envelope as the trait's types:
//!
//! ```
//! use idemkit::{Classify, Failure, Idem, IdempotencyKey, side_effect, store::MemoryStore};
//! use idemkit::rig::{ToolExecutionError, ToolOutput};
//! use rig_core::tool::PortableTool;
//! use serde::{Deserialize, Serialize};
//! # #[derive(Debug)] struct PayError;
//! # impl std::fmt::Display for PayError {
//! #     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { f.write_str("timed out") }
//! # }
//! # impl std::error::Error for PayError {}
//! # impl Classify for PayError { fn classify(&self) -> Failure { Failure::Ambiguous } }
//! # impl From<idemkit::Error> for PayError { fn from(_: idemkit::Error) -> Self { PayError } }
//!
//! #[derive(Clone, Serialize, Deserialize)]
//! struct ChargeArgs { customer_id: String, purpose: String, period: String, cents: u64 }
//!
//! struct Charge;
//!
//! impl PortableTool for Charge {
//!     const NAME: &'static str = "charge"; // the tool's name in every key
//!     type Args = ChargeArgs;
//!     type Output = ToolOutput;            // the result, its key, and whether it was replayed
//!     type Error = ToolExecutionError;     // the failure, classified for rig and for the model
//!
//!     fn description(&self) -> String { "Charges a customer once per purpose and period.".into() }
//!     fn parameters(&self) -> serde_json::Value { serde_json::json!({"type": "object"}) }
//!
//!     #[side_effect(key = "args.customer_id, args.purpose, args.period", rig)]
//!     async fn call(&self, key: &IdempotencyKey, args: ChargeArgs) -> Result<String, PayError> {
//!         Ok(format!("charged {} under {key}", args.cents))
//!     }
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(
//! # Idem::new(MemoryStore::new()).scope(async {
//! let args = ChargeArgs { customer_id: "cus_1".into(), purpose: "subscription".into(), period: "2026-11".into(), cents: 4200 };
//! let first = Charge.call(args.clone()).await.unwrap();
//! let again = Charge.call(args).await.unwrap();
//! assert!(again.render().contains("Replayed") && again.render().contains("32e00e40-1a53-8058-93c7-e9d1adc8ecaa"));
//! # let _ = first;
//! # }));
//! ```
//!
//! - **Key fields** are fields of the arguments (`args.customer_id`); a misspelt one is rustc's
//!   error at the key string. The tool's name in the key is its `NAME`. `name = "..."` must
//!   equal `NAME` (checked at compile time) and lists the tool in [`tools()`](crate::tools),
//!   which a tool named by its `NAME` alone is not (the registry needs the name as a literal).
//! - **Results**: `call` serves `Result<ToolOutput, ToolExecutionError>`. A success is the JSON
//!   `{"result": …, "replayed": bool, "idempotencyKey": "…", "advice": {…}}`, and a replay starts
//!   with a sentence saying nothing was done again: what rig sends back to the model. A
//!   `#[read_only(rig)]` tool's success is `{"result": …, "advice": {…}}`: it has no key and is
//!   never replayed. The advice is [`Advice`](crate::Advice), the same on every surface.
//! - **Failures** become rig's [`ToolExecutionError`] by [`Classify`] (see
//!   [`tool_error`]): rig's `retryable` hint, its kind, a `code` naming the reason, and model
//!   feedback saying whether calling again with the same arguments is safe. rig's agent loop
//!   does not retry a tool by itself; the hint is for hooks, and the feedback for the model,
//!   which decides to call again. The error keeps the tool's own error as its source.
//! - **Error types**: a `std::error::Error + Send + Sync` (kept as the source as it is, so
//!   `downcast_ref` finds it), `anyhow::Error` (feature `anyhow`) or
//!   `Box<dyn Error + Send + Sync>` (kept boxed; the error they hold is searched for idemkit's
//!   own, to name the reason).
//! - **No natural key**: `call` has rig's signature, so it cannot take an
//!   [`OperationId`](crate::OperationId); key it on a field of the tool
//!   (`key = "self.step, args.to"`) that the host fills from
//!   [`Idem::operation`](crate::Idem::operation) when it builds the tool for that step.
//! - The context-free [`PortableTool`](rig_core::tool::PortableTool) is supported (rig's
//!   `Tool` follows from it); a `call` taking rig's `&mut ToolContext` is not, since each attempt
//!   gets its arguments anew and a `&mut` cannot be handed to several.

use std::error::Error as StdError;

use crate::{CallInfo, Classify, Explanation, Failure, ToolKind};
pub use rig_core::tool::{ToolErrorKind, ToolExecutionError, ToolOutput};
use serde::Serialize;
use serde_json::{self, json};

/// What a rig tool's `call` returns when an idemkit attribute is on it.
pub type RigOutput = Result<ToolOutput, ToolExecutionError>;

/// The rig result of one call of a `#[side_effect(rig)]` tool: its outcome with its key, marked
/// `replayed` (with a sentence saying so first), or the failure as a [`ToolExecutionError`]. `info`
/// is what [`observe`](crate::observe) saw of the call; `key_fields` name the key fields.
pub fn side_effect_output<T, E>(
    result: Result<T, E>,
    info: Option<CallInfo>,
    key_fields: &[&str],
) -> RigOutput
where
    T: Serialize,
    E: StdError + Classify + Send + Sync + 'static,
{
    side_effect_output_as(result, info, key_fields, fail_std::<E>)
}

/// [`side_effect_output`] for any error type, made rig's envelope by `fail` ([`fail_std`] for a
/// `std::error::Error`, [`fail_boxed`] for `anyhow::Error` and `Box<dyn Error + Send + Sync>`).
pub(crate) fn side_effect_output_as<T, E>(
    result: Result<T, E>,
    info: Option<CallInfo>,
    key_fields: &[&str],
    fail: FailWith<E>,
) -> RigOutput
where
    T: Serialize,
{
    let key = info
        .as_ref()
        .and_then(|i| i.key.as_ref())
        .map(|k| k.to_string());
    let replayed = info.as_ref().is_some_and(|i| i.replayed);
    match result {
        Ok(value) => {
            let value = crate::told::explain::success_envelope(
                to_value(&value)?,
                Some((replayed, key.as_deref())),
            );
            if !replayed {
                return Ok(ToolOutput::json(value));
            }
            let note = crate::told::sentences::replayed(key.as_deref());
            ToolOutput::content(vec![
                rig_core::message::ToolResultContent::text(note),
                rig_core::message::ToolResultContent::json(value),
            ])
        }
        Err(e) => Err(fail(e, ToolKind::SideEffect, info.as_ref(), key_fields)),
    }
}

/// The rig result of one call of a `#[read_only(rig)]` tool: `{"result": …}` (no key, never a
/// replay), or the failure, whose feedback promises no key (a read has none and changes nothing).
pub fn read_only_output<T, E>(result: Result<T, E>) -> RigOutput
where
    T: Serialize,
    E: StdError + Classify + Send + Sync + 'static,
{
    read_only_output_as(result, fail_std::<E>)
}

/// [`read_only_output`] for any error type, made rig's envelope by `fail`.
pub(crate) fn read_only_output_as<T: Serialize, E>(
    result: Result<T, E>,
    fail: FailWith<E>,
) -> RigOutput {
    match result {
        Ok(value) => Ok(ToolOutput::json(crate::told::explain::success_envelope(
            to_value(&value)?,
            None,
        ))),
        Err(e) => Err(fail(e, ToolKind::ReadOnly, None, &[])),
    }
}

/// How a tool's error becomes rig's envelope.
pub(crate) type FailWith<E> = fn(E, ToolKind, Option<&CallInfo>, &[&str]) -> ToolExecutionError;

/// A `std::error::Error` kept as the envelope's source as it is (`downcast_ref` finds it).
pub(crate) fn fail_std<E>(
    e: E,
    kind: ToolKind,
    info: Option<&CallInfo>,
    key_fields: &[&str],
) -> ToolExecutionError
where
    E: StdError + Classify + Send + Sync + 'static,
{
    let failure = e.classify();
    let told = Explanation::of(&e, failure, kind, info, key_fields);
    envelope(e, told, failure, info)
}

/// `anyhow::Error` or `Box<dyn Error + Send + Sync>`, not an `Error` of their own: kept boxed.
pub(crate) fn fail_boxed<E>(
    e: E,
    kind: ToolKind,
    info: Option<&CallInfo>,
    key_fields: &[&str],
) -> ToolExecutionError
where
    E: Classify + Into<Box<dyn StdError + Send + Sync + 'static>>,
{
    let failure = e.classify();
    let boxed = e.into();
    let told = Explanation::of(&*boxed, failure, kind, info, key_fields);
    envelope(ToolFailure(boxed), told, failure, info)
}

/// `anyhow::Error`: explained by the error it holds (its boxed form hides the head's type).
#[cfg(feature = "anyhow")]
pub(crate) fn fail_anyhow(
    e: anyhow::Error,
    kind: ToolKind,
    info: Option<&CallInfo>,
    key_fields: &[&str],
) -> ToolExecutionError {
    let failure = e.classify();
    let told = Explanation::of(e.as_ref(), failure, kind, info, key_fields);
    envelope(ToolFailure(e.into()), told, failure, info)
}

/// A boxed error as an `Error` of its own (rig keeps a sized one as the source): its text and
/// its `source()` are the boxed error's, so idemkit's own error is found in the chain.
#[derive(Debug)]
struct ToolFailure(Box<dyn StdError + Send + Sync + 'static>);

impl std::fmt::Display for ToolFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}

impl StdError for ToolFailure {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.0.source()
    }
}

/// A `#[side_effect(rig)]` tool's failure as rig's error envelope, by [`Classify`]:
///
/// | failure | rig kind | `retryable` | `code` |
/// | --- | --- | --- | --- |
/// | `Permanent` | `other` | no | `failed` |
/// | `Ambiguous` | `other` | yes (same key: not done twice) | `failed_ambiguous` |
/// | `Transient` | `other` | yes | `failed_transient` |
/// | `RetryAfter(d)` | `rate_limited` | yes | `failed_transient` |
/// | key reused with other arguments | `invalid_args` | no | `key_reuse` |
/// | the same key in flight elsewhere | `other` | yes | `in_flight` |
/// | the store unreachable | `other` | yes | `store_unavailable` |
/// | the outcome unknown ([`Error::Ambiguous`](crate::Error::Ambiguous), [`Error::LeaseLost`](crate::Error::LeaseLost)) | `other` | no (a repeat does not send it again; `verify` or an operator settles it) | `ambiguous`, `lease_lost` |
/// | done earlier, its result not replayable | `other` | no | `unreplayable` |
/// | other refusals | `other` | no | the reason (see [`Explanation`]) |
///
/// The model sees a sentence saying what happened and whether calling again with the same
/// arguments helps, then `{"error", "reason", "idempotencyKey", "advice"}` (the advice:
/// [`Advice`](crate::Advice)); the error is kept as the
/// envelope's source (`downcast_ref`).
pub fn tool_error<E>(e: E, info: Option<&CallInfo>, key_fields: &[&str]) -> ToolExecutionError
where
    E: StdError + Classify + Send + Sync + 'static,
{
    fail_std(e, ToolKind::SideEffect, info, key_fields)
}

/// `e` in rig's envelope, with what the model is told of it (`told`, from the error as the tool
/// returned it: a boxed one is searched before it is wrapped).
fn envelope<S>(
    e: S,
    told: Explanation,
    failure: Failure,
    info: Option<&CallInfo>,
) -> ToolExecutionError
where
    S: StdError + Send + Sync + 'static,
{
    let key = info.and_then(|i| i.key.as_ref()).map(|k| k.to_string());
    let kind = match (told.reason, failure) {
        ("key_reuse", _) => ToolErrorKind::InvalidArgs,
        ("failed_transient", Failure::RetryAfter(_)) => ToolErrorKind::RateLimited,
        _ => ToolErrorKind::Other,
    };
    let message = e.to_string();
    let mut advice = told.advice;
    if advice.key.is_none() {
        advice.key.clone_from(&key);
    }
    let feedback = json!({
        "error": message,
        "reason": told.reason,
        "idempotencyKey": key,
        "advice": advice,
    });
    ToolExecutionError::new(kind, message)
        .with_retryable(told.retryable)
        .with_code(told.reason)
        .with_model_output(
            ToolOutput::content(vec![
                rig_core::message::ToolResultContent::text(told.text),
                rig_core::message::ToolResultContent::json(feedback),
            ])
            .unwrap_or_else(|e| e.model_output().clone()),
        )
        .with_source(e)
}

fn to_value<T: Serialize>(value: &T) -> Result<serde_json::Value, ToolExecutionError> {
    serde_json::to_value(value).map_err(|e| {
        ToolExecutionError::other(format!("the tool's result did not serialize: {e}"))
            .with_source(e)
    })
}

/// Whether two names are equal, in a const context (`name = "..."` against the tool's `NAME`).
#[doc(hidden)]
pub const fn same_name(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}
