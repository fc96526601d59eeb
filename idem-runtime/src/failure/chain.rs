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
//! | an `idemkit::Error` (key reuse, in flight, store…) | as it classifies itself (its `Classify`: see [`Error`]'s impl) |
//! | an `idemkit::http::HttpError` (feature `reqwest`) | as it classifies itself (its docs' table) |
//! | `std::io::Error` refused / not connected / address unavailable | `Transient` |
//! | `std::io::Error` timed out / reset / aborted / broken pipe / unexpected EOF | `Ambiguous` |
//! | anything else | `Ambiguous` |

use std::error::Error as StdError;
use std::io::ErrorKind;

use crate::error::{Error, StoreErrorKind};
use crate::failure::{Classified, Classify, Failure};

/// What idemkit's own errors mean for a retry, so that a tool's error type delegates to it
/// (`MyError::Idem(e) => e.classify()`):
///
/// | variant | failure | why |
/// | --- | --- | --- |
/// | `InFlight` | `Transient` | this call ran nothing; the other call's outcome is replayed to a later one |
/// | `Store`, the store unreachable or failing (`Unavailable`, `Other`) | `Transient` | fail closed: the body was not run; a later call may find the store back |
/// | `Store`, a record unreadable or a schema of another version (`Corrupt`, `Incompatible`) | `Permanent` | retrying reads the same record: an operator repairs it |
/// | `LeaseLost` | `Ambiguous` | an attempt was stopped mid-way: it may have taken effect; a retry with the same key is deduplicated or replayed |
/// | `Ambiguous` | `Ambiguous` | the outcome is unknown (S14, S19, S20): never "did not happen", so never released; settled by `verify` or an operator |
/// | `KeyReuse` | `Permanent` | another operation's key: the same arguments are refused again |
/// | `Unreplayable` | `Permanent` | the operation ran; it is never run again under this key |
/// | `Expired` | `Permanent` | the operation was done and its record's time-to-live passed (S33): never run again under this key |
/// | `Arguments`, `Settings`, `NoTenant`, `NoOperation`, `NoRuntime`, `NotConfigured`, `DuplicateTool` | `Permanent` | the program must change first |
///
/// ```
/// use idem_runtime::{Classify, Error, Failure, IdempotencyKey};
///
/// let key = IdempotencyKey::derive("charge", &[("order", &7u32)]);
/// let busy = Error::InFlight { tool: "charge".into(), key, waited: std::time::Duration::from_secs(1) };
/// assert_eq!(busy.classify(), Failure::Transient);
/// let reused = Error::KeyReuse { tool: "charge".into(), key };
/// assert_eq!(reused.classify(), Failure::Permanent);
/// ```
impl Classify for Error {
    fn classify(&self) -> Failure {
        match self {
            Error::InFlight { .. } => Failure::Transient,
            Error::Store { source, .. } => match source.kind() {
                StoreErrorKind::Unavailable | StoreErrorKind::Other => Failure::Transient,
                StoreErrorKind::Corrupt | StoreErrorKind::Incompatible => Failure::Permanent,
            },
            Error::LeaseLost { .. } | Error::Ambiguous { .. } => Failure::Ambiguous,
            Error::KeyReuse { .. }
            | Error::Unreplayable { .. }
            | Error::Expired { .. }
            | Error::Arguments { .. }
            | Error::Settings { .. }
            | Error::NoTenant { .. }
            | Error::NoOperation { .. }
            | Error::NoRuntime { .. }
            | Error::NotConfigured { .. }
            | Error::DuplicateTool { .. } => Failure::Permanent,
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
        if let Some(idem) = e.downcast_ref::<Error>() {
            return idem.classify();
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

    /// Issue 51 #5: idemkit's own errors classify by what each means, and a chain that holds one
    /// (a tool's boxed or anyhow error) delegates to it: a call in flight elsewhere and a store
    /// briefly down are not final, an unknown outcome is never "did not happen".
    #[test]
    fn finding5_each_idemkit_error_classifies_by_what_it_means() {
        use std::time::Duration;

        use crate::error::StoreError;
        use crate::key::IdempotencyKey;

        let key = IdempotencyKey::derive("charge", &[("order", &7u32)]);
        let tool = || "charge".to_owned();
        let store = |source: StoreError| Error::Store {
            tool: tool(),
            key: Some(key),
            source,
        };
        let cases = [
            (
                Error::InFlight {
                    tool: tool(),
                    key,
                    waited: Duration::from_secs(1),
                },
                Failure::Transient,
            ),
            (store(StoreError::unavailable("down")), Failure::Transient),
            (
                store(StoreError::new(StoreErrorKind::Other, "odd")),
                Failure::Transient,
            ),
            (store(StoreError::corrupt("bad row")), Failure::Permanent),
            (
                store(StoreError::new(StoreErrorKind::Incompatible, "newer")),
                Failure::Permanent,
            ),
            (
                Error::LeaseLost {
                    tool: tool(),
                    key,
                    attempts: 1,
                    why: "taken over",
                },
                Failure::Ambiguous,
            ),
            (
                Error::Ambiguous {
                    tool: tool(),
                    key,
                    attempts: 0,
                    last: Failure::Ambiguous,
                },
                Failure::Ambiguous,
            ),
            (
                Error::Ambiguous {
                    tool: tool(),
                    key,
                    attempts: 2,
                    last: Failure::Transient,
                },
                Failure::Ambiguous,
            ),
            (Error::KeyReuse { tool: tool(), key }, Failure::Permanent),
            (
                Error::Unreplayable {
                    tool: tool(),
                    key,
                    reason: "r".into(),
                },
                Failure::Permanent,
            ),
            (
                Error::Expired {
                    tool: tool(),
                    key,
                    done: std::time::UNIX_EPOCH,
                    resolved: false,
                },
                Failure::Permanent,
            ),
            (
                Error::Arguments {
                    tool: tool(),
                    source: serde_json::from_str::<u8>("x").unwrap_err(),
                },
                Failure::Permanent,
            ),
            (
                Error::Settings {
                    tool: tool(),
                    reason: "r".into(),
                },
                Failure::Permanent,
            ),
            (Error::NoTenant { tool: tool() }, Failure::Permanent),
            (Error::NoOperation { tool: tool() }, Failure::Permanent),
            (Error::NoRuntime { reason: "r".into() }, Failure::Permanent),
            (
                Error::NotConfigured {
                    tool: tool(),
                    reason: "r".into(),
                },
                Failure::Permanent,
            ),
            (
                Error::DuplicateTool {
                    tool: tool(),
                    first: "a".into(),
                    second: "b".into(),
                },
                Failure::Permanent,
            ),
        ];
        for (error, failure) in cases {
            let name = format!("{error:?}");
            assert_eq!(error.classify(), failure, "{name}");
            // In a tool's boxed error, the chain delegates to it.
            let boxed: Boxed = Box::new(error);
            assert_eq!(boxed.classify(), failure, "boxed {name}");
        }
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
