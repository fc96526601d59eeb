//! # idemkit
//!
//! Make AI agents' tool calls safe to retry. A write tool gets an idempotency key derived **once
//! per logical operation, before the first attempt**, from the fields that identify it; its
//! outcome is recorded, so a retry — after a lost response, a timeout, a crash and replay —
//! returns the first result instead of acting again.
//!
//! ```
//! use idemkit::{Classify, Failure, Idem, MemoryStore, Tool};
//!
//! #[derive(Debug)]
//! enum PayError { Declined, Timeout, Idem(idemkit::Error) }
//!
//! impl Classify for PayError {
//!     fn classify(&self) -> Failure {
//!         match self {
//!             PayError::Declined | PayError::Idem(_) => Failure::Permanent,
//!             PayError::Timeout => Failure::Ambiguous,
//!         }
//!     }
//! }
//! impl From<idemkit::Error> for PayError {
//!     fn from(e: idemkit::Error) -> Self { PayError::Idem(e) }
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let idem = Idem::new(MemoryStore::new());
//! let receipt: Result<String, PayError> = Tool::new("charge")
//!     .idem(&idem)
//!     .side_effect(
//!         &[("customer_id", &"cus_1"), ("purpose", &"subscription"), ("period", &"2026-11")],
//!         &serde_json::json!({ "amount_cents": 4200 }),
//!         |key| async move { Ok(format!("charged once under {key}")) },
//!     )
//!     .await;
//! assert_eq!(receipt.unwrap(), "charged once under 32e00e40-1a53-8058-93c7-e9d1adc8ecaa");
//! # });
//! ```
#![warn(missing_docs)]

pub use idem_macros::*;
pub use idem_runtime::*;

/// What the attributes' expansions reach; not a stable API.
#[doc(hidden)]
pub mod __private {
    pub use idem_runtime::__private::*;
    pub use idem_runtime::{
        Classify, Error, Fingerprint, Fingerprinter, IdempotencyKey, KeyHasher, KeyPart, Tool,
        ToolInfo, ToolKind,
    };

    use std::future::Future;

    use idem_runtime::__private::serde::Serialize;
    use idem_runtime::__private::serde::de::DeserializeOwned;

    /// The fingerprint of the arguments that are not key fields, keeping the first serialization
    /// failure, which the call reports as `Error::Arguments` without running the tool.
    #[derive(Debug, Default)]
    pub struct Arguments {
        fingerprinter: Fingerprinter,
        failed: Option<idem_runtime::__private::serde_json::Error>,
    }

    impl Arguments {
        /// No arguments yet.
        pub fn new() -> Self {
            Self::default()
        }

        /// Adds one argument; its `Serialize` bound is checked at the argument's span.
        pub fn arg<T: Serialize + ?Sized>(mut self, name: &str, value: &T) -> Self {
            if self.failed.is_none()
                && let Err(e) = self.fingerprinter.arg(name, value)
            {
                self.failed = Some(e);
            }
            self
        }

        /// The fingerprint, or why an argument did not serialize.
        pub fn finish(self) -> Result<Fingerprint, idem_runtime::__private::serde_json::Error> {
            match self.failed {
                None => Ok(self.fingerprinter.finish()),
                Some(e) => Err(e),
            }
        }
    }

    /// What `#[side_effect]` calls: the protocol with the key derived by the wrapper. `T` and `E`
    /// are named by the expansion at the user's spans, so an unmet bound (C8) points there.
    pub async fn side_effect<T, E, F, Fut>(
        tool: Tool<'_>,
        key: IdempotencyKey,
        arguments: Result<Fingerprint, idem_runtime::__private::serde_json::Error>,
        attempt: F,
    ) -> Result<T, E>
    where
        T: Serialize + DeserializeOwned,
        E: Classify + From<Error>,
        F: FnMut(IdempotencyKey) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        match arguments {
            Ok(fingerprint) => tool.run_keyed(key, fingerprint, attempt).await,
            Err(source) => Err(E::from(Error::Arguments {
                tool: tool.name().to_owned(),
                source,
            })),
        }
    }

    /// What `#[read_only]` calls.
    pub async fn read_only<T, E, F, Fut>(tool: Tool<'_>, attempt: F) -> Result<T, E>
    where
        E: Classify,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        tool.read_only(attempt).await
    }
}
