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

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
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
use crate::store::{Claim, ClaimRequest, Existing, ExistingState, LeaseToken, Store, Written};

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// How an outcome that cannot be replayed is stored (S16): a completed record whose outcome
/// starts with a NUL byte, which no JSON text does, followed by why. Part of the record format.
pub(crate) const UNREPLAYABLE: &[u8] = b"\0idemkit:unreplayable\0";

/// What one attempt came to, as the protocol needs to know it.
enum Ended {
    /// A side effect succeeded; its outcome serialized and reads back.
    Stored(Vec<u8>),
    /// A side effect succeeded, but its outcome does not serialize or read back: why.
    Unreplayable(String),
    /// A read succeeded.
    Read,
    /// The attempt failed, and was classified so.
    Failed(Failure),
    /// The lease was lost (S13), while an attempt ran (`attempting`) or between attempts.
    Lost { attempting: bool, why: &'static str },
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
    Read { tool: Tool<'a> },
    /// The claim is awaited; what to release if the call is dropped meanwhile.
    Claiming(BoxFuture<'a, Begun<'a>>, (Idem, IdempotencyKey, LeaseToken)),
    /// Past the claim: attempts. Changed in place between attempts (a `Run` is a few hundred
    /// bytes; moving it per step was a measurable part of a call).
    Running(Run<'a>, Between),
    /// The end is being written; the error the call then ends with, if not its last attempt's
    /// result. Owns everything, so a dropped call can finish it in the background.
    Recording(BoxFuture<'static, Option<Error>>),
    /// The key was completed before: this outcome is to be decoded.
    Replayed(Record<'a>, Vec<u8>),
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

    /// The stored outcome did not decode as `type_name`: the call is refused (S9), saying that
    /// the operation did run.
    pub(crate) fn undecodable(self, type_name: &str, e: serde_json::Error) -> Error {
        let call = self.record;
        let _span = call.span.enter();
        call.refused(call.store_error(StoreError::corrupt(format!(
            "the operation already ran and completed under this key, but its stored outcome no longer deserializes \
             as `{type_name}` ({e}), so it cannot be replayed and is not run again; did the tool's return type change? \
             Give the changed tool a new `name`, or forget the record to run the operation again"
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

    /// The attempt succeeded with `value`, which is serialized to be stored. An outcome that
    /// would not replay is stored as such (S16): one that does not serialize, or holds a NaN or
    /// an infinite float (JSON writes `null`, which does not read back as a float). Any other
    /// way an outcome fails to read back as `T` (a hand-written `Deserialize` that does not
    /// match its `Serialize`) is found at replay, which then says the operation ran.
    pub(crate) fn succeeded<T: serde::Serialize + ?Sized>(&mut self, value: &T) {
        let ended = match serde_json::to_vec(value) {
            Ok(bytes) => match crate::fingerprint::finite::first_non_finite(value) {
                None => Ended::Stored(bytes),
                Some(v) => Ended::Unreplayable(format!(
                    "the outcome holds the float {v}, which JSON stores as `null`, so it does not read back as `{}`",
                    std::any::type_name::<T>()
                )),
            },
            Err(e) => Ended::Unreplayable(format!("the outcome does not serialize: {e}")),
        };
        self.attempt_ended(ended);
    }

    /// Keeps the running call's lease renewed while its attempt is pending (S12); `Ready` when
    /// the lease is lost (S13), the call then being over. Reads never lose a lease.
    pub(crate) fn poll_lease(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let Phase::Running(run, _) = &mut self.phase else {
            return Poll::Pending;
        };
        let Some(holder) = &mut run.holder else {
            return Poll::Pending;
        };
        let why = std::task::ready!(holder.poll_lease(&run.call, cx));
        self.end_run(Ended::Lost {
            attempting: true,
            why,
        });
        Poll::Ready(())
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
            Phase::Replayed(record, outcome) => match outcome.strip_prefix(UNREPLAYABLE) {
                Some(reason) => {
                    let _span = record.span.enter();
                    let err = Error::Unreplayable {
                        tool: record.tool.to_string(),
                        key: record.key,
                        reason: String::from_utf8_lossy(reason).into_owned(),
                    };
                    tracing::warn!(error = %err, "not run");
                    record.finish(0, CallOutcome::Unreplayable);
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
                    Between::Ready => {
                        run.attempts += 1;
                        *between = Between::Attempting;
                        return Poll::Ready(Some(run.call.key));
                    }
                    Between::Backoff(sleep) => {
                        if sleep.as_mut().poll(cx).is_ready() {
                            *between = Between::Ready;
                            continue;
                        }
                        // The lease is kept while waiting, too: a long `RetryAfter` must not lose it.
                        let Some(holder) = &mut run.holder else {
                            return Poll::Pending;
                        };
                        let why = std::task::ready!(holder.poll_lease(&run.call, cx));
                        self.end_run(Ended::Lost {
                            attempting: false,
                            why,
                        });
                    }
                    Between::Attempting => unreachable!(
                        "idemkit: a call was asked for its next attempt while one was running"
                    ),
                },
                Phase::Claiming(claiming, _) => {
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
                    let Poll::Ready(error) = recording.as_mut().poll(cx) else {
                        return Poll::Pending;
                    };
                    self.phase = match error {
                        Some(err) => Phase::Refused(err),
                        None => Phase::Finished,
                    };
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
        if let Ended::Failed(failure) = ended {
            // S14: once an attempt may have taken effect, the call never ends in a release.
            run.ambiguous |= failure == Failure::Ambiguous;
            if let Some(delay) = run.next_delay(failure) {
                *between = Between::Backoff(Box::pin(tokio::time::sleep(delay)));
                return;
            }
        }
        self.end_run(ended);
    }

    /// Ends a running call: what it came to is recorded.
    fn end_run(&mut self, ended: Ended) {
        let Phase::Running(run, _) = std::mem::replace(&mut self.phase, Phase::Taken) else {
            unreachable!("idemkit: a call ended that was not running")
        };
        self.phase = match run.end(ended) {
            Ok(None) => Phase::Finished,
            Ok(Some(err)) => Phase::Refused(err),
            Err(recording) => Phase::Recording(recording),
        };
    }
}

/// S15: a call dropped before its end (its caller's future was dropped: a timeout, a `select!`,
/// a cancelled task; or its body panicked) ends its claim at once, in the background: kept as
/// ambiguous if an attempt was running or one had failed ambiguously, released otherwise; the
/// runtime's waiters are woken. An end write already under way is finished. (A process that
/// dies leaves its lease to expire instead: S8.)
impl Drop for Call<'_> {
    fn drop(&mut self) {
        // A call that ended has nothing to end (the common case: no move of the phase).
        if !matches!(
            self.phase,
            Phase::Running(..) | Phase::Claiming(..) | Phase::Recording(_)
        ) {
            return;
        }
        match std::mem::replace(&mut self.phase, Phase::Taken) {
            Phase::Running(run, between) => {
                let Some(holder) = run.holder else { return };
                let call = run.call;
                let _span = call.span.enter();
                let may_have_happened = run.ambiguous || matches!(between, Between::Attempting);
                tracing::warn!(
                    attempts = run.attempts,
                    may_have_happened,
                    "the call was dropped before its end (cancelled, or its body panicked); ending its claim"
                );
                let Holder {
                    idem, token, ttl, ..
                } = holder;
                let key = call.key;
                let attempts = run.attempts;
                in_background(async move {
                    let s = idem.settings();
                    let written = if may_have_happened {
                        let note = format!(
                            "the call was dropped (cancelled, or its body panicked) after {attempts} attempt(s) \
                             while one may have taken effect"
                        );
                        timed(s, s.store.mark_ambiguous(&key, token, &note, ttl)).await
                    } else {
                        timed(s, s.store.release(&key, token)).await
                    };
                    if let Err(e) = written {
                        tracing::warn!(%key, error = %e, "a dropped call's claim could not be ended; its lease will expire");
                    }
                    s.wakes.ended(&key);
                });
            }
            Phase::Claiming(_, (idem, key, token)) => {
                // The claim may have been applied: release it under its token (refused if not).
                in_background(async move {
                    let s = idem.settings();
                    if let Ok(Written::Applied) = timed(s, s.store.release(&key, token)).await {
                        s.wakes.ended(&key);
                    }
                });
            }
            Phase::Recording(recording) => in_background(async move {
                recording.await;
            }),
            _ => {}
        }
    }
}

/// Runs a dropped call's last store write: at once when the store answers at once, else on the
/// tokio runtime in force (none: the lease expires instead).
fn in_background(fut: impl Future<Output = ()> + Send + 'static) {
    let mut fut = Box::pin(fut);
    if fut
        .as_mut()
        .poll(&mut Context::from_waker(std::task::Waker::noop()))
        .is_ready()
    {
        return;
    }
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => drop(handle.spawn(fut)),
        Err(_) => tracing::warn!(
            "no tokio runtime to end a dropped call's claim on; its lease will expire instead"
        ),
    }
}

impl<'a> Call<'a> {}

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
    /// An attempt failed `Ambiguous`: the call never ends in a release (S14).
    ambiguous: bool,
}

/// What a side effect's holder needs to keep its lease and write its end.
struct Holder {
    idem: Idem,
    token: LeaseToken,
    ttl: Duration,
    lease: Duration,
    /// When the claim that took the lease was sent: by this process's clock the lease ends no
    /// sooner than `lease` after it (the store applied it later).
    claimed_at: Instant,
    /// Made when an attempt first waits (a body that answers at once never needs it).
    renewal: Option<Box<Renewal>>,
}

/// A held lease's renewals (S12).
struct Renewal {
    /// The lease ends no sooner than this, by this process's clock.
    ends: Instant,
    /// When the next renewal is due: a third of the lease after the last one was sent.
    due: Instant,
    timer: Pin<Box<Sleep>>,
    /// A renewal under way, and when it was sent.
    pending: Option<(Instant, BoxFuture<'static, Result<Written, StoreError>>)>,
}

impl Holder {
    /// When the lease ends at the latest, as far as this process knows.
    fn lease_ends(&self) -> Instant {
        self.renewal
            .as_ref()
            .map_or(self.claimed_at + self.lease, |r| r.ends)
    }

    /// Renews the lease when due; `Ready(why)` when it is lost: a renewal was refused (taken
    /// over), or none succeeded before it ended.
    fn poll_lease(&mut self, call: &Record<'_>, cx: &mut Context<'_>) -> Poll<&'static str> {
        let Holder {
            idem,
            token,
            lease,
            claimed_at,
            renewal,
            ..
        } = self;
        let (lease, token) = (*lease, *token);
        let r = renewal.get_or_insert_with(|| {
            let due = *claimed_at + lease / 3;
            Box::new(Renewal {
                ends: *claimed_at + lease,
                due,
                timer: Box::pin(tokio::time::sleep_until(due)),
                pending: None,
            })
        });
        loop {
            if let Some((sent, renewing)) = &mut r.pending
                && let Poll::Ready(result) = renewing.as_mut().poll(cx)
            {
                let sent = *sent;
                r.pending = None;
                match result {
                    Ok(Written::Applied) => {
                        r.ends = sent + lease;
                        r.due = sent + lease / 3;
                    }
                    Ok(Written::Fenced) => {
                        let _span = call.span.enter();
                        tracing::warn!(
                            "lease renewal refused: another caller took the key over; stopping this call"
                        );
                        return Poll::Ready("another caller took the key over");
                    }
                    Err(e) => {
                        let _span = call.span.enter();
                        tracing::warn!(error = %e, "lease renewal failed; trying again");
                        r.due = Instant::now() + lease / 10;
                    }
                }
            }
            let now = Instant::now();
            if now >= r.ends {
                let _span = call.span.enter();
                tracing::warn!(
                    "no lease renewal succeeded before the lease ended; stopping this call"
                );
                return Poll::Ready("no renewal succeeded before the lease ended");
            }
            if r.pending.is_none() && now >= r.due {
                let store: Arc<dyn Store> = Arc::clone(idem.store());
                let timeout = idem.settings().store_timeout;
                let key = call.key;
                r.pending = Some((
                    now,
                    Box::pin(async move {
                        match tokio::time::timeout(timeout, store.renew(&key, token, lease)).await {
                            Ok(result) => result,
                            Err(_) => Err(StoreError::unavailable(format!(
                                "the store did not answer within {timeout:?}"
                            ))),
                        }
                    }),
                ));
                continue;
            }
            let wake = if r.pending.is_some() {
                r.ends
            } else {
                r.due.min(r.ends)
            };
            if r.timer.deadline() != wake {
                r.timer.as_mut().reset(wake);
            }
            if r.timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
    }
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
                tool: Cow::Borrowed(tool.name),
                key: IdempotencyKey::from_uuid(uuid::Uuid::nil()),
                span,
            },
            holder: None,
            policy: tool.policy(base),
            schedule: None,
            started: Instant::now(),
            attempts: 0,
            ambiguous: false,
        }
    }

    fn side_effect(call: Record<'a>, holder: Holder, policy: RetryPolicy) -> Self {
        Run {
            call,
            started: holder.claimed_at,
            holder: Some(holder),
            policy,
            schedule: None,
            attempts: 0,
            ambiguous: false,
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

    /// Ends the call: a read is over at once; a side effect records its end in the store, at
    /// once when the store answers at once (`Ok`, with the error the call ends with if not its
    /// last attempt's result), else through the returned future.
    fn end(self, ended: Ended) -> Result<Option<Error>, BoxFuture<'static, Option<Error>>> {
        let Run {
            call,
            holder,
            attempts,
            ambiguous,
            ..
        } = self;
        let Some(holder) = holder else {
            let outcome = match ended {
                Ended::Failed(failure) => CallOutcome::Failed(failure),
                _ => CallOutcome::Completed,
            };
            call.finish_read(attempts, outcome);
            return Ok(None);
        };
        let mut ended = ended;
        if let Ended::Stored(bytes) = &mut ended {
            // A store that answers at once (in memory) needs no future for the end.
            let _span = call.span.enter();
            let s = holder.idem.settings();
            if let Some(result @ Ok(_)) =
                s.store
                    .complete_now(&call.key, holder.token, bytes, holder.ttl)
            {
                let outcome = if written(&call, "complete", result) {
                    CallOutcome::Completed
                } else {
                    CallOutcome::Unrecorded
                };
                s.wakes.ended(&call.key);
                call.finish(attempts, outcome);
                return Ok(None);
            }
        }
        let span = call.span.clone();
        let call = call.into_owned();
        Err(Box::pin(
            async move {
                let until = holder.lease_ends();
                let Holder {
                    idem, token, ttl, ..
                } = holder;
                let s = idem.settings();
                let key = call.key;
                let (outcome, error) = match ended {
                    Ended::Stored(bytes) => {
                        let op = || s.store.complete(&key, token, &bytes, ttl);
                        match write(s, &call, "complete", until, op).await {
                            true => (CallOutcome::Completed, None),
                            false => (CallOutcome::Unrecorded, None),
                        }
                    }
                    Ended::Unreplayable(reason) => {
                        tracing::error!(%reason, "the outcome cannot be replayed; recording that the operation ran");
                        let mut bytes = UNREPLAYABLE.to_vec();
                        bytes.extend_from_slice(reason.as_bytes());
                        let op = || s.store.complete(&key, token, &bytes, ttl);
                        match write(s, &call, "complete", until, op).await {
                            true => (CallOutcome::Completed, None),
                            false => (CallOutcome::Unrecorded, None),
                        }
                    }
                    Ended::Failed(Failure::Ambiguous) => {
                        let note = format!(
                            "{attempts} attempt(s); the last failed and may have taken effect"
                        );
                        let op = || s.store.mark_ambiguous(&key, token, &note, ttl);
                        write(s, &call, "mark_ambiguous", until, op).await;
                        (CallOutcome::Failed(Failure::Ambiguous), None)
                    }
                    Ended::Failed(last) if ambiguous => {
                        let note = format!(
                            "{attempts} attempt(s); the last failed as {last:?}, an earlier one may have taken effect"
                        );
                        let op = || s.store.mark_ambiguous(&key, token, &note, ttl);
                        write(s, &call, "mark_ambiguous", until, op).await;
                        let err = Error::Ambiguous {
                            tool: call.tool.to_string(),
                            key,
                            attempts,
                            last,
                        };
                        (CallOutcome::Failed(Failure::Ambiguous), Some(err))
                    }
                    Ended::Failed(failure) => {
                        let op = || s.store.release(&key, token);
                        write(s, &call, "release", until, op).await;
                        (CallOutcome::Failed(failure), None)
                    }
                    Ended::Lost { attempting, why } => {
                        // Fenced when taken over; applied when only the renewals failed.
                        if attempting || ambiguous {
                            let note = format!("{attempts} attempt(s); the lease was lost while one ran ({why})");
                            let mark = s.store.mark_ambiguous(&key, token, &note, ttl);
                            written(&call, "mark_ambiguous", timed(s, mark).await);
                        } else {
                            written(&call, "release", timed(s, s.store.release(&key, token)).await);
                        }
                        let err = Error::LeaseLost {
                            tool: call.tool.to_string(),
                            key,
                            attempts,
                            why,
                        };
                        (CallOutcome::LeaseLost, Some(err))
                    }
                    Ended::Read => unreachable!("idemkit: a side effect ended as a read"),
                };
                s.wakes.ended(&key);
                call.finish(attempts, outcome);
                error
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
        tool: Cow::Borrowed(tool.name),
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
    let lease = tool.lease.unwrap_or(s.lease);
    if ttl < lease {
        // A running record must never expire before its lease (the builders refuse this too).
        return Phase::Refused(call.refused(Error::Settings {
            tool: tool.name.to_owned(),
            reason: format!(
                "its ttl ({ttl:?}) is shorter than its lease ({lease:?}): a running record would expire \
                 before its lease; make the ttl at least the lease"
            ),
        }));
    }
    let policy = tool.policy(s.retry);
    let wait = tool.wait.unwrap_or(s.wait);
    let req = ClaimRequest {
        key,
        tool: tool.name,
        fingerprint,
        token,
        lease,
        ttl,
    };
    let claimed_at = Instant::now();
    let holder = move |idem, claimed_at| Holder {
        idem,
        token,
        ttl,
        lease,
        claimed_at,
        renewal: None,
    };
    let answered = s.store.claim_now(&req).map(|claim| {
        claim
            .map_err(|e| call.store_error(e))
            .and_then(|claim| answer(&req, claim))
    });
    match answered {
        Some(Ok(Answer::Run)) => {
            let run = Run::side_effect(call, holder(idem, claimed_at), policy);
            return Phase::Running(run, Between::Ready);
        }
        Some(Ok(Answer::Replay(outcome))) => return Phase::Replayed(call, outcome),
        Some(Err(e)) => return Phase::Refused(call.refused(e)),
        // Another holder runs it: wait for it below, as every store does.
        Some(Ok(Answer::Wait(_))) | None => {}
    }
    drop(entered);
    let on_drop = (idem.clone(), key, token);
    Phase::Claiming(
        Box::pin(
            async move {
                let claimed_at = match claim(idem.settings(), &req, wait).await {
                    Ok(Claimed::Run(sent)) => sent,
                    Ok(Claimed::Replay(outcome)) => return Begun::Replay(call, outcome),
                    Err(e) => return Begun::Refused(call.refused(e)),
                };
                Begun::Run(Run::side_effect(call, holder(idem, claimed_at), policy))
            }
            .instrument(span),
        ),
        on_drop,
    )
}

/// The tool, key and span of one call: what every log line and [`CallInfo`] names.
struct Record<'a> {
    tool: Cow<'a, str>,
    key: IdempotencyKey,
    span: tracing::Span,
}

impl Record<'_> {
    /// The same, owning the tool's name (for a write that may outlive the caller).
    fn into_owned(self) -> Record<'static> {
        Record {
            tool: Cow::Owned(self.tool.into_owned()),
            key: self.key,
            span: self.span,
        }
    }

    fn store_error(&self, source: StoreError) -> Error {
        Error::Store {
            tool: self.tool.to_string(),
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
            tool: self.tool.to_string(),
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
            tool: self.tool.to_string(),
            key: None,
            attempts,
            replayed: false,
            outcome,
        });
    }
}

enum Claimed {
    /// The key is ours, by the claim sent at this instant.
    Run(Instant),
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
        let sent = Instant::now();
        let claim = timed(s, s.store.claim(req))
            .await
            .map_err(|source| Error::Store {
                tool: req.tool.to_owned(),
                key: Some(req.key),
                source,
            })?;
        let lease_remaining = match answer(req, claim)? {
            Answer::Run => return Ok(Claimed::Run(sent)),
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

/// A holder's write after the body ran; returns whether it was applied. A store failure is
/// retried under the token (the write is safe to repeat) until the lease would end (S17): past
/// it, another caller may take over. A failure cannot undo the effect, so it is logged, not
/// returned: the caller keeps the body's result.
async fn write<F: Future<Output = Result<Written, StoreError>>>(
    s: &Settings,
    call: &Record<'_>,
    what: &str,
    until: Instant,
    mut op: impl FnMut() -> F,
) -> bool {
    let mut pause = Duration::from_millis(20);
    loop {
        match timed(s, op()).await {
            Err(e) if Instant::now() + pause < until => {
                tracing::warn!(what, error = %e, ?pause, "store write failed after the body ran; retrying under the lease");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            result => return written(call, what, result),
        }
    }
}

/// What [`write`] logs of a holder's write, and whether it was applied.
fn written(call: &Record<'_>, what: &str, result: Result<Written, StoreError>) -> bool {
    match result {
        Ok(Written::Applied) => true,
        Ok(Written::Fenced) => {
            tracing::warn!(tool = %call.tool, key = %call.key, what, "lease was taken over meanwhile; the new holder's record stands");
            false
        }
        Err(e) => {
            tracing::error!(tool = %call.tool, key = %call.key, what, error = %e, "store write failed after the body ran; the record stays claimed until its lease expires");
            false
        }
    }
}
