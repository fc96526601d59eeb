//! A call past its claim: its attempts' bookkeeping (`Run`), and the end it records in the
//! store (complete, keep as ambiguous, release), retried under the lease (S14, S16, S17).

use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use super::lease::Holder;
use super::timed::timed;
use super::trace::CallTrace;
use super::{BoxFuture, Ended};
use crate::error::{Error, StoreError};
use crate::failure::Failure;
use crate::idem::Settings;
use crate::key::IdempotencyKey;
use crate::observe::CallOutcome;
use crate::retry::{RetryPolicy, Schedule};
use crate::store::{LeaseToken, Outcome, Takeover, Written};

/// A call past its claim: the attempts so far, and what the end must record.
pub(super) struct Run<'a> {
    pub(super) call: CallTrace<'a>,
    pub(super) holder: Holder,
    pub(super) policy: RetryPolicy,
    /// Made at the first failure: most calls never need one (boxed: it is most of a `Run`'s
    /// size, which every step of the call moves).
    pub(super) schedule: Option<Box<Schedule>>,
    /// When the first attempt could start: the claim was sent then (its lease runs from it).
    pub(super) started: Instant,
    pub(super) attempts: u32,
    /// An attempt failed `Ambiguous`, or the claim took over a record whose outcome is unknown
    /// (kept as ambiguous, or a holder's that ran out its lease): the call never ends in a
    /// release (S14, S14+), and nothing is sent again unless the tool may re-send or a
    /// verification says it did not happen (S19, S20).
    pub(super) ambiguous: bool,
    /// An attempt or a verification was handed out: something ran under the claim (S27).
    pub(super) stepped: bool,
    /// S20: an attempt whose outcome is unknown may be sent again.
    pub(super) resend: bool,
    /// S19: the call's loop answers verification steps.
    pub(super) verifies: bool,
    /// The claim was answered at once, in the poll that hands out the first attempt (S22: no
    /// await between them, so no clock to read before it).
    pub(super) claimed_at_once: bool,
}

impl<'a> Run<'a> {
    /// A side effect whose claim, sent at `claimed_at`, took the lease.
    /// `takeover`: what the claim took over, if anything; its outcome is unknown (S14+, S19).
    pub(super) fn side_effect(
        call: CallTrace<'a>,
        holder: Holder,
        policy: RetryPolicy,
        claimed_at: Instant,
        takeover: Option<Takeover>,
        (resend, verifies): (bool, bool),
        claimed_at_once: bool,
    ) -> Self {
        Run {
            call,
            started: claimed_at,
            holder,
            policy,
            schedule: None,
            attempts: 0,
            ambiguous: takeover.is_some(),
            stepped: false,
            resend,
            verifies,
            claimed_at_once,
        }
    }

    /// The same, owning the tool's name (for a write that may outlive the caller).
    pub(super) fn into_owned(self) -> Run<'static> {
        Run {
            call: self.call.into_owned(),
            holder: self.holder,
            policy: self.policy,
            schedule: self.schedule,
            started: self.started,
            attempts: self.attempts,
            ambiguous: self.ambiguous,
            stepped: self.stepped,
            resend: self.resend,
            verifies: self.verifies,
            claimed_at_once: self.claimed_at_once,
        }
    }

    /// The wait before the next attempt, or `None` to give up.
    pub(super) fn next_delay(&mut self, failure: Failure) -> Option<Duration> {
        let policy = self.policy;
        let delay = self
            .schedule
            .get_or_insert_with(|| Box::new(policy.schedule()))
            .next_delay(failure, self.started.elapsed())?;
        let attempt = self.attempts;
        let _span = self.call.span.enter();
        tracing::warn!(
            attempt,
            ?failure,
            ?delay,
            "attempt failed; retrying with the same key"
        );
        Some(delay)
    }

    /// Ends the call where it can without a future, in place (no move of the `Run`): a side
    /// effect whose store completes at once (in memory). `None`: [`Run::end`] it.
    #[inline]
    pub(super) fn end_now(&mut self, ended: &mut Ended) -> Option<()> {
        let holder = &self.holder;
        let Ended::Stored(outcome) = ended else {
            return None;
        };
        let call = &self.call;
        let _span = call.span.enter();
        let s = holder.idem.settings();
        // A store that answers at once ends the call here. An answer still to come is dropped
        // unpolled (a store's future does nothing until polled) and written again by `end`,
        // which can await it; so is a failure answered at once, retried there (S17).
        let answered = crate::meters::store_now(call.metered, "complete", || {
            s.store
                .complete(call.key, holder.token, outcome.clone(), holder.ttl)
                .into_ready()
        });
        let result = match answered {
            Ok(Ok(written)) => Ok(written),
            Ok(Err(_)) | Err(_) => return None,
        };
        let outcome = if written(call, "complete", result) {
            CallOutcome::Completed
        } else {
            CallOutcome::Unrecorded
        };
        s.wakes.ended(&call.key);
        call.finish(self.attempts, outcome);
        Some(())
    }

    /// Ends a side effect through the store: the returned future writes the end (complete,
    /// keep as ambiguous or release, retried under the lease) and gives the error the call ends
    /// with, if not its last attempt's result.
    pub(super) fn end(self, ended: Ended) -> BoxFuture<'static, Option<Error>> {
        let Run {
            call,
            holder,
            attempts,
            ambiguous,
            started,
            ..
        } = self;
        let span = call.span.clone();
        let call = call.into_owned();
        Box::pin(
            async move {
                let until = holder.write_until(call.key, started);
                let Holder {
                    idem, token, ttl, ..
                } = holder;
                let s = idem.settings();
                let key = call.key;
                // Not succeeded, something having run: a `Permanent` failure is an answer (a
                // new key for it may be a new operation), a lease lost before any attempt ran
                // nothing.
                let unsucceeded = match &ended {
                    Ended::Stored(_) | Ended::Unreplayable(_) => false,
                    Ended::Failed(Failure::Permanent) => ambiguous,
                    Ended::Failed(_) | Ended::Unsettled(..) => true,
                    Ended::Lost { attempting, .. } => *attempting || attempts > 0 || ambiguous,
                };
                // What the call ended with, and, for a call that failed, why (its span's status).
                let (outcome, error, why) = match ended {
                    Ended::Stored(outcome) => {
                        match complete(s, &call, token, outcome, ttl, until).await {
                            true => (CallOutcome::Completed, None, None),
                            false => (CallOutcome::Unrecorded, None, None),
                        }
                    }
                    Ended::Unreplayable(reason) => {
                        tracing::error!(%reason, "the outcome cannot be replayed; recording that the operation ran");
                        let outcome = Outcome::unreplayable(&reason);
                        let op = || s.store.complete(key, token, outcome.clone(), ttl);
                        match write(s, &call, "complete", until, op).await {
                            true => (CallOutcome::Completed, None, None),
                            false => (CallOutcome::Unrecorded, None, None),
                        }
                    }
                    Ended::Failed(Failure::Ambiguous) => {
                        let note = format!(
                            "{attempts} attempt(s); the last failed and may have taken effect"
                        );
                        let op = || s.store.mark_ambiguous(key, token, &note, ttl);
                        write(s, &call, "mark_ambiguous", until, op).await;
                        (CallOutcome::Failed(Failure::Ambiguous), None, Some(note))
                    }
                    Ended::Failed(last) if ambiguous => {
                        let note = format!(
                            "{attempts} attempt(s); the last failed as {last:?}, an earlier one may have taken effect"
                        );
                        let op = || s.store.mark_ambiguous(key, token, &note, ttl);
                        write(s, &call, "mark_ambiguous", until, op).await;
                        let err = Error::Ambiguous {
                            tool: call.tool.to_string(),
                            key,
                            attempts,
                            last,
                        };
                        (CallOutcome::Failed(Failure::Ambiguous), Some(err), Some(note))
                    }
                    Ended::Unsettled(why, answered_unknown) => {
                        let note = format!(
                            "{attempts} attempt(s) in this call; the outcome is unknown and was not sent again: {why}"
                        );
                        tracing::warn!(why = %why, "the outcome is unknown; keeping the record as ambiguous, not sending again");
                        // S32: an Unknown answer of verify is counted with the record.
                        let op = || match answered_unknown {
                            true => s.store.mark_unknown(key, token, &note, ttl),
                            false => s.store.mark_ambiguous(key, token, &note, ttl),
                        };
                        write(s, &call, "mark_ambiguous", until, op).await;
                        let err = Error::Ambiguous {
                            tool: call.tool.to_string(),
                            key,
                            attempts,
                            last: Failure::Ambiguous,
                        };
                        (CallOutcome::Failed(Failure::Ambiguous), Some(err), Some(note))
                    }
                    Ended::Failed(failure) => {
                        let op = || s.store.release(key, token);
                        write(s, &call, "release", until, op).await;
                        (CallOutcome::Failed(failure), None, None)
                    }
                    Ended::Lost { attempting, why } => {
                        // Fenced when taken over; applied when only the renewals failed.
                        let note = format!("{attempts} attempt(s); the lease was lost while one ran ({why})");
                        if attempting || ambiguous {
                            let mark = s.store.mark_ambiguous(key, token, &note, ttl);
                            written(&call, "mark_ambiguous", timed(s, "mark_ambiguous", mark).await);
                        } else {
                            written(&call, "release", timed(s, "release", s.store.release(key, token)).await);
                        }
                        let err = Error::LeaseLost {
                            tool: call.tool.to_string(),
                            key,
                            attempts,
                            why,
                        };
                        (CallOutcome::LeaseLost, Some(err), Some(note))
                    }
                };
                s.wakes.ended(&key);
                if unsucceeded {
                    call.unsucceeded();
                }
                call.finish_because(attempts, outcome, why.as_deref());
                error
            }
            .instrument(span),
        )
    }
}

/// Outcomes up to this size are written as they are until the lease would end; a larger one
/// that the store keeps refusing gives way to the small "it ran" marker (issue 30 #9).
const SMALL_OUTCOME: usize = 512;

/// Completes the record with `outcome`, retried under the lease (S17). An outcome over
/// [`SMALL_OUTCOME`] that the store still refuses half-way to the lease's end (a full disk, a
/// value too large for the store) is replaced by the unreplayable marker, which says the
/// operation ran (S16): a record left running would let the next call run it again once the
/// lease ends.
async fn complete(
    s: &Settings,
    call: &CallTrace<'_>,
    token: LeaseToken,
    outcome: Outcome,
    ttl: Duration,
    until: Until,
) -> bool {
    let key = call.key;
    if outcome.len() > SMALL_OUTCOME {
        let now = Instant::now();
        let half = Until {
            at: now + until.at.saturating_duration_since(now) / 2,
            renew: None,
        };
        let op = || s.store.complete(key, token, outcome.clone(), ttl);
        let error = match attempt_until(s, "complete", half, op).await {
            Ok(written) => return written_ok(call, "complete", written),
            Err(e) => e,
        };
        tracing::error!(
            error = %error,
            bytes = outcome.len(),
            "the outcome could not be stored; recording that the operation ran instead (repeats will be told so, not run)"
        );
        let marker = Outcome::unreplayable(&format!(
            "the outcome ({} bytes) could not be stored ({error})",
            outcome.len()
        ));
        let op = || s.store.complete(key, token, marker.clone(), ttl);
        return write(s, call, "complete", until, op).await;
    }
    let op = || s.store.complete(key, token, outcome.clone(), ttl);
    write(s, call, "complete", until, op).await
}

/// Until when a holder's write after the body is retried: its lease's end as this process
/// knows it, which the write renews under the holder's token when its retries reach it.
#[derive(Clone, Copy)]
pub(super) struct Until {
    pub(super) at: Instant,
    /// The key, the holder's token and its lease, to renew it by; `None`: never renewed.
    pub(super) renew: Option<(IdempotencyKey, LeaseToken, Duration)>,
}

impl Holder {
    /// Until when a write of this holder's end is retried, for the lease its claim took at
    /// `claimed_at`: [`Holder::lease_ends`], renewed as the retries reach it.
    pub(super) fn write_until(&self, key: IdempotencyKey, claimed_at: Instant) -> Until {
        Until {
            at: self.lease_ends(claimed_at),
            renew: Some((key, self.token, self.lease)),
        }
    }
}

/// How many times a holder's end write renews its lease to go on retrying: a store that takes
/// renewals but keeps refusing the write (a value it cannot hold) is not retried for ever.
const WRITE_RENEWALS: u32 = 3;

/// Runs a holder's write, retried on failure while there is time before `until`: its answer, or
/// the last failure. A retry that would fall past the lease's end renews the lease under the
/// token first (applied only if nobody took the key over; S12) and goes on under the renewed
/// lease: a completion that failed with the lease nearly over is retried, not left to a
/// takeover that would run the body again after its success (simulation seed 12433).
async fn attempt_until<F: Future<Output = Result<Written, StoreError>>>(
    s: &Settings,
    what: &'static str,
    mut until: Until,
    mut op: impl FnMut() -> F,
) -> Result<Written, StoreError> {
    let mut pause = Duration::from_millis(20);
    let mut renewals = 0;
    loop {
        match timed(s, what, op()).await {
            Err(e) if tokio::runtime::Handle::try_current().is_ok() => {
                if Instant::now() + pause >= until.at {
                    let Some((key, token, lease)) =
                        until.renew.filter(|_| renewals < WRITE_RENEWALS)
                    else {
                        return Err(e);
                    };
                    renewals += 1;
                    let sent = Instant::now();
                    match timed(s, "renew", s.store.renew(key, token, lease)).await {
                        Ok(Written::Applied) => {
                            tracing::warn!(what, error = %e, "store write failed with the lease nearly over; renewed it to retry");
                            until.at = sent + lease;
                        }
                        // Taken over, or the store unreachable: the last failure stands.
                        _ => return Err(e),
                    }
                }
                tracing::warn!(what, error = %e, ?pause, "store write failed after the body ran; retrying under the lease");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            result => return result,
        }
    }
}

fn written_ok(call: &CallTrace<'_>, what: &str, written: Written) -> bool {
    self::written(call, what, Ok(written))
}

/// A holder's write after the body ran; returns whether it was applied. A store failure is
/// retried under the token (the write is safe to repeat) until the lease would end (S17): past
/// it, another caller may take over. A failure cannot undo the effect, so it is logged, not
/// returned: the caller keeps the body's result.
pub(super) async fn write<F: Future<Output = Result<Written, StoreError>>>(
    s: &Settings,
    call: &CallTrace<'_>,
    what: &'static str,
    until: Until,
    op: impl FnMut() -> F,
) -> bool {
    written(call, what, attempt_until(s, what, until, op).await)
}

/// What [`write`] logs of a holder's write, and whether it was applied.
pub(super) fn written(
    call: &CallTrace<'_>,
    what: &str,
    result: Result<Written, StoreError>,
) -> bool {
    match result {
        Ok(Written::Applied) => true,
        Ok(Written::Fenced) => {
            crate::meters::fenced(&call.tool, crate::meters::write_label(what));
            tracing::warn!(tool = %call.tool, key = %call.key, what, "lease was taken over meanwhile; the new holder's record stands");
            false
        }
        Err(e) => {
            tracing::error!(tool = %call.tool, key = %call.key, what, error = %e, "store write failed after the body ran; the record stays claimed until its lease expires");
            false
        }
    }
}
