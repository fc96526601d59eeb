//! What the README's and the guide's examples take as given. The README's blocks are compiled,
//! as written, in `twins.rs` (this crate's own tests: the README carries no hidden lines, which
//! GitHub would show); the guide's are doctests of the facade that use this crate.

// Test-only: its tools (`charge`, …) would otherwise be registered in every doctest that links
// this crate, and a doctest's own `charge` would then share its name (S21).
#[cfg(test)]
mod twins;

use idemkit::{Classify, Failure, Idem, store::MemoryStore};
use serde::{Deserialize, Serialize};

/// A tool's error, as the README's quick start defines it (there, it is its own type).
#[derive(Debug)]
pub enum PayError {
    /// The card was declined.
    Declined,
    /// No answer in time: the charge may have happened.
    Timeout,
    /// idemkit refused the call.
    Idem(idemkit::Error),
}

impl std::fmt::Display for PayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PayError::Declined => f.write_str("declined"),
            PayError::Timeout => f.write_str("timed out"),
            PayError::Idem(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for PayError {}

impl Classify for PayError {
    fn classify(&self) -> Failure {
        match self {
            PayError::Declined | PayError::Idem(_) => Failure::Permanent,
            PayError::Timeout => Failure::Ambiguous,
        }
    }
}

impl From<idemkit::Error> for PayError {
    fn from(e: idemkit::Error) -> Self {
        PayError::Idem(e)
    }
}

/// What a charge returns: the key the provider was given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Receipt {
    /// The idempotency key the provider saw.
    pub key: String,
    /// The amount charged.
    pub cents: u64,
}

/// An amount in cents.
pub type Cents = u64;

/// A payment provider's client that charges nothing.
#[derive(Debug, Clone, Copy)]
pub struct Provider;

impl Provider {
    /// Charges `cents`, sending `key` as the `Idempotency-Key`.
    ///
    /// # Errors
    ///
    /// `PayError::Declined` for an empty customer.
    #[allow(clippy::unused_async)]
    pub async fn charge(
        &self,
        key: &str,
        customer_id: &str,
        cents: u64,
    ) -> Result<Receipt, PayError> {
        if customer_id.is_empty() {
            return Err(PayError::Declined);
        }
        Ok(Receipt {
            key: key.to_owned(),
            cents,
        })
    }

    /// A customer's balance: 4200 cents.
    ///
    /// # Errors
    ///
    /// `PayError::Declined` for an empty customer.
    #[allow(clippy::unused_async)]
    pub async fn balance(&self, customer_id: &str) -> Result<Cents, PayError> {
        if customer_id.is_empty() {
            return Err(PayError::Declined);
        }
        Ok(4200)
    }
}

/// The provider the README's free functions call.
#[allow(non_upper_case_globals)]
pub static provider: Provider = Provider;

/// Runs `fut` to its end under a runtime of its own (a memory store), as a test would.
pub fn run<F: Future>(fut: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(Idem::new(MemoryStore::new()).scope(fut))
}

/// The MCP section's tool arguments.
pub mod mcp {
    use rmcp::schemars::JsonSchema;
    use serde::{Deserialize, Serialize};

    /// Charge a customer.
    #[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
    #[schemars(crate = "rmcp::schemars")]
    pub struct ChargeReq {
        /// The customer to charge, e.g. "`cus_1`".
        pub customer_id: String,
        /// What the charge is for, e.g. "subscription".
        pub purpose: String,
        /// The period it covers, e.g. "2026-11".
        pub period: String,
        /// The amount in cents.
        pub amount_cents: u64,
    }

    /// Read a customer's balance.
    #[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
    #[schemars(crate = "rmcp::schemars")]
    pub struct BalanceReq {
        /// The customer.
        pub customer_id: String,
    }
}

/// The README's SMS example: a gateway that does not deduplicate.
pub mod sms {
    use idemkit::{Classify, Failure, Verified};
    use serde::{Deserialize, Serialize};

    /// A message the gateway sent.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct Sent {
        /// The gateway's id of it.
        pub id: String,
    }

    /// The gateway's error.
    #[derive(Debug)]
    pub enum SmsError {
        /// No answer in time: it may have gone out.
        Timeout,
        /// idemkit refused the call.
        Idem(idemkit::Error),
    }

    impl std::fmt::Display for SmsError {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            match self {
                SmsError::Timeout => f.write_str("timed out"),
                SmsError::Idem(e) => write!(f, "{e}"),
            }
        }
    }

    impl std::error::Error for SmsError {}

    impl Classify for SmsError {
        fn classify(&self) -> Failure {
            match self {
                SmsError::Timeout => Failure::Ambiguous,
                SmsError::Idem(_) => Failure::Permanent,
            }
        }
    }

    impl From<idemkit::Error> for SmsError {
        fn from(e: idemkit::Error) -> Self {
            SmsError::Idem(e)
        }
    }

    /// A gateway's client that sends nothing.
    #[derive(Debug, Clone, Copy)]
    pub struct Sms;

    impl Sms {
        /// Sends `text` to `to`.
        ///
        /// # Errors
        ///
        /// Never, here.
        #[allow(clippy::unused_async)]
        pub async fn send(&self, to: &str, text: &str) -> Result<Sent, SmsError> {
            Ok(Sent {
                id: format!("{to}:{text}"),
            })
        }

        /// Whether a message with `text` went out to `to`: asked of the gateway's log.
        ///
        /// # Errors
        ///
        /// Never, here.
        #[allow(clippy::unused_async)]
        pub async fn was_sent(&self, to: &str, text: &str) -> Result<Verified<Sent>, SmsError> {
            let _ = (to, text);
            Ok(Verified::NotApplied)
        }
    }

    /// The gateway the README's SMS tool calls.
    #[allow(non_upper_case_globals)]
    pub static sms: Sms = Sms;
}
