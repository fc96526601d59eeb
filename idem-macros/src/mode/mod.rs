//! One module per integration a tool is served to, each a set of hooks the stages call, with
//! what only it needs from every stage: `mcp` (rmcp's `#[tool]`: its parse, its hints, the
//! wrapper serving MCP results) and `classified` (the `#[classified_tools]` attribute, which
//! checks an impl block of them), `rig` (the wrapper serving rig's envelope), `json` (the
//! arguments struct and the `JsonTools` entry).
//!
//! The hooks, by stage: check, each mode's `check` (called by `check`); plan, `mcp::derived`,
//! `mcp::key_path`, `mcp::fingerprint_except` (called by `lower`); expand, `Mode::attrs` and
//! `Mode::serve` below (dispatching to `mcp::attrs`, `mcp::serve`, `rig::serve`) and
//! `json::entry` (called by `expand`, with the plan); fallback, `mcp::written_tool_attr` and
//! the served return types `mcp::output`, `rig::output` (which the modes' `serve` use too).

pub(crate) mod classified;
pub(crate) mod json;
pub(crate) mod mcp;
pub(crate) mod rig;

use proc_macro2::TokenStream;

use crate::ast::Tool;
use crate::plan::{Mode, Plan};

/// The expand stage's hooks: what each mode changes of the wrapper.
impl Mode {
    /// The wrapper's outer attributes: in MCP mode, rmcp's `#[tool]` rewritten with the hints.
    pub(crate) fn attrs(&self, tool: &Tool, attrs: Vec<TokenStream>) -> Vec<TokenStream> {
        match self {
            Mode::Mcp { hints } => mcp::attrs(hints, tool, attrs),
            Mode::Plain | Mode::Rig { .. } => attrs,
        }
    }

    /// The wrapper's body as the mode serves it, and the return type it then has (`None`: the
    /// one written).
    pub(crate) fn serve(
        &self,
        tool: &Tool,
        plan: &Plan,
        body: TokenStream,
    ) -> (Option<TokenStream>, TokenStream) {
        let (output, body) = match self {
            Mode::Plain => return (None, body),
            Mode::Mcp { .. } => mcp::serve(tool, plan, body),
            Mode::Rig { pinned } => rig::serve(tool, plan, pinned.as_ref(), body),
        };
        (Some(output), body)
    }
}
