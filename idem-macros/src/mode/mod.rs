//! One module per integration a tool is served to, each with what only it needs from every
//! stage: `mcp` (rmcp's `#[tool]`: its parse, its hints, the wrapper serving MCP results) and
//! `classified` (the `#[classified_tools]` attribute, which checks an impl block of them), `rig`
//! (the wrapper serving rig's envelope), `json` (the arguments struct and the `JsonTools` entry).
//! Each mode's checks are its `check` hook, which the `check` stage calls.

pub(crate) mod classified;
pub(crate) mod json;
pub(crate) mod mcp;
pub(crate) mod rig;
