//! # idemkit
//!
//! Make AI agents' tool calls safe to retry. A write tool gets an idempotency key derived **once
//! per logical operation, before the first attempt**, from the fields that identify it; its
//! outcome is recorded, so a retry — after a lost response, a timeout, a crash and replay —
//! returns the first result instead of acting again.
//!
//! ```
//! use idemkit::{Classify, Failure, Idem, MemoryStore, Tool};
//!
//! #[derive(Debug)]
//! enum PayError { Declined, Timeout, Idem(idemkit::Error) }
//!
//! impl Classify for PayError {
//!     fn classify(&self) -> Failure {
//!         match self {
//!             PayError::Declined | PayError::Idem(_) => Failure::Permanent,
//!             PayError::Timeout => Failure::Ambiguous,
//!         }
//!     }
//! }
//! impl From<idemkit::Error> for PayError {
//!     fn from(e: idemkit::Error) -> Self { PayError::Idem(e) }
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let idem = Idem::new(MemoryStore::new());
//! let receipt: Result<String, PayError> = Tool::new("charge")
//!     .idem(&idem)
//!     .side_effect(
//!         &[("customer_id", &"cus_1"), ("purpose", &"subscription"), ("period", &"2026-11")],
//!         &serde_json::json!({ "amount_cents": 4200 }),
//!         |key| async move { Ok(format!("charged once under {key}")) },
//!     )
//!     .await;
//! assert_eq!(receipt.unwrap(), "charged once under 32e00e40-1a53-8058-93c7-e9d1adc8ecaa");
//! # });
//! ```
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

// What a user needs, named one by one: the runtime crate's own entry points for generated code
// (`SideEffectCall`, `ReadCall`, …) are reached through `__private`, not here.
#[cfg(feature = "rmcp")]
pub use idem_macros::classified_tools;
pub use idem_macros::{read_only, side_effect};
pub use idem_runtime::{
    AlreadyInstalled, BuildError, CallInfo, CallOutcome, Classified, Classify, DuplicateTools,
    Error, Failure, Fingerprint, Idem, IdemBuilder, IdempotencyKey, KeyHasher, KeyPart, KeyValue,
    MemoryStore, OperationId, RetryPolicy, Store, StoreError, StoreErrorKind, Tool, ToolInfo,
    ToolKind, check_unique_tool_names, normalize, observe, operation, store, tools,
};
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use idem_runtime::{PostgresStore, PostgresStoreBuilder};
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use idem_runtime::{RedisStore, RedisStoreBuilder};
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use idem_runtime::{SqliteStore, SqliteStoreBuilder, Synchronous};

#[cfg(feature = "rmcp")]
#[cfg_attr(docsrs, doc(cfg(feature = "rmcp")))]
pub mod mcp;

/// What the attributes' expansions reach; not a stable API.
#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;
