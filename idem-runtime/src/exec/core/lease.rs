//! A held lease and its renewals while the call runs (S12, S13).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

use super::BoxFuture;
use super::trace::CallTrace;
use crate::error::StoreError;
use crate::idem::Idem;
use crate::store::{LeaseToken, Store, Written};

/// What a side effect's holder needs to keep its lease and write its end.
pub(super) struct Holder {
    pub(super) idem: Idem,
    pub(super) token: LeaseToken,
    pub(super) ttl: Duration,
    pub(super) lease: Duration,
    /// Made when an attempt first waits (a body that answers at once never needs it).
    pub(super) renewal: Option<Box<Renewal>>,
    /// Outcomes longer than this (as JSON) are recorded as not replayable (S16).
    pub(super) max_outcome: usize,
}

/// A held lease's renewals (S12).
pub(super) struct Renewal {
    /// The lease ends no sooner than this, by this process's clock.
    pub(super) ends: Instant,
    /// When the next renewal is due: a third of the lease after the last one was sent.
    pub(super) due: Instant,
    pub(super) timer: Pin<Box<Sleep>>,
    /// A renewal under way, and when it was sent.
    pub(super) pending: Option<(Instant, BoxFuture<'static, Result<Written, StoreError>>)>,
    /// A renewal was sent after the lease's end (S22: a stalled holder's last chance); if it does
    /// not succeed, the lease is lost.
    pub(super) late: bool,
}

impl Holder {
    /// When the lease ends at the latest, as far as this process knows, for a lease taken by
    /// the claim sent at `claimed_at` (by this process's clock the lease ends no sooner than
    /// `lease` after it: the store applied it later).
    pub(super) fn lease_ends(&self, claimed_at: Instant) -> Instant {
        self.renewal
            .as_ref()
            .map_or(claimed_at + self.lease, |r| r.ends)
    }

    /// S22: `Ok` when the lease is live by this process's clock, so the body may be polled or an
    /// attempt started. Past its end (the process stalled: `SIGSTOP`, a paused VM, a starved
    /// runtime), one renewal is sent and awaited; `Ok` if it is applied (nobody took the key
    /// over meanwhile), `Err(why)` if not: the lease is lost (S13). `unrenewed`: check a lease
    /// that has had no renewal yet too, from the claim's sending (before an attempt is handed out:
    /// a claim's reply may come after its lease ended); an attempt's own polls need not, its
    /// first following the hand-out in the same poll.
    pub(super) fn poll_gate(
        &mut self,
        call: &CallTrace<'_>,
        claimed_at: Instant,
        unrenewed: bool,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), &'static str>> {
        let ends = match &self.renewal {
            Some(r) => r.ends,
            None if unrenewed => claimed_at + self.lease,
            None => return Poll::Ready(Ok(())),
        };
        if Instant::now() < ends {
            return Poll::Ready(Ok(()));
        }
        if let Poll::Ready(why) = self.poll_lease(call, claimed_at, cx) {
            return Poll::Ready(Err(why));
        }
        match &self.renewal {
            Some(r) if Instant::now() < r.ends => Poll::Ready(Ok(())),
            _ => Poll::Pending,
        }
    }

    /// Renews the lease when due; `Ready(why)` when it is lost: a renewal was refused (taken
    /// over), or none succeeded before it ended.
    pub(super) fn poll_lease(
        &mut self,
        call: &CallTrace<'_>,
        claimed_at: Instant,
        cx: &mut Context<'_>,
    ) -> Poll<&'static str> {
        let Holder {
            idem,
            token,
            lease,
            renewal,
            ..
        } = self;
        let (lease, token) = (*lease, *token);
        let r = renewal.get_or_insert_with(|| {
            let due = claimed_at + lease / 3;
            Box::new(Renewal {
                ends: claimed_at + lease,
                due,
                timer: Box::pin(tokio::time::sleep_until(due)),
                pending: None,
                late: false,
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
                        crate::meters::renewed(&call.tool);
                        r.ends = sent + lease;
                        r.due = sent + lease / 3;
                        r.late = false;
                    }
                    Ok(Written::Fenced) => {
                        crate::meters::fenced(&call.tool, "renew");
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
                // S22: past the end, the body waits; a renewal under way decides (bounded by the
                // store's timeout), else one last renewal is sent: applied only if nobody took
                // the key over meanwhile.
                if r.pending.is_some() {
                    return Poll::Pending;
                }
                if r.late {
                    let _span = call.span.enter();
                    tracing::warn!(
                        "no lease renewal succeeded before the lease ended; stopping this call"
                    );
                    return Poll::Ready("no renewal succeeded before the lease ended");
                }
                r.late = true;
                let _span = call.span.enter();
                tracing::warn!(
                    "the lease's end passed by this process's clock (the process stalled?); renewing before going on"
                );
            }
            if r.pending.is_none() && (now >= r.due || r.late) {
                let store: Arc<dyn Store> = Arc::clone(idem.store());
                let timeout = idem.settings().store_timeout;
                let key = call.key;
                r.pending = Some((
                    now,
                    Box::pin(async move {
                        let clock = crate::meters::store_clock();
                        let renewed = tokio::time::timeout(timeout, store.renew(key, token, lease));
                        let result = match renewed.await {
                            Ok(result) => result,
                            Err(_) => Err(StoreError::unavailable(format!(
                                "the store did not answer within {timeout:?}"
                            ))),
                        };
                        if let Some(started) = clock {
                            crate::meters::store_took("renew", started.elapsed());
                        }
                        result
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
