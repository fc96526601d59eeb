//! What an rmcp tool method's expansion reaches (`::idemkit::__private::mcp::…`).

use std::error::Error as StdError;

pub use crate::mcp::ToolOutput;
pub use crate::observe::observe;
use crate::{CallInfo, Classify};
use serde::Serialize;

/// The MCP result of a `#[side_effect]` tool, its error seen through `as_error`.
pub fn side_effect_output<T: Serialize, E: Classify>(
    result: Result<T, E>,
    info: Option<CallInfo>,
    key_fields: &[&str],
    as_error: AsError<E>,
) -> ToolOutput {
    crate::mcp::side_effect_output_as(result, info, key_fields, as_error)
}

/// The MCP result of a `#[read_only]` tool, its error seen through `as_error`.
pub fn read_only_output<T: Serialize, E: Classify>(
    result: Result<T, E>,
    as_error: AsError<E>,
) -> ToolOutput {
    crate::mcp::read_only_output_as(result, as_error)
}

/// How a tool's error is seen as a `std::error::Error` (its text, its `source()` chain).
pub type AsError<E> = fn(&E) -> &(dyn StdError + 'static);

/// Picks [`AsError`] for `E` by autoref specialisation, where `E` is concrete:
/// `(&&ErrorProbe::<E>::new()).error_view()`: `anyhow::Error` and `Box<dyn Error + Send + Sync>`
/// (not `Error`s themselves) first, then any `std::error::Error`, else a compile error
/// saying what an MCP tool's error must be.
pub use super::ErrorProbe;

/// `anyhow::Error`, through its `AsRef<dyn Error>` (feature `anyhow`).
pub trait ViaAnyhow<E> {
    fn error_view(&self) -> AsError<E>;
}
#[cfg(feature = "anyhow")]
impl ViaAnyhow<anyhow::Error> for &ErrorProbe<anyhow::Error> {
    fn error_view(&self) -> AsError<anyhow::Error> {
        |e| e.as_ref()
    }
}

/// `Box<dyn Error + Send + Sync>`, through its referent.
pub trait ViaBoxed<E> {
    fn error_view(&self) -> AsError<E>;
}
impl ViaBoxed<Box<dyn StdError + Send + Sync>> for &ErrorProbe<Box<dyn StdError + Send + Sync>> {
    fn error_view(&self) -> AsError<Box<dyn StdError + Send + Sync>> {
        |e| &**e
    }
}

/// Any `std::error::Error`, as itself.
pub trait ViaError<E> {
    fn error_view(&self) -> AsError<E>;
}
impl<E: StdError + 'static> ViaError<E> for ErrorProbe<E> {
    fn error_view(&self) -> AsError<E> {
        |e| e
    }
}

/// Anything else: the compile error of [`ToolError`].
pub trait ViaMissing<E> {
    fn error_view(self) -> AsError<E>
    where
        E: ToolError;
}
impl<E> ViaMissing<E> for ErrorProbe<E> {
    fn error_view(self) -> AsError<E>
    where
        E: ToolError,
    {
        |e| e
    }
}

/// `std::error::Error + 'static`, under a name that can say why an MCP tool's error needs it.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be reported as an MCP tool error",
    label = "`{Self}` must implement `std::error::Error` (and be `'static`)",
    note = "an MCP tool's failure is sent to the model as a tool error (`isError: true`) with its message, and its `source()` chain is searched for idemkit's own error to say why the call was refused: implement `std::fmt::Display` and `std::error::Error` for `{Self}` (e.g. with thiserror), with `source()` returning the `idemkit::Error` it carries; or use `anyhow::Error` (idemkit's `anyhow` feature) or `Box<dyn std::error::Error + Send + Sync>`"
)]
pub trait ToolError: StdError + 'static {}
impl<E: StdError + 'static> ToolError for E {}
