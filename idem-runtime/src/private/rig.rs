//! What a rig tool's expansion reaches (`::idemkit::__private::rig::…`).

use std::error::Error as StdError;

pub use crate::observe::observe;
pub use crate::rig::{RigOutput, same_name};
use crate::{CallInfo, Classify};
use serde::Serialize;

/// Whose `NAME` a rig tool's key takes.
pub use rig_core::tool::Tool;

use crate::rig::FailWith;

/// The rig result of a `#[side_effect(rig)]` tool, its error made rig's envelope by `fail`.
pub fn side_effect_output<T: Serialize, E>(
    result: Result<T, E>,
    info: Option<CallInfo>,
    key_fields: &[&str],
    fail: FailWith<E>,
) -> RigOutput {
    crate::rig::side_effect_output_as(result, info, key_fields, fail)
}

/// The rig result of a `#[read_only(rig)]` tool, its error made rig's envelope by `fail`.
pub fn read_only_output<T: Serialize, E>(result: Result<T, E>, fail: FailWith<E>) -> RigOutput {
    crate::rig::read_only_output_as(result, fail)
}

/// Picks how `E` becomes rig's envelope by autoref specialisation, where `E` is concrete
/// (`(&&ErrorProbe::<E>::new()).fail_with()`): `anyhow::Error` and
/// `Box<dyn Error + Send + Sync>` boxed, any other `std::error::Error + Send + Sync` kept as
/// it is (so `downcast_ref` finds it), else a compile error saying what it must be.
pub use super::ErrorProbe;

/// `anyhow::Error` (feature `anyhow`).
pub trait ViaAnyhow<E> {
    fn fail_with(&self) -> FailWith<E>;
}
#[cfg(feature = "anyhow")]
impl ViaAnyhow<anyhow::Error> for &ErrorProbe<anyhow::Error> {
    fn fail_with(&self) -> FailWith<anyhow::Error> {
        crate::rig::fail_anyhow
    }
}

/// `Box<dyn Error + Send + Sync>`.
pub trait ViaBoxed<E> {
    fn fail_with(&self) -> FailWith<E>;
}
impl ViaBoxed<Box<dyn StdError + Send + Sync>> for &ErrorProbe<Box<dyn StdError + Send + Sync>> {
    fn fail_with(&self) -> FailWith<Box<dyn StdError + Send + Sync>> {
        crate::rig::fail_boxed
    }
}

/// Any `std::error::Error + Send + Sync` that is [`Classify`], kept as it is; anything else, the
/// compile error of [`ToolError`] (or of `Classify`). One path: the bounds that pick it are the
/// ones `fail_std` needs, so no other type reaches it.
pub trait ViaError<E> {
    fn fail_with(self) -> FailWith<E>
    where
        E: ToolError + Classify;
}
impl<E> ViaError<E> for ErrorProbe<E> {
    fn fail_with(self) -> FailWith<E>
    where
        E: ToolError + Classify,
    {
        crate::rig::fail_std
    }
}

/// `std::error::Error + Send + Sync + 'static`, under a name that can say why a rig tool's
/// error needs it.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be reported as a rig tool error",
    label = "`{Self}` must implement `std::error::Error + Send + Sync` (and be `'static`)",
    note = "a rig tool's failure becomes rig's `ToolExecutionError`, which keeps the error as its source and searches its `source()` chain for idemkit's own error to say why the call was refused: implement `std::fmt::Display` and `std::error::Error` for `{Self}` (e.g. with thiserror), with `source()` returning the `idemkit::Error` it carries; or use `anyhow::Error` (idemkit's `anyhow` feature) or `Box<dyn std::error::Error + Send + Sync>`"
)]
pub trait ToolError: std::error::Error + Send + Sync + 'static {}
impl<E: std::error::Error + Send + Sync + 'static> ToolError for E {}

/// The impl's `type Output` and `type Error` are what the wrapper serves.
pub fn assert_envelope<O: OutputEnvelope, E: ErrorEnvelope>() {}

/// rig's `ToolOutput` only: what a rig tool's `call` under an idemkit attribute returns.
#[diagnostic::on_unimplemented(
    message = "a rig tool with an idemkit attribute on its `call` declares `type Output = ToolOutput`, not `{Self}`",
    label = "the wrapper serves `Result<ToolOutput, ToolExecutionError>`",
    note = "write `type Output = idemkit::rig::ToolOutput;` in the impl: the value your `call` returns goes inside it, with its idempotency key and whether it was replayed"
)]
pub trait OutputEnvelope {}
impl OutputEnvelope for rig_core::tool::ToolOutput {}

/// rig's `ToolExecutionError` only: what a rig tool's `call` under an idemkit attribute fails with.
#[diagnostic::on_unimplemented(
    message = "a rig tool with an idemkit attribute on its `call` declares `type Error = ToolExecutionError`, not `{Self}`",
    label = "the wrapper serves `Result<ToolOutput, ToolExecutionError>`",
    note = "write `type Error = idemkit::rig::ToolExecutionError;` in the impl: your `call`'s error is classified into it and kept as its source"
)]
pub trait ErrorEnvelope {}
impl ErrorEnvelope for rig_core::tool::ToolExecutionError {}
