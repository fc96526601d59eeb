//! Every annotated tool registers itself here, so a program can list its tools, a test can
//! check that no two share a name, and a call of a name two side-effect tools share is refused
//! (S21).
//!
//! Why S21 is checked at the first call rather than at build time: a link-time symbol per tool
//! name (a `#[unsafe(export_name = "...")]` static, so two definitions fail to link) was tried
//! and rejected. `export_name` trips the `unsafe_code` lint, so every crate with
//! `#![forbid(unsafe_code)]` would stop building; within a crate rustc names only the second
//! place, and across crates the error is the linker's ("duplicate symbol", naming object files,
//! not the tools' places), and only when both objects happen to be linked; and rustdoc's merged
//! doctests (edition 2024) link every doc example of a crate into one binary, so two examples
//! that each define a `charge` would fail to build, though each runs alone. The registry sees
//! every place, so the refusal names both, and can tell merged doctests apart.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use crate::error::Error;
use crate::exec::Verified;
use crate::key::IdempotencyKey;

/// A verify function's answer as a settler takes it: `Applied` with the outcome as JSON, or why
/// it failed.
pub type VerifyAnswer = Result<Verified<Vec<u8>>, String>;

/// A tool's own `verify`, as its attribute registers it for a settler (S28): given the arguments
/// a call kept with its record ([`Record::arguments`](crate::store::Record::arguments), JSON) and
/// the record's key, it decodes them and asks the tool's verify function. The settler runs it
/// under the record's key and tenant.
pub type StoredVerify = Arc<
    dyn Fn(&[u8], IdempotencyKey) -> Pin<Box<dyn Future<Output = VerifyAnswer> + Send>>
        + Send
        + Sync,
>;

/// Whether a tool may act on the world.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ToolKind {
    /// `#[read_only]`: no side effect, retried freely, no key.
    ReadOnly,
    /// `#[side_effect]`: keyed, recorded, replayed.
    SideEffect,
}

/// One tool, as its attribute registered it.
#[derive(Debug)]
pub struct ToolInfo {
    /// The tool's name (part of its keys).
    pub name: &'static str,
    /// Read-only or side effect.
    pub kind: ToolKind,
    /// The key fields' names as the key encodes them, in order (empty for read-only tools).
    pub key_fields: &'static [&'static str],
    /// Each key field's Rust type name (`std::any::type_name`), in the same order; `"?"` where
    /// the attribute could not name it (a generic or borrowed-with-a-named-lifetime parameter, a
    /// field of `self`). See [`tools_manifest`].
    pub key_types: &'static [fn() -> &'static str],
    /// The key fields of the previous derivation (`previous = "..."`), in order: a call also
    /// finds its operation under the key these make (empty when the attribute names none).
    pub previous_fields: &'static [&'static str],
    /// Each previous key field's Rust type name, as [`ToolInfo::key_types`].
    pub previous_types: &'static [fn() -> &'static str],
    /// `tenant_required = true`: the tool never runs without a tenant (S18).
    pub tenant_required: bool,
    /// The tool keys on an operation the host names (an `OperationId` parameter).
    pub operation_scoped: bool,
    /// S20: whether an attempt whose outcome is unknown may be sent again.
    pub resend: bool,
    /// S19: whether the tool has a `verify` function.
    pub verify: bool,
    /// S28: the tool's `verify` as a settler calls it, from the arguments a call kept with its
    /// record: `Some` for a tool with `verify` whose parameters serialize and deserialize
    /// (`serde`), that is no method (no `self`) and not generic, and whose verify future is
    /// `Send`; `None` otherwise (its records keep no arguments, and a settler leaves them for a
    /// verify listed by hand, [`Settler::verify`](crate::Settler::verify), or an operator).
    pub settle_verify: fn() -> Option<StoredVerify>,
    /// The outcome type's Rust type name (`std::any::type_name`), `"?"` where the attribute
    /// could not name it.
    pub outcome_type: fn() -> &'static str,
    /// The outcome type's JSON Schema, where it has one (`schemars::JsonSchema`, with the `json`
    /// feature).
    pub outcome_schema: fn() -> Option<serde_json::Value>,
    /// The tool's doc comment.
    pub description: &'static str,
    /// Where it is defined: `module_path!()`.
    pub module_path: &'static str,
    /// Where it is defined: `file!()`.
    pub file: &'static str,
    /// Where it is defined: `line!()`.
    pub line: u32,
}

inventory::collect!(ToolInfo);

/// Every tool registered in this program, in no particular order.
pub fn tools() -> impl Iterator<Item = &'static ToolInfo> {
    inventory::iter::<ToolInfo>.into_iter()
}

/// Every tool of this program as JSON, for `idemkit key --check FILE`: an application writes it
/// (to a file next to its binary, at build or start-up: `std::fs::write("tools.json",
/// idemkit::registry::tools_manifest())`) so that an operator's key derivation is checked against the
/// tools as they are: each side-effect tool's name and its key fields in key order, with their
/// Rust types and the kind the key encodes them as (`text`, `int`, `bool`, `bytes`, `uuid`, or
/// `any` when not known).
///
/// ```json
/// {"version": 1, "tools": [{"name": "charge", "kind": "side_effect",
///   "key_fields": [{"name": "customer_id", "type": "&str", "kind": "text"}]}]}
/// ```
pub fn tools_manifest() -> String {
    let mut tools: Vec<&'static ToolInfo> = tools().collect();
    tools.sort_by_key(|t| (t.name, t.module_path, t.line));
    let tools: Vec<serde_json::Value> = tools
        .into_iter()
        .map(|t| {
            let fields: Vec<serde_json::Value> = t
                .key_fields
                .iter()
                .enumerate()
                .map(|(i, name)| {
                    let ty = t.key_types.get(i).map_or("?", |f| f());
                    serde_json::json!({"name": name, "type": ty, "kind": key_kind(ty)})
                })
                .collect();
            let kind = match t.kind {
                ToolKind::SideEffect => "side_effect",
                ToolKind::ReadOnly => "read_only",
            };
            serde_json::json!({"name": t.name, "kind": kind, "key_fields": fields})
        })
        .collect();
    let manifest = serde_json::json!({"version": 1, "tools": tools});
    serde_json::to_string_pretty(&manifest).expect("a manifest is JSON")
}

/// S28: every registered side-effect tool's verify that a settler can call from the arguments
/// kept with a record ([`ToolInfo::settle_verify`]), by tool name. A name two places share (S21)
/// has none: which tool made a record of it cannot be told.
pub fn stored_verifies() -> BTreeMap<&'static str, StoredVerify> {
    let side_effects = tools().filter(|t| t.kind == ToolKind::SideEffect && t.verify);
    let same_place = |p: &&ToolInfo, q: &&ToolInfo| {
        (p.module_path, p.file, p.line) == (q.module_path, q.file, q.line)
    };
    let (one, _shared) = split_shared(by_name(side_effects, |info| info.name, same_place));
    one.into_iter()
        .filter_map(|(name, info)| (info.settle_verify)().map(|v| (name, v)))
        .collect()
}

/// The kind a key encodes a value of Rust type `ty` as (key encoding v1), by its type name.
pub(crate) fn key_kind(ty: &str) -> &'static str {
    let ty = ty.trim_start_matches('&').trim();
    let last = ty.rsplit("::").next().unwrap_or(ty);
    let base = ty.split('<').next().unwrap_or(ty);
    let base_last = base.rsplit("::").next().unwrap_or(base);
    match last {
        "str" | "String" | "char" => return "text",
        "bool" => return "bool",
        "u8" | "u16" | "u32" | "u64" | "u128" | "usize" | "i8" | "i16" | "i32" | "i64" | "i128"
        | "isize" => return "int",
        "Uuid" | "OperationId" => return "uuid",
        "[u8]" => return "bytes",
        _ => {}
    }
    match base_last {
        "Cow" | "Box" | "Arc" | "Rc" if ty.ends_with("str>") => "text",
        "Vec" if ty.ends_with("<u8>") => "bytes",
        _ => "any",
    }
}

/// Two or more tools share a name, and so would share keys.
#[derive(Debug)]
pub struct DuplicateTools {
    /// Each shared name with the places that define it.
    pub duplicates: Vec<(&'static str, Vec<&'static ToolInfo>)>,
}

impl fmt::Display for DuplicateTools {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "idemkit: tools share a name, so their keys would collide; give each a distinct `name = \"...\"`:"
        )?;
        for (name, infos) in &self.duplicates {
            write!(f, "  `{name}` is defined at")?;
            for (i, info) in infos.iter().enumerate() {
                let sep = if i == 0 { " " } else { ", " };
                write!(f, "{sep}{}", place(info))?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

impl std::error::Error for DuplicateTools {}

/// Checks that no two registered tools share a name; put it in a test of your own
/// (`#[test] fn tool_names_are_unique() { … }`):
///
/// ```
/// idem_runtime::check_unique_tool_names().unwrap();
/// ```
pub fn check_unique_tool_names() -> Result<(), DuplicateTools> {
    find_duplicates(tools())
}

/// The duplicate names among `infos`.
fn find_duplicates(
    infos: impl IntoIterator<Item = &'static ToolInfo>,
) -> Result<(), DuplicateTools> {
    let (_, shared) = split_shared(by_name(infos, |info| info.name, |_, _| false));
    if shared.is_empty() {
        Ok(())
    } else {
        Err(DuplicateTools {
            duplicates: shared.into_iter().collect(),
        })
    }
}

/// The registry's one view of registrations by name, for every kind of them (tools, tools
/// marked `json`): each name with its registrations in the order met, one per place (`same`
/// says when two are one place registered twice, as one module compiled into two crates is).
pub(crate) fn by_name<T>(
    items: impl IntoIterator<Item = T>,
    name: impl Fn(&T) -> &'static str,
    same: impl Fn(&T, &T) -> bool,
) -> ByName<T> {
    let mut by_name: ByName<T> = BTreeMap::new();
    for item in items {
        let places = by_name.entry(name(&item)).or_default();
        if !places.iter().any(|p| same(p, &item)) {
            places.push(item);
        }
    }
    by_name
}

/// Registrations by name: a [`by_name`] view, or the names of one that places share.
pub(crate) type ByName<T> = BTreeMap<&'static str, Vec<T>>;

/// The names of a [`by_name`] view that one place defines, each with its registration, and
/// those that two or more share, each with all of them.
pub(crate) fn split_shared<T>(by_name: ByName<T>) -> (BTreeMap<&'static str, T>, ByName<T>) {
    let mut one = BTreeMap::new();
    let mut shared = BTreeMap::new();
    for (name, mut places) in by_name {
        if places.len() == 1 {
            one.insert(name, places.pop().expect("one place"));
        } else if places.len() > 1 {
            shared.insert(name, places);
        }
    }
    (one, shared)
}

/// Where a tool is defined, as messages name it: `file:line (module path)`.
pub(crate) fn place(info: &ToolInfo) -> String {
    format!("{}:{} ({})", info.file, info.line, info.module_path)
}

/// The side-effect tool names that two or more places define, each with its places: computed
/// once, at the first call of any side-effect tool. A place registered twice (one module compiled
/// into two crates of one package under one name) is one place; places that never run in one
/// process (two doctests, below) do not share.
fn shared_names() -> &'static ByName<&'static ToolInfo> {
    static SHARED: OnceLock<ByName<&'static ToolInfo>> = OnceLock::new();
    SHARED.get_or_init(|| {
        let same_place = |p: &&ToolInfo, q: &&ToolInfo| {
            (p.module_path, p.file, p.line) == (q.module_path, q.file, q.line)
        };
        let side_effects = tools().filter(|t| t.kind == ToolKind::SideEffect);
        let mut by_name = by_name(side_effects, |info| info.name, same_place);
        for places in by_name.values_mut() {
            let all = places.clone();
            places.retain(|p| {
                all.iter()
                    .any(|q| !std::ptr::eq(*p, *q) && may_meet(p.module_path, q.module_path))
            });
            places.sort_by_key(|p| (p.file, p.line, p.module_path));
        }
        split_shared(by_name).1
    })
}

/// Whether tools defined in these two modules can be called in one process. Not when both are
/// in doctests that rustdoc merged into one binary (edition 2024: modules
/// `doctest_bundle_2024::__doctest_3`, …) and the doctests differ: each doctest runs alone, in a
/// process of its own, so two doc examples may each define their own `charge`.
fn may_meet(a: &str, b: &str) -> bool {
    match (doctest_of(a), doctest_of(b)) {
        (Some(a), Some(b)) => a == b,
        _ => true,
    }
}

/// The merged doctest a module belongs to (`doctest_bundle_2024::__doctest_3`), if any.
fn doctest_of(module_path: &str) -> Option<&str> {
    let mut segments = module_path.split("::");
    let (bundle, test) = (segments.next()?, segments.next()?);
    (bundle.starts_with("doctest_bundle_") && test.starts_with("__doctest_"))
        .then(|| &module_path[..bundle.len() + 2 + test.len()])
}

/// S21: a call of the side-effect tool `name` is refused when two registered side-effect tools
/// share that name, naming both places, before anything is claimed: they would share keys, and
/// one's outcome would be replayed as the other's. Per call one relaxed load once the registry
/// is known to share no name; otherwise one look-up. (A [`Tool`](crate::Tool) built by hand is
/// not registered: its name is checked against the registered ones only when two of those share
/// it.)
#[inline(always)]
pub(crate) fn refuse_shared_name(name: &str) -> Result<(), Error> {
    if NONE_SHARED.load(Ordering::Relaxed) {
        return Ok(());
    }
    refuse_shared_name_slow(name)
}

/// Set once [`shared_names`] is known to be empty (the registry never changes after start-up).
static NONE_SHARED: AtomicBool = AtomicBool::new(false);

#[cold]
#[inline(never)]
fn refuse_shared_name_slow(name: &str) -> Result<(), Error> {
    let shared = shared_names();
    if shared.is_empty() {
        NONE_SHARED.store(true, Ordering::Relaxed);
        return Ok(());
    }
    match shared.get(name) {
        None => Ok(()),
        Some(places) => Err(Error::DuplicateTool {
            tool: name.to_owned(),
            first: place(places[0]),
            second: places[1..]
                .iter()
                .map(|p| place(p))
                .collect::<Vec<_>>()
                .join(" and "),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s21_tools_of_two_merged_doctests_never_meet_and_any_other_pair_does() {
        assert!(!may_meet(
            "doctest_bundle_2024::__doctest_0",
            "doctest_bundle_2024::__doctest_3::billing"
        ));
        assert!(may_meet(
            "doctest_bundle_2024::__doctest_3",
            "doctest_bundle_2024::__doctest_3::billing"
        ));
        assert!(may_meet("doctest_bundle_2024::__doctest_3", "app::billing"));
        assert!(may_meet("app::billing", "app::shop"));
        assert_eq!(
            doctest_of("doctest_bundle_2024::__doctest_12::shop"),
            Some("doctest_bundle_2024::__doctest_12")
        );
        assert_eq!(doctest_of("doctest_bundle_2024"), None);
        assert_eq!(doctest_of("app::__doctest_1"), None);
    }
}
