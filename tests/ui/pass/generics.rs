// Generics, lifetimes and where clauses are kept.
#![deny(warnings)] // A new warning in an expansion fails the case (issue 16).
use idemkit::{Idem, IdempotencyKey, KeyPart, MemoryStore, side_effect};
use serde::Serialize;
use std::fmt::Display;

#[derive(Debug)]
struct PayError(String);
impl idemkit::Classify for PayError {
    fn classify(&self) -> idemkit::Failure {
        idemkit::Failure::Permanent
    }
}
impl From<idemkit::Error> for PayError {
    fn from(e: idemkit::Error) -> Self {
        PayError(e.to_string())
    }
}

fn block_on<F: std::future::Future>(fut: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(fut)
}

#[side_effect(key = "id, label")]
async fn record<'a, K, A>(key: &IdempotencyKey, id: K, label: &'a str, payload: A) -> Result<String, PayError>
where
    K: KeyPart + Clone + Display,
    A: Serialize + Clone + Display,
{
    // `?` converts into the declared error type: the body's output type is pinned before it is checked.
    let n: u32 = "7".parse::<u32>().map_err(|e| PayError(e.to_string()))?;
    Ok(format!("{id}/{label}/{payload}/{key}/{n}"))
}

fn main() {
    let idem = Idem::new(MemoryStore::new());
    let out = block_on(idem.scope(record(42u32, "x", String::from("p")))).unwrap();
    let key = IdempotencyKey::derive("record", &[("id", &42u32), ("label", &"x")]);
    assert_eq!(out, format!("42/x/p/{key}/7"));
}
