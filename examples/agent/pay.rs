//! What the example agents' payment tools fail with and return: shared by the agent's tools
//! (`mod.rs`) and the MCP server's (`../mcp/mod.rs`), which include this file alone. Including
//! the agent's module would bring its tools too, and two tools of one name in one program are
//! refused at their first call (S21).

use std::time::Duration;

use fake_provider::ProviderError;
use idemkit::{Classify, Failure};
use serde::{Deserialize, Serialize};

/// What can go wrong when the agent calls the provider.
#[derive(Debug)]
pub enum PayError {
    /// The provider, or the way to it, failed.
    Provider(ProviderError),
    /// idemkit refused to run the tool (key reuse, in flight, store failure).
    Idem(idemkit::Error),
}

impl std::fmt::Display for PayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PayError::Provider(e) => write!(f, "{e}"),
            PayError::Idem(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for PayError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PayError::Provider(e) => Some(e),
            PayError::Idem(e) => Some(e),
        }
    }
}

impl From<ProviderError> for PayError {
    fn from(e: ProviderError) -> Self {
        PayError::Provider(e)
    }
}

impl From<idemkit::Error> for PayError {
    fn from(e: idemkit::Error) -> Self {
        PayError::Idem(e)
    }
}

impl Classify for PayError {
    fn classify(&self) -> Failure {
        match self {
            // The request never reached the provider: it did not happen.
            PayError::Provider(ProviderError::Connect) => Failure::Transient,
            // Sent, no answer: it may have happened.
            PayError::Provider(ProviderError::Timeout | ProviderError::Broken) => {
                Failure::Ambiguous
            }
            PayError::Provider(ProviderError::Status {
                code, retry_after, ..
            }) => match code {
                429 => Failure::RetryAfter(Duration::from_secs(retry_after.unwrap_or(1))),
                // The provider is still executing the same key: ask again shortly.
                409 => Failure::RetryAfter(Duration::from_millis(100)),
                503 => Failure::Transient,
                500..=599 => Failure::Ambiguous,
                _ => Failure::Permanent,
            },
            PayError::Idem(e) => e.classify(),
        }
    }
}

/// What a charge returns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Receipt {
    /// The provider's charge id.
    pub charge_id: String,
    /// The key the charge was made with.
    pub key: String,
}
