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
//! # The protocol
//!
//! | # | situation | what happens |
//! | --- | --- | --- |
//! | S1 | first call, succeeds | body runs once; outcome stored as completed; returned |
//! | S2 | same key and same arguments again, after completion | stored outcome returned; body not run |
//! | S3 | same key, different other arguments | [`Error::KeyReuse`]; body not run |
//! | S4 | body fails `Transient`/`Ambiguous`/`RetryAfter`, then succeeds | retried with the identical key; stored; returned |
//! | S5 | body fails `Permanent` | not retried; record released; error returned |
//! | S6 | retries exhausted | last error returned; `Transient`: released; `Ambiguous`: kept, and the next call takes it over with the same key |
//! | S7 | same key, concurrently | exactly one body runs; the others wait (bounded) for its outcome, or get [`Error::InFlight`] |
//! | S8 | the process dies mid-call | the lease expires; the next call takes over with the same key |
//! | S9 | the store is unreachable or its data corrupt | [`Error::Store`]; the body is not run |
//! | S10 | the record is older than its time-to-live (default 24 h) | a completed record is treated as absent; a running or ambiguous one never expires by time (S34) |
//! | S11 | a lease holder finishes after its lease was taken over | its write is refused; the new holder's record stands |
//! | S12 | a body runs longer than the lease | its holder renews the lease while it runs |
//! | S13 | a holder's renewal is refused, or fails until its lease ends | no further attempt; its body stops at the next await; [`Error::LeaseLost`] |
//! | S14 | any attempt of a call was `Ambiguous` | the call never ends in a release: the record is kept as ambiguous |
//! | S14+ | a call takes over a record kept as ambiguous (or a dead holder's) | the ambiguity comes with it: only a `NotApplied` verification or an operator clears it |
//! | S15 | the caller's future is dropped, or the body panics | the claim ends at once: kept as ambiguous if an attempt had started, released if not |
//! | S16 | the outcome does not read back (or exceeds the size bound) | recorded as done but not replayable: [`Error::Unreplayable`], never a re-run |
//! | S17 | the completion write fails | retried under the token until the lease would end |
//! | S18 | equal key fields under two tenants | two records |
//! | S19 | an outcome is unknown and the tool has a verify function ([`Tool::verify`]) | asked before anything is sent again: [`Verified::Applied`] completes, `NotApplied` goes on, `Unknown` keeps it ambiguous |
//! | S20 | an outcome is unknown and the tool has no verify function | sent again only if the tool may re-send ([`Tool::resend`]); otherwise [`Error::Ambiguous`] and the record is kept |
//! | S21 | two tools share a name | refused before any body runs |
//! | S22 | a holder's lease end has passed by its own clock (stalled) | it polls its body no further and starts no attempt until a renewal succeeds |
//! | S23 | a claimer caps a lease end as clock skew | by the holder's own lease length |
//! | S24 | an operator settles a record kept as ambiguous | `idemkit resolve KEY applied --outcome JSON` / `not-applied` |
//! | S30 | an actor holding a record to decide it (the settler, `idemkit resolve`, the HTTP layer, a caller) is cut off, times out or dies | as soon as its hold lapses the record is what it was before the hold: ambiguous stays ambiguous and listed; a [`Settler`] pass dropped mid-verify gives its claim back at once |
//! | S31 | a holder died, its lease lapsed, its body may have started | operators' reads ([`Records`]) and the [`Settler`] read the record as ambiguous; `idemkit settle` reports it and the settler settles it, without waiting for a caller |
//! | S32 | a record is taken over, by a caller or the settler | when it was first made ([`Record::first_made`](store::Record::first_made)), its Unknown answers of verify and since when stay as they were; the settler's bounds count across takeovers |
//! | S34 | an ambiguous record is older than its ttl | it stays ambiguous and listed until a decision settles it (the [`Settler`], `idemkit resolve`, `idemkit forget`); never pruned by time, nor is a running record whose lease lapsed (S31); [`Record::expires_in`](store::Record::expires_in) is `Duration::MAX`; a settle pass reports how long the oldest has waited ([`SettleReport::oldest_unknown`]) |

#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod classify;
mod error;
mod exec;
mod explain;
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
mod meters;
mod observe;
mod registry;
mod retry;
#[doc(hidden)]
pub mod sentences;
pub mod settle;
pub mod store;
mod testing;
mod wake;

#[cfg(feature = "conformance")]
#[cfg_attr(docsrs, doc(cfg(feature = "conformance")))]
pub mod conformance;

pub use classify::{Classified, classify_chain};
pub use error::{Error, StoreError, StoreErrorKind};
#[doc(hidden)]
pub use exec::{Attempt, Next, ReadCall, ReadNext, SideEffectCall, VerifyStep};
pub use exec::{Tool, Verified, Verifying, current_key};
pub use explain::Explanation;
pub use fingerprint::{Fingerprint, Fingerprinter};
pub use idem::{
    AlreadyInstalled, BuildError, Idem, IdemBuilder, MAX_OPERATION_NAME_LEN, as_tenant,
    in_current_scope, operation, operation_name, operation_scope, scoped_operation,
};
pub use key::normalize;
pub use key::{IdempotencyKey, KeyField, KeyHasher, KeyPart, KeyValue, OperationId};
pub use observe::{CallInfo, CallOutcome, observe};
pub use registry::{
    DuplicateTools, StoredVerify, ToolInfo, ToolKind, VerifyAnswer, check_unique_tool_names,
    stored_verifies, tools, tools_manifest,
};
pub use retry::{Classify, Failure, RetryPolicy, Schedule};
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

/// What generated code reaches, and nothing else should: the paths are not a stable API.
#[doc(hidden)]
pub mod __private {
    pub use crate::explain::success_envelope;
    pub use crate::fingerprint::sorted::SortedArgs;
    pub use crate::sentences::replayed as replayed_note;
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
}
