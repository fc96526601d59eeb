//! What the PostgreSQL and Redis tests share: the URL of the test server (a loud skip when it is
//! not set, a failure under CI), and a tool that counts how often its body runs.
#![allow(dead_code)] // Each test file uses part of it.

use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};

use idem_runtime::{
    CallOutcome, Classify, Error, Failure, Idem, IdempotencyKey, StoreErrorKind, Tool, observe,
};

/// The URL in `var` of the test server `server`; under CI a missing one is a failure, elsewhere
/// a loud skip.
pub fn server_url(var: &str, server: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false") => {
            panic!("{var} is not set under CI: .ci/run starts {server} and sets it")
        }
        _ => {
            eprintln!(
                "\n==========\nSKIPPED: set {var} to run the {server} store tests \
                 (eval \"$(scripts/test-servers.sh start)\")\n==========\n"
            );
            None
        }
    }
}

/// The error type of the tool below.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TestError {
    /// idemkit refused: the store failed so.
    Store(StoreErrorKind),
    /// Any other runtime error.
    Other(String),
}

impl Classify for TestError {
    fn classify(&self) -> Failure {
        Failure::Permanent
    }
}

impl From<Error> for TestError {
    fn from(e: Error) -> Self {
        match e {
            Error::Store { source, .. } => TestError::Store(source.kind()),
            other => TestError::Other(other.to_string()),
        }
    }
}

/// `prefix` and 12 random hex digits: a table or key prefix of one test's own.
pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

/// The key of tool `charge` for `order`.
pub fn key_of(order: u64) -> IdempotencyKey {
    IdempotencyKey::derive("charge", &[("order", &order)])
}

/// Calls tool `charge` for `order`; the body counts its run in `runs`, then awaits `during`.
pub async fn charge<Fut: Future<Output = ()>>(
    idem: &Idem,
    order: u64,
    runs: &AtomicU32,
    during: impl FnOnce() -> Fut,
) -> (Result<String, TestError>, CallOutcome) {
    let mut during = Some(during);
    let (result, info) = observe(Tool::new("charge").idem(idem).side_effect(
        &[("order", &order)],
        &4200u64,
        |key| {
            let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
            let during = during.take().expect("the body runs at most once per call");
            async move {
                during().await;
                Ok::<_, TestError>(format!("receipt {n} for {key}"))
            }
        },
    ))
    .await;
    (result, info.expect("every call reports").outcome)
}
