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

mod describe;
mod entry;
mod reply;

use crate::fingerprint::exact::{held, number_tokens, numbers_keep_text};
use crate::registry::{self, ToolInfo, tools};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;

pub use self::describe::{Describe, DescribeChain, DescribeDebug, DescribeDisplay, Described};
pub use self::entry::{DEFAULT_MAX_ARGUMENTS_LEN, JsonArgs, JsonEntry};
pub use self::reply::{JsonCallError, JsonReply, ToolDefinition};

#[derive(Clone, Copy)]
struct Entry {
    json: &'static JsonEntry,
    info: Option<&'static ToolInfo>,
}

/// One dispatcher for the tools of an agent: their definitions for the model, and a call by
/// name with JSON arguments. A failed call's error says, for the model, what happened and
/// whether calling again helps ([`JsonCallError::Failed`]'s [`Explanation`](crate::Explanation)).
///
/// ```text
/// let tools = idemkit::JsonTools::all();
/// let request_tools = tools.chat_tools(); // the request's `tools`
/// // for each of the response's tool_calls:
/// let content = match tools.call(&call.function.name, &call.function.arguments).await {
///     Ok(reply) => reply.content(),
///     Err(e) => e.content(),   // for the model: what happened, what to correct, the advice
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
    /// operation the host put in force with `idemkit::scope::operation_scope`.
    ///
    /// A name two of them share is neither listed nor called: a call of it is refused with
    /// [`JsonCallError::DuplicateTool`], naming both places (side-effect tools of one name are
    /// refused at any call anyway, S21; see
    /// [`check_unique_tool_names`](crate::check_unique_tool_names) for a test that finds them).
    pub fn all() -> Self {
        let infos = registry::by_name(tools(), |info| info.name, |_, _| false);
        // One tool registered twice (one module compiled into two crates) is one tool.
        let entries = registry::by_name(
            inventory::iter::<JsonEntry>,
            |json| json.name,
            |a, b| (a.type_name)() == (b.type_name)(),
        );
        let infos_of = |name| infos.get(name).map_or(&[][..], Vec::as_slice);
        let (one, shared) = registry::split_shared(entries);
        let tools = one
            .into_iter()
            .map(|(name, json)| {
                let info = json.own_info(infos_of(name));
                (name, Entry { json, info })
            })
            .collect();
        let shared = shared
            .into_iter()
            .map(|(name, same)| {
                let places: Vec<String> = same
                    .iter()
                    .map(|json| match json.own_info(infos_of(name)) {
                        Some(info) => registry::place(info),
                        None => (json.type_name)().to_owned(),
                    })
                    .collect();
                tracing::warn!(
                    tool = name,
                    places = %places.join(" and "),
                    "two tools marked `json` share a name: neither is listed or called from JSON; give each a distinct `name = \"...\"`"
                );
                (name, places)
            })
            .collect();
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
        // serde_json has read a number that a double does not hold as the double nearest it:
        // its text, here, is the only place left that tells.
        if let Some(number) = number_tokens(arguments.as_bytes()).find(|n| !held(n)) {
            return Err(rounded(tool, number));
        }
        self.run(tool, entry, value).await
    }

    /// Calls the tool `name` with `arguments` already parsed (bounded by the length of their JSON
    /// text, as [`JsonTools::call`]).
    ///
    /// Whoever parsed them has read each number as serde_json does: without its
    /// `arbitrary_precision` feature, a number that a double does not hold as written (an
    /// integer beyond 64 bits, a decimal of more digits than a double keeps) is already the
    /// double nearest it, and nothing here can tell. With the feature such a number is refused,
    /// as [`JsonTools::call`] refuses it from the text.
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
        if numbers_keep_text()
            && let Some(number) = first_not_held(&arguments)
        {
            return Err(rounded(tool, &number));
        }
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

/// A number of the arguments that a double does not hold as written (nor a 64-bit integer):
/// read, it would be another number than the model wrote, and two such numbers one, so it is
/// refused rather than rounded.
fn rounded(tool: &'static str, number: &str) -> JsonCallError {
    let shown: String = if number.len() > 40 {
        format!("{}…", &number[..40])
    } else {
        number.to_owned()
    };
    let read = match number.parse::<f64>() {
        Ok(f) if f.is_finite() => format!("would be read as {f}"),
        _ => "is beyond the range of a double".to_owned(),
    };
    JsonCallError::InvalidArguments {
        tool,
        message: format!(
            "the number {shown} {read}: a number here must be an integer within 64 bits or a \
             decimal that a double holds as written (any of up to 15 significant digits does); \
             pass it as a string"
        ),
    }
}

/// The text of the first number of `value` that a double does not hold as written (with
/// serde_json's `arbitrary_precision`, where a `Number` keeps its text).
fn first_not_held(value: &Value) -> Option<String> {
    match value {
        Value::Number(n) => {
            let text = n.to_string();
            (!held(&text)).then_some(text)
        }
        Value::Array(items) => items.iter().find_map(first_not_held),
        Value::Object(map) => map.values().find_map(first_not_held),
        Value::Null | Value::Bool(_) | Value::String(_) => None,
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

#[cfg(test)]
mod tests {
    use super::{first_not_held, numbers_keep_text};
    use serde_json::Value;

    /// Issue 52: where a `Value` keeps a number's text (serde_json's `arbitrary_precision`), a
    /// number a double would round is found in it, at any depth, and the call refused; without
    /// the feature the `Value` holds the double already. (`.ci/run` runs this with the feature.)
    #[test]
    fn issue52_a_number_a_double_would_round_is_found_where_the_value_keeps_its_text() {
        let value: Value =
            serde_json::from_str(r#"{"a": [1, 0.1, {"b": 18446744073709551617}]}"#).unwrap();
        let found = first_not_held(&value);
        if numbers_keep_text() {
            assert_eq!(found.as_deref(), Some("18446744073709551617"));
        } else {
            assert_eq!(found, None);
        }
        let held: Value =
            serde_json::from_str(r#"{"a": [1, 0.1, -0, 1e3, 1.50, 18446744073709551615, -5]}"#)
                .unwrap();
        assert_eq!(first_not_held(&held), None);
    }
}
