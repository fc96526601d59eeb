//! How errors that are not a tool's own type are classified: `Box<dyn Error + Send + Sync>`
//! and, with the `anyhow` feature, `anyhow::Error`. A tool returning one of them says how a
//! failure should be retried by attaching a [`Failure`] to the error (as anyhow context, or
//! with [`Failure::to`]); otherwise what idemkit recognises in the error's chain decides, and an
//! error that says nothing is taken the safe way for a write: it **may have happened**
//! (`Failure::Ambiguous`: retried with the same key, and kept if attempts run out, never released).
//!
//! In the chain, the first of these decides:
//!
//! | found | failure |
//! | --- | --- |
//! | a `Failure` attached (`.context(Failure::Transient)`, `Failure::Transient.to(err)`) | that one |
//! | an `idemkit::Error` (key reuse, in flight, store…) | `Permanent` |
//! | an `idemkit::http::HttpError` (feature `reqwest`) | as it classifies itself (its docs' table) |
//! | `std::io::Error` refused / not connected / address unavailable | `Transient` |
//! | `std::io::Error` timed out / reset / aborted / broken pipe / unexpected EOF | `Ambiguous` |
//! | anything else | `Ambiguous` |

use std::error::Error as StdError;
use std::fmt;
use std::io::ErrorKind;

use crate::error::Error;
use crate::retry::{Classify, Failure};

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

/// The failure an error means, from what its chain holds (see the module docs).
pub fn classify_chain(error: &(dyn StdError + 'static)) -> Failure {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(c) = e.downcast_ref::<Classified>() {
            return c.failure;
        }
        if let Some(f) = e.downcast_ref::<Failure>() {
            return *f;
        }
        if e.downcast_ref::<Error>().is_some() {
            return Failure::Permanent;
        }
        #[cfg(feature = "reqwest")]
        if let Some(http) = e.downcast_ref::<crate::http::HttpError>() {
            return http.classify();
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return match io.kind() {
                ErrorKind::ConnectionRefused
                | ErrorKind::NotConnected
                | ErrorKind::AddrNotAvailable => Failure::Transient,
                _ => Failure::Ambiguous,
            };
        }
        next = e.source();
    }
    Failure::Ambiguous
}

impl Classify for Box<dyn StdError + Send + Sync> {
    fn classify(&self) -> Failure {
        classify_chain(&**self)
    }
}

#[cfg(feature = "anyhow")]
impl Classify for anyhow::Error {
    fn classify(&self) -> Failure {
        // A `Failure` given as context is found by downcasting the error itself.
        if let Some(f) = self.downcast_ref::<Failure>() {
            return *f;
        }
        classify_chain(self.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Boxed = Box<dyn StdError + Send + Sync>;

    #[test]
    fn an_error_that_says_nothing_may_have_happened() {
        let e: Boxed = "provider said something".into();
        assert_eq!(e.classify(), Failure::Ambiguous);
    }

    #[test]
    fn an_attached_failure_decides_wherever_it_is_in_the_chain() {
        let e: Boxed = Failure::Transient.to(std::io::Error::other("503")).into();
        assert_eq!(e.classify(), Failure::Transient);
        let e: Boxed = Box::new(Failure::RetryAfter(std::time::Duration::from_secs(2)));
        assert_eq!(
            e.classify(),
            Failure::RetryAfter(std::time::Duration::from_secs(2))
        );
    }

    #[test]
    fn idemkits_own_errors_and_io_kinds_are_recognised() {
        let reuse: Boxed = Box::new(Error::Settings {
            tool: "t".into(),
            reason: "r".into(),
        });
        assert_eq!(reuse.classify(), Failure::Permanent);
        let refused: Boxed = Box::new(std::io::Error::from(ErrorKind::ConnectionRefused));
        assert_eq!(refused.classify(), Failure::Transient);
        let reset: Boxed = Box::new(std::io::Error::from(ErrorKind::ConnectionReset));
        assert_eq!(reset.classify(), Failure::Ambiguous);
    }

    #[cfg(feature = "anyhow")]
    #[test]
    fn anyhow_errors_take_a_failure_as_context() {
        use anyhow::Context;
        let e = Err::<(), _>(std::io::Error::other("declined"))
            .context(Failure::Permanent)
            .unwrap_err();
        assert_eq!(e.classify(), Failure::Permanent);
        assert_eq!(anyhow::anyhow!("no idea").classify(), Failure::Ambiguous);
        let refused = anyhow::Error::new(std::io::Error::from(ErrorKind::ConnectionRefused))
            .context("calling the provider");
        assert_eq!(refused.classify(), Failure::Transient);
    }
}
