//! The typed face of a call: what needs the tool's output and error types (serializing,
//! classifying, decoding a replay, keeping the last attempt's result) around the untyped
//! [`Call`]. Generic over the output and error only, never over the body, so a crate's tools
//! with the same types share one copy of it.
//!
//! What a tool's expansion (and [`Tool`](super::Tool)) runs:
//!
//! ```text
//! let mut call = SideEffectCall::new(tool, key, fingerprint);
//! while let Some(key) = call.attempt().await {
//!     call.run(async move { body }).await;     // the attempt, awaited in place, lease kept
//! }
//! call.end()
//! ```
//!
//! An outcome is not decoded when it is stored (issue 42: a deserialization per call, measured at
//! 849 of a call's 6,024 instructions outside SHA-256); the executor seals it instead
//! ([`Outcome::seal`]), and [`SideEffectCall::end`] tells at replay an outcome its type does not
//! read back (sealed, intact: S16, `Error::Unreplayable`) from a damaged one (S9).

use std::future::Future;
use std::marker::PhantomData;
use std::task::Poll;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::Tool;
use super::core::{Call, End, Next, Read, ReadNext};
use super::repeats::InProgress;
use super::verified::Verified;
use crate::error::Error;
use crate::failure::Classify;
use crate::fingerprint::Fingerprint;
use crate::key::IdempotencyKey;
use crate::store::Outcome;

/// A side-effect call of a tool returning `Result<T, E>`. Not a stable API.
#[doc(hidden)]
#[derive(Debug)]
pub struct SideEffectCall<'a, T, E> {
    call: Call<'a>,
    last: Option<Result<T, E>>,
    /// In this process's set of calls in progress (a repeat of the key is warned of).
    in_progress: InProgress,
    /// Attempts that ended with a result.
    attempts: u32,
    /// How the verify function's error reads (its `Display`), kept in the record and the span
    /// when a verification fails; set by the expansion where `E` has one.
    describe: Option<fn(&E) -> String>,
}

impl<'a, T, E> SideEffectCall<'a, T, E> {
    /// The call of `tool` with this key and the fingerprint of its other arguments (or why they
    /// did not serialize, which refuses the call).
    pub fn new(
        tool: Tool<'a>,
        key: IdempotencyKey,
        fingerprint: Result<Fingerprint, serde_json::Error>,
    ) -> Self {
        let in_progress = super::repeats::enter(tool.name(), &key);
        SideEffectCall {
            call: Call::side_effect(tool, key, fingerprint),
            last: None,
            in_progress,
            attempts: 0,
            describe: None,
        }
    }

    /// The key and fingerprint the tool's previous derivation (`previous = "..."`) makes of the
    /// call's arguments: before its own key is claimed, the call looks its operation up under
    /// this one, and is that operation's call when a record of it is there (replayed, waited
    /// for, taken over), so a key change never runs an operation twice.
    pub fn previous(
        &mut self,
        key: IdempotencyKey,
        fingerprint: Result<Fingerprint, serde_json::Error>,
    ) {
        self.call.previous(key, fingerprint);
    }

    /// How an error of the verify function reads, for the record's note (`idemkit show`) and the
    /// call's span when a verification fails (S19); without it, by how the error classifies.
    pub fn describe_errors(&mut self, describe: Option<fn(&E) -> String>) {
        self.describe = describe;
    }

    /// The key to run the next attempt with, or `None` when the call is over. When
    /// [`SideEffectCall::verifying`] says so, the step is a verification instead (S19): run it
    /// with [`SideEffectCall::verify`].
    pub fn attempt(&mut self) -> Next<'_, 'a> {
        self.call.next_attempt()
    }

    /// Whether the step [`SideEffectCall::attempt`] just handed out is a verification (only for
    /// a tool made [`Tool::with_verify`]).
    pub fn verifying(&self) -> bool {
        self.call.verifying()
    }
}

impl<'a, T: Serialize + DeserializeOwned, E: Classify + From<Error>> SideEffectCall<'a, T, E> {
    /// Runs one attempt: awaits `attempt` in place, renewing the call's lease while it waits
    /// (S12). If the lease is lost (S13), the attempt is dropped at the await point it waits at
    /// and the call is over. An attempt that answers at its first poll costs no timer.
    ///
    /// A future of its own rather than an `async fn`: it is instantiated once per tool (it is
    /// generic over the attempt), and a hand-written `poll` is a fraction of the code of a
    /// coroutine wrapping a `poll_fn` (issue 20: the attributes' build cost).
    pub fn run<F: Future<Output = Result<T, E>>>(
        &mut self,
        attempt: F,
    ) -> Attempt<'_, 'a, T, E, F> {
        Step {
            call: self,
            step: attempt,
            kind: PhantomData,
        }
    }

    /// What the attempt returned.
    pub fn ended(&mut self, result: Result<T, E>) {
        match &result {
            Ok(value) => self.call.succeeded(value),
            Err(err) => {
                let failure = err.classify();
                if failure.is_retryable() {
                    self.in_progress.retrying();
                }
                self.call.failed(failure);
            }
        }
        self.attempts += 1;
        self.last = Some(result);
    }

    /// Runs one verification (S19): awaits `verify` in place, the lease kept as for an attempt.
    pub fn verify<F: Future<Output = Result<Verified<T>, E>>>(
        &mut self,
        verify: F,
    ) -> VerifyStep<'_, 'a, T, E, F> {
        Step {
            call: self,
            step: verify,
            kind: PhantomData,
        }
    }

    /// What the verification answered.
    fn verified(&mut self, answer: Result<Verified<T>, E>) {
        match answer {
            Ok(Verified::Applied(value)) => {
                self.call.verified_applied(&value);
                self.last = Some(Ok(value));
            }
            Ok(Verified::NotApplied) => self.call.verified_not_applied(),
            Ok(Verified::Unknown) => self.call.verified_unknown(None),
            // Not the call's result: what it says is kept with the record and in the span.
            Err(e) => {
                let why = match self.describe {
                    Some(describe) => describe(&e),
                    None => format!(
                        "an error of type `{}`, which classifies as \"{}\"",
                        std::any::type_name::<E>(),
                        e.classify()
                    ),
                };
                self.call.verified_unknown(Some(why));
            }
        }
    }

    /// The call's result, once [`SideEffectCall::attempt`] said it is over. By reference: the
    /// call's state (a few hundred bytes) stays where it is, in the tool's future, instead of
    /// moving into this function.
    pub fn end(&mut self) -> Result<T, E> {
        match self.call.take_end() {
            End::LastAttempt => {
                if let Some(Err(e)) = &self.last
                    && self.attempts > 1
                    && e.classify().is_retryable()
                {
                    self.in_progress.gave_up(self.attempts);
                }
                last(self.last.take())
            }
            End::Replay(replay) => match serde_json::from_slice(&replay.outcome) {
                Ok(value) => {
                    replay.decoded();
                    Ok(value)
                }
                // Sealed by this executor for `T` and intact: `T` does not read back what it
                // wrote (S16). Anything else is not as written (S9).
                Err(e) if Outcome::sealed_for(&replay.outcome, std::any::type_name::<T>()) => {
                    Err(replay.unreplayable(std::any::type_name::<T>(), e).into())
                }
                Err(e) => Err(replay.undecodable(std::any::type_name::<T>(), e).into()),
            },
            End::Refused(err) => Err(err.into()),
        }
    }
}

pin_project_lite::pin_project! {
    /// One step of a call, awaited in place, the lease kept while it is pending: an attempt of
    /// the body ([`Attempt`]) or a verification ([`VerifyStep`]), which differ only in what
    /// their answer is handed to (`K`). Written once, so that the S22 gate, the current key
    /// (S26) and the lease (S12, S13) are the same for both. Not a stable API.
    #[doc(hidden)]
    #[must_use = "futures do nothing unless awaited"]
    pub struct Step<'c, 'a, T, E, F, K> {
        call: &'c mut SideEffectCall<'a, T, E>,
        #[pin]
        step: F,
        kind: PhantomData<fn() -> K>,
    }
}

/// The future of [`SideEffectCall::run`]: one attempt of the body. Not a stable API.
#[doc(hidden)]
pub type Attempt<'c, 'a, T, E, F> = Step<'c, 'a, T, E, F, Body>;

/// The future of [`SideEffectCall::verify`]: one verification (S19). Not a stable API.
#[doc(hidden)]
pub type VerifyStep<'c, 'a, T, E, F> = Step<'c, 'a, T, E, F, Verification>;

/// A step that runs the body: its result is what the attempt came to.
#[doc(hidden)]
#[derive(Debug)]
pub enum Body {}

/// A step that runs the verify function: its answer settles an unknown outcome (S19).
#[doc(hidden)]
#[derive(Debug)]
pub enum Verification {}

/// What a kind of step hands its answer to.
#[doc(hidden)]
pub trait StepKind<T, E, R> {
    /// The step answered `answer`.
    fn answered(call: &mut SideEffectCall<'_, T, E>, answer: R);
}

impl<T, E> StepKind<T, E, Result<T, E>> for Body
where
    T: Serialize + DeserializeOwned,
    E: Classify + From<Error>,
{
    #[inline]
    fn answered(call: &mut SideEffectCall<'_, T, E>, answer: Result<T, E>) {
        call.ended(answer);
    }
}

impl<T, E> StepKind<T, E, Result<Verified<T>, E>> for Verification
where
    T: Serialize + DeserializeOwned,
    E: Classify + From<Error>,
{
    #[inline]
    fn answered(call: &mut SideEffectCall<'_, T, E>, answer: Result<Verified<T>, E>) {
        call.verified(answer);
    }
}

impl<T, E, F, K> std::fmt::Debug for Step<'_, '_, T, E, F, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Step").finish_non_exhaustive()
    }
}

impl<T, E, F, K> Future for Step<'_, '_, T, E, F, K>
where
    F: Future,
    K: StepKind<T, E, F::Output>,
{
    type Output = ();

    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<()> {
        let this = self.project();
        // S22: past the lease's end by this process's clock, the step is polled no further
        // until a renewal succeeds; the call is over if none does.
        if std::task::ready!(this.call.call.poll_gate(cx)).is_err() {
            return Poll::Ready(());
        }
        // S26: the step's key is the current one while it is polled: requests it sends carry
        // it without the tool writing it (`http::IdempotentRequest`), and a verification asks
        // about this call's key, also inside another call's body.
        let _current = crate::scope::current::CurrentKey::enter(this.call.call.step_key());
        match this.step.poll(cx) {
            Poll::Ready(answer) => {
                K::answered(this.call, answer);
                Poll::Ready(())
            }
            Poll::Pending => this.call.call.poll_lease(cx),
        }
    }
}

/// A read-only call of a tool returning `Result<T, E>`. Not a stable API.
#[doc(hidden)]
#[derive(Debug)]
pub struct ReadCall<'a, T, E> {
    call: Read<'a>,
    last: Option<Result<T, E>>,
}

impl<'a, T, E> ReadCall<'a, T, E> {
    /// The read of `tool`.
    pub fn new(tool: Tool<'a>) -> Self {
        ReadCall {
            call: Read::new(tool),
            last: None,
        }
    }

    /// Whether to run another attempt (`Some`, with the nil key), or `None` when it is over.
    pub fn attempt(&mut self) -> ReadNext<'_, 'a> {
        self.call.next_attempt()
    }
}

impl<T, E: Classify> ReadCall<'_, T, E> {
    /// What the attempt returned.
    pub fn ended(&mut self, result: Result<T, E>) {
        match &result {
            Ok(_) => self.call.read(),
            Err(err) => self.call.failed(err.classify()),
        }
        self.last = Some(result);
    }

    /// The read's result, once [`ReadCall::attempt`] said it is over. By reference: the call's
    /// state stays where it is, in the tool's future, instead of moving into this function.
    pub fn end(&mut self) -> Result<T, E> {
        if !self.call.is_over() {
            unreachable!("idemkit: a call's end was taken before it was over")
        }
        last(self.last.take())
    }
}

fn last<T, E>(last: Option<Result<T, E>>) -> Result<T, E> {
    last.expect("idemkit: a call ended without an attempt's result")
}
