//! What an operator decides about a record kept as ambiguous (S24): the [`Decision`], the
//! [`Resolution`] kept with the record, what [`Records::resolve`](super::Records::resolve) did
//! ([`Resolved`]), and the check every store makes before it changes anything.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime};

use crate::error::StoreError;

/// What an operator decided about a record kept as ambiguous (S24): whether its effect
/// happened.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Decision {
    /// It happened: the record completes with the outcome the operator gives, which later
    /// calls replay.
    Applied,
    /// It did not happen: the record is released, so the next call runs the operation.
    NotApplied,
    /// S33: an operator forgot a tombstone ([`Records::forget`](super::Records::forget)): the operation was done, and
    /// the next call runs it again. Not a decision [`Records::resolve`](super::Records::resolve) takes; kept with the
    /// record as a not-applied one is (it no longer counts), to show who let it run again.
    Forgotten,
}

impl Decision {
    /// The word the `idemkit` command takes and prints: `applied`, `not-applied`.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Applied => "applied",
            Decision::NotApplied => "not-applied",
            Decision::Forgotten => "forgotten",
        }
    }

    /// The word every store writes: `applied`, `not_applied` (the record format; see the
    /// stores' schemas).
    #[cfg_attr(
        not(any(feature = "sqlite", feature = "postgres", feature = "redis")),
        allow(dead_code)
    )]
    pub(crate) fn stored(self) -> &'static str {
        match self {
            Decision::Applied => "applied",
            Decision::NotApplied => "not_applied",
            Decision::Forgotten => "forgotten",
        }
    }

    /// The decision a store's word names ([`Decision::stored`]), if it names one.
    #[cfg_attr(
        not(any(feature = "sqlite", feature = "postgres", feature = "redis")),
        allow(dead_code)
    )]
    pub(crate) fn from_stored(word: &[u8]) -> Option<Self> {
        match word {
            b"applied" => Some(Decision::Applied),
            b"not_applied" => Some(Decision::NotApplied),
            b"forgotten" => Some(Decision::Forgotten),
            _ => None,
        }
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Decision {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "applied" => Ok(Decision::Applied),
            "not-applied" | "not_applied" => Ok(Decision::NotApplied),
            other => Err(format!(
                "`{other}` is not a decision; use applied (it happened) or not-applied (it did not)"
            )),
        }
    }
}

/// A decision kept with the record ([`Record::resolution`](super::Record::resolution)): what,
/// when (by the store's clock), and the operator's note.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolution {
    /// What the operator decided.
    pub decision: Decision,
    /// When, by the store's clock.
    pub at: SystemTime,
    /// The operator's note (who, why, the ticket), if any.
    pub note: Option<String>,
}

impl Resolution {
    /// `decision`, made `at`, with `note`: for stores written outside this crate.
    pub fn new(decision: Decision, at: SystemTime, note: Option<String>) -> Self {
        Resolution { decision, at, note }
    }
}

/// What [`Records::resolve`](super::Records::resolve) did.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolved {
    /// The decision is applied and kept with the record.
    Resolved,
    /// No live record has that key: nothing changed.
    NotFound,
    /// The record is running and its holder's lease is live for this much longer: nothing
    /// changed (the holder may still finish; wait for the lease to run out).
    LeaseLive {
        /// Time until the lease runs out.
        remaining: Duration,
    },
    /// The record completed: its outcome is known, nothing to settle, nothing changed.
    Completed,
}

/// Checks that `outcome` fits `decision` (applied needs one, not-applied takes none): for
/// stores, before [`Records::resolve`](super::Records::resolve) changes anything.
pub fn check_resolution(decision: Decision, outcome: Option<&[u8]>) -> Result<(), StoreError> {
    match (decision, outcome) {
        (Decision::Applied, None) => Err(StoreError::new(
            crate::error::StoreErrorKind::Other,
            "resolving a record as applied needs its outcome (the JSON a call of the tool returns), \
             which later calls replay; nothing was changed",
        )),
        (Decision::NotApplied, Some(_)) => Err(StoreError::new(
            crate::error::StoreErrorKind::Other,
            "a record resolved as not applied takes no outcome (the next call runs the operation); \
             nothing was changed",
        )),
        (Decision::Forgotten, _) => Err(StoreError::new(
            crate::error::StoreErrorKind::Other,
            "`forgotten` is not a decision resolve takes: forget the record (`idemkit forget`); \
             nothing was changed",
        )),
        _ => Ok(()),
    }
}
