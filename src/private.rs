//! What the attributes' expansions reach (`::idemkit::__private::…`), and nothing else should:
//! re-exports, so generated code never names a crate the user may have renamed or never named,
//! and the glue between a wrapper and the runtime. Not a stable API.

use std::marker::PhantomData;

pub use idem_runtime::__private::*;

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
pub use idem_runtime::{
    Classify, Error, Fingerprint, Fingerprinter, Idem, IdempotencyKey, KeyHasher, KeyPart, Next,
    ReadCall, ReadNext, SideEffectCall, Tool, ToolInfo, ToolKind, Verified, normalize,
    scoped_operation,
};

use idem_runtime::__private::serde::Serialize;
use idem_runtime::__private::serde::de::DeserializeOwned;

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
    label = "`{Self}` must implement `serde::Serialize`",
    note = "the arguments that are not key fields are fingerprinted, so that a retry is told apart from a key reused for another operation: add `#[derive(serde::Serialize)]` to `{Self}`, or make the argument a key field",
    note = "if `{Self}` is a handle rather than data of the operation (an HTTP client, a connection pool, a channel's sender), it does not belong in the arguments: make the tool a method and keep the handle in `self` (`&self` is neither a key field nor fingerprinted)"
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
    note = "add `impl From<idemkit::Error> for {Self}`: key reuse, a call still in flight and store failures reach the caller as your error type (classify them, usually as `Failure::Permanent`)"
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
// `idem_runtime::SideEffectCall`). The real runner hands out the runtime's typed call; the one
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
    pub fn verifying(&self) -> bool {
        unreachable!("{UNCHECKED}")
    }

    pub async fn verify<F: core::future::Future<Output = Result<Verified<T>, E>>>(
        &mut self,
        _verification: F,
    ) {
        unreachable!("{UNCHECKED}")
    }
}

// `verify = path` (S19, C10). The expansion looks at the function through a `VerifyProbe` of the
// tool's parameter types, `T` and `E`, by autoref specialization: a `Verifier` (which calls it)
// when it is an `async fn` of those parameters answering `Result<Verified<T>, E>`, else a
// `Misfit`, never run, which the expansion's own assertion reports at the path with the
// signature to write. So a misfit is one error, not a cascade from the call.

/// The types a `verify` function's fit is judged by, without owning any (so `Send`, `Sync`).
type Signature<A, T, E> = PhantomData<fn() -> (A, T, E)>;

/// Selects how the `verify` function `F` is called with the arguments `A` (a tuple).
pub struct VerifyProbe<F, A, T, E>(F, Signature<A, T, E>);

impl<F, A, T, E> VerifyProbe<F, A, T, E> {
    /// The probe of `verify`.
    pub fn new(verify: F) -> Self {
        VerifyProbe(verify, PhantomData)
    }
}

/// Calls a `verify` function that fits its tool.
pub struct Verifier<F, A, T, E>(F, Signature<A, T, E>);

/// A `verify` function that does not fit its tool: never called, the build has failed.
pub struct Misfit<A, T, E>(Signature<A, T, E>);

impl<A, T, E> Misfit<A, T, E> {
    pub fn call(&self, _arguments: A) -> core::future::Pending<Result<Verified<T>, E>> {
        unreachable!("idemkit: a tool whose `verify` function does not fit it does not compile")
    }
}

/// Picked when `verify` fits.
pub trait VerifyFits<F, A, T, E> {
    /// The verifier.
    fn verify_fit(&self) -> Verifier<F, A, T, E>;
}

/// Picked otherwise.
pub trait VerifyMisfits<A, T, E> {
    /// The misfit.
    fn verify_fit(&self) -> Misfit<A, T, E>;
}

impl<F, A, T, E> VerifyMisfits<A, T, E> for &VerifyProbe<F, A, T, E> {
    fn verify_fit(&self) -> Misfit<A, T, E> {
        Misfit(PhantomData)
    }
}

/// One arity of `verify` functions: the tool's receiver, key and parameters count.
macro_rules! verify_arity {
    ($($a:ident),*) => {
        impl<F: Copy, $($a,)* T, E> VerifyFits<F, ($($a,)*), T, E> for VerifyProbe<F, ($($a,)*), T, E>
        where
            F: AsyncFn($($a),*) -> Result<Verified<T>, E>,
        {
            fn verify_fit(&self) -> Verifier<F, ($($a,)*), T, E> {
                Verifier(self.0, PhantomData)
            }
        }

        impl<F, $($a,)* T, E> Verifier<F, ($($a,)*), T, E>
        where
            F: AsyncFn($($a),*) -> Result<Verified<T>, E>,
        {
            /// The verification, with the attempt's arguments.
            #[allow(non_snake_case, clippy::unused_unit)]
            pub fn call(
                &self,
                ($($a,)*): ($($a,)*),
            ) -> impl core::future::Future<Output = Result<Verified<T>, E>> + '_ {
                (self.0)($($a),*)
            }
        }
    };
}

verify_arity!();
verify_arity!(A0);
verify_arity!(A0, A1);
verify_arity!(A0, A1, A2);
verify_arity!(A0, A1, A2, A3);
verify_arity!(A0, A1, A2, A3, A4);
verify_arity!(A0, A1, A2, A3, A4, A5);
verify_arity!(A0, A1, A2, A3, A4, A5, A6);
verify_arity!(A0, A1, A2, A3, A4, A5, A6, A7);
verify_arity!(A0, A1, A2, A3, A4, A5, A6, A7, A8);
verify_arity!(A0, A1, A2, A3, A4, A5, A6, A7, A8, A9);
verify_arity!(A0, A1, A2, A3, A4, A5, A6, A7, A8, A9, A10);
verify_arity!(A0, A1, A2, A3, A4, A5, A6, A7, A8, A9, A10, A11);
verify_arity!(A0, A1, A2, A3, A4, A5, A6, A7, A8, A9, A10, A11, A12);
verify_arity!(A0, A1, A2, A3, A4, A5, A6, A7, A8, A9, A10, A11, A12, A13);
verify_arity!(
    A0, A1, A2, A3, A4, A5, A6, A7, A8, A9, A10, A11, A12, A13, A14
);
verify_arity!(
    A0, A1, A2, A3, A4, A5, A6, A7, A8, A9, A10, A11, A12, A13, A14, A15
);

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
    pub use idem_runtime::json::{
        Describe, DescribeChain, DescribeDebug, DescribeDisplay, JsonArgs, JsonEntry,
    };
}

#[cfg(feature = "rmcp")]
pub mod mcp {
    use std::error::Error as StdError;

    pub use crate::mcp::ToolOutput;
    use idem_runtime::__private::serde::Serialize;
    pub use idem_runtime::observe;
    use idem_runtime::{CallInfo, Classify};

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
}

#[cfg(feature = "rig")]
pub mod rig {
    use std::error::Error as StdError;

    pub use crate::rig::{RigOutput, same_name};
    use idem_runtime::__private::serde::Serialize;
    pub use idem_runtime::observe;
    use idem_runtime::{CallInfo, Classify};

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

    /// Any `std::error::Error + Send + Sync`.
    pub trait ViaError<E> {
        fn fail_with(&self) -> FailWith<E>;
    }
    impl<E: StdError + Classify + Send + Sync + 'static> ViaError<E> for ErrorProbe<E> {
        fn fail_with(&self) -> FailWith<E> {
            crate::rig::fail_std
        }
    }

    /// Anything else: the compile error of [`ToolError`].
    pub trait ViaMissing<E> {
        fn fail_with(self) -> FailWith<E>
        where
            E: ToolError;
    }
    impl<E> ViaMissing<E> for ErrorProbe<E> {
        fn fail_with(self) -> FailWith<E>
        where
            E: ToolError,
        {
            |_, _, _, _| unreachable!("ToolError implies ViaError")
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
}
