//! The lock of every side-effect tool's identity: a file checked in next to the code
//! (`idemkit.lock`) that a test of the application's own compares its tools with, so that a
//! change which would re-key operations in flight, or make stored outcomes unreplayable, fails
//! the build before it is deployed.
//!
//! ```no_run
//! // A unit test of the crate that defines the tools (or of the application crate that links
//! // every crate of tools): the tools register themselves in the binary that links them.
//! #[test]
//! fn tools_match_their_lock() {
//!     idem_runtime::lock::check("idemkit.lock");
//! }
//! ```
//!
//! [`check`] writes the file when it is absent (except under CI, where a missing lock fails) or
//! when `IDEMKIT_LOCK=update` is set, and otherwise compares. The lock holds, for each
//! side-effect tool registered in the test binary (every `#[side_effect]` of the crates it
//! links): its name, its key fields in order with each one's Rust type and the kind key
//! encoding v1 gives it, the key encoding's version, the previous derivation (`previous = "..."`)
//! if it has one, whether it requires a tenant or keys on an operation the host names, its
//! `resend` and `verify` declarations, and its outcome type: the type's name, and its JSON
//! Schema where it has one (idemkit's `json` feature and `#[derive(schemars::JsonSchema)]`).
//!
//! Why a test helper rather than an `idemkit lock` command: the tools are registered by the
//! application's own code, so only a binary that links it can list them. A test links it
//! already, runs in the CI that must fail, and needs no build step of its own.
//!
//! Why a type's name and, where it has one, its JSON Schema for the outcome: serde's
//! `Deserialize` does not describe what it reads, and a schema does (its required properties are
//! what a stored outcome must hold to replay). A type without a schema is locked by its name,
//! which still catches the type replaced by another, not a field added to it.
//!
//! The format is JSON with keys sorted and one key field per line, so a change shows as a small
//! diff in review.

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::path::Path;

use serde_json::{Map, Value};

use crate::registry::{ToolInfo, ToolKind, key_kind, place, tools};

/// The key encoding every key of this version of idemkit is derived with.
pub const KEY_ENCODING: u64 = 1;

/// The lock file's own format version.
const FORMAT: u64 = 1;

/// The lock of this program's side-effect tools, as [`check`] writes it.
pub fn render() -> String {
    render_tools(side_effects())
}

/// What [`compare`] found.
#[derive(Debug)]
pub enum Checked {
    /// The tools match the lock.
    Matches,
    /// The lock was written (it was absent, or `IDEMKIT_LOCK=update` was set).
    Written,
}

/// The tools no longer match the lock: what changed, tool by tool, with what it does and what to
/// do.
#[derive(Debug)]
pub struct Mismatch {
    /// The lock's path, as given.
    pub path: String,
    /// One paragraph per change.
    pub changes: Vec<String>,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "idemkit: the side-effect tools no longer match {} ({} change(s)):",
            self.path,
            self.changes.len()
        )?;
        for change in &self.changes {
            writeln!(f)?;
            writeln!(f, "{change}")?;
        }
        writeln!(f)?;
        write!(
            f,
            "When every change above is intended and safe, record it: IDEMKIT_LOCK=update cargo test, and commit {}.",
            self.path
        )
    }
}

impl std::error::Error for Mismatch {}

/// Why the lock could not be checked.
#[derive(Debug)]
pub enum LockError {
    /// The tools changed.
    Mismatch(Mismatch),
    /// The file could not be read or written, or is not a lock.
    File(String),
}

impl fmt::Display for LockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LockError::Mismatch(m) => m.fmt(f),
            LockError::File(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for LockError {}

/// Checks this program's side-effect tools against the lock at `path`, panicking with what
/// changed, what it does to operations in flight and to stored outcomes, and what to do. Call it
/// from a test of your own: `idemkit::lock::check("idemkit.lock")` (a relative path is the
/// package's directory under `cargo test`). See [`compare`] for when it writes the file.
#[track_caller]
pub fn check(path: impl AsRef<Path>) {
    let path = path.as_ref();
    match compare(path) {
        Ok(Checked::Matches) => {}
        Ok(Checked::Written) => eprintln!(
            "idemkit: wrote the lock {} ({} side-effect tool(s)); commit it",
            path.display(),
            side_effects().len()
        ),
        Err(e) => panic!("{e}"),
    }
}

/// [`check`] without the panic: writes the lock when it is absent (except under CI: `CI` set and
/// not `false`, where a missing lock is an error, since a check that writes what it checks
/// checks nothing) or when `IDEMKIT_LOCK=update` is set; otherwise compares.
pub fn compare(path: impl AsRef<Path>) -> Result<Checked, LockError> {
    let path = path.as_ref();
    let shown = path.display().to_string();
    let update = std::env::var("IDEMKIT_LOCK").is_ok_and(|v| v == "update");
    let write = |why: &str| {
        std::fs::write(path, render()).map_err(|e| {
            LockError::File(format!(
                "idemkit: cannot write the lock {shown} ({why}): {e}"
            ))
        })?;
        Ok(Checked::Written)
    };
    if update {
        return write("IDEMKIT_LOCK=update");
    }
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false");
            if ci {
                return Err(LockError::File(format!(
                    "idemkit: the lock {shown} is missing, and CI is set: write it with \
                     `IDEMKIT_LOCK=update cargo test` and commit it, so CI has something to check the tools against"
                )));
            }
            return write("it was absent");
        }
        Err(e) => {
            return Err(LockError::File(format!(
                "idemkit: cannot read the lock {shown}: {e}"
            )));
        }
    };
    let locked: Value = serde_json::from_str(&text).map_err(|e| {
        LockError::File(format!(
            "idemkit: {shown} is not an idemkit lock ({e}); write it anew with IDEMKIT_LOCK=update cargo test"
        ))
    })?;
    let changes = differences(&locked, &side_effects());
    if changes.is_empty() {
        Ok(Checked::Matches)
    } else {
        Err(LockError::Mismatch(Mismatch {
            path: shown,
            changes,
        }))
    }
}

/// The side-effect tools by name (the first place of a name that two share: S21 refuses their
/// calls anyway).
fn side_effects() -> BTreeMap<&'static str, &'static ToolInfo> {
    let mut all: Vec<&'static ToolInfo> =
        tools().filter(|t| t.kind == ToolKind::SideEffect).collect();
    all.sort_by_key(|t| (t.name, t.file, t.line, t.module_path));
    let mut by_name = BTreeMap::new();
    for t in all {
        by_name.entry(t.name).or_insert(t);
    }
    by_name
}

/// A key field as the lock writes it: `customer_id: &str as text`.
fn field(name: &str, ty: &str) -> String {
    format!("{name}: {ty} as {}", key_kind(ty))
}

fn fields(names: &[&str], types: &[fn() -> &'static str]) -> Vec<String> {
    names
        .iter()
        .enumerate()
        .map(|(i, name)| field(name, types.get(i).map_or("?", |f| f())))
        .collect()
}

/// One tool's entry, keys inserted in sorted order (so the text is the same whichever map
/// serde_json is built with).
fn entry(t: &ToolInfo) -> Value {
    let mut m = BTreeMap::new();
    m.insert("key", strings(fields(t.key_fields, t.key_types)));
    m.insert("key_encoding", Value::from(KEY_ENCODING));
    if !t.previous_fields.is_empty() {
        m.insert(
            "previous",
            strings(fields(t.previous_fields, t.previous_types)),
        );
    }
    m.insert("operation_scoped", Value::from(t.operation_scoped));
    m.insert("outcome", Value::from((t.outcome_type)()));
    if let Some(schema) = (t.outcome_schema)() {
        m.insert("outcome_schema", sorted(schema));
    }
    m.insert("resend", Value::from(t.resend));
    m.insert("tenant_required", Value::from(t.tenant_required));
    m.insert("verify", Value::from(t.verify));
    object(m.into_iter().map(|(k, v)| (k.to_owned(), v)))
}

fn render_tools(tools: BTreeMap<&'static str, &'static ToolInfo>) -> String {
    let tools = object(tools.into_iter().map(|(n, t)| (n.to_owned(), entry(t))));
    let lock = object([
        ("format".to_owned(), Value::from(FORMAT)),
        ("tools".to_owned(), tools),
    ]);
    let mut text = serde_json::to_string_pretty(&lock).expect("a lock is JSON");
    text.push('\n');
    text
}

fn strings(v: Vec<String>) -> Value {
    Value::Array(v.into_iter().map(Value::String).collect())
}

/// An object with these entries, inserted in key order.
fn object(entries: impl IntoIterator<Item = (String, Value)>) -> Value {
    let sorted: BTreeMap<String, Value> = entries.into_iter().collect();
    let mut map = Map::new();
    for (k, v) in sorted {
        map.insert(k, v);
    }
    Value::Object(map)
}

/// `v` with every object's keys in sorted order.
fn sorted(v: Value) -> Value {
    match v {
        Value::Object(m) => object(m.into_iter().map(|(k, v)| (k, sorted(v)))),
        Value::Array(a) => Value::Array(a.into_iter().map(sorted).collect()),
        v => v,
    }
}

/// What the lock says of one tool.
struct Locked<'a> {
    key: Vec<&'a str>,
    previous: Vec<&'a str>,
    key_encoding: Option<u64>,
    tenant_required: bool,
    operation_scoped: bool,
    resend: bool,
    verify: bool,
    outcome: &'a str,
    outcome_schema: Option<&'a Value>,
}

impl<'a> Locked<'a> {
    fn read(v: &'a Value) -> Self {
        let list = |name: &str| -> Vec<&'a str> {
            v.get(name)
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default()
        };
        let flag = |name: &str| v.get(name).and_then(Value::as_bool).unwrap_or(false);
        Locked {
            key: list("key"),
            previous: list("previous"),
            key_encoding: v.get("key_encoding").and_then(Value::as_u64),
            tenant_required: flag("tenant_required"),
            operation_scoped: flag("operation_scoped"),
            resend: flag("resend"),
            verify: flag("verify"),
            outcome: v.get("outcome").and_then(Value::as_str).unwrap_or("?"),
            outcome_schema: v.get("outcome_schema"),
        }
    }
}

const IN_FLIGHT: &str = "Operations in flight get a new key: an agent that retries one after the deploy (or a \
                         second binary of a rolling deploy) runs it again, and its stored outcome is not found, so \
                         it is not replayed.";

/// Every difference between the lock and the tools, as paragraphs.
fn differences(locked: &Value, current: &BTreeMap<&'static str, &'static ToolInfo>) -> Vec<String> {
    let empty = Map::new();
    let locked_tools = locked
        .get("tools")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let mut changes = Vec::new();
    if current.is_empty() && !locked_tools.is_empty() {
        changes.push(
            "no side-effect tool is registered in this test binary at all: the check must run in a binary that \
             links the tools, such as a unit test (`#[cfg(test)]`) of the crate that defines them, or of the \
             application crate that depends on every crate of tools (an integration test under `tests/` does not \
             link a binary crate, and may leave out a library's tools it never names)."
                .to_owned(),
        );
    }
    for (name, entry) in locked_tools {
        if !current.contains_key(name.as_str()) {
            let was = Locked::read(entry);
            changes.push(format!(
                "tool `{name}` is in the lock but no tool has that name now (renamed, or removed).\n  \
                 A tool's name is part of every key it derives. {IN_FLIGHT}\n  \
                 To fix: if it was renamed, keep the old name with `name = \"{name}\"` on its #[side_effect] \
                 (the key was `{}`); if it was removed on purpose, update the lock.",
                was.key.join(", ")
            ));
        }
    }
    for (name, info) in current {
        match locked_tools.get(*name) {
            None => changes.push(format!(
                "tool `{name}` at {} is not in the lock (a new tool: nothing of it is in flight or stored).\n  \
                 To fix: update the lock to record it.",
                place(info)
            )),
            Some(entry) => tool_changes(name, info, &Locked::read(entry), &mut changes),
        }
    }
    changes
}

fn tool_changes(name: &str, t: &ToolInfo, was: &Locked<'_>, changes: &mut Vec<String>) {
    let head = format!("tool `{name}` at {}", place(t));
    let key = fields(t.key_fields, t.key_types);
    let previous = fields(t.previous_fields, t.previous_types);
    let key_changed = key.iter().map(String::as_str).ne(was.key.iter().copied());
    if was.key_encoding != Some(KEY_ENCODING) {
        changes.push(format!(
            "{head}: the lock was written with key encoding {}, this idemkit derives keys with encoding {KEY_ENCODING}.\n  \
             {IN_FLIGHT}\n  To fix: deploy with the idemkit the lock was written with until records made under it \
             have expired, then update the lock.",
            was.key_encoding
                .map_or_else(|| "?".to_owned(), |v| v.to_string())
        ));
    }
    if key_changed {
        let bridged = previous
            .iter()
            .map(String::as_str)
            .eq(was.key.iter().copied());
        if bridged {
            changes.push(format!(
                "{head}: its key changed, with `previous` naming the key it had (safe).\n  \
                 was: {}\n  now: {} (previous: {})\n  \
                 A call finds an operation made under the previous key and replays, waits for or settles it there, \
                 so nothing runs twice. `previous` may go once every record made under it has expired (the tool's \
                 ttl after this deploy).\n  To fix: update the lock, which then records the transition.",
                was.key.join(", "),
                key.join(", "),
                previous.join(", ")
            ));
        } else {
            let names = field_names(&was.key);
            let types_only = was.key.len() == key.len()
                && names.iter().zip(t.key_fields).all(|(a, b)| a == b)
                && kinds(&was.key).eq(kinds_owned(&key));
            let what = if types_only {
                "a key field's Rust type changed, its kind did not (if the new type's `KeyPart` encodes its values \
                 as the old one did, the key is the same: then update the lock)"
            } else {
                "its key changed"
            };
            changes.push(format!(
                "{head}: {what}.\n  was: {}\n  now: {}\n  {IN_FLIGHT}\n  \
                 To fix: keep the key as it was; or add `previous = \"{}\"` to its #[side_effect] (the key as it was, \
                 written as its `key` was), so a call also finds its operation under the previous key, until every \
                 record made before the deploy has expired (its ttl); or, when no operation made under the old key \
                 can still be retried, update the lock.",
                was.key.join(", "),
                key.join(", "),
                names.join(", "),
            ));
        }
    } else if previous
        .iter()
        .map(String::as_str)
        .ne(was.previous.iter().copied())
    {
        if previous.is_empty() {
            changes.push(format!(
                "{head}: `previous = \"{}\"` was removed.\n  \
                 A call no longer finds operations made under that key: safe once every record made under it has \
                 expired (the tool's ttl after the deploy that changed the key), not before.\n  \
                 To fix: keep `previous` until then; then update the lock.",
                field_names(&was.previous).join(", ")
            ));
        } else {
            changes.push(format!(
                "{head}: its previous derivation changed.\n  was: {}\n  now: {}\n  \
                 Operations made under the previous key the lock records are no longer found.\n  \
                 To fix: name the key the tool had in `previous`; update the lock once that is intended.",
                if was.previous.is_empty() {
                    "(none)".to_owned()
                } else {
                    was.previous.join(", ")
                },
                previous.join(", ")
            ));
        }
    }
    let schema = (t.outcome_schema)().map(sorted);
    let outcome_type = (t.outcome_type)();
    match (was.outcome_schema, &schema) {
        (Some(old), Some(new)) if old != new => {
            changes.push(format!(
                "{head}: its outcome's schema changed ({}).\n  {}",
                outcome_type,
                schema_change(old, new)
            ));
        }
        _ if was.outcome != outcome_type => changes.push(format!(
            "{head}: its outcome type changed.\n  was: {}\n  now: {outcome_type}\n  \
             Outcomes stored by the old build are decoded as the new type when replayed: if it does not read \
             them, the call fails as unreplayable (S16: never run again, never replayed as corrupt).\n  \
             To fix: keep the outcome's serialized form readable (serde `default` for added fields, `alias` for \
             renamed ones); then update the lock.",
            was.outcome
        )),
        (None, Some(_)) | (Some(_), None) => changes.push(format!(
            "{head}: its outcome's schema {} (idemkit's `json` feature, or `schemars::JsonSchema` on {outcome_type}).\n  \
             To fix: update the lock.",
            if schema.is_some() { "is now known" } else { "is no longer known" }
        )),
        _ => {}
    }
    let flags = [
        (
            "resend",
            was.resend,
            t.resend,
            "whether an attempt of unknown outcome is sent again (S20); keys and stored outcomes are unchanged",
        ),
        (
            "verify",
            was.verify,
            t.verify,
            "whether an attempt of unknown outcome is verified first (S19); keys and stored outcomes are unchanged",
        ),
        (
            "tenant_required",
            was.tenant_required,
            t.tenant_required,
            "a call without a tenant is refused when true (S18); keys are unchanged",
        ),
        (
            "operation_scoped",
            was.operation_scoped,
            t.operation_scoped,
            "whether it keys on an operation the host names (an `OperationId`)",
        ),
    ];
    for (what, old, new, means) in flags {
        if old != new {
            changes.push(format!(
                "{head}: `{what}` changed from {old} to {new}: {means}.\n  To fix: update the lock if intended."
            ));
        }
    }
}

/// The names of key fields as the lock writes them (`customer_id: &str as text` → `customer_id`).
fn field_names<'a>(fields: &[&'a str]) -> Vec<&'a str> {
    fields
        .iter()
        .map(|f| f.split(':').next().unwrap_or(f))
        .collect()
}

fn kinds<'a>(fields: &'a [&'a str]) -> impl Iterator<Item = &'a str> + 'a {
    fields.iter().map(|f| f.rsplit(" as ").next().unwrap_or(f))
}

fn kinds_owned(fields: &[String]) -> Vec<&str> {
    fields
        .iter()
        .map(|f| f.rsplit(" as ").next().unwrap_or(f))
        .collect()
}

/// What a schema change does to stored outcomes: the properties now required that an old
/// outcome may lack, the ones gone; else that it changed.
fn schema_change(old: &Value, new: &Value) -> String {
    let required = |s: &Value| -> Vec<String> {
        s.get("required")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    let properties = |s: &Value| -> BTreeMap<String, Value> {
        s.get("properties")
            .and_then(Value::as_object)
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default()
    };
    let (old_props, new_props) = (properties(old), properties(new));
    let old_required = required(old);
    let mut out = String::new();
    let added: Vec<String> = required(new)
        .into_iter()
        .filter(|r| !old_required.contains(r))
        .collect();
    if !added.is_empty() {
        let _ = write!(
            out,
            "Required now and possibly absent from outcomes stored by the old build: {}. A replay of such an \
             outcome cannot decode it: the call fails as unreplayable (S16: never run again, never replayed as \
             corrupt).\n  To fix: give each a default (`#[serde(default)]`), or `#[serde(alias = \"old_name\")]` \
             for a renamed field, so old outcomes still read; then update the lock.",
            added
                .iter()
                .map(|a| format!("`{a}`"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        return out;
    }
    let changed: Vec<&String> = new_props
        .iter()
        .filter(|(k, v)| old_props.get(*k).is_some_and(|o| o != *v))
        .map(|(k, _)| k)
        .collect();
    if !changed.is_empty() {
        let _ = write!(
            out,
            "Changed: {}. An outcome stored by the old build may no longer decode: the call then fails as \
             unreplayable (S16).\n  To fix: keep each field's serialized form readable by the new type; then update the lock.",
            changed
                .iter()
                .map(|a| format!("`{a}`"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        return out;
    }
    out.push_str(
        "Outcomes stored by the old build still decode if every field they lack has a default and nothing \
         they hold is refused (a removed field is ignored unless `deny_unknown_fields`).\n  \
         To fix: check that, then update the lock.",
    );
    out
}

#[cfg(test)]
mod tests;
