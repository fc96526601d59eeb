//! The runtime's own errors. A tool's error type takes them in through `From<idemkit::Error>`.

use std::time::Duration;

use crate::key::IdempotencyKey;

/// What went wrong inside idemkit, as opposed to inside the tool.
///
/// Every message names the tool and the key and says what to do. It implements
/// [`Classify`](crate::Classify) by what each variant means for a retry (its impl lists them), so
/// a tool's error type hands it on: `MyError::Idem(e) => e.classify()`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The key was used before with different arguments (Stripe's `idempotency_error`): the body
    /// was not run.
    #[error(
        "idemkit: tool `{tool}` was called with key {key}, which an earlier call made with different arguments; \
         {not_run}. A key names one operation: if this is a new operation, add the field that tells it \
         apart to the tool's key; if it is a retry, pass the same arguments",
        not_run = crate::told::sentences::was_not_run("the tool")
    )]
    KeyReuse {
        /// The tool's name.
        tool: String,
        /// The key both calls derived.
        key: IdempotencyKey,
    },

    /// Another call with the same key is still running, and did not finish within the wait.
    #[error(
        "idemkit: tool `{tool}` with key {key} is still running in another call (waited {waited:?}); \
         the tool was not run again. Retry later: once the first call finishes, the same call returns its outcome"
    )]
    InFlight {
        /// The tool's name.
        tool: String,
        /// The key of the running call.
        key: IdempotencyKey,
        /// How long this call waited for the other one.
        waited: Duration,
    },

    /// The store could not be read or written, or returned data it cannot vouch for; the body was
    /// not run by this call (idemkit fails closed).
    #[error(
        "idemkit: the store failed for tool `{tool}`{key}: {source}; this call did not run the tool (idemkit fails \
         closed rather than risk acting twice). Fix the store, then retry the call",
        key = key.map(|k| format!(" (key {k})")).unwrap_or_default()
    )]
    Store {
        /// The tool's name.
        tool: String,
        /// The key, when one was derived.
        key: Option<IdempotencyKey>,
        /// What the store said.
        #[source]
        source: StoreError,
    },

    /// The call's lease was lost while it ran (S13): another caller took the key over, or renewals
    /// failed until the lease ended. The running attempt was stopped at its next await and no
    /// further attempt was started; whether the effect happened is unknown.
    #[error(
        "idemkit: tool `{tool}` with key {key} lost its lease after {attempts} attempt(s) ({why}); the running attempt \
         was stopped and the outcome is unknown: {effect_unknown}. Retry the call with the same \
         arguments: it derives the same key, so the provider can deduplicate it, and it replays the outcome if another \
         caller recorded one",
        effect_unknown = crate::told::sentences::EFFECT_UNKNOWN
    )]
    LeaseLost {
        /// The tool's name.
        tool: String,
        /// The call's key.
        key: IdempotencyKey,
        /// Attempts started, the stopped one included.
        attempts: u32,
        /// Taken over, or renewals failed.
        why: &'static str,
    },

    /// The operation's outcome is unknown: it may have taken effect (S14, S19, S20). An attempt
    /// of this call failed in a way that may have taken effect (`Failure::Ambiguous`) and a later
    /// one failed otherwise; or the attempt's outcome is unknown and the tool cannot re-send it
    /// (it does not take the key, or says `resend = false`) and no `verify` settled it; or an
    /// earlier call's outcome is unknown (`attempts` = 0: the record was kept as ambiguous, or its
    /// holder's lease ran out) and this call did not send it again. The record is kept as
    /// ambiguous; only a tool that passes the key on re-sends it, otherwise the tool's `verify`
    /// or an operator settles it.
    #[error(
        "idemkit: tool `{tool}` with key {key}: {}; {}. The record is kept as ambiguous and the operation is not \
         sent again blindly: a tool that passes the key to a provider that deduplicates re-sends it on the next \
         call; otherwise the tool's `verify` settles it, or an operator. {}",
        what_is_unknown(*attempts, *last),
        crate::told::sentences::EFFECT_UNKNOWN,
        crate::told::sentences::how_to_settle(key)
    )]
    Ambiguous {
        /// The tool's name.
        tool: String,
        /// The call's key.
        key: IdempotencyKey,
        /// Attempts run.
        attempts: u32,
        /// How the last attempt failed.
        last: crate::failure::Failure,
    },

    /// The operation ran and took effect under this key, but its outcome cannot be replayed
    /// (S16): it did not serialize, fit the size bound or hold finite floats when it was
    /// recorded, or the JSON this executor wrote for it, intact, does not read back as the
    /// tool's output type (found at its first replay). It is never run again under this key.
    #[error(
        "idemkit: tool `{tool}` already ran with key {key} and took effect, but its outcome cannot be replayed ({reason}); \
         it will not be run again under this key. Look the effect up at the provider by key {key}; make the output \
         type round-trip through JSON (e.g. no NaN or infinite floats, string keys in maps)"
    )]
    Unreplayable {
        /// The tool's name.
        tool: String,
        /// The operation's key.
        key: IdempotencyKey,
        /// Why the outcome was not stored in a replayable form.
        reason: String,
    },

    /// The operation was done under this key (completed, or settled as applied) and its
    /// record's time-to-live has passed (S33): its outcome is no longer kept, but it is never
    /// run again because time passed. The record is a tombstone until the store's tombstone
    /// setting passes or an operator forgets it (`idemkit forget KEY`, which lets the next call
    /// run it again). The body was not run.
    #[error(
        "idemkit: tool `{tool}` with key {key} was {}. {}",
        crate::told::sentences::done_not_kept(*done, *resolved),
        crate::told::sentences::DONE_WHAT_TO_DO
    )]
    Expired {
        /// The tool's name.
        tool: String,
        /// The operation's key.
        key: IdempotencyKey,
        /// When it was done, by the store's clock (`UNIX_EPOCH` when the store did not keep it).
        done: std::time::SystemTime,
        /// Whether a decision (an operator's, or the settler's verify) ended it.
        resolved: bool,
    },

    /// The arguments that are not key fields could not be serialized for the fingerprint.
    #[error(
        "idemkit: the arguments of tool `{tool}` cannot be fingerprinted: {source}; {not_run}. \
         Every argument that is not a key field must serialize with serde (e.g. no map with non-string keys)",
        not_run = crate::told::sentences::was_not_run("the tool")
    )]
    Arguments {
        /// The tool's name.
        tool: String,
        /// What serde said.
        #[source]
        source: serde_json::Error,
    },

    /// The tool's settings cannot be honoured (e.g. a ttl shorter than the lease); the body was
    /// not run.
    #[error(
        "idemkit: {}: {reason}",
        crate::told::sentences::was_not_run(&format!("tool `{tool}`"))
    )]
    Settings {
        /// The tool's name.
        tool: String,
        /// What is wrong, and what to do.
        reason: String,
    },

    /// The tool runs only on behalf of a tenant, and none was set: the body was not run.
    #[error(
        "idemkit: tool `{tool}` runs only on behalf of a tenant, and none is set here; {not_run}. Run the \
         call under `idemkit::scope::as_tenant(\"...\", ...)` where the request enters, or give the runtime one with \
         `Idem::builder().tenant(\"...\")`",
        not_run = crate::told::sentences::was_not_run("the tool")
    )]
    NoTenant {
        /// The tool's name.
        tool: String,
    },

    /// The tool takes an [`OperationId`](crate::OperationId) that the host names (a tool called
    /// by a model: JSON function calling, MCP), and no operation is in force: the body was not run.
    #[error(
        "idemkit: tool `{tool}` is keyed on an operation the host names, and no operation is in force here; \
         {not_run}. Run the model's turn under `idemkit::scope::operation_scope(\"plan-42/step-3\", ...)`, naming \
         the operation from the host's own durable state (the plan step, the ticket), never from the model",
        not_run = crate::told::sentences::was_not_run("the tool")
    )]
    NoOperation {
        /// The tool's name.
        tool: String,
    },

    /// No runtime is in force where [`Idem::current`](crate::Idem::current) was asked (outside a
    /// tool call).
    #[error(
        "idemkit: no runtime is in force here ({reason}). Install one at start-up with \
         `idemkit::Idem::builder().store(...).build()?.install()`, run under one with `idem.scope(...)`, or enable the \
         `sqlite` feature for the zero-configuration default"
    )]
    NoRuntime {
        /// Why there is none.
        reason: String,
    },

    /// No runtime was installed and there is no default store to fall back to.
    #[error(
        "idemkit: tool `{tool}` has no runtime to record its outcome in ({reason}); {not_run}. Install one at \
         start-up with `idemkit::Idem::builder().store(...).build()?.install()`, or enable the `sqlite` feature for \
         the zero-configuration default",
        not_run = crate::told::sentences::was_not_run("the tool")
    )]
    NotConfigured {
        /// The tool's name.
        tool: String,
        /// Why there is none.
        reason: String,
    },

    /// Two side-effect tools of this program share the name `tool` (S21): they would share keys
    /// and records, so one tool's outcome would be replayed as the other's. Every call of that
    /// name is refused before anything is claimed, until each tool has a name of its own.
    #[error(
        "idemkit: two tools are named `{tool}`, one at {first} and one at {second}; they would share keys and \
         records, so one tool's outcome would be replayed as the other's. {not_run_lead}. Give each a distinct \
         name with `#[side_effect(name = \"...\")]` (the name is part of every key: the tool that keeps the old name \
         keeps its records)",
        not_run_lead = crate::told::sentences::was_not_run("The tool")
    )]
    DuplicateTool {
        /// The shared name.
        tool: String,
        /// Where one of them is defined: `file:line (module path)`.
        first: String,
        /// Where another is defined (every other place, when more than two share the name).
        second: String,
    },
}

/// What kind of store failure this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// The store could not be reached or did not answer.
    Unavailable,
    /// A record was unreadable: a corrupted row, or an outcome that no longer deserializes.
    Corrupt,
    /// The store's schema is newer (or otherwise other) than this build understands.
    Incompatible,
    /// Any other failure of the store.
    Other,
}

/// A failure of a [`Store`](crate::Store), with what to do about it.
///
/// One pointer wide (its parts are boxed), so that [`Error`], which carries it, stays under
/// clippy's `result_large_err` threshold (128 bytes) inside a tool's own error enum.
#[derive(thiserror::Error)]
#[error(transparent)]
pub struct StoreError(Box<StoreErrorInner>);

#[derive(thiserror::Error)]
#[error("{message}")]
struct StoreErrorInner {
    kind: StoreErrorKind,
    message: String,
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl std::fmt::Debug for StoreErrorInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreError")
            .field("kind", &self.kind)
            .field("message", &self.message)
            .field("source", &self.source)
            .finish()
    }
}

impl std::fmt::Debug for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl StoreError {
    /// A failure of `kind`, described by `message` (what happened, and what to do).
    pub fn new(kind: StoreErrorKind, message: impl Into<String>) -> Self {
        StoreError(Box::new(StoreErrorInner {
            kind,
            message: message.into(),
            source: None,
        }))
    }

    /// The store could not be reached.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StoreErrorKind::Unavailable, message)
    }

    /// A record was unreadable.
    pub fn corrupt(message: impl Into<String>) -> Self {
        Self::new(StoreErrorKind::Corrupt, message)
    }

    /// Attaches the underlying error.
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.0.source = Some(Box::new(source));
        self
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> StoreErrorKind {
        self.0.kind
    }
}

#[cfg(test)]
mod tests {
    use super::{Error, StoreError};

    /// Issue 33: `enum ToolError { Idem(idemkit::Error), .. }` as a tool's `Result` error passes
    /// clippy's default `result_large_err` (which fires at 128 bytes).
    #[test]
    fn error_is_small_enough_for_result_large_err() {
        let size = std::mem::size_of::<Error>();
        println!("idemkit::Error is {size} bytes");
        assert!(size < 128, "idemkit::Error is {size} bytes");
        assert_eq!(
            std::mem::size_of::<StoreError>(),
            std::mem::size_of::<usize>()
        );
    }
}

/// What [`Error::Ambiguous`] knows of how the outcome became unknown, said as it happened
/// (issue 41 #3): no attempt of this call ran, or which one left it unknown.
fn what_is_unknown(attempts: u32, last: crate::failure::Failure) -> String {
    use crate::failure::Failure;
    match (attempts, last) {
        (0, _) => "this call sent nothing: an earlier call of this operation left its outcome unknown (it timed \
                   out or broke off after sending, or its holder stopped before recording the outcome)"
            .to_owned(),
        (1, Failure::Ambiguous) => "the outcome of this call's attempt is unknown: it failed after it may have \
                                    reached the provider (a timeout, a reset, or a reply lost after sending)"
            .to_owned(),
        (n, Failure::Ambiguous) => format!(
            "the outcome of this call's last attempt (of {n}) is unknown: it failed after it may have reached the \
             provider (a timeout, a reset, or a reply lost after sending)"
        ),
        (n, last) => format!(
            "the last of this call's {n} attempts failed as {} (it did not happen), but an earlier attempt of this \
             operation failed after it may have reached the provider",
            match last {
                Failure::Transient => "transient".to_owned(),
                Failure::Permanent => "permanent".to_owned(),
                Failure::RetryAfter(wait) => format!("retry-after {wait:?}"),
                other => format!("{other:?}"),
            }
        ),
    }
}

#[cfg(test)]
mod ambiguous_wording {
    use super::Error;
    use crate::failure::Failure;
    use crate::key::IdempotencyKey;

    fn ambiguous(attempts: u32, last: Failure) -> String {
        let key = IdempotencyKey::derive("send_sms", &[("order", &1u64)]);
        Error::Ambiguous {
            tool: "send_sms".into(),
            key,
            attempts,
            last,
        }
        .to_string()
    }

    /// Issue 41 #3: an unknown outcome is worded by what is known, never "after 0 attempt(s) …
    /// the last failed as Ambiguous", which says something that did not happen.
    #[test]
    fn an_unknown_outcome_says_which_attempt_left_it_unknown() {
        let none = ambiguous(0, Failure::Ambiguous);
        assert!(none.contains("this call sent nothing"), "{none}");
        assert!(none.contains("an earlier call of this operation"), "{none}");
        assert!(!none.contains("0 attempt"), "{none}");
        let one = ambiguous(1, Failure::Ambiguous);
        assert!(one.contains("this call's attempt is unknown"), "{one}");
        assert!(one.contains("may have reached the provider"), "{one}");
        let later = ambiguous(3, Failure::Transient);
        assert!(
            later.contains(
                "the last of this call's 3 attempts failed as transient (it did not happen)"
            ),
            "{later}"
        );
        assert!(
            later.contains("an earlier attempt of this operation"),
            "{later}"
        );
        for message in [none, one, later] {
            assert!(
                message.contains("idemkit resolve"),
                "says what settles it: {message}"
            );
        }
    }
}

#[cfg(test)]
mod store_error_tests {
    use std::error::Error as _;

    use super::{StoreError, StoreErrorKind};

    /// `StoreError` (thiserror, through its boxed parts): its message is its `Display`, its
    /// cause its `source`, its `Debug` names its parts.
    #[test]
    fn display_source_and_debug_are_its_parts() {
        let cause = std::io::Error::other("connection reset");
        let e = StoreError::unavailable("the store did not answer").with_source(cause);
        assert_eq!(e.to_string(), "the store did not answer");
        assert_eq!(e.kind(), StoreErrorKind::Unavailable);
        assert_eq!(
            e.source().map(ToString::to_string).as_deref(),
            Some("connection reset")
        );
        let debug = format!("{e:?}");
        assert!(
            debug.starts_with(
                "StoreError { kind: Unavailable, message: \"the store did not answer\""
            ),
            "{debug}"
        );
        assert!(StoreError::corrupt("x").source().is_none());
    }
}
