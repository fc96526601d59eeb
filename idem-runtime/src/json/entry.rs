//! What a tool marked `json` registers (`JsonArgs`, `JsonEntry`): its arguments' schema, and how a
//! call of it is prepared and run from JSON.

use super::describe::Described;
use crate::failure::Failure;
use crate::observe::{CallInfo, CallOutcome, observe};
use crate::registry::{ToolInfo, ToolKind};
use crate::told::explain::Explanation;
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::future::Future;
use std::pin::Pin;

/// The bound on one call's arguments unless set otherwise: 64 KiB of JSON text. A model's
/// arguments are a few hundred bytes; a bound keeps a runaway generation from being parsed,
/// fingerprinted and stored.
pub const DEFAULT_MAX_ARGUMENTS_LEN: usize = 64 * 1024;

/// One tool's arguments as a JSON object, and how to call the tool with them. Implemented by
/// the attributes' expansion for tools marked `json`; not for hand implementations.
#[doc(hidden)]
pub trait JsonArgs: DeserializeOwned + JsonSchema + Send + 'static {
    /// The tool's `T`.
    type Ok: Serialize;
    /// The tool's `E`.
    type Err;
    /// Calls the tool's wrapper (key, record, retries: as from Rust).
    fn call(self) -> impl Future<Output = Result<Self::Ok, Self::Err>> + Send;
    /// The error as text for the model, and as a `std::error::Error` where it is one.
    fn describe(err: &Self::Err) -> Described<'_>;
}

/// A call's end: its value, or the error's text and what to tell the model of it.
pub(super) type Ended = Result<Value, (String, Explanation)>;

pub(super) type Run = Pin<Box<dyn Future<Output = (Ended, Option<CallInfo>)> + Send>>;

/// A tool's JSON entry in the registry, submitted by the attributes' expansion.
#[doc(hidden)]
pub struct JsonEntry {
    pub(super) name: &'static str,
    /// Its kind and model-facing description, the tool's own (not looked up by name: an MCP
    /// method of the same name has its own registration).
    pub(super) kind: ToolKind,
    pub(super) description: &'static str,
    /// `destructive = ..`, `open_world = ..` on the attribute: MCP's hints, when served there.
    pub(super) destructive: Option<bool>,
    pub(super) open_world: Option<bool>,
    pub(super) parameters: fn() -> Value,
    /// Reads the arguments (refusing them runs nothing), then the call to await; the tool's
    /// registration, when found, names its kind and key fields for the explanation of a failure.
    pub(super) prepare: fn(Value, Option<&'static ToolInfo>) -> Result<Run, serde_json::Error>,
    /// The arguments' type, whose path (`crate::module::function::…`) tells which registered
    /// tool of this name the entry is, should two share it.
    pub(super) type_name: fn() -> &'static str,
}

inventory::collect!(JsonEntry);

impl JsonEntry {
    /// The entry of the tool `name` whose arguments are `A`.
    pub const fn new<A: JsonArgs>(
        name: &'static str,
        kind: ToolKind,
        description: &'static str,
        destructive: Option<bool>,
        open_world: Option<bool>,
    ) -> Self {
        JsonEntry {
            name,
            kind,
            description,
            destructive,
            open_world,
            parameters: parameters_of::<A>,
            prepare: prepare::<A>,
            type_name: std::any::type_name::<A>,
        }
    }

    /// This entry's own registration among `infos` (the tools of its name): the only one, or the
    /// one declared in the innermost module that the arguments' type is declared in (the
    /// attributes declare it inside the tool's function: `crate::module::charge::…`, or
    /// `<crate::module::Type as Trait>::call::…`). `None` when that cannot tell them apart.
    pub(super) fn own_info(&self, infos: &[&'static ToolInfo]) -> Option<&'static ToolInfo> {
        if let [only] = infos {
            return Some(only);
        }
        let path = (self.type_name)();
        let path = path.strip_prefix('<').unwrap_or(path);
        let inside = |info: &&&'static ToolInfo| {
            path.strip_prefix(info.module_path)
                .is_some_and(|rest| rest.starts_with("::"))
        };
        let innermost = infos
            .iter()
            .filter(inside)
            .map(|i| i.module_path.len())
            .max()?;
        let mut found = infos
            .iter()
            .filter(inside)
            .filter(|i| i.module_path.len() == innermost);
        match (found.next(), found.next()) {
            (Some(info), None) => Some(info),
            _ => None,
        }
    }
}

pub(super) fn parameters_of<A: JsonSchema>() -> Value {
    let mut schema = schemars::schema_for!(A);
    // A function's parameters, not a document: no dialect line, no Rust struct name.
    schema.remove("$schema");
    schema.remove("title");
    schema.to_value()
}

pub(super) fn prepare<A: JsonArgs>(
    arguments: Value,
    tool: Option<&'static ToolInfo>,
) -> Result<Run, serde_json::Error> {
    let args: A = serde_json::from_value(arguments)?;
    Ok(Box::pin(async move {
        let (result, info) = observe(args.call()).await;
        let ended = match result {
            Ok(ok) => serde_json::to_value(&ok).map_err(|e| {
                let message =
                    format!("the tool ran, but its result could not be written as JSON: {e}");
                (message, result_not_json(info.as_ref()))
            }),
            Err(err) => Err(explained(tool, info.as_ref(), A::describe(&err))),
        };
        (ended, info)
    }))
}

/// What the model is told of a result that did not serialize: the tool ran, and for a side
/// effect its outcome is recorded (a repeat is not done again, and gets the same answer).
pub(super) fn result_not_json(info: Option<&CallInfo>) -> Explanation {
    let key = info.and_then(|i| i.key.as_ref());
    let text = match key {
        Some(key) => format!(
            "Done: the tool ran and took effect (idempotency key {key}), but its result could not be written as \
             JSON. It will not be done again under this key, so calling again gets this same answer; tell the user \
             it was done."
        ),
        None => "The tool ran, but its result could not be written as JSON; calling again will not help. Tell \
                 the user."
            .to_owned(),
    };
    Explanation::result_not_json(text, key)
}

/// The error's text, from its description, and what to tell the model: by idemkit's own error
/// when the error carries one, else by how the call ended (`info`).
pub(super) fn explained(
    tool: Option<&'static ToolInfo>,
    info: Option<&CallInfo>,
    described: Described<'_>,
) -> (String, Explanation) {
    let kind = tool.map_or(ToolKind::SideEffect, |t| t.kind);
    let failure = match info.map(|i| i.outcome) {
        Some(CallOutcome::Failed(failure)) => failure,
        _ => Failure::Permanent,
    };
    let told = match described.error {
        Some(error) => {
            let key_fields = tool.map_or(&[][..], |t| t.key_fields);
            Explanation::of(error, failure, kind, info, key_fields)
        }
        None => Explanation::of_failure(failure, kind, info),
    };
    (described.text, told)
}
