//! What the attributes' expansions reach (`::idemkit::__private::…`), and nothing else should:
//! re-exports, so generated code never names a crate the user may have renamed or never named,
//! and the glue between a wrapper and the runtime. Not a stable API.

use std::marker::PhantomData;

pub use crate::fingerprint::sorted::SortedArgs;
pub use crate::told::explain::success_envelope;
pub use crate::told::sentences::replayed as replayed_note;
pub use inventory;
#[cfg(feature = "json")]
pub use schemars;
pub use serde;
pub use serde_json;
pub use uuid;

/// Picks, by autoref specialisation, an outcome type's JSON Schema for the lock
/// ([`crate::lock`]): `T: JsonSchema` with the `json` feature, else none.
pub struct OutcomeProbe<T: ?Sized>(std::marker::PhantomData<fn() -> Box<T>>);

impl<T: ?Sized> OutcomeProbe<T> {
    /// The probe.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        OutcomeProbe(std::marker::PhantomData)
    }
}

/// Picked when `T` has a JSON Schema.
pub trait OutcomeSchema {
    /// The schema.
    fn outcome_schema(&self) -> Option<serde_json::Value>;
}

#[cfg(feature = "json")]
impl<T: schemars::JsonSchema + ?Sized> OutcomeSchema for OutcomeProbe<T> {
    fn outcome_schema(&self) -> Option<serde_json::Value> {
        serde_json::to_value(schemars::schema_for!(T)).ok()
    }
}

/// Picked otherwise: no schema.
pub trait OutcomeNoSchema {
    /// None.
    fn outcome_schema(&self) -> Option<serde_json::Value>;
}

impl<T: ?Sized> OutcomeNoSchema for &OutcomeProbe<T> {
    fn outcome_schema(&self) -> Option<serde_json::Value> {
        None
    }
}

/// Text a key field normalisation (`nfc(name)`, `nfc_fold(name)`) can read.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not text, so `nfc(..)` or `nfc_fold(..)` cannot normalise it",
    label = "not text",
    note = "normalisation applies to text key fields (`&str`, `String`, `Cow<str>`, `Box<str>`, `Arc<str>`); key this field without it"
)]
pub trait KeyText {
    /// The text.
    fn key_text(&self) -> &str;
}

impl KeyText for str {
    fn key_text(&self) -> &str {
        self
    }
}

impl KeyText for String {
    fn key_text(&self) -> &str {
        self
    }
}

impl KeyText for std::borrow::Cow<'_, str> {
    fn key_text(&self) -> &str {
        self
    }
}

impl KeyText for Box<str> {
    fn key_text(&self) -> &str {
        self
    }
}

impl KeyText for std::sync::Arc<str> {
    fn key_text(&self) -> &str {
        self
    }
}

impl<T: KeyText + ?Sized> KeyText for &T {
    fn key_text(&self) -> &str {
        (**self).key_text()
    }
}

/// The type name of what `field` reads from an `A` (a key field of a parameter of type `A`),
/// for the manifest; `field` is never called.
pub fn key_type<A: ?Sized, R: ?Sized>(field: for<'x> fn(&'x A) -> &'x R) -> &'static str {
    let _ = field;
    std::any::type_name::<R>()
}

/// What a tool's return type is made of, so that a one-argument alias (`anyhow::Result<T>`, a
/// crate's own `Result<T>`) names its error type through the compiler, not through syntax.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a `Result`",
    label = "a tool returns `Result<T, E>`, or an alias of it",
    note = "write `Result<T, YourError>`, or an alias of `std::result::Result` such as `anyhow::Result<T>`"
)]
pub trait ToolResult {
    /// `T`.
    type Ok;
    /// `E`.
    type Err;
}

impl<T, E> ToolResult for Result<T, E> {
    type Ok = T;
    type Err = E;
}
pub use crate::{
    Classify, Error, Fingerprint, Fingerprinter, Idem, IdempotencyKey, KeyHasher, KeyPart, Next,
    ReadCall, ReadNext, SideEffectCall, StoredVerify, Tool, ToolInfo, ToolKind, Verified,
    VerifyAnswer, normalize, scoped_operation,
};

use serde::Serialize;
use serde::de::DeserializeOwned;

/// The fingerprint of the arguments that are not key fields, keeping the first serialization
/// failure, which the call reports as `Error::Arguments` without running the tool. The expansion
/// passes the arguments sorted by name, so they are hashed as they come.
#[derive(Debug, Default)]
pub struct Arguments {
    sorted: SortedArgs,
    failed: Option<serde_json::Error>,
}

impl Arguments {
    /// No arguments yet.
    #[inline]
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one argument; its bound is checked at the argument's span.
    #[inline]
    pub fn arg<T: Fingerprinted + ?Sized>(mut self, name: &'static str, value: &T) -> Self {
        if self.failed.is_none()
            && let Err(e) = self.sorted.arg(name, value)
        {
            self.failed = Some(e);
        }
        self
    }

    /// Adds one argument without its fields that are key fields (an MCP request: the key fields
    /// are in the key already).
    pub fn arg_except<T: Fingerprinted + ?Sized>(
        self,
        name: &'static str,
        value: &T,
        key_fields: &[&str],
    ) -> Self {
        match serde_json::to_value(value) {
            Ok(serde_json::Value::Object(mut fields)) => {
                for key_field in key_fields {
                    fields.remove(*key_field);
                }
                self.arg(name, &fields)
            }
            Ok(other) => self.arg(name, &other),
            Err(e) => {
                let mut this = self;
                this.failed.get_or_insert(e);
                this
            }
        }
    }

    /// The fingerprint, or why an argument did not serialize.
    #[inline]
    pub fn finish(self) -> Result<Fingerprint, serde_json::Error> {
        match self.failed {
            None => Ok(self.sorted.finish()),
            Some(e) => Err(e),
        }
    }
}

/// `Serialize`, under a name that can say why a tool's other arguments need it.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be fingerprinted as an argument of a side effect",
    label = "an argument that is not a key field is fingerprinted: a handle belongs in `self`, data must implement `serde::Serialize`",
    note = "if `{Self}` is a handle rather than data of the operation (an HTTP client such as `reqwest::Client`, a connection pool, a channel's sender), it does not belong in the arguments: make the tool a method and keep the handle in `self` (`&self` is neither a key field nor fingerprinted)",
    note = "if `{Self}` is data of the operation: the arguments that are not key fields are fingerprinted, so that a retry is told apart from a key reused for another operation; add `#[derive(serde::Serialize)]` to `{Self}`, or make the argument a key field"
)]
pub trait Fingerprinted: Serialize {}
impl<T: Serialize + ?Sized> Fingerprinted for T {}

/// Each attempt gets its arguments anew, by clone (a reference clones for free).
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be handed to every attempt of a tool",
    label = "`{Self}` must implement `Clone`",
    note = "each attempt gets the tool's arguments anew, so an argument taken by value is cloned per attempt: derive or implement `Clone` for `{Self}`, or take it by reference (`&{Self}`)"
)]
pub trait PerAttempt {
    /// A copy for the next attempt.
    fn again(&self) -> Self;
}
impl<T: Clone> PerAttempt for T {
    #[inline]
    fn again(&self) -> Self {
        self.clone()
    }
}

/// Never run: an attempt's body starts with `if false { return fake_return::<R>(); }`, which
/// pins its `async` block's output to the tool's `R` before the body is checked (the "fake
/// return edge" of tracing-attributes), so `?` and `.into()` in the body infer as they do in the
/// function.
#[inline(always)]
pub fn fake_return<R>() -> R {
    unreachable!("the expansion calls `fake_return` only under `if false`")
}

// C8. The expansion calls these with the tool's `T` and `E` written at the user's spans, so an
// unmet bound is reported once, at that type, with the trait's `on_unimplemented` text.

/// A side-effect tool's output is stored and replayed.
pub fn assert_output<T: StoredOutcome>() {}

/// `Serialize + DeserializeOwned`, under a name that can say why a tool's output needs them.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be stored and replayed as a side effect's outcome",
    label = "`{Self}` must implement `serde::Serialize` and `serde::de::DeserializeOwned`",
    note = "the first outcome of a side effect is stored, and a repeat of the call returns it instead of acting again: add `#[derive(serde::Serialize, serde::Deserialize)]` to `{Self}` (owned fields only, no borrowed `&str`)"
)]
pub trait StoredOutcome {}
impl<T: Serialize + DeserializeOwned> StoredOutcome for T {}

/// A tool's error says which failures to retry.
pub fn assert_classify<E: Classify>() {}

/// A side-effect tool's error carries the runtime's own errors.
pub fn assert_from_error<E: FromIdemError>() {}

/// `From<idemkit::Error>`, under a name that can say what to add when it is missing.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot carry idemkit's own errors",
    label = "`{Self}` does not implement `From<idemkit::Error>`",
    note = "add `impl From<idemkit::Error> for {Self}`: key reuse, a call still in flight and store failures reach the caller as your error type (in `Classify`, hand them to their own: `MyError::Idem(e) => e.classify()`)"
)]
pub trait FromIdemError {}
impl<E: From<Error>> FromIdemError for E {}

// The call itself must not repeat those errors at the attribute: it goes through a runner chosen
// by autoref specialization, the checked one when the bounds hold, else one that is never run
// (the assertions above have already failed the build).

/// Selects the runner for `T` and `E`.
pub struct Probe<T, E>(PhantomData<fn() -> (T, E)>);

impl<T, E> Probe<T, E> {
    /// The probe.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        Probe(PhantomData)
    }
}

/// The runner for types that passed the checks.
pub struct Checked<T, E>(PhantomData<fn() -> (T, E)>);

/// The runner for types that failed them; never run, because the build has failed.
pub struct Unchecked<T, E>(PhantomData<fn() -> (T, E)>);

/// Picked when `T` and `E` meet a side-effect tool's bounds.
pub trait SideEffectChecked<T, E> {
    /// The runner.
    fn side_effect_runner(&self) -> Checked<T, E>;
}

impl<T: Serialize + DeserializeOwned, E: Classify + From<Error>> SideEffectChecked<T, E>
    for Probe<T, E>
{
    fn side_effect_runner(&self) -> Checked<T, E> {
        Checked(PhantomData)
    }
}

/// Picked otherwise.
pub trait SideEffectUnchecked<T, E> {
    /// The runner.
    fn side_effect_runner(&self) -> Unchecked<T, E>;
}

impl<T, E> SideEffectUnchecked<T, E> for &Probe<T, E> {
    fn side_effect_runner(&self) -> Unchecked<T, E> {
        Unchecked(PhantomData)
    }
}

/// Picked when `E` meets a read-only tool's bound.
pub trait ReadOnlyChecked<T, E> {
    /// The runner.
    fn read_only_runner(&self) -> Checked<T, E>;
}

impl<T, E: Classify> ReadOnlyChecked<T, E> for Probe<T, E> {
    fn read_only_runner(&self) -> Checked<T, E> {
        Checked(PhantomData)
    }
}

/// Picked otherwise.
pub trait ReadOnlyUnchecked<T, E> {
    /// The runner.
    fn read_only_runner(&self) -> Unchecked<T, E>;
}

impl<T, E> ReadOnlyUnchecked<T, E> for &Probe<T, E> {
    fn read_only_runner(&self) -> Unchecked<T, E> {
        Unchecked(PhantomData)
    }
}

// What a tool's expansion runs: a loop over `attempt()` that awaits the body in place (see
// `crate::SideEffectCall`). The real runner hands out the runtime's typed call; the one
// for types that failed the checks hands out a call with the same methods and no bounds, so
// the loop does not repeat the checks' errors.

impl<T: Serialize + DeserializeOwned, E: Classify + From<Error>> Checked<T, E> {
    pub fn side_effect<'a>(
        &self,
        tool: Tool<'a>,
        key: IdempotencyKey,
        arguments: Result<Fingerprint, serde_json::Error>,
    ) -> SideEffectCall<'a, T, E> {
        SideEffectCall::new(tool, key, arguments)
    }
}

impl<T, E: Classify> Checked<T, E> {
    pub fn read_only<'a>(&self, tool: Tool<'a>) -> ReadCall<'a, T, E> {
        ReadCall::new(tool)
    }
}

impl<T, E> Unchecked<T, E> {
    pub fn side_effect<'a>(
        &self,
        tool: Tool<'a>,
        _key: IdempotencyKey,
        _arguments: Result<Fingerprint, serde_json::Error>,
    ) -> UncheckedCall<'a, T, E> {
        self.read_only(tool)
    }

    pub fn read_only<'a>(&self, tool: Tool<'a>) -> UncheckedCall<'a, T, E> {
        UncheckedCall(ReadCall::new(tool))
    }
}

/// The call of a tool whose types failed the checks: never run, because the build has failed.
/// It holds a read's call only to hand out `attempt()`'s future type, which needs no bounds.
pub struct UncheckedCall<'a, T, E>(ReadCall<'a, T, E>);

const UNCHECKED: &str = "idemkit: a tool whose types fail the attribute's checks does not compile";

impl<'a, T, E> UncheckedCall<'a, T, E> {
    pub fn attempt(&mut self) -> ReadNext<'_, 'a> {
        self.0.attempt()
    }

    pub fn ended(&mut self, _result: Result<T, E>) {
        unreachable!("{UNCHECKED}")
    }

    pub async fn run<F: core::future::Future<Output = Result<T, E>>>(&mut self, _attempt: F) {
        unreachable!("{UNCHECKED}")
    }

    pub fn end(self) -> Result<T, E> {
        unreachable!("{UNCHECKED}")
    }
}

impl<'a, T, E> UncheckedCall<'a, T, E> {
    pub fn previous(
        &mut self,
        _key: IdempotencyKey,
        _arguments: Result<Fingerprint, serde_json::Error>,
    ) {
    }

    pub fn verifying(&self) -> bool {
        unreachable!("{UNCHECKED}")
    }

    pub async fn verify<F: core::future::Future<Output = Result<Verified<T>, E>>>(
        &mut self,
        _verification: F,
    ) {
        unreachable!("{UNCHECKED}")
    }

    pub fn describe_errors(&mut self, _describe: Option<fn(&E) -> String>) {
        unreachable!("{UNCHECKED}")
    }
}

mod settle;
mod verify;
pub use self::settle::*;
pub use self::verify::*;

/// The probe that picks, by autoref specialisation where `E` is concrete, how an MCP or rig
/// tool's error `E` is reported (each integration's traits implement the picks on `&ErrorProbe`).
#[cfg(any(feature = "rmcp", feature = "rig"))]
pub struct ErrorProbe<E>(PhantomData<fn() -> E>);

#[cfg(any(feature = "rmcp", feature = "rig"))]
impl<E> ErrorProbe<E> {
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        ErrorProbe(PhantomData)
    }
}
#[cfg(any(feature = "rmcp", feature = "rig"))]
impl<E> Clone for ErrorProbe<E> {
    fn clone(&self) -> Self {
        *self
    }
}
#[cfg(any(feature = "rmcp", feature = "rig"))]
impl<E> Copy for ErrorProbe<E> {}

/// What a tool marked `json` expands to: its arguments struct implements `JsonArgs`, and its
/// `JsonEntry` is submitted to the registry.
#[cfg(feature = "json")]
pub mod json {
    pub use crate::json::{
        Describe, DescribeChain, DescribeDebug, DescribeDisplay, Described, JsonArgs, JsonEntry,
    };
}

#[cfg(feature = "rmcp")]
pub mod mcp;

#[cfg(feature = "rig")]
pub mod rig;
