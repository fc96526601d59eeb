//! Attribute macros of [idemkit](https://docs.rs/idemkit): `#[side_effect(key = "...")]` and
//! `#[read_only]`. Use them through the `idemkit` facade, which re-exports them.
//!
//! The crate is split by stage, each using only the stages before it: parse (`attr` the
//! attribute's arguments, `rmcp` an rmcp `#[tool]` on the method) → model (`ast`) → check
//! (`check`: every error, nothing built) → lower (`lower`: the plan) → expand (`expand`, with
//! `serve` for MCP results), or on any error `fallback` (the item as written plus the errors, so
//! one mistake gives one error). `suggest` and `ctxt` serve every stage; `classified` is the
//! `#[classified_tools]` attribute.

use proc_macro::TokenStream;
use proc_macro2::TokenStream as TokenStream2;

mod ast;
mod attr;
mod check;
mod classified;
mod ctxt;
mod expand;
mod fallback;
mod lower;
mod rmcp;
mod serve;
mod suggest;

use ast::Kind;

/// Marks an `async fn` as a tool with a side effect, keyed by the named fields.
///
/// ```ignore
/// use idemkit::{side_effect, IdempotencyKey};
///
/// /// Charges a customer once per purpose and period.
/// #[side_effect(key = "customer_id, purpose, period", max_attempts = 5)]
/// async fn charge(
///     key: &IdempotencyKey, // optional; injected, never passed by callers
///     customer_id: &str,
///     purpose: &str,
///     period: &str,
///     amount_cents: u64,
/// ) -> Result<Receipt, PayError> {
///     provider.charge(key.as_str(), customer_id, amount_cents).await
/// }
///
/// let receipt = charge("cus_1", "subscription", "2026-11", 4200).await?;
/// ```
///
/// # Arguments
///
/// | argument | meaning |
/// | --- | --- |
/// | `key = "a, b.c, self.d"` or `key(a, b.c, self.d)` | **required**: the fields that identify the operation, in key order. Each is a parameter, a name bound by a destructuring parameter, or `self`, followed by field accesses. The field's name in the key is the last segment (`args.customer_id` → `customer_id`). |
/// | `key = "nfc(name), period"` | a text key field normalised first: `nfc(..)` Unicode NFC, `nfc_fold(..)` NFC trimmed and in lower case (keys are byte-exact without). |
/// | `name = "payments.charge"` | the tool's name, part of every key (default: the function's name). Pin it to keep keys stable across renames. |
/// | `max_attempts = 5` | attempts in all, the first included (default: the runtime's retry policy). |
/// | `retry = <expr>` | a whole `idemkit::RetryPolicy` for this tool. |
/// | `lease = "10s"` | how long a claim holds before another call may take over; renewed every third of it while the body runs, so it bounds how long a crashed holder blocks the key, not how long a body may run (default: the runtime's, 10 s). |
/// | `ttl = "24h"` | how long the outcome is kept; at least the lease (a compile error otherwise, when both are given). |
/// | `in_flight_wait = "10s"` | how long a concurrent call of the same key waits for the outcome before `Error::InFlight` (one name for this setting everywhere: `Tool::in_flight_wait`, `IdemBuilder::in_flight_wait`). |
/// | `idem = <expr>` | the runtime to use, e.g. `idem = self.idem` (an `Idem`, `&Idem` or `Arc<Idem>`); default: the runtime in force (`Idem::current`). |
/// | `crate = path` | where the `idemkit` crate is, when it is renamed (default `::idemkit`). |
///
/// Durations are numbers with units `ms`, `s`, `m`, `h`, `d`, combinable: `"1h30m"`.
///
/// # What the wrapper does
///
/// Callers see the signature as written, minus the `&IdempotencyKey` parameter. On each call the
/// wrapper derives the key from the key fields **once**, fingerprints every other argument (they
/// must be `serde::Serialize`; a destructuring parameter contributes the names it binds), and runs
/// the body through the executor protocol, attempt by attempt: the body becomes an `async move`
/// block awaited once per attempt inside the wrapper (its `return` and `?` end the attempt), so
/// nothing can call it around the wrapper. Each attempt gets the arguments the body refers to
/// anew: owned arguments are cloned (so they must be `Clone`), references are copied. The body
/// runs in the caller's `tracing` span; idemkit's own events are in `idemkit.side_effect`.
///
/// The return type is `Result<T, E>`, or a one-argument alias of it (`anyhow::Result<T>` with
/// idemkit's `anyhow` feature, a crate's own `Result<T>`); `E` implements `idemkit::Classify` and
/// `From<idemkit::Error>` (`anyhow::Error` and `Box<dyn Error + Send + Sync>` do). `T` must be
/// `Serialize + DeserializeOwned`: the first outcome is stored and replayed. Methods take `&self`.
///
/// # What is a compile error about the key, and what cannot be
///
/// - A key minted **in the body** (C4): a call of `Uuid::new_v4`, `new_v7`, `now_v7` …,
///   `IdempotencyKey::random`/`new`, `OperationId::new`, `Ulid::new`, `rand::random`, `nanoid!`,
///   also inside a macro's arguments (`format!("{}", Uuid::new_v4())`).
/// - A key the **caller** would pass: a parameter named `key` that is not `&IdempotencyKey`, or an
///   `IdempotencyKey` taken by value.
/// - Not caught: a key minted in a **helper function** the body calls (`fresh_key()` returning a
///   UUID): the macro sees only the body's own tokens. Keep keys out of helpers: a helper that
///   needs the key takes the injected `&IdempotencyKey` as an argument, and an operation with no
///   natural identity keys on an `OperationId` (`idemkit::operation("...")`), minted once and
///   stored.
///
/// Minting an identifier in the body (`Uuid::new_v4()`, `Uuid::now_v7()`,
/// `IdempotencyKey::random()`, `OperationId::new()`, `Ulid::new()`, `rand::random()`,
/// `nanoid!()`) is a compile error: it would run once per attempt.
#[proc_macro_attribute]
pub fn side_effect(args: TokenStream, item: TokenStream) -> TokenStream {
    expand(Kind::SideEffect, args.into(), item.into()).into()
}

/// Marks an `async fn` as a read-only tool: retried by `idemkit::Classify`, no key, no store.
///
/// ```ignore
/// #[read_only(max_attempts = 3)]
/// async fn balance(customer_id: &str) -> Result<Cents, PayError> { /* … */ }
/// ```
///
/// Arguments: `name = "..."`, `max_attempts = N`, `retry = <expr>`, `idem = <expr>`,
/// `crate = path`, as for [`macro@side_effect`]. A `key` is an error: read-only tools need none.
#[proc_macro_attribute]
pub fn read_only(args: TokenStream, item: TokenStream) -> TokenStream {
    expand(Kind::ReadOnly, args.into(), item.into()).into()
}

/// Checks that every rmcp `#[tool]` method of an impl block is classified: `#[side_effect]` or
/// `#[read_only]` (feature `rmcp`). Write it above rmcp's `#[tool_router]`:
///
/// ```ignore
/// #[idemkit::classified_tools]
/// #[tool_router]
/// impl Payments {
///     #[side_effect(key = "req.customer_id, req.period")]
///     #[tool]
///     async fn charge(&self, req: Parameters<ChargeReq>) -> Result<Receipt, PayError> { /* … */ }
///
///     #[tool] // error: MCP tool `refund` is not classified: mark it `#[side_effect(key = "...")]` …
///     async fn refund(&self, req: Parameters<RefundReq>) -> Result<String, PayError> { /* … */ }
/// }
/// ```
///
/// It changes nothing in the impl block; it only fails the build when a tool is unclassified.
#[cfg(feature = "rmcp")]
#[proc_macro_attribute]
pub fn classified_tools(args: TokenStream, item: TokenStream) -> TokenStream {
    classified::classified_tools(args.into(), item.into()).into()
}

/// The whole expansion of one attribute: parse → model → check → lower → expand, or, on any
/// error, the item as written plus every error.
fn expand(kind: Kind, args: TokenStream2, item: TokenStream2) -> TokenStream2 {
    let cx = ctxt::Ctxt::default();
    let args = attr::parse(&cx, args);
    let func: syn::ItemFn = match syn::parse2(item.clone()) {
        Ok(func) => func,
        Err(e) => {
            cx.syn_error(syn::Error::new(
                e.span(),
                format!(
                    "{} goes on an `async fn` with a body (a free function, or a method taking `&self`): {e}",
                    kind.attribute()
                ),
            ));
            let errors = cx.finish().map(|e| e.to_compile_error());
            return quote::quote!(#item #errors);
        }
    };
    let mcp = rmcp::find(&cx, kind, &func);
    let tool = ast::Tool::new(kind, func, mcp);
    check::check(&cx, &args, &tool);
    match cx.finish() {
        None => expand::tool(&args, &tool, &lower::lower(&args, &tool)),
        Some(errors) => {
            let item = fallback::fallback(&args, &tool);
            let errors = errors.to_compile_error();
            quote::quote!(#item #errors)
        }
    }
}

#[cfg(test)]
mod tests;
