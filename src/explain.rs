//! Why a tool call failed, in words a model can act on: shared by the integrations that hand a
//! failure back to an agent (MCP results, rig's `ToolExecutionError`). The answers themselves
//! are the runtime's ([`Explanation`]), one per way a call can end, so every surface (JSON calls
//! too) tells the same story.

use std::error::Error as StdError;

use idem_runtime::{CallInfo, Classify, Explanation, ToolKind};

/// `e`'s explanation: by idemkit's own error in its `source()` chain, else by how the call ended
/// (`info`), else by its [`Classify`]. A read-only tool has no key and changes nothing, so its
/// sentences promise neither.
pub(crate) fn explain<E>(
    e: &E,
    kind: ToolKind,
    info: Option<&CallInfo>,
    key_fields: &[&str],
) -> Explanation
where
    E: StdError + Classify + 'static,
{
    Explanation::of(e, e.classify(), kind, info, key_fields)
}
