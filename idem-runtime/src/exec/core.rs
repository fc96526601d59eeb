//! The protocol's steps that do not depend on a tool's types: claim → attempts → complete or
//! release, the retry schedule, the span and the logs.
//!
//! Nothing here is generic over a tool's body, so it is compiled once, in this crate. A call is
//! a [`Call`] driven by a loop in the caller (what the attributes expand to, or
//! [`Tool`](super::Tool)'s methods): `next_attempt().await` says what to do; the caller runs an attempt
//! itself, awaiting the body in place, and reports what it came to. A crate with hundreds of
//! tools then compiles hundreds of small loops, not hundreds of copies of the protocol, nor a
//! generic driver per tool.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};
use tracing::Instrument;
use tracing::field::Empty;

use super::Tool;
use super::wake::Waiting;
use crate::error::{Error, StoreError};
use crate::fingerprint::Fingerprint;
use crate::idem::{Idem, Settings};
use crate::key::IdempotencyKey;
use crate::observe::{CallInfo, CallOutcome, report};
use crate::retry::{Failure, RetryPolicy, Schedule};
use crate::store::{Claim, ClaimRequest, Existing, ExistingState, LeaseToken, Written};

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What one attempt came to, as the protocol needs to know it.
enum Ended {
    /// A side effect succeeded; its outcome serialized (or why it did not).
    Stored(Result<Vec<u8>, serde_json::Error>),
    /// A read succeeded.
    Read,
    /// The attempt failed, and was classified so.
    Failed(Failure),
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
    },
    /// A read not yet polled.
    Read {
        tool: Tool<'a>,
    },
    Claiming(BoxFuture<'a, Begun<'a>>),
    /// Past the claim: attempts. Changed in place between attempts (a `Run` is a few hundred
    /// bytes; moving it per step was a measurable part of a call).
    Running(Run<'a>, Between),
    Recording(BoxFuture<'a, ()>),
    /// The key was completed before: this outcome is to be decoded.
    Replayed(Record<'a>, Vec<u8>),
    /// Refused before any attempt.
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
}

/// How a call ended, for [`super::typed`] to turn into the tool's result.
pub(crate) enum End<'a> {
    /// The last attempt's result stands.
    LastAttempt,
    /// Decode this stored outcome; report with [`Replay::decoded`] or [`Replay::undecodable`].
    Replay(Replay<'a>),
    /// Refused before any attempt.
    Refused(Error),
}

/// A stored outcome to decode.
pub(crate) struct Replay<'a> {
    pub(crate) outcome: Vec<u8>,
    record: Record<'a>,
}

impl Replay<'_> {
    /// The stored outcome decoded: the call is over.
    pub(crate) fn decoded(self) {
        let _span = self.record.span.enter();
        self.record.finish(0, CallOutcome::Replayed);
    }

    /// The stored outcome did not decode as `type_name`: the call is refused.
    pub(crate) fn undecodable(self, type_name: &str, e: serde_json::Error) -> Error {
        let call = self.record;
        let _span = call.span.enter();
        call.refused(call.store_error(StoreError::corrupt(format!(
            "the stored outcome no longer deserializes as `{type_name}` ({e}); did the tool's return type change? \
             Delete the record, or give the changed tool a new `name`"
        ))))
    }
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
            },
        }
    }

    /// A read-only call.
    pub(crate) fn read_only(tool: Tool<'a>) -> Self {
        Call {
            phase: Phase::Read { tool },
        }
    }

    /// The key of the next attempt to run, or `None` when the call is over: a future that
    /// claims, waits between attempts and records the end.
    pub(crate) fn next_attempt(&mut self) -> Next<'_, 'a> {
        Next { call: self }
    }

    /// The attempt succeeded with `value`, which is serialized to be stored.
    pub(crate) fn succeeded<T: serde::Serialize + ?Sized>(&mut self, value: &T) {
        self.attempt_ended(Ended::Stored(serde_json::to_vec(value)));
    }

    /// The read succeeded.
    pub(crate) fn read(&mut self) {
        self.attempt_ended(Ended::Read);
    }

    /// The attempt failed, classified as `failure`.
    pub(crate) fn failed(&mut self, failure: Failure) {
        self.attempt_ended(Ended::Failed(failure));
    }

    /// How the call ended, once [`Call::next_attempt`] said it is over.
    pub(crate) fn take_end(&mut self) -> End<'a> {
        match std::mem::replace(&mut self.phase, Phase::Taken) {
            Phase::Finished => End::LastAttempt,
            Phase::Replayed(record, outcome) => End::Replay(Replay { outcome, record }),
            Phase::Refused(err) => End::Refused(err),
            _ => unreachable!("idemkit: a call's end was taken before it was over"),
        }
    }

    /// Drives the protocol up to the next attempt, or to its end.
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<IdempotencyKey>> {
        loop {
            match &mut self.phase {
                Phase::Running(run, between) => match between {
                    Between::Ready => {
                        run.attempts += 1;
                        *between = Between::Attempting;
                        return Poll::Ready(Some(run.call.key));
                    }
                    Between::Backoff(sleep) => {
                        if sleep.as_mut().poll(cx).is_pending() {
                            return Poll::Pending;
                        }
                        *between = Between::Ready;
                    }
                    Between::Attempting => unreachable!(
                        "idemkit: a call was asked for its next attempt while one was running"
                    ),
                },
                Phase::Claiming(claiming) => {
                    let begun = match claiming.as_mut().poll(cx) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(begun) => begun,
                    };
                    self.phase = match begun {
                        Begun::Run(run) => Phase::Running(run, Between::Ready),
                        Begun::Replay(record, outcome) => Phase::Replayed(record, outcome),
                        Begun::Refused(err) => Phase::Refused(err),
                    };
                }
                Phase::Recording(recording) => {
                    if recording.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    self.phase = Phase::Finished;
                }
                Phase::Claim { .. } => {
                    let Phase::Claim {
                        tool,
                        key,
                        fingerprint,
                    } = std::mem::replace(&mut self.phase, Phase::Taken)
                    else {
                        unreachable!()
                    };
                    self.phase = match fingerprint {
                        Ok(fingerprint) => start(tool, key, fingerprint),
                        Err(source) => Phase::Refused(Error::Arguments {
                            tool: tool.name().to_owned(),
                            source,
                        }),
                    };
                }
                Phase::Read { tool } => {
                    let tool = *tool;
                    self.phase = Phase::Running(Run::read(tool), Between::Ready);
                }
                Phase::Finished | Phase::Replayed(..) | Phase::Refused(_) => {
                    return Poll::Ready(None);
                }
                Phase::Taken => {
                    unreachable!("idemkit: a call was asked for its next attempt after its end")
                }
            }
        }
    }

    /// Takes what the attempt came to: retries after a wait, or records the end.
    fn attempt_ended(&mut self, ended: Ended) {
        let Phase::Running(run, between @ Between::Attempting) = &mut self.phase else {
            unreachable!("idemkit: an attempt ended that the call did not start")
        };
        if let Ended::Failed(failure) = ended
            && let Some(delay) = run.next_delay(failure)
        {
            *between = Between::Backoff(Box::pin(tokio::time::sleep(delay)));
            return;
        }
        let Phase::Running(run, _) = std::mem::replace(&mut self.phase, Phase::Taken) else {
            unreachable!()
        };
        self.phase = match run.end(ended) {
            Some(recording) => Phase::Recording(recording),
            None => Phase::Finished,
        };
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

/// A call past its claim (or a read): the attempts so far, and what the end must record.
struct Run<'a> {
    call: Record<'a>,
    /// `None` for a read: nothing is recorded.
    holder: Option<Holder>,
    policy: RetryPolicy,
    /// Made at the first failure: most calls never need one (boxed: it is most of a `Run`'s
    /// size, which every step of the call moves).
    schedule: Option<Box<Schedule>>,
    started: Instant,
    attempts: u32,
}

/// What a side effect's holder needs to write its end.
struct Holder {
    idem: Idem,
    token: LeaseToken,
    ttl: Duration,
}

impl<'a> Run<'a> {
    fn read(tool: Tool<'a>) -> Self {
        let span = tracing::info_span!(
            "idemkit.read_only",
            tool = tool.name,
            attempts = Empty,
            outcome = Empty
        );
        // A read needs no store: never open the default one just for its retry policy.
        let base = tool
            .idem
            .cloned()
            .or_else(Idem::configured)
            .map_or_else(RetryPolicy::default, |idem| idem.retry_policy());
        Run {
            call: Record {
                tool: tool.name,
                key: IdempotencyKey::from_uuid(uuid::Uuid::nil()),
                span,
            },
            holder: None,
            policy: tool.policy(base),
            schedule: None,
            started: Instant::now(),
            attempts: 0,
        }
    }

    fn side_effect(call: Record<'a>, holder: Holder, policy: RetryPolicy) -> Self {
        Run {
            call,
            holder: Some(holder),
            policy,
            schedule: None,
            started: Instant::now(),
            attempts: 0,
        }
    }

    /// The wait before the next attempt, or `None` to give up.
    fn next_delay(&mut self, failure: Failure) -> Option<Duration> {
        let policy = self.policy;
        let delay = self
            .schedule
            .get_or_insert_with(|| Box::new(policy.schedule()))
            .next_delay(failure, self.started.elapsed())?;
        let attempt = self.attempts;
        let _span = self.call.span.enter();
        if self.holder.is_some() {
            tracing::warn!(
                attempt,
                ?failure,
                ?delay,
                "attempt failed; retrying with the same key"
            );
        } else {
            tracing::debug!(attempt, ?failure, ?delay, "read failed; retrying");
        }
        Some(delay)
    }

    /// Ends the call: a read is over at once; a side effect records its end in the store.
    fn end(self, mut ended: Ended) -> Option<BoxFuture<'a, ()>> {
        let Run {
            call,
            holder,
            attempts,
            ..
        } = self;
        let Some(holder) = holder else {
            let outcome = match ended {
                Ended::Failed(failure) => CallOutcome::Failed(failure),
                Ended::Read | Ended::Stored(_) => CallOutcome::Completed,
            };
            call.finish_read(attempts, outcome);
            return None;
        };
        if let Ended::Stored(Ok(bytes)) = &mut ended {
            // A store that answers at once (in memory) needs no future for the end.
            let _span = call.span.enter();
            let s = holder.idem.settings();
            if let Some(result) = s
                .store
                .complete_now(&call.key, holder.token, bytes, holder.ttl)
            {
                let outcome = if written(&call, "complete", result) {
                    CallOutcome::Completed
                } else {
                    CallOutcome::Unrecorded
                };
                s.wakes.ended(&call.key);
                call.finish(attempts, outcome);
                return None;
            }
        }
        let span = call.span.clone();
        Some(Box::pin(
            async move {
                let Holder { idem, token, ttl } = holder;
                let s = idem.settings();
                let key = call.key;
                match ended {
                    Ended::Stored(Ok(bytes)) => {
                        let recorded =
                            write(s, &call, "complete", s.store.complete(&key, token, &bytes, ttl))
                                .await;
                        let outcome = if recorded {
                            CallOutcome::Completed
                        } else {
                            CallOutcome::Unrecorded
                        };
                        call.finish(attempts, outcome);
                    }
                    Ended::Stored(Err(e)) => {
                        tracing::error!(error = %e, "the outcome does not serialize; keeping the record as ambiguous");
                        let note = format!("the outcome did not serialize: {e}");
                        let mark = s.store.mark_ambiguous(&key, token, &note, ttl);
                        write(s, &call, "mark_ambiguous", mark).await;
                        call.finish(attempts, CallOutcome::Unrecorded);
                    }
                    Ended::Failed(Failure::Ambiguous) => {
                        let note = format!(
                            "{attempts} attempt(s); the last failed and may have taken effect"
                        );
                        let mark = s.store.mark_ambiguous(&key, token, &note, ttl);
                        write(s, &call, "mark_ambiguous", mark).await;
                        call.finish(attempts, CallOutcome::Failed(Failure::Ambiguous));
                    }
                    Ended::Failed(failure) => {
                        write(s, &call, "release", s.store.release(&key, token)).await;
                        call.finish(attempts, CallOutcome::Failed(failure));
                    }
                    Ended::Read => unreachable!("idemkit: a side effect ended as a read"),
                }
                s.wakes.ended(&key);
            }
            .instrument(span),
        ))
    }
}

// Short-lived (the claim's result, moved once into the phase): boxing `Run` would cost an
// allocation per call to save a copy.
#[allow(clippy::large_enum_variant)]
enum Begun<'a> {
    Run(Run<'a>),
    Replay(Record<'a>, Vec<u8>),
    Refused(Error),
}

/// Everything before the first attempt: the span, the runtime in force, the claim. A store
/// that answers the claim at once ([`Store::claim_now`](crate::store::Store::claim_now)) is
/// answered here, without a future; otherwise (or while another holder runs) the claim is
/// awaited, waiting (bounded) for that holder.
fn start<'a>(tool: Tool<'a>, key: IdempotencyKey, fingerprint: Fingerprint) -> Phase<'a> {
    let span = tracing::info_span!(
        "idemkit.side_effect",
        tool = tool.name,
        key = %key,
        fingerprint = %fingerprint,
        attempts = Empty,
        replayed = Empty,
        outcome = Empty,
    );
    let call = Record {
        tool: tool.name,
        key,
        span: span.clone(),
    };
    let entered = span.enter();
    let idem = match tool.runtime() {
        Ok(idem) => idem,
        Err(e) => return Phase::Refused(call.refused(e)),
    };
    let s = idem.settings();
    let token = LeaseToken::new();
    let ttl = tool.ttl.unwrap_or(s.ttl);
    let policy = tool.policy(s.retry);
    let wait = tool.wait.unwrap_or(s.wait);
    let req = ClaimRequest {
        key,
        tool: tool.name,
        fingerprint,
        token,
        lease: tool.lease.unwrap_or(s.lease),
        ttl,
    };
    let answered = s.store.claim_now(&req).map(|claim| {
        claim
            .map_err(|e| call.store_error(e))
            .and_then(|claim| answer(&req, claim))
    });
    match answered {
        Some(Ok(Answer::Run)) => {
            let run = Run::side_effect(call, Holder { idem, token, ttl }, policy);
            return Phase::Running(run, Between::Ready);
        }
        Some(Ok(Answer::Replay(outcome))) => return Phase::Replayed(call, outcome),
        Some(Err(e)) => return Phase::Refused(call.refused(e)),
        // Another holder runs it: wait for it below, as every store does.
        Some(Ok(Answer::Wait(_))) | None => {}
    }
    drop(entered);
    Phase::Claiming(Box::pin(
        async move {
            match claim(idem.settings(), &req, wait).await {
                Ok(Claimed::Run) => {}
                Ok(Claimed::Replay(outcome)) => return Begun::Replay(call, outcome),
                Err(e) => return Begun::Refused(call.refused(e)),
            }
            Begun::Run(Run::side_effect(call, Holder { idem, token, ttl }, policy))
        }
        .instrument(span),
    ))
}

/// The tool, key and span of one call: what every log line and [`CallInfo`] names.
struct Record<'a> {
    tool: &'a str,
    key: IdempotencyKey,
    span: tracing::Span,
}

impl Record<'_> {
    fn store_error(&self, source: StoreError) -> Error {
        Error::Store {
            tool: self.tool.to_owned(),
            key: Some(self.key),
            source,
        }
    }

    fn refused(&self, err: Error) -> Error {
        tracing::warn!(error = %err, "not run");
        self.finish(0, CallOutcome::Refused);
        err
    }

    fn finish(&self, attempts: u32, outcome: CallOutcome) {
        let replayed = outcome == CallOutcome::Replayed;
        self.span.record("attempts", attempts);
        self.span.record("replayed", replayed);
        self.span.record("outcome", outcome.as_str());
        tracing::info!(
            attempts,
            replayed,
            outcome = outcome.as_str(),
            "side effect finished"
        );
        report(|| CallInfo {
            tool: self.tool.to_owned(),
            key: Some(self.key),
            attempts,
            replayed,
            outcome,
        });
    }

    fn finish_read(&self, attempts: u32, outcome: CallOutcome) {
        self.span.record("attempts", attempts);
        self.span.record("outcome", outcome.as_str());
        report(|| CallInfo {
            tool: self.tool.to_owned(),
            key: None,
            attempts,
            replayed: false,
            outcome,
        });
    }
}

enum Claimed {
    Run,
    Replay(Vec<u8>),
}

/// What a claim's answer means for the call.
enum Answer {
    Run,
    Replay(Vec<u8>),
    /// Another holder's lease is live for this long.
    Wait(Duration),
}

fn answer(req: &ClaimRequest<'_>, claim: Claim) -> Result<Answer, Error> {
    let Existing { fingerprint, state } = match claim {
        Claim::Acquired => return Ok(Answer::Run),
        Claim::Existing(existing) => existing,
    };
    if fingerprint != req.fingerprint {
        return Err(Error::KeyReuse {
            tool: req.tool.to_owned(),
            key: req.key,
        });
    }
    match state {
        ExistingState::Completed { outcome } => Ok(Answer::Replay(outcome)),
        ExistingState::Running { lease_remaining } => Ok(Answer::Wait(lease_remaining)),
        ExistingState::Ambiguous => Err(Error::Store {
            tool: req.tool.to_owned(),
            key: Some(req.key),
            source: StoreError::corrupt(
                "the store reported an ambiguous record of the same arguments instead of handing it over; \
                 the store implementation breaks the claim contract",
            ),
        }),
    }
}

/// Claims the key, waiting (bounded) while another holder's lease is live.
async fn claim(s: &Settings, req: &ClaimRequest<'_>, wait: Duration) -> Result<Claimed, Error> {
    let started = Instant::now();
    let mut nap = Duration::from_millis(10);
    // Registered at the first answer that another call holds the key: a holder of this runtime
    // then wakes this call at its end (see `wake`); others are found by polling.
    let mut waiting: Option<Waiting<'_>> = None;
    loop {
        let seen = waiting.as_ref().map(|w| w.ends().seen());
        let claim = timed(s, s.store.claim(req))
            .await
            .map_err(|source| Error::Store {
                tool: req.tool.to_owned(),
                key: Some(req.key),
                source,
            })?;
        let lease_remaining = match answer(req, claim)? {
            Answer::Run => return Ok(Claimed::Run),
            Answer::Replay(outcome) => return Ok(Claimed::Replay(outcome)),
            Answer::Wait(lease_remaining) => lease_remaining,
        };
        let waited = started.elapsed();
        if waited >= wait {
            return Err(Error::InFlight {
                tool: req.tool.to_owned(),
                key: req.key,
                waited,
            });
        }
        let (Some(waiting), Some(seen)) = (&waiting, seen) else {
            // Listening from now on, look again at once: a holder that ended in between is
            // seen by that claim.
            waiting = Some(s.wakes.wait(req.key));
            continue;
        };
        // Wake at the lease's end at the latest, to take over a holder that died.
        let pause = nap
            .min(lease_remaining + Duration::from_millis(1))
            .min(wait - waited);
        tracing::debug!(
            ?pause,
            ?lease_remaining,
            "another call holds the key; waiting for its outcome"
        );
        let ended = waiting.ends().notify().notified();
        let mut ended = std::pin::pin!(ended);
        ended.as_mut().enable();
        if waiting.ends().seen() == seen {
            let sleep = tokio::time::sleep(pause);
            let mut sleep = std::pin::pin!(sleep);
            std::future::poll_fn(|cx| {
                if ended.as_mut().poll(cx).is_ready() || sleep.as_mut().poll(cx).is_ready() {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            })
            .await;
        }
        nap = (nap * 2).min(Duration::from_millis(500));
    }
}

/// Runs a store operation under the runtime's store timeout. An operation that answers on its
/// first poll (an in-memory store) never needed the timer, so the timer starts only after it.
async fn timed<T>(
    s: &Settings,
    op: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    let mut op = std::pin::pin!(op);
    let first = std::future::poll_fn(|cx| Poll::Ready(op.as_mut().poll(cx))).await;
    if let Poll::Ready(result) = first {
        return result;
    }
    match tokio::time::timeout(s.store_timeout, op).await {
        Ok(result) => result,
        Err(_) => Err(StoreError::unavailable(format!(
            "the store did not answer within {:?}",
            s.store_timeout
        ))),
    }
}

/// A holder's write after the body ran; returns whether it was applied. A failure here cannot
/// undo the effect, so it is logged, not returned: the caller keeps the body's result.
async fn write(
    s: &Settings,
    call: &Record<'_>,
    what: &str,
    op: impl Future<Output = Result<Written, StoreError>>,
) -> bool {
    written(call, what, timed(s, op).await)
}

/// What [`write`] logs of a holder's write, and whether it was applied.
fn written(call: &Record<'_>, what: &str, result: Result<Written, StoreError>) -> bool {
    match result {
        Ok(Written::Applied) => true,
        Ok(Written::Fenced) => {
            tracing::warn!(tool = call.tool, key = %call.key, what, "lease was taken over meanwhile; the new holder's record stands");
            false
        }
        Err(e) => {
            tracing::error!(tool = call.tool, key = %call.key, what, error = %e, "store write failed after the body ran; the record stays claimed until its lease expires");
            false
        }
    }
}
