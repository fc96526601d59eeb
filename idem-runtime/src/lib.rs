//! The runtime of [idemkit](https://docs.rs/idemkit): idempotency keys, retries by failure kind,
//! the executor protocol and the stores it records outcomes in.
//!
//! Most programs use it through the `idemkit` facade and its attributes; everything here is also
//! usable by hand:
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use idem_runtime::{Classify, Failure, Idem, MemoryStore, Tool};
//!
//! #[derive(Debug)]
//! struct PayError(String);
//! impl Classify for PayError {
//!     fn classify(&self) -> Failure { Failure::Ambiguous }
//! }
//! impl From<idem_runtime::Error> for PayError {
//!     fn from(e: idem_runtime::Error) -> Self { PayError(e.to_string()) }
//! }
//!
//! let idem = Idem::new(MemoryStore::new());
//! let mut charges = 0;
//! for _retry_by_the_agent in 0..3 {
//!     let receipt: Result<u64, PayError> = Tool::new("charge")
//!         .idem(&idem)
//!         .side_effect(&[("customer_id", &"cus_1"), ("period", &"2026-11")], &4200u64, |_key| {
//!             charges += 1;
//!             async { Ok(4200) }
//!         })
//!         .await;
//!     assert_eq!(receipt.unwrap(), 4200);
//! }
//! assert_eq!(charges, 1);
//! # });
//! ```
//!
#![doc = include_str!("../protocol.md")]
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod error;
mod exec;
mod failure;
mod fingerprint;
#[cfg(any(feature = "reqwest", feature = "tower"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "reqwest", feature = "tower"))))]
pub mod http;
mod idem;
#[cfg(feature = "json")]
#[cfg_attr(docsrs, doc(cfg(feature = "json")))]
pub mod json;
mod key;
pub mod lock;
#[cfg(feature = "rmcp")]
#[cfg_attr(docsrs, doc(cfg(feature = "rmcp")))]
pub mod mcp;
mod meters;
mod observe;
mod registry;
mod retry;
#[cfg(feature = "rig")]
#[cfg_attr(docsrs, doc(cfg(feature = "rig")))]
pub mod rig;
mod scope;
pub mod settle;
pub mod store;
pub mod testing;
mod told;
mod wake;

#[cfg(feature = "conformance")]
#[cfg_attr(docsrs, doc(cfg(feature = "conformance")))]
pub mod conformance;

pub use error::{Error, StoreError, StoreErrorKind};
#[doc(hidden)]
pub use exec::{Attempt, Next, ReadCall, ReadNext, SideEffectCall, VerifyStep};
pub use exec::{Tool, Verified, Verifying};
pub use failure::chain::classify_chain;
pub use failure::{Classified, Classify, Failure};
pub use fingerprint::{Fingerprint, Fingerprinter};
pub use idem::{AlreadyInstalled, BuildError, Idem, IdemBuilder};
pub use key::normalize;
pub use key::{IdempotencyKey, JsonKeyField, KeyField, KeyHasher, KeyPart, KeyValue, OperationId};
pub use observe::{CallInfo, CallOutcome, observe};
pub use registry::{
    DuplicateTools, StoredVerify, ToolInfo, ToolKind, VerifyAnswer, check_unique_tool_names,
    stored_verifies, tools, tools_manifest,
};
pub use retry::{RetryPolicy, Schedule};
pub use scope::current::current_key;
pub use scope::{
    MAX_OPERATION_NAME_LEN, as_tenant, in_current_scope, operation, operation_name,
    operation_scope, scoped_operation,
};
pub use settle::{SettleReport, Settled, Settler, SettlerHandle};
pub use store::memory::MemoryStore;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use store::postgres::{PostgresStore, PostgresStoreBuilder};
pub use store::records::Records;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use store::redis::{RedisStore, RedisStoreBuilder};
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use store::sqlite::{SqliteStore, SqliteStoreBuilder, Synchronous};
pub use store::transitions::Store;
pub use told::advice;
pub use told::advice::Advice;
pub use told::explain::Explanation;
#[doc(hidden)]
pub use told::sentences;

/// What generated code reaches, and nothing else should: the paths are not a stable API.
#[doc(hidden)]
#[path = "private/mod.rs"]
pub mod __private;
