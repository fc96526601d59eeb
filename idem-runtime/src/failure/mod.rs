//! What a failed attempt means for the operation: [`Failure`], the [`Classify`] trait a tool's
//! error implements to say it, and [`Classified`], an error with its failure attached
//! ([`Failure::to`]). How an error that is not a tool's own type is classified, from what its
//! chain holds, is the `chain` module's job (below `error`, which it reads).

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

pub(crate) mod chain;

/// What a failed attempt means for the operation (a contract).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// It did not happen (connection refused, 503 before commit): retry; when attempts run out,
    /// the record is released so a later call may run again.
    Transient,
    /// It may have happened (timeout, reset, 502 after the request was sent): retry with the
    /// same key; when attempts run out, the record is kept, so the next call reuses the key and
    /// an operator can see it.
    Ambiguous,
    /// The server said when to come back: wait that long, then retry.
    RetryAfter(Duration),
    /// It will not succeed (declined, invalid): stop; the record is released.
    Permanent,
}

impl Failure {
    /// Whether another attempt may help.
    pub fn is_retryable(&self) -> bool {
        !matches!(self, Failure::Permanent)
    }
}

/// Tells the retry loop what a tool's error means (a contract).
///
/// ```
/// use idem_runtime::{Classify, Failure};
/// use std::time::Duration;
///
/// enum PayError { Declined, Timeout, Unavailable, RateLimited(u64) }
///
/// impl Classify for PayError {
///     fn classify(&self) -> Failure {
///         match self {
///             PayError::Declined => Failure::Permanent,
///             PayError::Timeout => Failure::Ambiguous,
///             PayError::Unavailable => Failure::Transient,
///             PayError::RateLimited(s) => Failure::RetryAfter(Duration::from_secs(*s)),
///         }
///     }
/// }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` does not say which failures to retry",
    label = "`{Self}` does not implement `idemkit::Classify`",
    note = "implement `idemkit::Classify for {Self}`: map each error to `Failure::Transient` (did not happen), `Ambiguous` (may have happened), `RetryAfter(d)` or `Permanent`",
    note = "for an error type of another crate, which you cannot implement it for: wrap it in a newtype of yours, or return `Box<dyn Error + Send + Sync>` (or `anyhow::Error` with idemkit's `anyhow` feature) and attach the failure with `Failure::Transient.to(err)` or `.context(Failure::Transient)`"
)]
pub trait Classify {
    /// What this failure means for the operation.
    fn classify(&self) -> Failure;
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Transient => f.write_str("did not happen (transient): retry"),
            Failure::Ambiguous => {
                f.write_str("may have happened (ambiguous): retry with the same key")
            }
            Failure::RetryAfter(d) => write!(f, "retry after {d:?}"),
            Failure::Permanent => f.write_str("will not succeed (permanent): stop"),
        }
    }
}

/// A `Failure` is an error of its own, so that it can ride on another one as its context
/// (`anyhow::Context`) and be found again in the chain.
impl StdError for Failure {}

/// An error with the failure it means attached: what [`Failure::to`] makes.
#[derive(Debug)]
pub struct Classified {
    failure: Failure,
    source: Box<dyn StdError + Send + Sync>,
}

impl Classified {
    /// The failure attached.
    pub fn failure(&self) -> Failure {
        self.failure
    }
}

impl fmt::Display for Classified {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.source, f)
    }
}

impl StdError for Classified {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&*self.source)
    }
}

impl Failure {
    /// `error`, marked as meaning this failure, for a tool that returns
    /// `Box<dyn Error + Send + Sync>` (or anyhow):
    ///
    /// ```
    /// use idem_runtime::{Classify, Failure};
    ///
    /// let refused = std::io::Error::other("card declined");
    /// let err: Box<dyn std::error::Error + Send + Sync> = Failure::Permanent.to(refused).into();
    /// assert_eq!(err.classify(), Failure::Permanent);
    /// ```
    pub fn to(self, error: impl Into<Box<dyn StdError + Send + Sync>>) -> Classified {
        Classified {
            failure: self,
            source: error.into(),
        }
    }
}
