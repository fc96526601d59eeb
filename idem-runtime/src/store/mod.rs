//! The store traits: where claims and outcomes are kept, and what each transition must do.
//!
//! - [`Store`]: the claim state machine, one method per transition. The executor drives it.
//! - [`OperationIds`]: the name → UUID map behind [`OperationId`](crate::OperationId).
//!
//! Every [`Store`] obeys the same state machine, and proves it with the same conformance suite
//! (`idem_runtime::conformance`, feature `conformance`):
//!
//! ```text
//!      claim (absent, or released by a decision)          complete (token matches)
//!   absent ───────────────────────────────▶ Running ─────────────────────────────▶ Completed
//!      ▲                                    │  ▲  │
//!      │         release (token matches)    │  │  │ mark_ambiguous (token matches)
//!      │                                    │  │  │ (renew, token matches: Running → Running,
//!      │                                    │  │  │  the lease end moved later)
//!      └────────────────────────────────────┘  │  ▼
//!                                              └─ Ambiguous
//!          claim, same fingerprint, and the lease expired or the record is Ambiguous: take over
//! ```
//!
//! A holder whose call was cancelled before anything ran under its claim gives the claim back
//! with [`Store::restore`] (S27): the record becomes what it was before that claim (absent,
//! Ambiguous, or the expired holder's Running), so a cancellation never makes an unknown
//! outcome of its own.
//!
//! A holder whose verify function answered Unknown marks the record ambiguous with
//! [`Store::mark_unknown`], which also counts that answer with the record (S32); a record keeps
//! when its operation was first made, its Unknown answers and the note of the ambiguous record
//! it was through every takeover. Operators and the settler read a Running record whose lease
//! lapsed as an ambiguous one ([`Records::get`], S31).
//!
//! A completed record whose time-to-live has passed is a tombstone (S33): a claim answers
//! [`ExistingState::Tombstone`] (the executor's [`Error::Expired`](crate::Error::Expired)),
//! never takes it, and [`Records`] show it as [`RecordState::Tombstone`]; its outcome may be
//! dropped, and it is removed only by a prune past the store's tombstone setting
//! ([`DEFAULT_TOMBSTONES`]) or an operator's [`Records::forget`]. A Running or
//! Ambiguous record never expires by time (S34): a claim takes it over, prune leaves it, and
//! [`Records::get`]/[`Records::list`] show it with [`Record::expires_in`] [`Duration::MAX`](std::time::Duration::MAX) until
//! it completes or a decision settles it; a row written before with an expiry on it reads the
//! same. A write by a holder
//! whose token is no longer the record's is refused ([`Written::Fenced`]); a write the holder
//! already made, sent again under its token (its reply was lost), is [`Written::Applied`] again.
//!
//! An operator (not the executor) may also settle an Ambiguous record, or a Running one whose
//! lease ran out, with [`Records::resolve`] (S24): applied → Completed with the operator's
//! outcome; not applied → absent.
//!
//! # Writing a store
//!
//! Implement the five transitions and the name → id map: [`Store`] when the store can answer
//! at once (each method returns [`StoreFuture::ready`]: no allocation, no poll), or
//! [`AsyncStore`] when it must wait (plain `async fn`s, boxed for you); and [`OperationIds`].
//! Add [`Records`] for operators (the `idemkit` command) and for the conformance suite, which
//! then proves the store in two lines of a test file (see `idem_runtime::conformance`, feature
//! `conformance`). `idem-runtime/tests/third_party_store.rs` is a complete store written with
//! the public API only: about 130 lines for the transitions and the map, 60 for the reads.
//!
//! An answer that is not ready must do nothing until it is polled (an `async` block never
//! does): the executor may drop one it cannot await where it asked, and ask again.

pub(crate) mod memory;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
pub(crate) mod records;
#[cfg(feature = "redis")]
pub(crate) mod redis;
#[cfg(feature = "sqlite")]
pub(crate) mod sqlite;

pub(crate) mod future;
pub(crate) mod outcome;
pub(crate) mod record;
mod redact;
pub(crate) mod resolution;
pub(crate) mod token;
pub(crate) mod transitions;

// The types of the store implementer's API have their one public path here; `Store`,
// `Records` and the stores themselves have theirs at the crate's top level.
pub use self::future::StoreFuture;
pub use self::outcome::Outcome;
pub use self::record::{Record, RecordState};
pub(crate) use self::records::Records;
pub use self::records::{
    Count, DEFAULT_TOMBSTONES, Forgot, RecordFilter, Released, StateKind, UnknownState,
    count_records,
};
pub use self::redact::redacted_url;
pub use self::resolution::{Decision, Resolution, Resolved, check_resolution};
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use self::sqlite::{DEFAULT_PATH_ENV, default_path};
pub use self::token::LeaseToken;
#[cfg_attr(not(feature = "sqlite"), allow(unused_imports))]
pub(crate) use self::token::fork_generation;
pub(crate) use self::transitions::Store;
pub use self::transitions::{
    AsyncStore, Claim, ClaimRequest, Existing, ExistingState, OperationIds, Takeover, Written,
};
