//! S28: what `verify = path` registers for a settler, and what a call of such a tool keeps with
//! its record: the tool's arguments (JSON), and its verify asked from them.
//!
//! Both are picked by autoref specialization where the expansion names the types: a tool whose
//! parameters serialize and deserialize (`serde`), and whose verify future is `Send`, keeps its
//! arguments and registers its verify ([`ToolInfo::settle_verify`]); any other keeps nothing and
//! registers none (its records are settled as before: a verify listed by hand, or an operator).
//!
//! [`ToolInfo::settle_verify`]: crate::ToolInfo::settle_verify

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;

use crate::{IdempotencyKey, StoredVerify, Verified, VerifyAnswer};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json;

/// Selects whether a call keeps `R` (its arguments, borrowed, as a tuple) for a verify that
/// takes them back as `O` (the same, owned).
pub struct KeepArguments<'r, O, R>(&'r R, PhantomData<fn() -> O>);

impl<'r, O, R> KeepArguments<'r, O, R> {
    /// The probe of `arguments`.
    pub fn new(arguments: &'r R) -> Self {
        KeepArguments(arguments, PhantomData)
    }
}

/// Picked when the arguments serialize and come back as `O`.
pub trait KeepsArguments {
    /// The arguments as JSON (`None` when they do not serialize: nothing kept).
    fn kept(&self) -> Option<Vec<u8>>;
}

impl<O: DeserializeOwned, R: Serialize> KeepsArguments for KeepArguments<'_, O, R> {
    fn kept(&self) -> Option<Vec<u8>> {
        serde_json::to_vec(self.0).ok()
    }
}

/// Picked otherwise: nothing kept.
pub trait KeepsNothing {
    /// `None`.
    fn kept(&self) -> Option<Vec<u8>>;
}

impl<O, R> KeepsNothing for &KeepArguments<'_, O, R> {
    fn kept(&self) -> Option<Vec<u8>> {
        None
    }
}

/// Selects whether `F`, the expansion's `async fn(O, IdempotencyKey) -> VerifyAnswer` that asks
/// the tool's verify with its arguments decoded as `O`, is registered for a settler.
pub struct SettleProbe<O, F>(F, PhantomData<fn() -> O>);

impl<O, F> SettleProbe<O, F> {
    /// The probe of `verify`.
    pub fn new(verify: F) -> Self {
        SettleProbe(verify, PhantomData)
    }
}

/// Picked when the arguments deserialize and the verification is `Send`.
pub trait SettleFits {
    /// The verify a settler calls.
    fn settle_verify(&self) -> Option<StoredVerify>;
}

impl<O, F, Fut> SettleFits for SettleProbe<O, F>
where
    O: DeserializeOwned + Send + 'static,
    F: Fn(O, IdempotencyKey) -> Fut + Copy + Send + Sync + 'static,
    Fut: Future<Output = VerifyAnswer> + Send + 'static,
{
    fn settle_verify(&self) -> Option<StoredVerify> {
        let verify = self.0;
        Some(Arc::new(
            move |arguments: &[u8], key| match serde_json::from_slice::<O>(arguments) {
                Ok(decoded) => Box::pin(verify(decoded, key)),
                Err(e) => {
                    let why = format!(
                        "the arguments kept with the record do not decode as the tool's parameters \
                         now ({e}); settle it with `idemkit resolve`"
                    );
                    Box::pin(std::future::ready(Err(why)))
                }
            },
        ))
    }
}

/// Picked otherwise: none registered.
pub trait SettleMisfits {
    /// `None`.
    fn settle_verify(&self) -> Option<StoredVerify>;
}

impl<O, F> SettleMisfits for &SettleProbe<O, F> {
    fn settle_verify(&self) -> Option<StoredVerify> {
        None
    }
}

/// A verify function's answer as a settler keeps it: `Applied`'s outcome as JSON, an error by
/// `describe` (its `Display`, else its `Debug`).
pub fn settle_answer<T: Serialize, E>(
    answer: Result<Verified<T>, E>,
    describe: Option<fn(&E) -> String>,
) -> VerifyAnswer {
    match answer {
        Ok(Verified::Applied(t)) => serde_json::to_vec(&t)
            .map(Verified::Applied)
            .map_err(|e| format!("its Applied answer does not serialize as JSON: {e}")),
        Ok(Verified::NotApplied) => Ok(Verified::NotApplied),
        Ok(Verified::Unknown) => Ok(Verified::Unknown),
        Err(e) => Err(format!(
            "verify failed: {}",
            describe.map_or_else(|| "an error without Display or Debug".to_owned(), |d| d(&e))
        )),
    }
}
