//! # idemkit
//!
//! Make AI agents' tool calls safe to retry. A write tool gets an idempotency key derived **once
//! per logical operation, before the first attempt**, from the fields that identify it; its
//! outcome is recorded, so a retry — after a lost response, a timeout, a crash and replay —
//! returns the first result instead of acting again.
//!
//! ```
//! use idemkit::{Classify, Failure, Idem, IdempotencyKey, side_effect, store::MemoryStore};
//!
//! #[derive(Debug)]
//! enum PayError { Declined, Timeout, Idem(idemkit::Error) }
//!
//! impl Classify for PayError {
//!     fn classify(&self) -> Failure {
//!         match self {
//!             PayError::Declined => Failure::Permanent,
//!             PayError::Idem(e) => e.classify(),       // idemkit's own errors classify themselves
//!             PayError::Timeout => Failure::Ambiguous,   // may have happened: retried with the same key
//!         }
//!     }
//! }
//! impl From<idemkit::Error> for PayError {
//!     fn from(e: idemkit::Error) -> Self { PayError::Idem(e) }
//! }
//!
//! /// Charges a customer once per purpose and period.
//! #[side_effect(key = "customer_id, purpose, period")]
//! async fn charge(key: &IdempotencyKey, customer_id: &str, purpose: &str, period: &str, cents: u64)
//!     -> Result<String, PayError>
//! {
//!     // provider.charge(key.as_str(), customer_id, cents).await
//!     Ok(format!("charged {cents} once under {key}"))
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(
//! # Idem::new(MemoryStore::new()).scope(async {
//! // Callers see the signature they wrote, minus the key; a repeat returns the first outcome.
//! let receipt = charge("cus_1", "subscription", "2026-11", 4200).await.unwrap();
//! assert_eq!(receipt, "charged 4200 once under 32e00e40-1a53-8058-93c7-e9d1adc8ecaa");
//! assert_eq!(charge("cus_1", "subscription", "2026-11", 4200).await.unwrap(), receipt);
//! # }));
//! ```
//!
//! Without the attribute, [`Tool`] runs the same protocol by hand.
//!
//! # Where things are
//!
//! One way in per audience, as tower's root: the few names a tool's author needs are at the
//! root; the rest is in modules, each item at one path.
//!
//! - **The root**, for a tool's author: the attributes ([`side_effect`], [`read_only`],
//!   `classified_tools`), the runtime ([`Idem`], [`IdemBuilder`], [`Tool`], [`RetryPolicy`]), keys
//!   ([`IdempotencyKey`], [`KeyPart`], [`OperationId`]), failures ([`Classify`], [`Failure`],
//!   [`Classified`], [`Error`], [`Explanation`]) and [`Verified`].
//! - [`scope`], for the host that runs agents: operations, tenants, spawned tasks, what a call did.
//! - [`store`]: the stores (memory, SQLite, PostgreSQL, Redis), and the traits to write one.
//! - [`registry`]: every tool in the program, its manifest; [`lock`]: the lock of their identities.
//! - [`settle`]: the settler of records kept as ambiguous (docs/operating.md).
//! - [`key`]: keys by hand (the hasher, values, normalisation, arguments' fingerprints).
//! - [`advice`]: the machine-readable advice beside every answer.
//! - Each surface its module: `json`, `mcp`, `rig`, `http` (with their features).
//! - `__private`: what generated code calls; not an API.
//!
//! The names the root held before these modules keep working there, hidden from these docs.
//!
//! # Feature flags
//!
//! Only SQLite is on by default; everything else is compiled in when asked for:
//!
//! | feature | what it adds |
//! | --- | --- |
//! | `sqlite` (default) | `store::SqliteStore`, the embedded store opened at `./.idemkit/idemkit.db` when no runtime is installed |
//! | `postgres` | `store::PostgresStore` (tokio-postgres + deadpool): many workers on many machines |
//! | `redis` | `store::RedisStore` (redis-rs), with its documented durability limits |
//! | `json` | tools marked `json`: listed with a JSON Schema, called by name with JSON arguments (`json::JsonTools`) |
//! | `rmcp` | rmcp tool methods with MCP annotations from the attributes; with `json`, `mcp::JsonToolsServer`; remote MCP servers' tools called through `mcp::IdempotentClient` |
//! | `rig` | rig tools: `#[side_effect(key = "args.…", rig)]` on a rig `Tool`'s `call` |
//! | `anyhow` | `anyhow::Error` as a tool's error type |
//! | `reqwest` | `send_idempotent()` on reqwest 0.13's `RequestBuilder`: a request sent inside a side effect carries its key (`http`) |
//! | `tower` | `http::IdempotencyLayer`: an API's server side of the Idempotency-Key draft |
//! | `metrics` | counters and the store's latency through the `metrics` facade (OpenTelemetry through `metrics-exporter-opentelemetry`) |
//!
//! A build without default features has the memory store only (for tests), plus what it names.
//!
//! The README's quick start is a whole program to paste into a new crate; the guide below (built
//! with the features its examples use: `anyhow`, `json`, `postgres`, `rig`, `rmcp`, as on docs.rs)
//! goes through the rest.
#![cfg_attr(
    all(
        feature = "anyhow",
        feature = "json",
        feature = "postgres",
        feature = "rig",
        feature = "rmcp"
    ),
    doc = include_str!("../docs/guide.md")
)]
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

// What a user needs, one path per item. The attributes' pages are idem-macros' own docs,
// inlined: their examples are doctests of idem-macros compiled against this crate (a
// dev-dependency), so what users read here compiles.
#[cfg(feature = "rmcp")]
#[cfg_attr(docsrs, doc(cfg(feature = "rmcp")))]
#[doc(inline)]
pub use idem_macros::classified_tools;
#[doc(inline)]
pub use idem_macros::{read_only, side_effect};
pub use idem_runtime::{
    AlreadyInstalled, BuildError, Classified, Classify, Error, Explanation, Failure, Idem,
    IdemBuilder, IdempotencyKey, KeyPart, OperationId, RetryPolicy, Tool, Verified,
};

// The modules, one per audience.
#[cfg(any(feature = "reqwest", feature = "tower"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "reqwest", feature = "tower"))))]
pub use idem_runtime::http;
#[cfg(feature = "json")]
#[cfg_attr(docsrs, doc(cfg(feature = "json")))]
pub use idem_runtime::json;
#[cfg(feature = "rmcp")]
#[cfg_attr(docsrs, doc(cfg(feature = "rmcp")))]
pub use idem_runtime::mcp;
#[cfg(feature = "rig")]
#[cfg_attr(docsrs, doc(cfg(feature = "rig")))]
pub use idem_runtime::rig;
pub use idem_runtime::{advice, lock, settle};

/// The scope a call runs in, for the host that runs agents: the operation a tool keyed on
/// [`OperationId`] belongs to, the tenant its records are kept under, tasks
/// spawned inside a call, and what a call did ([`observe`]).
pub mod scope {
    pub use idem_runtime::{
        CallInfo, CallOutcome, MAX_OPERATION_NAME_LEN, as_tenant, in_current_scope, observe,
        operation, operation_name, operation_scope, scoped_operation,
    };
}

/// Every tool the attributes registered in this program: listed ([`tools`]), checked for
/// duplicate names ([`check_unique_tool_names`]) and written as a manifest
/// ([`tools_manifest`]).
pub mod registry {
    pub use idem_runtime::{
        DuplicateTools, ToolInfo, ToolKind, check_unique_tool_names, tools, tools_manifest,
    };
}

/// The stores outcomes are recorded in: [`MemoryStore`] (tests), `SqliteStore` (the default,
/// feature `sqlite`), `PostgresStore` (feature `postgres`), `RedisStore` (feature `redis`); the
/// traits a store implements ([`Store`], [`Records`]), the records operators read and resolve, and
/// the types of a store implementer's API (see the runtime's
/// [`store`](idem_runtime::store) docs and its conformance suite).
pub mod store {
    pub use idem_runtime::store::*;
    pub use idem_runtime::{MemoryStore, Records, Store, StoreError, StoreErrorKind};
    #[cfg(feature = "postgres")]
    #[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
    pub use idem_runtime::{PostgresStore, PostgresStoreBuilder};
    #[cfg(feature = "redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    pub use idem_runtime::{RedisStore, RedisStoreBuilder};
    #[cfg(feature = "sqlite")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
    pub use idem_runtime::{SqliteStore, SqliteStoreBuilder, Synchronous};
    // The test hook, documented at `testing`, kept here (hidden) for code written before.
    #[doc(hidden)]
    pub use idem_runtime::testing::{Intercept, Step};
}

/// Test hooks for your own agent's tests: [`Intercept`](testing::Intercept) wraps any store with
/// a hook before each transition, to count what the executor asks or to fail one.
pub use idem_runtime::testing;

/// Keys by hand, for [`Tool`] without the attributes and for a [`KeyPart`]
/// of your own: the [`KeyHasher`] a key part writes into, [`KeyValue`]s, the opt-in
/// [`normalize`] of text fields, and the [`Fingerprint`] of a call's other arguments.
///
/// [`KeyPart`]: crate::KeyPart
pub mod key {
    pub use idem_runtime::{Fingerprint, KeyHasher, KeyValue, normalize};
}

/// What the attribute's expansions reach (`::idemkit::__private::…`): the runtime's, not a stable
/// API.
#[doc(hidden)]
pub use idem_runtime::__private;

// The names the root held before the modules, each kept where it was (hidden) so that no caller breaks; the
// path documented is the module's (CHANGELOG). `tests/paths.rs` checks that both name one item.
#[doc(hidden)]
pub use idem_runtime::advice::Advice;
#[doc(hidden)]
#[cfg(feature = "json")]
pub use idem_runtime::json::{
    DEFAULT_MAX_ARGUMENTS_LEN, JsonCallError, JsonReply, JsonTools, ToolDefinition,
};
#[doc(hidden)]
pub use idem_runtime::settle::{Pass, SettleReport, SettleStore, Settled, Settler, SettlerHandle};
#[doc(hidden)]
pub use idem_runtime::{
    CallInfo, CallOutcome, DuplicateTools, Fingerprint, KeyHasher, KeyValue,
    MAX_OPERATION_NAME_LEN, MemoryStore, Records, Store, StoreError, StoreErrorKind, ToolInfo,
    ToolKind, as_tenant, check_unique_tool_names, in_current_scope, normalize, observe, operation,
    operation_name, operation_scope, scoped_operation, tools, tools_manifest,
};
#[doc(hidden)]
#[cfg(feature = "postgres")]
pub use idem_runtime::{PostgresStore, PostgresStoreBuilder};
#[doc(hidden)]
#[cfg(feature = "redis")]
pub use idem_runtime::{RedisStore, RedisStoreBuilder};
#[doc(hidden)]
#[cfg(feature = "sqlite")]
pub use idem_runtime::{SqliteStore, SqliteStoreBuilder, Synchronous};

// The README's Rust blocks are not doctests (GitHub would show rustdoc's hidden lines): each is
// compiled, as written, in `tests/readme/src/twins.rs`, which checks that it holds every one; the
// quick start's `src/main.rs` is built and run by `scripts/quickstart.sh`.

/// `docs/operating.md`'s examples, compiled as doctests (issue 52: its settler block named a
/// `Settler` the facade did not export, and was not compiled).
#[cfg(doctest)]
#[doc = include_str!("../docs/operating.md")]
pub struct OperatingDocs;

/// `docs/http.md`'s examples, compiled as doctests (issue 39: they once did not compile).
#[cfg(all(doctest, feature = "reqwest", feature = "tower"))]
#[doc = include_str!("../docs/http.md")]
pub struct HttpDoctests;
