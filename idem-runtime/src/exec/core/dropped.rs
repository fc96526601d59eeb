//! What a dropped call leaves behind (S15): its claim ended at once, in the background.

use std::task::Context;

use super::claim::timed;
use super::end::write;
use super::lease::Holder;
use super::{Between, Call, Phase};
use crate::store::Written;

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
                let holder = run.holder;
                let call = run.call.into_owned();
                let _span = call.span.clone().entered();
                let may_have_happened =
                    run.ambiguous || matches!(between, Between::Attempting | Between::Verifying(_));
                tracing::warn!(
                    attempts = run.attempts,
                    may_have_happened,
                    "the call was dropped before its end (cancelled, or its body panicked); ending its claim"
                );
                let until = holder.lease_ends(run.started);
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
            Phase::Claiming(_, (idem, key, token, ttl)) => {
                // The claim may have been applied, and may have taken over a record whose
                // outcome is unknown (kept ambiguous, or a dead holder's): a release would forget
                // that, and the next call of a tool that cannot re-send would send again (found
                // by the simulation). So the record is kept as ambiguous under this call's token;
                // refused (nothing changes) if the claim was not applied. A fresh claim cancelled
                // while its answer was in flight is then kept as ambiguous although nothing ran
                // under it: the safe side, which a verification or an operator settles.
                in_background(async move {
                    let s = idem.settings();
                    let note = "the call was dropped while its claim was in flight: nothing ran under it, \
                                but the claim may have taken over a record whose outcome is unknown";
                    if let Ok(Written::Applied) = timed(
                        s,
                        "mark_ambiguous",
                        s.store.mark_ambiguous(key, token, note, ttl),
                    )
                    .await
                    {
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
