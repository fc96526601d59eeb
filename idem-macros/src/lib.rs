//! Attribute macros of [idemkit](https://docs.rs/idemkit): `#[side_effect(key = "...")]` and
//! `#[read_only]`. Use them through the `idemkit` facade, which re-exports them.
//!
//! The crate is split by stage, each using only the stages before it: parse (`attr` the
//! attribute's arguments) → model (`ast`) → check (`check`: every error, nothing built) → plan
//! (`lower` builds the `plan::Plan` once: the `__private` path, the mode, the name, the key
//! fields, the knobs; the arguments end there) → expand (`expand`, with `register` and `settle`,
//! each reading the plan), or on any error `fallback` (the item as written plus the errors, so
//! one mistake gives one error). What is particular to one integration is in `mode`, one module
//! each, as hooks the stages call: `mode::mcp` (rmcp's `#[tool]` read from the method, its
//! hints, its checks, the wrapper serving MCP results; `mode::classified`, the
//! `#[classified_tools]` attribute), `mode::rig`, `mode::json`. `describe` is what a model is
//! told a tool does; `suggest` and `ctxt` serve every stage.

use proc_macro::TokenStream;
use proc_macro2::TokenStream as TokenStream2;

mod ast;
mod attr;
mod calls;
mod check;
mod ctxt;
mod describe;
mod expand;
mod fallback;
mod handed;
mod lower;
mod minted;
mod mode;
mod plan;
mod register;
mod settle;
mod suggest;

use ast::Kind;

/// Marks an `async fn` as a tool with a side effect, keyed by the named fields.
///
/// ```
/// use idemkit::{Classify, Failure, IdempotencyKey, side_effect};
/// # use idemkit::{Idem, MemoryStore};
/// # #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
/// # struct Receipt { key: String, cents: u64 }
/// # struct Provider;
/// # impl Provider {
/// #     async fn charge(&self, key: &str, _: &str, cents: u64) -> Result<Receipt, PayError> {
/// #         Ok(Receipt { key: key.to_owned(), cents })
/// #     }
/// # }
/// # #[allow(non_upper_case_globals)] static provider: Provider = Provider;
///
/// #[derive(Debug)]
/// enum PayError { Declined, Timeout, Idem(idemkit::Error) }
///
/// impl Classify for PayError {
///     fn classify(&self) -> Failure {
///         match self {
///             PayError::Declined => Failure::Permanent,
///             PayError::Idem(e) => e.classify(), // idemkit's own errors classify themselves
///             PayError::Timeout => Failure::Ambiguous, // may have happened: same key again
///         }
///     }
/// }
/// impl From<idemkit::Error> for PayError {
///     fn from(e: idemkit::Error) -> Self { PayError::Idem(e) }
/// }
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
/// # async fn agent() -> Result<(), PayError> {
/// let receipt = charge("cus_1", "subscription", "2026-11", 4200).await?;
/// assert_eq!(receipt.key, "32e00e40-1a53-8058-93c7-e9d1adc8ecaa");
/// // A repeat returns the recorded outcome; the body does not run again.
/// assert_eq!(charge("cus_1", "subscription", "2026-11", 4200).await?, receipt);
/// # Ok(())
/// # }
/// # let run = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
/// # run.block_on(Idem::new(MemoryStore::new()).scope(agent())).unwrap();
/// ```
///
/// A method of whatever holds the client, keyed on fields of a JSON arguments struct (what a
/// language model sends), with its own runtime and a pinned name:
///
/// ```
/// use idemkit::{Idem, IdempotencyKey, MemoryStore, side_effect};
/// use serde::{Deserialize, Serialize};
/// # #[derive(Debug)] struct PayError;
/// # impl idemkit::Classify for PayError {
/// #     fn classify(&self) -> idemkit::Failure { idemkit::Failure::Permanent }
/// # }
/// # impl From<idemkit::Error> for PayError { fn from(_: idemkit::Error) -> Self { PayError } }
///
/// #[derive(Clone, Serialize, Deserialize)]
/// struct RefundReq { charge_id: String, cents: u64, reason: String }
///
/// struct Payments { idem: Idem }
///
/// impl Payments {
///     /// Refunds a charge at most once; `cents` and `reason` are fingerprinted, not keyed.
///     #[side_effect(key = "req.charge_id", name = "payments.refund", idem = self.idem)]
///     async fn refund(&self, key: &IdempotencyKey, req: RefundReq) -> Result<String, PayError> {
///         Ok(format!("refunded {} of {} under {key}", req.cents, req.charge_id))
///     }
/// }
///
/// # let run = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
/// # run.block_on(async {
/// let payments = Payments { idem: Idem::new(MemoryStore::new()) };
/// let req = RefundReq { charge_id: "ch_1".into(), cents: 500, reason: "duplicate".into() };
/// let first = payments.refund(req.clone()).await.unwrap();
/// assert_eq!(payments.refund(req.clone()).await.unwrap(), first); // replayed
/// // The same key with other arguments is refused, not run (S3).
/// let other = RefundReq { cents: 900, ..req };
/// assert!(matches!(payments.refund(other).await, Err(PayError)));
/// # });
/// ```
///
/// # Arguments
///
/// Every argument, with an example of each. Only `key` is required.
///
/// | argument | example | meaning |
/// | --- | --- | --- |
/// | `key` | `key = "customer_id, req.period, self.account"` or `key(customer_id, req.period)` | **required**: the fields that identify the operation, in key order. Each is a parameter, a name bound by a destructuring parameter, or `self`, followed by field accesses. The field's name in the key is the last segment (`req.period` → `period`). An operation with no natural identity keys on an `OperationId` parameter: `key = "step"` for `step: OperationId`. |
/// | `nfc(..)`, `nfc_fold(..)` in `key` | `key = "nfc_fold(email), period"` | a text key field normalised first: `nfc` Unicode NFC, `nfc_fold` NFC trimmed and in lower case (keys are byte-exact without). |
/// | `name` | `name = "payments.charge"` | the tool's name, part of every key and the name a model calls it by (default: the function's name, or rmcp's `#[tool(name = "...")]`). Pin it to keep keys stable across renames. |
/// | `max_attempts` | `max_attempts = 5` | attempts in all, the first included (default: the runtime's retry policy, 4). |
/// | `retry` | `retry = RetryPolicy::default().with_max_attempts(5)` | a whole `idemkit::RetryPolicy` for this tool. |
/// | `lease` | `lease = "30s"` | how long a claim holds before another call may take over; renewed every third of it while the body runs, so it bounds how long a crashed holder blocks the key, not how long a body may run (default: the runtime's, 10 s). |
/// | `ttl` | `ttl = "7d"` | how long the outcome is kept; at least the lease (a compile error otherwise, when both are given). |
/// | `in_flight_wait` | `in_flight_wait = "2s"` | how long a concurrent call of the same key waits for the outcome before `Error::InFlight` (the same setting as `Tool::in_flight_wait`, `IdemBuilder::in_flight_wait`). |
/// | `idem` | `idem = self.idem` | the runtime to use (an `Idem`, `&Idem` or `Arc<Idem>`); default: the runtime in force (`Idem::current`). |
/// | `verify` | `verify = welcome_sent`, `verify = Self::was_voided` | S19: an `async fn` asked, before anything is sent again, whether an attempt whose outcome is unknown took effect (see below). |
/// | `resend` | `resend = false` | S20: whether an attempt whose outcome is unknown (it answered `Ambiguous`, was cancelled or panicked, lost its lease) may be sent again under the same key. Default: `true` iff the tool passes the key on, so the provider can deduplicate: it takes the `&IdempotencyKey`, or its body sends it with `.send_idempotent()` or reads it with `current_key()` (`idemkit::http`; seen in the body's own code, not in a helper it calls); otherwise the call ends in `idemkit::Error::Ambiguous` and the record is kept until a verification or an operator (`idemkit resolve`) settles it. |
/// | `tenant_required` | `tenant_required = true` | the tool never runs without a tenant in force (`idemkit::scope::as_tenant`, S18): `idemkit::Error::NoTenant` instead. |
/// | `json` | `#[side_effect(key = "order_id", json)]` | callable by name with JSON arguments (feature `json`): listed by `idemkit::JsonTools` (JSON function calling) and served over MCP by `idemkit::mcp::JsonToolsServer`, one definition for both. A free function whose parameters each come from a JSON object's property of the same name; an `OperationId` parameter comes from the host instead (see below). |
/// | `destructive` | `destructive = true` | MCP's `destructiveHint` (feature `rmcp`), with rmcp's `#[tool]` below the attribute, or with `json`; the other hints follow from the attribute. |
/// | `open_world` | `open_world = false` | MCP's `openWorldHint`, as `destructive`. |
/// | `rig` | `#[side_effect(key = "args.order_id", rig)]` | on the `call` of a rig `PortableTool` impl (feature `rig`): the wrapper serves rig's `Result<ToolOutput, ToolExecutionError>`, the key's tool name is the impl's `NAME` (see `idemkit::rig`). |
/// | `crate` | `crate = my_idemkit` | where the `idemkit` crate is, when it is renamed (default `::idemkit`). |
///
/// Durations are numbers with units `ms`, `s`, `m`, `h`, `d`, combinable: `"1h30m"`.
///
/// # When the provider cannot deduplicate: `verify` and `resend`
///
/// A provider that honours the key (Stripe's `Idempotency-Key`) makes a re-send harmless; an
/// e-mail, an SMS, a webhook or a row in the agent's own database does not. So an attempt whose
/// outcome is unknown is sent again only when the tool takes the `&IdempotencyKey`, or sends it
/// with `.send_idempotent()` (or says `resend = true`); otherwise the call answers
/// `Error::Ambiguous` and later calls of the key do not run the body until the outcome is settled
/// (S20). `verify = check` settles it by asking the
/// provider, before anything is sent again: after an attempt whose outcome is unknown, when a call
/// meets a record kept as ambiguous, and when it takes over a holder whose lease ran out. `check`
/// takes the tool's parameters, in the same order and of the same types (the `&IdempotencyKey`
/// too where the tool takes it, `&self` first for a method; owned arguments are cloned for it as
/// for an attempt), and answers `Result<idemkit::Verified<T>, E>` with the tool's own `T` and `E`.
/// `Applied(t)` completes the call with `t` (replayed from then on; `idemkit::scope::observe` says
/// `verified`), `NotApplied` lets it send again, `Unknown` (or an error) keeps it ambiguous (S19).
/// A `check` whose signature does not fit is a compile error at its path (C10) that names the
/// signature to write.
///
/// ```
/// use idemkit::{Classify, Failure, Verified, side_effect};
/// # use idemkit::{Idem, MemoryStore};
/// # use std::sync::atomic::{AtomicU32, Ordering};
/// #[derive(Debug)]
/// enum MailError { Timeout, Idem(idemkit::Error) }
/// impl Classify for MailError {
///     fn classify(&self) -> Failure {
///         match self {
///             MailError::Timeout => Failure::Ambiguous, // may have gone out
///             MailError::Idem(e) => e.classify(),
///         }
///     }
/// }
/// impl From<idemkit::Error> for MailError {
///     fn from(e: idemkit::Error) -> Self { MailError::Idem(e) }
/// }
/// # static SENT: AtomicU32 = AtomicU32::new(0);
///
/// /// Sends the welcome mail once; SMTP knows nothing of our key, so it takes none.
/// #[side_effect(key = "user_id", verify = welcome_sent)]
/// async fn send_welcome(user_id: u64, address: String) -> Result<u32, MailError> {
///     SENT.fetch_add(1, Ordering::SeqCst);
///     Err(MailError::Timeout) // sent, but the answer was lost
/// }
///
/// /// Asked before anything is sent again: did the mail go out?
/// async fn welcome_sent(user_id: u64, address: String) -> Result<Verified<u32>, MailError> {
///     let _ = (user_id, address); // ask the mail provider's log
///     Ok(Verified::Applied(1))
/// }
///
/// # let run = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
/// # run.block_on(Idem::new(MemoryStore::new()).scope(async {
/// assert_eq!(send_welcome(7, "ada@example.com".into()).await.unwrap(), 1); // verified
/// assert_eq!(SENT.load(Ordering::SeqCst), 1, "sent once, never re-sent blindly");
/// # }));
/// ```
///
/// **Taking `&IdempotencyKey` turns re-sending on.** The attribute takes a tool that takes the
/// key to hand it to a provider that deduplicates by it. A key used for anything else (an
/// e-mail's `Message-ID`, a log line) does not stop a second e-mail after a lost answer: say
/// `resend = false` (or give `verify`), and the lost answer ends the call as
/// `Error::Ambiguous`, the e-mail sent once:
///
/// ```
/// use idemkit::{Classify, Failure, IdempotencyKey, side_effect};
/// # use idemkit::{Idem, MemoryStore};
/// # use std::sync::atomic::{AtomicU32, Ordering};
/// # #[derive(Debug)]
/// # enum MailError { Timeout, Idem(idemkit::Error) }
/// # impl Classify for MailError {
/// #     fn classify(&self) -> Failure {
/// #         match self { MailError::Timeout => Failure::Ambiguous, MailError::Idem(e) => e.classify() }
/// #     }
/// # }
/// # impl From<idemkit::Error> for MailError {
/// #     fn from(e: idemkit::Error) -> Self { MailError::Idem(e) }
/// # }
/// # static SENT: AtomicU32 = AtomicU32::new(0);
/// /// The key is only the receipt's Message-ID: the mail server does not deduplicate by it.
/// #[side_effect(key = "order_id", resend = false)]
/// async fn send_receipt(key: &IdempotencyKey, order_id: &str) -> Result<(), MailError> {
///     let _message_id = format!("<{key}@shop.example>");
///     SENT.fetch_add(1, Ordering::SeqCst);
///     Err(MailError::Timeout) // sent, but the answer was lost
/// }
///
/// # let run = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
/// # run.block_on(Idem::new(MemoryStore::new()).scope(async {
/// let lost = send_receipt("ord_1").await;
/// assert!(matches!(lost, Err(MailError::Idem(idemkit::Error::Ambiguous { .. }))));
/// assert_eq!(SENT.load(Ordering::SeqCst), 1, "not re-sent: without `resend = false`, 4 e-mails");
/// # }));
/// ```
///
/// # Tools a model calls: descriptions, operations, one definition
///
/// A model is told what a tool does by its doc comment (the registry's `description`, a JSON
/// tool's definition, rmcp's `#[tool(description)]`): the summary and body, without rustdoc's
/// sections for Rust readers (`# Errors`, `# Panics`, `# Examples`, `# Safety`, up to the next
/// other heading) and without link syntax (`` [`Receipt`] `` reads `Receipt`, `[the policy](x)`
/// reads `the policy`). So `# Errors`, which pedantic clippy asks of a public tool, stays for
/// readers of the docs.
///
/// A tool with no natural key (an e-mail, a message) keys on an `OperationId` parameter. Called
/// by a model (`json`), that parameter is **not** among the properties the model sends: the
/// host names the operation from its own durable state (a plan step, a ticket) around the model's
/// turn with `idemkit::scope::operation_scope("plan-42/step-3", ...)`, and the call gets its id
/// (`idem.operation("plan-42/step-3")`, minted once and stored). A retried turn (a new
/// `tool_call_id`, the same step) or the same step after the agent restarts derives the same
/// key, so the mail goes out once; without an operation in force the call is refused
/// (`idemkit::Error::NoOperation`). The id comes from the tool's runtime (`idem = ...`, else the
/// one in force). Over MCP, the client names the operation in the request's `_meta`
/// (`{"idemkit/operation": "plan-42/step-3"}`): `idemkit::mcp::JsonToolsServer` reads it for
/// `json` tools; an rmcp `#[tool]` method under `#[side_effect]` may take an `OperationId`
/// parameter too (rmcp's router never sees it) when its server is wrapped in
/// `idemkit::mcp::Operations`. A rig tool's `call` has rig's own signature, so it cannot take
/// one: key it on a field of the tool (`key = "self.step, args.to"`) that the host fills from
/// `idem.operation("plan-42/step-3")` when it builds the tool for that step.
///
/// ```
/// use idemkit::{Idem, JsonTools, MemoryStore, OperationId, operation_scope, side_effect};
///
/// /// Sends the customer one apology for the plan step being carried out.
/// ///
/// /// # Errors
/// ///
/// /// When the mail provider refuses it.
/// #[side_effect(key = "step", json)]
/// async fn send_apology(step: OperationId, to: String, text: String) -> anyhow::Result<String> {
///     Ok(format!("sent to {to}"))
/// }
///
/// # let run = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
/// # run.block_on(async {
/// let idem = Idem::new(MemoryStore::new());
/// let tools = JsonTools::only(["send_apology"]).unwrap();
/// // The model sees `to` and `text` only.
/// assert_eq!(tools.definitions()[0].parameters["required"], serde_json::json!(["to", "text"]));
/// assert!(!tools.definitions()[0].description.contains("# Errors"));
/// let args = r#"{"to": "ada@example.com", "text": "Sorry!"}"#;
/// let turn = || idem.scope(operation_scope("plan-42/step-3", tools.call("send_apology", args)));
/// let first = turn().await.unwrap();
/// let retried = turn().await.unwrap(); // the model's turn again: the same step
/// assert!(retried.replayed() && retried.key() == first.key());
/// # });
/// ```
///
/// One definition serves JSON function calling and MCP: mark a free function `json` and serve
/// `idemkit::JsonTools` with `idemkit::mcp::JsonToolsServer`: one name, one description, one
/// record (a call over MCP replays one made by JSON function calling, and back). A tool written
/// as an rmcp `#[tool]` method is an MCP tool only; a rig tool is its own `PortableTool` impl.
///
/// # A retry loop around the tool
///
/// The wrapper already retries (by `max_attempts`/`retry` and the error's `Classify`): a loop of
/// your own around a call multiplies the attempts (3 turns of your loop × 4 attempts = 12 bodies).
/// Let the attribute decide instead. A call of a key whose call in this process is between
/// failed attempts (retrying), or that gave up retrying within the last minute, is logged as a
/// `tracing` warning (target `idemkit.side_effect`) naming the tool and the key, so such a loop
/// shows in the logs. Callers of one key at the same time that have not failed (several agents,
/// a fan-out) are not warned of: the claim runs the body once for them.
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
///   natural identity keys on an `OperationId` (`idemkit::scope::operation("...")`), minted once and
///   stored.
#[proc_macro_attribute]
pub fn side_effect(args: TokenStream, item: TokenStream) -> TokenStream {
    expand(Kind::SideEffect, args.into(), item.into()).into()
}

/// Marks an `async fn` as a read-only tool: retried by `idemkit::Classify`, no key, no store.
///
/// ```
/// use idemkit::{Classify, Failure, read_only};
///
/// #[derive(Debug)]
/// struct Unavailable;
/// impl Classify for Unavailable {
///     fn classify(&self) -> Failure { Failure::Transient }
/// }
///
/// #[read_only(max_attempts = 3)]
/// async fn balance(customer_id: &str) -> Result<u64, Unavailable> {
///     Ok(customer_id.len() as u64 * 100)
/// }
///
/// # let run = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
/// # run.block_on(async {
/// assert_eq!(balance("cus_1").await.unwrap(), 500); // no key, no store: a read runs every time
/// # });
/// ```
///
/// The error type needs `Classify` only: nothing is recorded, so no `From<idemkit::Error>` and
/// no `Serialize` for the output.
///
/// # Arguments
///
/// | argument | example | meaning |
/// | --- | --- | --- |
/// | `name` | `name = "orders.status"` | the tool's name (default: the function's name). |
/// | `max_attempts` | `max_attempts = 3` | attempts in all, the first included. |
/// | `retry` | `retry = RetryPolicy::no_retry()` | a whole `idemkit::RetryPolicy` for this tool. |
/// | `idem` | `idem = self.idem` | the runtime whose retry defaults apply. |
/// | `json` | `#[read_only(json)]` | callable by name with JSON arguments (`idemkit::JsonTools`, `idemkit::mcp::JsonToolsServer`; feature `json`). |
/// | `open_world` | `open_world = true` | MCP's `openWorldHint` (with rmcp's `#[tool]` below, or `json`). |
/// | `rig` | `#[read_only(rig)]` | on the `call` of a rig `PortableTool` impl (feature `rig`). |
/// | `crate` | `crate = my_idemkit` | where the `idemkit` crate is, when it is renamed. |
///
/// A `key` is an error: read-only tools need none; so are `verify`, `resend`, `lease`, `ttl`,
/// `in_flight_wait`, `tenant_required` and `destructive`: a read changes nothing and records
/// nothing, so one whose answer was lost is simply read again.
#[proc_macro_attribute]
pub fn read_only(args: TokenStream, item: TokenStream) -> TokenStream {
    expand(Kind::ReadOnly, args.into(), item.into()).into()
}

/// Checks that every rmcp `#[tool]` method of an impl block is classified: `#[side_effect]` or
/// `#[read_only]` (feature `rmcp`). Write it above rmcp's `#[tool_router]`, and ours above each
/// `#[tool]`:
///
/// ```
/// use idemkit::{IdempotencyKey, classified_tools, read_only, side_effect};
/// use rmcp::handler::server::wrapper::Parameters;
/// use rmcp::{tool, tool_router};
/// # #[derive(Debug)] struct PayError;
/// # impl std::fmt::Display for PayError {
/// #     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { f.write_str("declined") }
/// # }
/// # impl std::error::Error for PayError {}
/// # impl idemkit::Classify for PayError {
/// #     fn classify(&self) -> idemkit::Failure { idemkit::Failure::Permanent }
/// # }
/// # impl From<idemkit::Error> for PayError { fn from(_: idemkit::Error) -> Self { PayError } }
/// # #[derive(Clone, serde::Serialize, serde::Deserialize, rmcp::schemars::JsonSchema)]
/// # #[schemars(crate = "rmcp::schemars")]
/// # struct ChargeReq { customer_id: String, period: String, cents: u64 }
/// # struct Payments;
///
/// #[classified_tools]
/// #[tool_router]
/// impl Payments {
///     /// Charges a customer once per period.
///     #[side_effect(key = "req.customer_id, req.period")]
///     #[tool]
///     async fn charge(&self, key: &IdempotencyKey, req: Parameters<ChargeReq>) -> Result<String, PayError> {
///         Ok(format!("charged {} under {key}", req.0.cents))
///     }
///
///     /// A customer's balance.
///     #[read_only]
///     #[tool]
///     async fn balance(&self, req: Parameters<ChargeReq>) -> Result<u64, PayError> {
///         Ok(req.0.cents)
///     }
/// }
/// # assert_eq!(Payments::tool_router().list_all().len(), 2);
/// ```
///
/// A `#[tool]` without either attribute fails the build ("MCP tool `refund` is not classified:
/// mark it `#[side_effect(key = "...")]` …"):
///
/// ```compile_fail
/// # use idemkit::classified_tools;
/// # use rmcp::handler::server::wrapper::Parameters;
/// # use rmcp::{tool, tool_router};
/// # #[derive(Clone, serde::Serialize, serde::Deserialize, rmcp::schemars::JsonSchema)]
/// # #[schemars(crate = "rmcp::schemars")]
/// # struct RefundReq { charge_id: String }
/// # struct Payments;
/// #[classified_tools]
/// #[tool_router]
/// impl Payments {
///     /// Refunds a charge.
///     #[tool]
///     async fn refund(&self, req: Parameters<RefundReq>) -> String {
///         format!("refunded {}", req.0.charge_id)
///     }
/// }
/// # let _ = Payments::tool_router();
/// ```
///
/// It changes nothing in the impl block; it only fails the build when a tool is unclassified.
#[cfg(feature = "rmcp")]
#[proc_macro_attribute]
pub fn classified_tools(args: TokenStream, item: TokenStream) -> TokenStream {
    mode::classified::classified_tools(args.into(), item.into()).into()
}

/// The whole expansion of one attribute: parse → model → check → lower → expand, or, on any
/// error, the item as written plus every error.
fn expand(kind: Kind, args: TokenStream2, item: TokenStream2) -> TokenStream2 {
    let cx = ctxt::Ctxt::new();
    let args = attr::parse(&cx, args);
    let func: ast::Func = match syn::parse2(item.clone()) {
        Ok(func) => func,
        Err(e) => {
            cx.syn_error(syn::Error::new(
                e.span(),
                format!(
                    "{} goes on an `async fn` with a body (a free function, or a method taking `&self`): {e}",
                    kind.attribute()
                ),
            ));
            let errors = cx.check().err().map(|e| e.to_compile_error());
            return quote::quote!(#item #errors);
        }
    };
    let mcp = mode::mcp::find(&cx, kind, &func);
    let tool = ast::Tool::new(kind, func, mcp);
    check::check(&cx, &args, &tool);
    match cx.check() {
        Ok(()) => expand::tool(&tool, &lower::lower(args, &tool)),
        Err(errors) => {
            let item = fallback::fallback(&args, &tool);
            let errors = errors.to_compile_error();
            quote::quote!(#item #errors)
        }
    }
}

#[cfg(test)]
mod tests;
