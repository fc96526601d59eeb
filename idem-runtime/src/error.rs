//! The runtime's own errors. A tool's error type takes them in through `From<idemkit::Error>`.

use std::time::Duration;

use crate::key::IdempotencyKey;

/// What went wrong inside idemkit, as opposed to inside the tool.
///
/// Every message names the tool and the key and says what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The key was used before with different arguments (Stripe's `idempotency_error`): the body
    /// was not run.
    #[error(
        "idemkit: tool `{tool}` was called with key {key}, which an earlier call made with different arguments; \
         the tool was not run. A key names one operation: if this is a new operation, add the field that tells it \
         apart to the tool's key; if it is a retry, pass the same arguments"
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
    /// not run (idemkit fails closed).
    #[error(
        "idemkit: the store failed for tool `{tool}`{key}: {source}; the tool was not run (idemkit fails closed \
         rather than risk acting twice). Fix the store, then retry the call",
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

    /// The arguments that are not key fields could not be serialized for the fingerprint.
    #[error(
        "idemkit: the arguments of tool `{tool}` cannot be fingerprinted: {source}; the tool was not run. \
         Every argument that is not a key field must serialize with serde (e.g. no map with non-string keys)"
    )]
    Arguments {
        /// The tool's name.
        tool: String,
        /// What serde said.
        #[source]
        source: serde_json::Error,
    },

    /// No runtime was installed and there is no default store to fall back to.
    #[error(
        "idemkit: tool `{tool}` has no runtime to record its outcome in ({reason}); the tool was not run. Install one at \
         start-up with `idemkit::Idem::builder().store(...).build().install()`, or enable the `sqlite` feature for \
         the zero-configuration default"
    )]
    NotConfigured {
        /// The tool's name.
        tool: String,
        /// Why there is none.
        reason: String,
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
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct StoreError {
    kind: StoreErrorKind,
    message: String,
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl StoreError {
    /// A failure of `kind`, described by `message` (what happened, and what to do).
    pub fn new(kind: StoreErrorKind, message: impl Into<String>) -> Self {
        StoreError {
            kind,
            message: message.into(),
            source: None,
        }
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
        self.source = Some(Box::new(source));
        self
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> StoreErrorKind {
        self.kind
    }
}
