//! The protocol's steps that do not depend on a tool's types: claim → attempts (the lease
//! renewed while they run) → complete, keep as ambiguous or release; the retry schedule; what a
//! dropped call leaves behind; the span and the logs.
//!
//! Nothing here is generic over a tool's body, so it is compiled once, in this crate. A call is
//! a [`Call`] driven by a loop in the caller (what the attributes expand to, or
//! [`Tool`](super::Tool)'s methods): `next_attempt().await` says what to do; the caller runs an attempt
//! itself, awaiting the body in place, and reports what it came to. A crate with hundreds of
//! tools then compiles hundreds of small loops, not hundreds of copies of the protocol, nor a
//! generic driver per tool.
//!
//! This module owns the call's state machine ([`Call`], its phases, what an attempt came to);
//! its rooms: `claim` (before the first attempt), `lease` (renewals while it runs), `end` (the
//! attempts' bookkeeping and the end written to the store), `dropped` (a call dropped before its
//! end), `replay` (an outcome met at the claim, to decode), `trace` (what logs and `CallInfo`
//! name), `verify` (a verification's answers: applied, not applied, unknown), `fresh` (a retry
//! loop around the tool that makes a new key each turn); and `read`, a read-only call's own small
//! loop.
//!
//! A call's phases ([`Phase`]) and the transitions that move it between them, each a method of
//! [`Call`] (`start`, `claimed`, `refuse_arguments`, `attempt_ended`, the `verified_*` answers,
//! `end_run`, `recorded`, `take_end`), driven by `poll_next`:
//!
//! ```text
//!  Claim ──first poll: runtime, tenant, S21, settings──▶ Refused ─────────────────┐
//!    │ the claim sent (claim.rs: `start`)                                          │
//!    ▼                                                                             │
//!  Claiming ──Existing(Completed)──▶ Replayed ────────────────────────────────────┤
//!    │  ├─────refused (key reuse, in flight past the wait, store down)──▶ Refused ┤
//!    │ Acquired (a new record, or a takeover: expired holder, ambiguous)           │
//!    ▼                                                                             │
//!  Running(run, Between)                                                           │
//!    Ready ──S22 gate──▶ Attempting ──ended: succeeded / failed──▶ Backoff ──▶ Ready
//!      │  └─ unknown outcome, resend = false ─▶ Verify ──▶ Verifying ──▶ Ready │ end
//!      └─ lease lost, attempts or time spent, settled, unsettled ──▶ end_run   │
//!    ▼ end_run (end.rs: complete / mark ambiguous / release, fenced by the token)  │
//!  Recording ──written──▶ Finished ─────────────────────────────────────────────┤
//!            └─an error to end with──▶ Refused ─────────────────────────────────┤
//!                                                                     take_end ▼
//!                                                                            Taken
//! ```
//!
//! Dropped in any phase, a call ends in the background (`dropped.rs`): in `Claiming`, its claim
//! finishes and is given back as if never made (S27); in `Running`, an attempt that may have
//! started leaves the record ambiguous, one that cannot have releases it; in `Recording`, the
//! write finishes.

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::time::Sleep;

use super::Tool;
use crate::error::Error;
use crate::failure::Failure;
use crate::fingerprint::Fingerprint;
use crate::key::IdempotencyKey;
use crate::observe::CallOutcome;
use crate::store::Outcome;

mod claim;
mod dropped;
mod end;
mod fresh;
mod lease;
mod read;
mod replay;
mod scratch;
mod timed;
mod trace;
mod verify;

pub(crate) use self::read::Read;
pub use self::read::ReadNext;
pub(crate) use self::replay::Replay;

use self::claim::{Begun, start};
use self::end::Run;
use self::scratch::with_scratch;
use self::trace::CallTrace;

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What one attempt came to, as the protocol needs to know it.
enum Ended {
    /// A side effect succeeded; its outcome serialized and reads back.
    Stored(Outcome),
    /// A side effect succeeded, but its outcome does not serialize or read back: why.
    Unreplayable(String),
    /// The attempt failed, and was classified so.
    Failed(Failure),
    /// The lease was lost (S13), while an attempt ran (`attempting`) or between attempts.
    Lost { attempting: bool, why: &'static str },
    /// The outcome is unknown and is not to be sent again (S19, S20): the record is kept as
    /// ambiguous, and the call ends with [`Error::Ambiguous`]; why it was not settled (a verify
    /// function's error says why it failed), and whether a verify function answered Unknown or
    /// failed (counted with the record, S32).
    Unsettled(Cow<'static, str>, bool),
}

/// The protocol of one call, driven by a loop in the caller:
///
/// ```text
/// while let Some(key) = call.next_attempt().await {
///     let result = body(key).await;       // the caller awaits the attempt in place
///     call.succeeded(&value) / call.failed(err.classify()) / call.read();
/// }
/// call.take_end()                          // replay, refusal, or the last attempt's result
/// ```
///
/// Not a stable API: what [`super::typed`] wraps for generated code and [`Tool`](super::Tool).
#[doc(hidden)]
pub struct Call<'a> {
    phase: Phase<'a>,
}

impl std::fmt::Debug for Call<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Call").finish_non_exhaustive()
    }
}

enum Phase<'a> {
    /// A side effect not yet polled: the runtime in force is looked up at the first poll,
    /// inside the caller's task (where `Idem::scope` applies).
    Claim {
        tool: Tool<'a>,
        key: IdempotencyKey,
        fingerprint: Result<Fingerprint, serde_json::Error>,
        /// The previous derivation's key and fingerprint, looked up first (`previous = "..."`).
        previous: Option<Box<claim::Previous>>,
    },
    /// The claim is awaited; what to end if the call is dropped meanwhile. Owns everything,
    /// so a dropped call can leave it to finish in the background (S27).
    Claiming(BoxFuture<'static, Begun<'static>>, claim::Claiming),
    /// Past the claim: attempts. Changed in place between attempts (a `Run` is a few hundred
    /// bytes; moving it per step was a measurable part of a call).
    Running(Run<'a>, Between),
    /// The end is being written; the error the call then ends with, if not its last attempt's
    /// result. Owns everything, so a dropped call can finish it in the background.
    Recording(BoxFuture<'static, Option<Error>>),
    /// The key was completed before: this outcome is to be decoded.
    Replayed(CallTrace<'a>, Outcome),
    /// Refused before any attempt, or over with this error instead of the last attempt's result.
    Refused(Error),
    /// Over: the last attempt's result stands.
    Finished,
    /// Over, and its end taken.
    Taken,
}

/// Where a running call is between attempts.
enum Between {
    /// An attempt is to start.
    Ready,
    /// The caller is running an attempt.
    Attempting,
    /// Waiting before the next attempt.
    Backoff(Pin<Box<Sleep>>),
    /// A verification is to start (S19): an outcome is unknown; after how the attempt that left
    /// it unknown failed (`None`: an earlier call's, met at the claim).
    Verify(Option<Failure>),
    /// The caller is running a verification.
    Verifying(Option<Failure>),
}

/// How a call ended, for [`super::typed`] to turn into the tool's result.
pub(crate) enum End<'a> {
    /// The last attempt's result stands.
    LastAttempt,
    /// Decode this stored outcome; report with [`Replay::decoded`] or [`Replay::undecodable`].
    Replay(Replay<'a>),
    /// Refused before any attempt, or over with this error (lease lost, ambiguous, unreplayable).
    Refused(Error),
}

impl<'a> Call<'a> {
    /// A side-effect call, with its key and arguments' fingerprint made.
    pub(crate) fn side_effect(
        tool: Tool<'a>,
        key: IdempotencyKey,
        fingerprint: Result<Fingerprint, serde_json::Error>,
    ) -> Self {
        Call {
            phase: Phase::Claim {
                tool,
                key,
                fingerprint,
                previous: None,
            },
        }
    }

    /// Before its own key, the call looks its operation up under `key`, the previous
    /// derivation's, with that derivation's `fingerprint` (see `claim::Previous`).
    pub(crate) fn previous(
        &mut self,
        key: IdempotencyKey,
        fingerprint: Result<Fingerprint, serde_json::Error>,
    ) {
        if let Phase::Claim { previous, .. } = &mut self.phase {
            *previous = Some(Box::new(claim::Previous { key, fingerprint }));
        }
    }

    /// The key of the next attempt to run, or `None` when the call is over: a future that
    /// claims, waits between attempts and records the end.
    pub(crate) fn next_attempt(&mut self) -> Next<'_, 'a> {
        Next { call: self }
    }

    /// The attempt succeeded with `value`, which is serialized to be stored. An outcome that
    /// would not replay is stored as such (S16): one that does not serialize, is over the size
    /// bound, or holds a NaN or an infinite float (JSON writes `null`, which does not read back
    /// as a float). Any other way an outcome fails to read back as `T` (a field skipped when
    /// empty without `default`, a hand-written `Deserialize` that does not match its
    /// `Serialize`) is found at its first replay, by the seal written after it
    /// ([`Outcome::seal`]), which tells it from a damaged record, and then says the operation
    /// ran (S16) rather than fail as a corrupt store (S9).
    pub(crate) fn succeeded<T: serde::Serialize>(&mut self, value: &T) {
        let ended = self.outcome_of(value);
        self.attempt_ended(ended);
    }

    /// What a successful result comes to: stored, or not replayable and why.
    fn outcome_of<T: serde::Serialize>(&self, value: &T) -> Ended {
        let bound = match &self.phase {
            Phase::Running(run, _) => run.holder.max_outcome,
            _ => usize::MAX,
        };
        with_scratch(|buf| match serde_json::to_writer(&mut *buf, value) {
            Ok(()) if buf.len() > bound => Ended::Unreplayable(format!(
                "the outcome is {} bytes, over the bound of {bound} bytes (`max_outcome_bytes`)",
                buf.len()
            )),
            Ok(()) => match crate::fingerprint::finite::first_non_finite(value) {
                None => {
                    Outcome::seal(buf, std::any::type_name::<T>());
                    Ended::Stored(Outcome::from(&buf[..]))
                }
                Some(v) => Ended::Unreplayable(format!(
                    "the outcome holds the float {v}, which JSON stores as `null`, so it does not read back as `{}`",
                    std::any::type_name::<T>()
                )),
            },
            Err(e) => Ended::Unreplayable(format!("the outcome does not serialize: {e}")),
        })
    }

    /// The key of the step running now, if one is: what an attempt's body was handed, and what
    /// a verification asks about (S26: each sees its own call's key as the current one).
    pub(crate) fn step_key(&self) -> Option<IdempotencyKey> {
        match &self.phase {
            Phase::Running(run, Between::Attempting | Between::Verifying(_)) => Some(run.call.key),
            _ => None,
        }
    }

    fn set_between(&mut self, next: Between) {
        if let Phase::Running(_, between) = &mut self.phase {
            *between = next;
        }
    }

    /// S22: whether the body may be polled now. Past the lease's end by this process's clock (a
    /// stalled process, a paused VM), only a renewal that succeeds lets it go on; `Err` when
    /// none did, the call then being over (S13).
    pub(crate) fn poll_gate(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ()>> {
        let Phase::Running(run, _) = &mut self.phase else {
            return Poll::Ready(Ok(()));
        };
        let why = match std::task::ready!(run.holder.poll_gate(&run.call, run.started, false, cx)) {
            Ok(()) => return Poll::Ready(Ok(())),
            Err(why) => why,
        };
        self.end_run(Ended::Lost {
            attempting: true,
            why,
        });
        Poll::Ready(Err(()))
    }

    /// Keeps the running call's lease renewed while its attempt is pending (S12); `Ready` when
    /// the lease is lost (S13), the call then being over.
    pub(crate) fn poll_lease(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let Phase::Running(run, _) = &mut self.phase else {
            return Poll::Pending;
        };
        let why = std::task::ready!(run.holder.poll_lease(&run.call, run.started, cx));
        self.end_run(Ended::Lost {
            attempting: true,
            why,
        });
        Poll::Ready(())
    }

    /// The attempt failed, classified as `failure`.
    pub(crate) fn failed(&mut self, failure: Failure) {
        self.attempt_ended(Ended::Failed(failure));
    }

    /// How the call ended, once [`Call::next_attempt`] said it is over.
    pub(crate) fn take_end(&mut self) -> End<'a> {
        // The usual end: nothing to move out (replacing the whole phase copies its largest
        // variant's size).
        if matches!(self.phase, Phase::Finished) {
            self.phase = Phase::Taken;
            return End::LastAttempt;
        }
        match std::mem::replace(&mut self.phase, Phase::Taken) {
            Phase::Finished => End::LastAttempt,
            Phase::Replayed(record, outcome) => match Outcome::unreplayable_reason(&outcome) {
                Some(reason) => {
                    let _span = record.span.enter();
                    let err = Error::Unreplayable {
                        tool: record.tool.to_string(),
                        key: record.key,
                        reason: String::from_utf8_lossy(reason).into_owned(),
                    };
                    tracing::warn!(error = %err, "not run");
                    record.finish_because(0, CallOutcome::Unreplayable, Some(&err.to_string()));
                    End::Refused(err)
                }
                None => End::Replay(Replay { outcome, record }),
            },
            Phase::Refused(err) => End::Refused(err),
            _ => unreachable!("idemkit: a call's end was taken before it was over"),
        }
    }

    /// Drives the protocol up to the next attempt, or to its end.
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<IdempotencyKey>> {
        loop {
            match &mut self.phase {
                Phase::Running(run, between) => match between {
                    Between::Ready | Between::Verify(_) => {
                        // S22: the lease is live by this process's clock before anything starts,
                        // the first attempt too when its claim was awaited: a claim whose reply
                        // came after its lease ended (a slow store, a stall while awaiting it) may
                        // have been taken over meanwhile (found by the model check,
                        // idem-runtime/tests/model.rs). A claim answered at once, in this same
                        // poll, leaves no await between it and the first attempt: no clock read.
                        let held = if run.attempts > 0
                            || run.holder.renewal.is_some()
                            || !run.claimed_at_once
                        {
                            std::task::ready!(run.holder.poll_gate(
                                &run.call,
                                run.started,
                                true,
                                cx
                            ))
                        } else {
                            Ok(())
                        };
                        if let Err(why) = held {
                            self.end_run(Ended::Lost {
                                attempting: false,
                                why,
                            });
                            continue;
                        }
                        if let Between::Verify(after) = *between {
                            *between = Between::Verifying(after);
                            run.stepped = true;
                            return Poll::Ready(Some(run.call.key));
                        }
                        // S19, S20: an outcome that is unknown is not sent again blindly.
                        if run.ambiguous && (run.verifies || !run.resend) {
                            if run.verifies {
                                *between = Between::Verify(None);
                                continue;
                            }
                            self.end_run(Ended::Unsettled(Cow::Borrowed(
                                "an earlier attempt may have taken effect and the tool cannot re-send it (`resend = false`, or it does not take the key)",
                            ),
                            false,
                        ));
                            continue;
                        }
                        run.attempts += 1;
                        run.stepped = true;
                        *between = Between::Attempting;
                        return Poll::Ready(Some(run.call.key));
                    }
                    Between::Backoff(sleep) => {
                        if sleep.as_mut().poll(cx).is_ready() {
                            *between = Between::Ready;
                            continue;
                        }
                        // The lease is kept while waiting, too: a long `RetryAfter` must not lose it.
                        let why =
                            std::task::ready!(run.holder.poll_lease(&run.call, run.started, cx));
                        self.end_run(Ended::Lost {
                            attempting: false,
                            why,
                        });
                    }
                    Between::Attempting | Between::Verifying(_) => unreachable!(
                        "idemkit: a call was asked for its next attempt while one was running"
                    ),
                },
                Phase::Claiming(claiming, _) => {
                    let Poll::Ready(begun) = claiming.as_mut().poll(cx) else {
                        return Poll::Pending;
                    };
                    self.claimed(begun);
                }
                Phase::Recording(recording) => {
                    let Poll::Ready(error) = recording.as_mut().poll(cx) else {
                        return Poll::Pending;
                    };
                    self.recorded(error);
                }
                Phase::Claim {
                    fingerprint: Ok(_), ..
                } => start(&mut self.phase),
                Phase::Claim { .. } => self.refuse_arguments(),
                Phase::Finished | Phase::Replayed(..) | Phase::Refused(_) => {
                    return Poll::Ready(None);
                }
                Phase::Taken => {
                    unreachable!("idemkit: a call was asked for its next attempt after its end")
                }
            }
        }
    }

    /// `Claiming` → what the awaited claim began: `Running`, `Replayed` or `Refused`.
    fn claimed(&mut self, begun: Begun<'a>) {
        self.phase = match begun {
            Begun::Run(run) => Phase::Running(run, Between::Ready),
            Begun::Replay(record, outcome) => Phase::Replayed(record, outcome),
            Begun::Refused(err) => Phase::Refused(err),
            Begun::Cancelled => {
                unreachable!(
                    "idemkit: a claim stopped as cancelled while its call was still polled"
                )
            }
        };
    }

    /// `Recording` → `Finished` once the end is written, or `Refused` with the error the call
    /// then ends with.
    fn recorded(&mut self, error: Option<Error>) {
        self.phase = match error {
            Some(err) => Phase::Refused(err),
            None => Phase::Finished,
        };
    }

    /// `Claim` → `Refused`: the other arguments did not serialize, so there is no fingerprint
    /// to claim with.
    fn refuse_arguments(&mut self) {
        let Phase::Claim {
            tool,
            fingerprint: Err(source),
            ..
        } = std::mem::replace(&mut self.phase, Phase::Taken)
        else {
            unreachable!("idemkit: arguments refused of a call that had its fingerprint")
        };
        self.phase = Phase::Refused(Error::Arguments {
            tool: tool.name().to_owned(),
            source,
        });
    }

    /// Takes what the attempt came to: retries after a wait, or records the end.
    fn attempt_ended(&mut self, ended: Ended) {
        let Phase::Running(run, between @ Between::Attempting) = &mut self.phase else {
            unreachable!("idemkit: an attempt ended that the call did not start")
        };
        if let Ended::Failed(failure) = ended {
            // S14: once an attempt may have taken effect, the call never ends in a release.
            let unknown = failure == Failure::Ambiguous;
            run.ambiguous |= unknown;
            // S19: asked before anything is sent again, whether or not attempts remain.
            if unknown && run.verifies {
                *between = Between::Verify(Some(failure));
                return;
            }
            // S20: not sent again where the provider cannot deduplicate.
            if unknown && !run.resend {
                self.end_run(Ended::Unsettled(Cow::Borrowed(
                    "the attempt may have taken effect and the tool cannot re-send it (`resend = false`, or it does not take the key)",
                ),
                false,
            ));
                return;
            }
            if let Some(delay) = run.next_delay(failure) {
                *between = Between::Backoff(Box::pin(tokio::time::sleep(delay)));
                return;
            }
        }
        self.end_run(ended);
    }

    /// Ends a running call: what it came to is recorded.
    #[inline]
    fn end_run(&mut self, mut ended: Ended) {
        let Phase::Running(run, _) = &mut self.phase else {
            unreachable!("idemkit: a call ended that was not running")
        };
        // In place when it can (a store that answers at once): moving the whole phase
        // out copies its largest variant.
        if run.end_now(&mut ended).is_some() {
            self.phase = Phase::Finished;
            return;
        }
        let Phase::Running(run, _) = std::mem::replace(&mut self.phase, Phase::Taken) else {
            unreachable!()
        };
        self.phase = Phase::Recording(run.end(ended));
    }
}

/// The future of [`Call::next_attempt`].
#[doc(hidden)]
#[derive(Debug)]
#[must_use = "futures do nothing unless awaited"]
pub struct Next<'c, 'a> {
    call: &'c mut Call<'a>,
}

impl Future for Next<'_, '_> {
    type Output = Option<IdempotencyKey>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.call.poll_next(cx)
    }
}
