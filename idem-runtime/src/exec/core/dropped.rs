//! What a dropped call leaves behind (S15, S27): its claim ended at once, in the background.

use std::sync::atomic::Ordering;
use std::task::Context;

use super::claim::{Begun, Claiming};
use super::end::{Run, write};
use super::lease::Holder;
use super::timed::timed;
use super::{Between, Call, Phase};
use crate::error::Error;
use crate::store::Written;

/// What a store that cannot give a claim back keeps instead ([`Store::restore`]'s default).
///
/// [`Store::restore`]: crate::Store::restore
const GIVEN_BACK: &str = "the call was dropped (cancelled) before anything ran under its claim, which took over \
                          a record whose outcome is unknown; this store cannot bring that record back, so it is \
                          kept as ambiguous";

/// S15: a call dropped before its end (its caller's future was dropped: a timeout, a `select!`,
/// a cancelled task; or its body panicked) ends its claim at once, in the background: kept as
/// ambiguous if an attempt was running or one had failed ambiguously, released otherwise; the
/// runtime's waiters are woken. An end write already under way is finished. (A process that
/// dies leaves its lease to expire instead: S8.)
///
/// S27: a call dropped before anything ran under its claim (no attempt, no verification handed
/// out; its claim in flight or answered) makes no unknown outcome: a claim in flight is awaited
/// in the background first (a write sent after it must not overtake it), then a new record is
/// released, and a taken-over one is given back as it was ([`Store::restore`]): still ambiguous,
/// or the expired holder's again.
///
/// [`Store::restore`]: crate::Store::restore
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
                let unused = !run.stepped && matches!(between, Between::Ready | Between::Verify(_));
                if unused {
                    let _span = run.call.span.clone().entered();
                    tracing::info!(
                        "the call was dropped before anything ran under its claim; giving the claim back"
                    );
                    in_background(give_back(run.into_owned()));
                    return;
                }
                let holder = run.holder;
                let call = run.call.into_owned();
                // Cut off after something ran (a timeout around the call, say): a call alike
                // with a new key soon after is a retry with a fresh key.
                call.unsucceeded();
                let _span = call.span.clone().entered();
                let may_have_happened =
                    run.ambiguous || matches!(between, Between::Attempting | Between::Verifying(_));
                tracing::warn!(
                    attempts = run.attempts,
                    may_have_happened,
                    "the call was dropped before its end (cancelled, or its body panicked); ending its claim"
                );
                let until = holder.write_until(call.key, run.started);
                let Holder {
                    idem, token, ttl, ..
                } = holder;
                let key = call.key;
                let attempts = run.attempts;
                // The same write as a call's own end: retried under the lease (S17), logged alike.
                in_background(async move {
                    let s = idem.settings();
                    if may_have_happened {
                        let note = format!(
                            "the call was dropped (cancelled, or its body panicked) after {attempts} attempt(s) \
                             while one may have taken effect"
                        );
                        let op = || s.store.mark_ambiguous(key, token, &note, ttl);
                        write(s, &call, "mark_ambiguous", until, op).await;
                    } else {
                        write(s, &call, "release", until, || s.store.release(key, token)).await;
                    }
                    s.wakes.ended(&key);
                });
            }
            Phase::Claiming(claiming, on_drop) => {
                let Claiming {
                    idem,
                    key,
                    token,
                    ttl,
                    cancelled,
                } = on_drop;
                // The claim stops waiting for another holder; one already sent is answered.
                cancelled.store(true, Ordering::Relaxed);
                in_background(async move {
                    match claiming.await {
                        Begun::Run(run) => give_back(run).await,
                        // No answer (or a failed one): the claim may still have been applied,
                        // so it is given back all the same (refused if it was not ours).
                        Begun::Refused(Error::Store { .. }) => {
                            let s = idem.settings();
                            let op = s.store.restore(key, token, GIVEN_BACK, ttl);
                            if let Ok(Written::Applied) = timed(s, "restore", op).await {
                                s.wakes.ended(&key);
                            }
                        }
                        Begun::Replay(..) | Begun::Refused(_) | Begun::Cancelled => {}
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

/// S27: a claim under which nothing ran, given back: a new record released, a taken-over one
/// brought back as it was.
async fn give_back(run: Run<'static>) {
    let until = run.holder.write_until(run.call.key, run.started);
    let Holder {
        idem, token, ttl, ..
    } = run.holder;
    let call = run.call;
    let (s, key) = (idem.settings(), call.key);
    // What the claim took over is unknown (S14+): `ambiguous` says there was one.
    if run.ambiguous {
        let op = || s.store.restore(key, token, GIVEN_BACK, ttl);
        write(s, &call, "restore", until, op).await;
    } else {
        write(s, &call, "release", until, || s.store.release(key, token)).await;
    }
    s.wakes.ended(&key);
}

/// Runs a dropped call's last store write: at once when the store answers at once, else on the
/// tokio runtime in force (none: the lease expires instead).
///
/// Never panics (issue 30 #7): a call dropped after its runtime is gone (or while it shuts down,
/// or while the thread unwinds) must not panic in `Drop`, which would abort an unwinding
/// process. The first poll makes no tokio timer without a runtime (`timed` and `write` check),
/// and is guarded all the same.
pub(super) fn in_background(fut: impl Future<Output = ()> + Send + 'static) {
    let mut fut = Box::pin(fut);
    let first = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        fut.as_mut()
            .poll(&mut Context::from_waker(std::task::Waker::noop()))
            .is_ready()
    }));
    match first {
        Ok(true) => return,
        Ok(false) => {}
        Err(_) => {
            tracing::warn!("ending a dropped call's claim failed; its lease will expire instead");
            return;
        }
    }
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => drop(handle.spawn(fut)),
        Err(_) => tracing::warn!(
            "no tokio runtime to end a dropped call's claim on; its lease will expire instead"
        ),
    }
}
