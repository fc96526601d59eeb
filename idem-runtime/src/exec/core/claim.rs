//! Everything before the first attempt: the span, the runtime in force, the claim and the
//! bounded wait for another holder (S2, S3, S7).

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;
use tracing::field::Empty;

use super::end::Run;
use super::lease::Holder;
use super::timed::{Answered, timed, timed_answer};
use super::trace::CallTrace;
use super::{Between, Phase};
use crate::error::{Error, StoreError};
use crate::fingerprint::Fingerprint;
use crate::idem::{Idem, Settings};
use crate::key::IdempotencyKey;
use crate::store::{Claim, ClaimRequest, Existing, ExistingState, LeaseToken, Outcome, Takeover};
use crate::wake::Waiting;

// Short-lived (the claim's result, moved once into the phase): boxing `Run` would cost an
// allocation per call to save a copy.
#[allow(clippy::large_enum_variant)]
pub(super) enum Begun<'a> {
    Run(Run<'a>),
    Replay(CallTrace<'a>, Outcome),
    Refused(Error),
    /// The call was dropped while its claim was in flight, and the claim did not take the key
    /// (see [`Claiming`]): nothing to end.
    Cancelled,
}

/// What a call dropped while its claim is in flight ends (S27): the claim's answer is awaited in
/// the background (its request may already be on its way: a write sent after it must not
/// overtake it), and a claim that took the key gives it back.
pub(super) struct Claiming {
    pub(super) idem: Idem,
    pub(super) key: IdempotencyKey,
    pub(super) token: LeaseToken,
    pub(super) ttl: Duration,
    /// Set when the call is dropped: the claim stops waiting for another holder.
    pub(super) cancelled: Arc<AtomicBool>,
}

/// Everything before the first attempt: the span, the runtime in force, the claim. A store
/// that answers the claim at once (a ready [`StoreFuture`](crate::store::StoreFuture)) is
/// answered here, without a boxed future of the call's own; otherwise (or while another holder
/// runs) the claim is awaited, waiting (bounded) for that holder.
///
/// `phase` is a [`Phase::Claim`] with its fingerprint made, and is replaced by what comes next
/// in place: the claim's parts are read from it and the next phase is written where it goes,
/// rather than the whole phase moved out and the next one moved in (a few hundred bytes each, a
/// `memcpy` per move by callgrind; only the fields used are read, so the `Tool` is not copied).
// Inlined into `poll_next`, its one caller.
#[inline(always)]
pub(super) fn start(phase: &mut Phase<'_>) {
    let Phase::Claim {
        tool,
        key,
        fingerprint: Ok(fingerprint),
        previous,
    } = phase
    else {
        unreachable!("idemkit: a call's claim started without its fingerprint")
    };
    let (tool, key, fingerprint, previous) = (*tool, *key, *fingerprint, previous.take());
    let idem = tool.runtime();
    // S18: the task's tenant, else the runtime's; the key the body and the store see is then
    // the tenant's own.
    let tenant = crate::scope::call_tenant(idem.as_ref().ok());
    let key = crate::scope::record_key(key, tenant.as_deref());
    // `previous = "..."`: its key is the tenant's own too.
    let previous = previous.map(|p| {
        (
            crate::scope::record_key(p.key, tenant.as_deref()),
            p.fingerprint,
        )
    });
    let span = tracing::info_span!(
        "idemkit.side_effect",
        tool = tool.name,
        key = %key,
        fingerprint = %fingerprint,
        attempts = Empty,
        replayed = Empty,
        outcome = Empty,
        verified = Empty,
        otel.status_code = Empty,
        otel.status_description = Empty,
    );
    let call = CallTrace {
        tool: Cow::Borrowed(tool.name),
        key,
        span: span.clone(),
        metered: crate::meters::recording(),
        verified: false,
        args: super::fresh::slot(&fingerprint, tenant.as_deref()),
    };
    let entered = span.enter();
    let idem = match idem {
        Ok(idem) => idem,
        Err(e) => {
            *phase = Phase::Refused(call.refused(e));
            return;
        }
    };
    // S21: a name two registered side-effect tools share is refused before anything is claimed.
    if let Err(e) = crate::registry::refuse_shared_name(tool.name) {
        *phase = Phase::Refused(call.refused(e));
        return;
    }
    if tool.tenant_required && tenant.is_none() {
        let e = Error::NoTenant {
            tool: tool.name.to_owned(),
        };
        *phase = Phase::Refused(call.refused(e));
        return;
    }
    let previous = match previous {
        None => None,
        Some((key, Ok(fingerprint))) => Some((key, fingerprint)),
        Some((_, Err(source))) => {
            let e = Error::Arguments {
                tool: tool.name.to_owned(),
                source,
            };
            *phase = Phase::Refused(call.refused(e));
            return;
        }
    };
    let s = idem.settings();
    let token = LeaseToken::new();
    let ttl = tool.ttl.unwrap_or(s.ttl);
    let lease = tool.lease.unwrap_or(s.lease);
    if ttl < lease {
        // A running record must never expire before its lease (the builders refuse this too).
        *phase = Phase::Refused(call.refused(Error::Settings {
            tool: tool.name.to_owned(),
            reason: format!(
                "its ttl ({ttl:?}) is shorter than its lease ({lease:?}): a running record would expire \
                 before its lease; make the ttl at least the lease"
            ),
        }));
        return;
    }
    let policy = tool.policy(s.retry);
    let wait = tool.in_flight_wait.unwrap_or(s.in_flight_wait);
    let max_outcome = tool.max_outcome.unwrap_or(s.max_outcome);
    let sending = (tool.resend.unwrap_or(true), tool.verifies);
    let claimed_at = Instant::now();
    let req = ClaimRequest {
        key,
        tool: tool.name,
        fingerprint,
        token,
        lease,
        ttl,
        tenant,
        arguments: tool.arguments,
        // Read just above: the memory store takes it as its "now" (one clock read fewer).
        sent_at: Some(claimed_at),
    };
    let holder = move |idem| Holder {
        idem,
        token,
        ttl,
        lease,
        renewal: None,
        max_outcome,
    };
    // A store that answers at once is answered here, without a boxed future. An answer still to
    // come is dropped unpolled (a store's future does nothing until polled) and asked again by
    // the claim loop below, which can await it. A call with a previous key looks there first,
    // below.
    let answered = previous.is_none().then(|| {
        crate::meters::store_since(call.metered, "claim", claimed_at, || {
            s.store.claim(&req).into_ready()
        })
        .ok()
        .map(|claim| {
            claim
                .map_err(|e| call.store_error(e))
                .and_then(|claim| answer(&req, claim))
        })
    });
    let answered = answered.flatten();
    match answered {
        Some(Ok(Answer::Run(takeover))) => {
            let run = Run::side_effect(
                call,
                holder(idem),
                policy,
                claimed_at,
                takeover,
                sending,
                true,
            );
            *phase = Phase::Running(run, Between::Ready);
            return;
        }
        Some(Ok(Answer::Replay(outcome))) => {
            *phase = Phase::Replayed(call, outcome);
            return;
        }
        Some(Err(e)) => {
            *phase = Phase::Refused(call.refused(e));
            return;
        }
        // Another holder runs it: wait for it below, as every store does.
        Some(Ok(Answer::Wait(_))) | None => {}
    }
    drop(entered);
    let cancelled = Arc::new(AtomicBool::new(false));
    let on_drop = Claiming {
        idem: idem.clone(),
        key,
        token,
        ttl,
        cancelled: Arc::clone(&cancelled),
    };
    // Owns what it uses (the tool's name copied), so that a call dropped meanwhile can leave it
    // to finish in the background (S27).
    let call = call.into_owned();
    let name = req.tool.to_owned();
    let tenant = req.tenant.clone();
    let arguments: Option<Box<[u8]>> = req.arguments.map(Box::from);
    *phase = Phase::Claiming(
        Box::pin(
            async move {
                let mut call = call;
                if let Some((key, fingerprint)) = previous {
                    let req = ClaimRequest {
                        key,
                        tool: &name,
                        fingerprint,
                        token,
                        lease,
                        ttl,
                        tenant: tenant.clone(),
                        arguments: arguments.as_deref(),
                        sent_at: None,
                    };
                    match find_previous(idem.settings(), &req, wait, &cancelled).await {
                        // Dropped meanwhile: no claim of its own key (S27).
                        Ok(None) if cancelled.load(Ordering::Relaxed) => return Begun::Cancelled,
                        Ok(None) => {}
                        Ok(Some(found)) => {
                            call.key = key;
                            let (claimed_at, takeover) = match found {
                                Claimed::Run(sent, takeover) => (sent, takeover),
                                Claimed::Replay(outcome) => return Begun::Replay(call, outcome),
                                Claimed::Cancelled => return Begun::Cancelled,
                            };
                            return Begun::Run(Run::side_effect(
                                call,
                                holder(idem),
                                policy,
                                claimed_at,
                                takeover,
                                sending,
                                false,
                            ));
                        }
                        Err(e) => {
                            call.key = key;
                            return Begun::Refused(call.refused(e));
                        }
                    }
                }
                let req = ClaimRequest {
                    key,
                    tool: &name,
                    fingerprint,
                    token,
                    lease,
                    ttl,
                    tenant,
                    arguments: arguments.as_deref(),
                    sent_at: None,
                };
                let (claimed_at, takeover) =
                    match claim(idem.settings(), &req, wait, &cancelled).await {
                        Ok(Claimed::Run(sent, takeover)) => (sent, takeover),
                        Ok(Claimed::Replay(outcome)) => return Begun::Replay(call, outcome),
                        Ok(Claimed::Cancelled) => return Begun::Cancelled,
                        Err(e) => return Begun::Refused(call.refused(e)),
                    };
                Begun::Run(Run::side_effect(
                    call,
                    holder(idem),
                    policy,
                    claimed_at,
                    takeover,
                    sending,
                    false,
                ))
            }
            .instrument(span),
        ),
        on_drop,
    );
}

/// The key and fingerprint a tool's previous derivation (`previous = "..."`) makes of a call's
/// arguments.
pub(crate) struct Previous {
    pub(crate) key: IdempotencyKey,
    pub(crate) fingerprint: Result<Fingerprint, serde_json::Error>,
}

/// Looks the call's operation up under its previous key, by claiming that key: `None` when no
/// record of it is there (the claim made a new record, which is released at once: the call goes
/// on under its own key); else what the claim found, which the call then is (replayed, run after
/// a takeover, refused: in flight past the wait, the key reused, the store down), under the
/// previous key. Never both: an operation made under the previous key is never run again
/// under the new one.
async fn find_previous(
    s: &Settings,
    req: &ClaimRequest<'_>,
    wait: Duration,
    cancelled: &AtomicBool,
) -> Result<Option<Claimed>, Error> {
    match claim(s, req, wait, cancelled).await? {
        Claimed::Run(_, None) => {
            if let Err(e) = timed(s, "release", s.store.release(req.key, req.token)).await {
                tracing::warn!(
                    error = %e,
                    "could not give back the claim of the previous key (nothing ran under it); it ends with its lease"
                );
            }
            s.wakes.ended(&req.key);
            Ok(None)
        }
        found => {
            tracing::info!(
                previous_key = %req.key,
                "found the operation under the tool's previous key; the call is its call"
            );
            Ok(Some(found))
        }
    }
}

pub(super) enum Claimed {
    /// The key is ours, by the claim sent at this instant; what it took over, if anything.
    Run(Instant, Option<Takeover>),
    Replay(Outcome),
    /// The call was dropped while another holder ran the key: it stopped waiting.
    Cancelled,
}

/// What a claim's answer means for the call.
pub(super) enum Answer {
    /// The key is ours; what the claim took over, if anything (its outcome is unknown: S14+).
    Run(Option<Takeover>),
    Replay(Outcome),
    /// Another holder's lease is live for this long.
    Wait(Duration),
}

pub(super) fn answer(req: &ClaimRequest<'_>, claim: Claim) -> Result<Answer, Error> {
    let Existing { fingerprint, state } = match claim {
        Claim::Acquired { takeover } => {
            // A new record right after a call alike failed under another key: a retry loop
            // that makes a new key each turn (one atomic load while no call has failed).
            let tenant = req.tenant.as_deref();
            super::fresh::claimed(
                req.tool,
                &req.fingerprint,
                tenant,
                req.key,
                takeover.is_none(),
            );
            if let Some(from) = takeover {
                tracing::info!(from = from.as_str(), "took over the key's record");
                crate::meters::took_over(req.tool, from);
            }
            return Ok(Answer::Run(takeover));
        }
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
        // S33: done, and past its time-to-live: never run again because time passed.
        ExistingState::Tombstone { done, resolved } => Err(Error::Expired {
            tool: req.tool.to_owned(),
            key: req.key,
            done,
            resolved,
        }),
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

/// Claims the key, waiting (bounded) while another holder's lease is live, and not once the
/// call is `cancelled`. A claim whose answer did not come within the store timeout is sent again
/// once under its own token, which a store recognises (the key is then ours, with what the
/// first one took over): a claim that was applied late leaves no running record behind.
pub(super) async fn claim(
    s: &Settings,
    req: &ClaimRequest<'_>,
    wait: Duration,
    cancelled: &AtomicBool,
) -> Result<Claimed, Error> {
    let started = Instant::now();
    let mut nap = Duration::from_millis(10);
    // Registered at the first answer that another call holds the key: a holder of this runtime
    // then wakes this call at its end (see `wake`); others are found by polling.
    let mut waiting: Option<Waiting<'_>> = None;
    let mut sent_again = false;
    // A claim is to be sent whether or not the call was dropped: the first, and one sent again.
    let mut must_send = true;
    loop {
        // Dropped while waiting for another holder: no new claim (one answered late is sent
        // again all the same, below, so that it is answered).
        if !must_send && cancelled.load(Ordering::Relaxed) {
            return Ok(Claimed::Cancelled);
        }
        must_send = false;
        let seen = waiting.as_ref().map(|w| w.ends().seen());
        let sent = Instant::now();
        let claim = match timed_answer(s, "claim", s.store.claim(req)).await {
            Answered::Yes(result) => result,
            Answered::Late(_) if !sent_again => {
                sent_again = true;
                must_send = true;
                tracing::warn!(
                    timeout = ?s.store_timeout,
                    "the store did not answer the claim in time; sending it again under its own token"
                );
                continue;
            }
            Answered::Late(e) => Err(e),
        }
        .map_err(|source| Error::Store {
            tool: req.tool.to_owned(),
            key: Some(req.key),
            source,
        })?;
        let lease_remaining = match answer(req, claim)? {
            Answer::Run(takeover) => return Ok(Claimed::Run(sent, takeover)),
            Answer::Replay(outcome) => return Ok(Claimed::Replay(outcome)),
            Answer::Wait(lease_remaining) => lease_remaining,
        };
        if cancelled.load(Ordering::Relaxed) {
            return Ok(Claimed::Cancelled);
        }
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
