//! Every annotated tool registers itself here, so a program can list its tools and a test can
//! check that no two share a name.

use std::collections::BTreeMap;
use std::fmt;

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
                write!(f, "{sep}{}:{} ({})", info.file, info.line, info.module_path)?;
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
    let mut by_name: BTreeMap<&'static str, Vec<&'static ToolInfo>> = BTreeMap::new();
    for info in infos {
        by_name.entry(info.name).or_default().push(info);
    }
    let duplicates: Vec<_> = by_name.into_iter().filter(|(_, v)| v.len() > 1).collect();
    if duplicates.is_empty() {
        Ok(())
    } else {
        Err(DuplicateTools { duplicates })
    }
}
