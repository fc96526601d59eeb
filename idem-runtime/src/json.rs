//! Tools called by name with JSON arguments: chat APIs' function calling (feature `json`).
//!
//! A tool written `#[side_effect(key = "...", json)]` (or `#[read_only(json)]`) registers an
//! entry here: the JSON Schema of its arguments and a way to call it from a JSON object.
//! [`JsonTools`] lists those tools in the shape chat APIs take
//! (`{"type": "function", "function": {"name", "description", "parameters"}}`) and dispatches a
//! model's call by name. The call goes through the tool's own Rust wrapper, so it derives the
//! same key and the same fingerprint as the same call written in Rust, and shares its record.
//!
//! Arguments that are not a JSON object of the tool's parameters (a missing field, a wrong type,
//! an unknown field, text over [`JsonTools::max_arguments_len`]) are refused before anything
//! runs, with a message the model can act on.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::error::Error as StdError;
use std::fmt;
use std::future::Future;
use std::pin::Pin;

use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::explain::Explanation;
use crate::key::IdempotencyKey;
use crate::observe::{CallInfo, CallOutcome, observe};
use crate::registry::{ToolInfo, ToolKind, tools};
use crate::retry::Failure;

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
    /// The error as text for the model.
    fn describe(err: &Self::Err) -> String;
}

/// A call's end: its value, or the error's text and what to tell the model of it.
type Ended = Result<Value, (String, Explanation)>;

type Run = Pin<Box<dyn Future<Output = (Ended, Option<CallInfo>)> + Send>>;

/// A tool's JSON entry in the registry, submitted by the attributes' expansion.
#[doc(hidden)]
pub struct JsonEntry {
    name: &'static str,
    /// Its kind and model-facing description, the tool's own (not looked up by name: an MCP
    /// method of the same name has its own registration).
    kind: ToolKind,
    description: &'static str,
    /// `destructive = ..`, `open_world = ..` on the attribute: MCP's hints, when served there.
    destructive: Option<bool>,
    open_world: Option<bool>,
    parameters: fn() -> Value,
    /// Reads the arguments (refusing them runs nothing), then the call to await; the tool's
    /// registration, when found, names its kind and key fields for the explanation of a failure.
    prepare: fn(Value, Option<&'static ToolInfo>) -> Result<Run, serde_json::Error>,
    /// The arguments' type, whose path (`crate::module::function::…`) tells which registered
    /// tool of this name the entry is, should two share it.
    type_name: fn() -> &'static str,
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
    fn own_info(&self, infos: &[&'static ToolInfo]) -> Option<&'static ToolInfo> {
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

fn parameters_of<A: JsonSchema>() -> Value {
    let mut schema = schemars::schema_for!(A);
    // A function's parameters, not a document: no dialect line, no Rust struct name.
    schema.remove("$schema");
    schema.remove("title");
    schema.to_value()
}

fn prepare<A: JsonArgs>(
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
            Err(err) => Err(explaining(tool, info.as_ref(), || A::describe(&err))),
        };
        (ended, info)
    }))
}

/// What the model is told of a result that did not serialize: the tool ran, and for a side
/// effect its outcome is recorded (a repeat is not done again, and gets the same answer).
fn result_not_json(info: Option<&CallInfo>) -> Explanation {
    let text = match info.and_then(|i| i.key.as_ref()) {
        Some(key) => format!(
            "Done: the tool ran and took effect (idempotency key {key}), but its result could not be written as \
             JSON. It will not be done again under this key, so calling again gets this same answer; tell the user \
             it was done."
        ),
        None => "The tool ran, but its result could not be written as JSON; calling again will not help. Tell \
                 the user."
            .to_owned(),
    };
    Explanation {
        reason: "result_not_json",
        retryable: false,
        text,
    }
}

/// What [`explaining`] hands to the description of a tool's error, and what it gets back.
struct Explaining {
    kind: ToolKind,
    key_fields: &'static [&'static str],
    info: Option<CallInfo>,
    told: Option<Explanation>,
}

thread_local! {
    /// Set by [`explaining`] around one synchronous `describe`, which sees the concrete error
    /// type: an error that is a `std::error::Error` is explained there by idemkit's own error in
    /// its chain.
    static EXPLAINING: RefCell<Option<Explaining>> = const { RefCell::new(None) };
}

/// The error's text, by `describe`, and what to tell the model: by idemkit's own error when the
/// error carries one (found by `describe`), else by how the call ended.
fn explaining(
    tool: Option<&'static ToolInfo>,
    info: Option<&CallInfo>,
    describe: impl FnOnce() -> String,
) -> (String, Explanation) {
    let kind = tool.map_or(ToolKind::SideEffect, |t| t.kind);
    EXPLAINING.with(|slot| {
        *slot.borrow_mut() = Some(Explaining {
            kind,
            key_fields: tool.map_or(&[], |t| t.key_fields),
            info: info.cloned(),
            told: None,
        })
    });
    let message = describe();
    let told = EXPLAINING.with(|slot| slot.borrow_mut().take().and_then(|e| e.told));
    let told = told.unwrap_or_else(|| {
        let failure = match info.map(|i| i.outcome) {
            Some(CallOutcome::Failed(failure)) => failure,
            _ => Failure::Permanent,
        };
        Explanation::of_failure(failure, kind, info)
    });
    (message, told)
}

/// The error as text: its `Display` when it has one, else its `Debug`; an error that is a
/// `std::error::Error` is also explained by idemkit's own error in its chain (autoref
/// specialisation, resolved where the error type is concrete: `(&&Describe(err)).describe()`).
#[doc(hidden)]
pub struct Describe<'a, E>(pub &'a E);

#[doc(hidden)]
pub trait DescribeDisplay {
    fn describe(&self) -> String;
}

impl<E: StdError + 'static> DescribeDisplay for &Describe<'_, E> {
    fn describe(&self) -> String {
        describe_error(self.0)
    }
}

/// The text of an error seen as a `std::error::Error`, explained by idemkit's own error in its
/// chain when [`explaining`] asks.
fn describe_error(error: &(dyn StdError + 'static)) -> String {
    EXPLAINING.with(|slot| {
        if let Some(explaining) = slot.borrow_mut().as_mut() {
            let failure = match explaining.info.as_ref().map(|i| i.outcome) {
                Some(CallOutcome::Failed(failure)) => failure,
                _ => Failure::Permanent,
            };
            explaining.told = Some(Explanation::of(
                error,
                failure,
                explaining.kind,
                explaining.info.as_ref(),
                explaining.key_fields,
            ));
        }
    });
    error.to_string()
}

/// `anyhow::Error` and `Box<dyn Error + Send + Sync>`, not `std::error::Error`s themselves: seen
/// through what they hold, so idemkit's own error in their chain explains them too.
#[doc(hidden)]
pub trait DescribeChain {
    fn describe(&self) -> String;
}

impl DescribeChain for &Describe<'_, Box<dyn StdError + Send + Sync>> {
    fn describe(&self) -> String {
        describe_error(&**self.0)
    }
}

#[cfg(feature = "anyhow")]
impl DescribeChain for &Describe<'_, anyhow::Error> {
    fn describe(&self) -> String {
        describe_error(self.0.as_ref())
    }
}

impl<E: fmt::Display> DescribeDisplay for &&Describe<'_, E> {
    fn describe(&self) -> String {
        self.0.to_string()
    }
}

#[doc(hidden)]
pub trait DescribeDebug {
    fn describe(&self) -> String;
}

impl<E: fmt::Debug> DescribeDebug for Describe<'_, E> {
    fn describe(&self) -> String {
        format!("{:?}", self.0)
    }
}

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

    /// The value as JSON text: a chat API's tool message content.
    pub fn content(&self) -> String {
        self.value.to_string()
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
                "the arguments for `{tool}` are {len} bytes, over the limit of {limit}; the tool was not run. \
                 Call it again with only the parameters its schema names"
            ),
            JsonCallError::InvalidArguments { tool, message } => write!(
                f,
                "invalid arguments for `{tool}`: {message}; the tool was not run. Call it again with a JSON \
                 object that matches its parameters schema"
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

#[derive(Clone, Copy)]
struct Entry {
    json: &'static JsonEntry,
    info: Option<&'static ToolInfo>,
}

/// One dispatcher for the tools of an agent: their definitions for the model, and a call by
/// name with JSON arguments. A failed call's error says, for the model, what happened and
/// whether calling again helps ([`JsonCallError::Failed`]'s [`Explanation`]).
///
/// ```text
/// let tools = idemkit::JsonTools::all();
/// let request_tools = tools.chat_tools(); // the request's `tools`
/// // for each of the response's tool_calls:
/// let content = match tools.call(&call.function.name, &call.function.arguments).await {
///     Ok(reply) => reply.content(),
///     Err(e) => e.to_string(), // for the model: what to correct
/// };
/// ```
///
/// (`tests/json_calls.rs` and the `openai_agent` example run this loop.)
#[derive(Clone)]
pub struct JsonTools {
    tools: BTreeMap<&'static str, Entry>,
    /// Names two entries share, with their places: neither listed nor called (S21).
    shared: BTreeMap<&'static str, Vec<String>>,
    max_arguments_len: usize,
}

impl fmt::Debug for JsonTools {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JsonTools")
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .field("shared", &self.shared)
            .field("max_arguments_len", &self.max_arguments_len)
            .finish()
    }
}

impl JsonTools {
    /// Every tool of this program marked `json`, each described by its own doc comment (its
    /// summary and body; rustdoc's `# Errors`, `# Panics`, `# Examples` and `# Safety` sections
    /// and link syntax are left out).
    ///
    /// A tool is marked `json` in its attribute, with the `json` feature of `idemkit` on:
    /// `#[side_effect(key = "order_id", json)]` or `#[read_only(json)]` on a free `async fn`
    /// whose parameters are the JSON object's properties (`idemkit = { version = "...",
    /// features = ["json"] }`). An `OperationId` parameter is not a property: it is the
    /// operation the host put in force with `idemkit::operation_scope`.
    ///
    /// A name two of them share is neither listed nor called: a call of it is refused with
    /// [`JsonCallError::DuplicateTool`], naming both places (side-effect tools of one name are
    /// refused at any call anyway, S21; see
    /// [`check_unique_tool_names`](crate::check_unique_tool_names) for a test that finds them).
    pub fn all() -> Self {
        let mut infos: BTreeMap<&'static str, Vec<&'static ToolInfo>> = BTreeMap::new();
        for info in tools() {
            infos.entry(info.name).or_default().push(info);
        }
        let mut entries: BTreeMap<&'static str, Vec<&'static JsonEntry>> = BTreeMap::new();
        for json in inventory::iter::<JsonEntry> {
            let same = entries.entry(json.name).or_default();
            // One tool registered twice (one module compiled into two crates) is one tool.
            if !same.iter().any(|e| (e.type_name)() == (json.type_name)()) {
                same.push(json);
            }
        }
        let mut tools = BTreeMap::new();
        let mut shared = BTreeMap::new();
        for (name, same) in entries {
            let infos = infos.get(name).map_or(&[][..], Vec::as_slice);
            match same.as_slice() {
                [json] => {
                    let info = json.own_info(infos);
                    tools.insert(name, Entry { json, info });
                }
                _ => {
                    let places: Vec<String> = same
                        .iter()
                        .map(|json| match json.own_info(infos) {
                            Some(info) => crate::registry::place(info),
                            None => (json.type_name)().to_owned(),
                        })
                        .collect();
                    tracing::warn!(
                        tool = name,
                        places = %places.join(" and "),
                        "two tools marked `json` share a name: neither is listed or called from JSON; give each a distinct `name = \"...\"`"
                    );
                    shared.insert(name, places);
                }
            }
        }
        JsonTools {
            tools,
            shared,
            max_arguments_len: DEFAULT_MAX_ARGUMENTS_LEN,
        }
    }

    /// Only the named tools, for an agent that should see some of them.
    pub fn only<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<Self, JsonCallError> {
        let all = Self::all();
        let mut tools = BTreeMap::new();
        for name in names {
            let (name, entry) = all.find(name)?;
            tools.insert(name, entry);
        }
        Ok(JsonTools {
            tools,
            shared: BTreeMap::new(),
            max_arguments_len: all.max_arguments_len,
        })
    }

    /// The bound on one call's arguments, in bytes of JSON text (default
    /// [`DEFAULT_MAX_ARGUMENTS_LEN`]); longer arguments are refused unread.
    pub fn max_arguments_len(mut self, bytes: usize) -> Self {
        self.max_arguments_len = bytes;
        self
    }

    /// The tools' names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.tools.keys().copied()
    }

    /// Each tool's definition, sorted by name.
    pub fn definitions(&self) -> Vec<ToolDefinition> {
        self.tools
            .iter()
            .map(|(name, entry)| ToolDefinition {
                name,
                description: entry.json.description,
                kind: entry.json.kind,
                parameters: (entry.json.parameters)(),
                destructive: entry.json.destructive,
                open_world: entry.json.open_world,
            })
            .collect()
    }

    /// The definitions as a chat-completions request's `tools` array.
    pub fn chat_tools(&self) -> Value {
        Value::Array(
            self.definitions()
                .iter()
                .map(ToolDefinition::to_chat_tool)
                .collect(),
        )
    }

    /// Calls the tool `name` with `arguments`, JSON text as a chat API sends it (empty text or
    /// `null` for a tool without parameters reads as `{}`).
    pub async fn call(&self, name: &str, arguments: &str) -> Result<JsonReply, JsonCallError> {
        let (tool, entry) = self.find(name)?;
        self.check_len(tool, arguments.len())?;
        let value = if arguments.trim().is_empty() {
            Value::Object(Default::default())
        } else {
            serde_json::from_str(arguments).map_err(|e| invalid(tool, e))?
        };
        self.run(tool, entry, value).await
    }

    /// Calls the tool `name` with `arguments` already parsed (bounded by the length of their JSON
    /// text, as [`JsonTools::call`]).
    pub async fn call_value(
        &self,
        name: &str,
        arguments: Value,
    ) -> Result<JsonReply, JsonCallError> {
        let (tool, entry) = self.find(name)?;
        self.check_len(tool, json_len(&arguments, self.max_arguments_len))?;
        self.run(tool, entry, arguments).await
    }

    fn find(&self, name: &str) -> Result<(&'static str, Entry), JsonCallError> {
        if let Some((name, places)) = self.shared.get_key_value(name) {
            return Err(JsonCallError::DuplicateTool {
                name,
                places: places.clone(),
            });
        }
        self.tools
            .get_key_value(name)
            .map(|(n, e)| (*n, *e))
            .ok_or_else(|| self.unknown(name))
    }

    fn unknown(&self, name: &str) -> JsonCallError {
        // The name is the model's text: bounded, so a runaway name does not fill a log.
        let name: String = name.chars().take(128).collect();
        JsonCallError::UnknownTool {
            name,
            known: self.names().collect(),
        }
    }

    fn check_len(&self, tool: &'static str, len: usize) -> Result<(), JsonCallError> {
        if len > self.max_arguments_len {
            return Err(JsonCallError::ArgumentsTooLarge {
                tool,
                len,
                limit: self.max_arguments_len,
            });
        }
        Ok(())
    }

    async fn run(
        &self,
        tool: &'static str,
        entry: Entry,
        arguments: Value,
    ) -> Result<JsonReply, JsonCallError> {
        let arguments = match arguments {
            Value::Null => Value::Object(Default::default()),
            Value::Object(map) => Value::Object(map),
            other => {
                return Err(JsonCallError::InvalidArguments {
                    tool,
                    message: format!(
                        "the arguments must be a JSON object of named parameters, not {}",
                        kind_of(&other)
                    ),
                });
            }
        };
        let run = (entry.json.prepare)(arguments, entry.info).map_err(|e| invalid(tool, e))?;
        match run.await {
            (Ok(value), info) => Ok(JsonReply { value, info }),
            (Err((message, explanation)), info) => Err(JsonCallError::Failed {
                tool,
                message,
                info: info.map(Box::new),
                explanation: Box::new(explanation),
            }),
        }
    }
}

fn invalid(tool: &'static str, e: serde_json::Error) -> JsonCallError {
    JsonCallError::InvalidArguments {
        tool,
        message: e.to_string(),
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The length of `value`'s JSON text, counted up to just past `limit`.
fn json_len(value: &Value, limit: usize) -> usize {
    struct Count {
        len: usize,
        limit: usize,
    }
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.len += buf.len();
            if self.len > self.limit {
                // Stop serialising: the arguments are over the bound already.
                return Err(std::io::Error::other("over the bound"));
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count { len: 0, limit };
    let _ = serde_json::to_writer(&mut count, value);
    count.len
}
