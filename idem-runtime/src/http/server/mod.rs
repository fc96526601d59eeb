//! The server side: a tower layer that gives an API the Idempotency-Key draft's semantics, run as
//! a side effect on idemkit's executor, so a keyed request is claimed, leased, renewed, fenced and
//! recorded exactly as a tool call is (and listed by `idemkit list`, shown by `idemkit show`).
//!
//! A keyed request is one call of a tool named by [`IdempotencyLayer::name`] (default `http`),
//! whose one key field is the client's key (`idempotency_key`, text) and whose fingerprint is the
//! request's method, path and query, and body (SHA-256). Its scope, when
//! [`IdempotencyLayer::scope`] gives one, is the call's tenant (S18): the record's key is the
//! tenant's own, and the handler runs under [`as_tenant`](crate::as_tenant), so tools it calls
//! are scoped too.

mod body;
mod fingerprint;
mod layer;
mod service;
mod stored;
#[cfg(test)]
mod tests;

pub use self::body::{Prefixed, ResponseBody};
pub use self::layer::{IdempotencyLayer, IdempotencyService};

type BoxError = Box<dyn std::error::Error + Send + Sync>;
