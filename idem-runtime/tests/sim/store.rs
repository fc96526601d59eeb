//! The store as one agent host reaches it: the shared memory store behind a link that delays,
//! fails, loses replies and is cut by the host's partitions; it also notes what the protocol did
//! (takeovers, fenced writes, replays) as evidence that the hard paths ran.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem_runtime::store::{
    AsyncStore, Claim, ClaimRequest, Existing, ExistingState, LeaseToken, OperationIds, Outcome,
    Record, RecordState, Takeover, Written,
};
use idem_runtime::{IdempotencyKey, MemoryStore, Records, Store, StoreError, StoreErrorKind};
use uuid::Uuid;

use super::{CALL, Protocol, Receipt, World};

/// What the executor's completion of an unreplayable outcome starts with (`UNREPLAYABLE` in
/// `idem-runtime/src/exec/core/mod.rs`, private to the crate).
pub const UNREPLAYABLE: &[u8] = b"\0idemkit:unreplayable\0";

/// One incarnation's view of the shared store.
pub struct SimStore {
    world: Arc<World>,
    host: usize,
    shared: Arc<MemoryStore>,
    /// Tokens of leases this incarnation acquired and has not yet given up.
    held: Mutex<BTreeSet<Uuid>>,
    /// The incarnation crashed: nothing it sends reaches the store any more.
    dead: AtomicBool,
}

impl SimStore {
    pub fn new(world: Arc<World>, host: usize, shared: Arc<MemoryStore>) -> Self {
        SimStore {
            world,
            host,
            shared,
            held: Mutex::new(BTreeSet::new()),
            dead: AtomicBool::new(false),
        }
    }

    /// The host crashed: what its dropped futures still try to write never arrives.
    pub fn kill(&self) {
        self.dead.store(true, Ordering::SeqCst);
    }

    fn dead(&self) -> Result<(), StoreError> {
        if self.dead.load(Ordering::SeqCst) {
            return Err(StoreError::unavailable("the host crashed"));
        }
        Ok(())
    }

    /// Whether this incarnation holds a lease that is still the record's.
    pub async fn holds_a_live_lease(&self, keys: &[IdempotencyKey]) -> bool {
        let held = self.held.lock().unwrap().clone();
        for key in keys {
            if let Ok(Some(Record {
                state: RecordState::Running { token, .. },
                ..
            })) = self.shared.get(key).await
                && held.contains(&token.0)
            {
                return true;
            }
        }
        false
    }

    /// The request's way to the store.
    async fn reach(&self) -> Result<(), StoreError> {
        self.dead()?;
        if let Some(cut) = self.world.store_cut(self.host) {
            if cut.store_only {
                self.world.fault(
                    self.host,
                    "store unreachable while the provider is (store-only partition)",
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            return Err(StoreError::unavailable("partitioned from the store"));
        }
        if self.world.fault_chance(self.world.cfg.p_store_down) {
            self.world.fault(self.host, "store unavailable");
            return Err(StoreError::unavailable("injected: store unavailable"));
        }
        tokio::time::sleep(self.world.delay(0..=10)).await;
        Ok(())
    }

    /// The reply's way back: the write has been applied whatever happens here.
    async fn reply(&self) -> Result<(), StoreError> {
        tokio::time::sleep(self.world.delay(0..=10)).await;
        self.dead()?;
        if self.world.store_cut(self.host).is_some() {
            return Err(StoreError::unavailable("partitioned from the store"));
        }
        if self.world.fault_chance(self.world.cfg.p_store_reply_lost) {
            self.world
                .fault(self.host, "store reply lost after the write");
            return Err(StoreError::unavailable("injected: reply lost"));
        }
        Ok(())
    }

    /// `no-drop-guard`: the end write of a dropped call is swallowed, as if never sent.
    fn ignore_drop_guard(&self, token: LeaseToken) -> Option<Result<Written, StoreError>> {
        if self.world.cfg.protocol != Protocol::NoDropGuard {
            return None;
        }
        let call = self.world.dropped_call_of(token.0)?;
        self.world.log(self.host, || {
            format!("(broken) ignores the end write of dropped call {call}")
        });
        Some(Ok(Written::Applied))
    }

    fn dropped_claim_ended(&self, token: LeaseToken, w: Written) {
        if w == Written::Applied && self.world.dropped_call_of(token.0).is_some() {
            self.world
                .saw(self.host, "dropped call's claim ended at once");
        }
    }

    /// An end write of `token` was stopped: the record may stay running until its lease ends,
    /// and the next claim then takes it over as an unknown outcome.
    fn end_write_failed(&self, token: LeaseToken) {
        self.world.end_write_failed(token.0);
        if let Some(op) = self.world.op_of_token(token.0) {
            self.world.uncertain(op);
        }
    }

    /// `claimer-lease-cap`: the broken claimer's cap of a longer lease than its own (S23).
    /// A claim that finds a live lease ending further ahead than one of its own leases notes the
    /// capped end (as the SQLite store wrote it into the record) and is told the lease ends
    /// then; a claim at or after the capped end takes the record over, unless its holder renewed
    /// since (a renewal rewrites the lease end).
    async fn cap_claimer_lease(
        &self,
        req: &ClaimRequest<'_>,
        before: Option<&Record>,
    ) -> Result<Option<Claim>, StoreError> {
        if self.world.cfg.protocol != Protocol::ClaimerLeaseCap {
            return Ok(None);
        }
        let Some(Record {
            fingerprint,
            state:
                RecordState::Running {
                    token,
                    lease_remaining,
                },
            ..
        }) = before
        else {
            return Ok(None);
        };
        if *fingerprint != req.fingerprint || lease_remaining.is_zero() {
            return Ok(None);
        }
        let remaining =
            match self
                .world
                .capped(*req.key.as_bytes(), token.0, *lease_remaining, req.lease)
            {
                Some(left) if left.is_zero() => {
                    // Past the capped end: taken over while the holder's own lease is live.
                    Records::release_key(&*self.shared, &req.key, true).await?;
                    let claim = self.shared.claim(req).await?;
                    if let Claim::Acquired { .. } = claim {
                        self.world
                            .saw(self.host, "lease taken over (expired holder)");
                        self.world
                            .token_acquired(CALL.try_with(|c| *c).ok(), req.token.0);
                        self.world.claimed_key(req.token.0, req.key.to_string());
                        self.held.lock().unwrap().insert(req.token.0);
                        self.world.log(self.host, || {
                            format!(
                                "(broken) took over {} at the claimer's capped lease end",
                                req.key
                            )
                        });
                    }
                    self.reply().await?;
                    return Ok(Some(match claim {
                        Claim::Acquired { .. } => Claim::Acquired {
                            takeover: Some(Takeover::ExpiredHolder),
                        },
                        other => other,
                    }));
                }
                Some(left) => left,
                None => return Ok(None),
            };
        self.world.log(self.host, || {
            format!(
                "(broken) capped the holder's lease ({lease_remaining:?} left) to {left:?}",
                left = remaining
            )
        });
        self.reply().await?;
        Ok(Some(Claim::Existing(Existing::new(
            *fingerprint,
            ExistingState::Running {
                lease_remaining: remaining.min(*lease_remaining),
            },
        ))))
    }

    /// `unreadable-stored-as-replayable`: the executor seals the JSON of every outcome it
    /// stores, so that one which does not read back is told at replay from a damaged record
    /// (S16: `Unreplayable`); the old one (issue 30 #4) stored the receipt's bare JSON, which
    /// does not decode and reads as corrupt (S9). The outcome of the broken protocol, for an
    /// operation whose receipt does not read back, is that bare JSON.
    fn as_the_old_executor_stored(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        outcome: Outcome,
    ) -> Outcome {
        if self.world.cfg.protocol != Protocol::UnreadableStoredAsReplayable
            || outcome.starts_with(UNREPLAYABLE)
        {
            return outcome;
        }
        let Some(op) = self.world.op_of_token(token.0) else {
            return outcome;
        };
        let spec = &self.world.cfg.ops[op];
        if !spec.unreadable {
            // It reads back (or holds a non-finite float, which the old executor caught too).
            return outcome;
        }
        let receipt = self
            .world
            .provider_receipt(key.as_ref())
            .unwrap_or(Receipt {
                charge_id: 0,
                op,
                amount_cents: spec.amount_cents,
                fee_rate: 0.029,
                tags: Vec::new(),
                memo: String::new(),
            });
        self.world.log(self.host, || {
            format!("(broken) stores op {op}'s unreadable receipt as if replayable")
        });
        Outcome::from(serde_json::to_vec(&receipt).expect("a receipt serializes"))
    }

    fn written(&self, token: LeaseToken, w: Written) -> Written {
        self.held.lock().unwrap().remove(&token.0);
        if w == Written::Fenced {
            self.world
                .saw(self.host, "late write fenced (holder was taken over)");
        }
        w
    }
}

/// The transitions, each as the store runs it; [`AsyncStore`] makes them a [`Store`].
impl AsyncStore for SimStore {
    async fn claim(&self, req: &ClaimRequest<'_>) -> Result<Claim, StoreError> {
        // The call that sent it: a claim on its way when its call is dropped is left to land in
        // the background (S27), outside the call's task.
        let sender = CALL.try_with(|c| *c).ok();
        self.reach().await?;
        let before = self.shared.get(&req.key).await?;
        // A holder's record whose lease lapsed reads as ambiguous for operators (S31): told
        // apart by what the store holds.
        if self.world.cfg.protocol == Protocol::NoTakeover
            && let Some(Record {
                fingerprint,
                state: RecordState::Ambiguous { .. },
                ..
            }) = before
            && let Some(ExistingState::Running {
                lease_remaining: Duration::ZERO,
            }) = super::stored_state(&self.shared, &req.key)
        {
            // The broken store: an expired lease is reported as live, never handed over.
            self.reply().await?;
            return Ok(Claim::Existing(Existing::new(
                fingerprint,
                ExistingState::Running {
                    lease_remaining: self.world.cfg.leases[self.host],
                },
            )));
        }
        if let Some(capped) = self.cap_claimer_lease(req, before.as_ref()).await? {
            return Ok(capped);
        }
        let mut claim = self.shared.claim(req).await?;
        if self.world.cfg.protocol == Protocol::AmbiguityDroppedOnTakeover
            && let Claim::Acquired { takeover: Some(_) } = claim
        {
            // The broken store: a takeover reported as a fresh claim.
            self.world.log(self.host, || {
                "(broken) takeover reported as a fresh claim".to_owned()
            });
            claim = Claim::Acquired { takeover: None };
        }
        let (w, h) = (&self.world, self.host);
        match &claim {
            Claim::Acquired {
                takeover: Some(Takeover::ExpiredHolder),
            } => {
                w.saw(h, "lease taken over (expired holder)");
                // S19: a running record whose holder's lease ran out is an unknown outcome to
                // the claimer, whatever the holder did: it may have stalled (SIGSTOP, a paused
                // VM) between attempts that all failed before commit, which the runtime cannot
                // tell from a holder that stalled mid-send (seeds 12357, 13064, 17166).
                if let Some(call) = sender {
                    w.uncertain(w.op_of_call(call));
                }
            }
            Claim::Acquired {
                takeover: Some(Takeover::Ambiguous),
            } => w.saw(h, "ambiguous record taken over"),
            Claim::Existing(e) => match e.state {
                ExistingState::Running { .. } => w.saw(h, "waited on another holder's live lease"),
                ExistingState::Completed { .. } => w.saw(h, "replayed from the store"),
                ExistingState::Ambiguous | _ => {}
            },
            _ => {}
        }
        if matches!(claim, Claim::Acquired { .. }) {
            self.world.token_acquired(sender, req.token.0);
            if let Some(call) = sender
                && self.dead().is_err()
            {
                // Landed after its host crashed: nobody ends it, and the next claim takes it
                // over as an unknown outcome (S8).
                self.world.uncertain(self.world.op_of_call(call));
            }
            self.world.claimed_key(req.token.0, req.key.to_string());
            self.held.lock().unwrap().insert(req.token.0);
            w.log(h, || format!("claimed {}", req.key));
        }
        if let Err(e) = self.reply().await {
            if matches!(claim, Claim::Acquired { .. })
                && let Some(call) = sender
            {
                // Applied, but its caller never learns it: the record is an orphan until its
                // lease ends, and the next claim takes it over as an unknown outcome.
                self.world.uncertain(self.world.op_of_call(call));
            }
            return Err(e);
        }
        Ok(claim)
    }

    async fn complete(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        outcome: Outcome,
        ttl: Duration,
    ) -> Result<Written, StoreError> {
        self.dead()?;
        self.world.end_write(token.0);
        let (before, fail) = self.world.completion_arrives(token.0);
        if before > 0 {
            self.world
                .saw(self.host, "completion write retried under its token");
        }
        if fail {
            tokio::time::sleep(self.world.delay(1..=30)).await;
            self.world.fault(
                self.host,
                "completion write failed before reaching the store",
            );
            // If none gets through before the lease ends, the record is an expired holder's.
            if let Some(op) = self.world.op_of_token(token.0) {
                self.world.uncertain(op);
            }
            return Err(StoreError::unavailable(
                "injected: the completion write failed before reaching the store",
            ));
        }
        if let Err(e) = self.reach().await {
            self.world.completion_blocked(token.0);
            self.end_write_failed(token);
            return Err(e);
        }
        if self
            .world
            .disk_full_refuses(self.host, token.0, outcome.len())
        {
            // Refused by the store: nothing written. If no write of it gets through before the
            // lease ends, the record is an expired holder's (its outcome unknown to a taker); a
            // dropped call's end goes on retrying it, so its claim is left to its lease (not
            // `completion_blocked`: that would excuse a re-run, which the marker must prevent).
            self.end_write_failed(token);
            self.reply().await?;
            return Err(StoreError::new(
                StoreErrorKind::Other,
                "injected: database or disk is full (the outcome was not written)",
            ));
        }
        let outcome = self.as_the_old_executor_stored(key, token, outcome);
        let mut w = self.shared.complete(key, token, outcome, ttl).await?;
        if self.world.cfg.protocol == Protocol::CompletionNotIdempotent
            && self.world.completion_was_applied(token.0)
        {
            // The broken store: a completion sent again is refused as a takeover.
            w = Written::Fenced;
        }
        self.world.completion_answered(self.host, token.0, w);
        let w = self.written(token, w);
        if w == Written::Applied
            && self
                .world
                .fault_chance(self.world.cfg.p_complete_reply_lost)
        {
            tokio::time::sleep(self.world.delay(1..=30)).await;
            self.world.fault(
                self.host,
                "completion reply lost after the write was applied",
            );
            return Err(StoreError::unavailable(
                "injected: the completion was applied but its reply was lost",
            ));
        }
        self.reply().await?;
        Ok(w)
    }

    async fn renew(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        lease: Duration,
    ) -> Result<Written, StoreError> {
        if self.world.cfg.protocol == Protocol::NoRenewal {
            // The broken holder: its lease is never extended, whatever it is told.
            return Ok(Written::Applied);
        }
        self.reach().await?;
        let mut w = self.shared.renew(key, token, lease).await?;
        let resumed = self
            .world
            .resumed_within(self.host, Duration::from_millis(100));
        if w == Written::Fenced && resumed && self.world.cfg.protocol == Protocol::StalledPollsOn {
            // The broken holder: resumed after a stall, it goes on as if still holding.
            self.world.log(self.host, || {
                "(broken) late renewal after a stall taken as applied".to_owned()
            });
            w = Written::Applied;
        } else if resumed {
            self.world.saw(
                self.host,
                match w {
                    Written::Applied => "stalled holder's late renewal applied: it went on (S22)",
                    _ => "stalled holder's late renewal refused: it stopped (S22)",
                },
            );
        }
        if w == Written::Applied {
            self.world.renewed(*key.as_bytes(), token.0);
            self.world
                .saw(self.host, "lease renewed while the body ran");
        }
        if w == Written::Fenced {
            self.world
                .saw(self.host, "renewal refused (holder was taken over)");
            self.held.lock().unwrap().remove(&token.0);
        }
        self.reply().await?;
        Ok(w)
    }

    async fn release(&self, key: IdempotencyKey, token: LeaseToken) -> Result<Written, StoreError> {
        if let Some(ignored) = self.ignore_drop_guard(token) {
            return ignored;
        }
        self.dead()?;
        self.world.end_write(token.0);
        if let Err(e) = self.reach().await {
            self.end_write_failed(token);
            return Err(e);
        }
        let w = self.shared.release(key, token).await?;
        self.dropped_claim_ended(token, w);
        let w = self.written(token, w);
        self.reply().await?;
        Ok(w)
    }

    async fn mark_ambiguous(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        note: &str,
        ttl: Duration,
    ) -> Result<Written, StoreError> {
        if let Some(ignored) = self.ignore_drop_guard(token) {
            return ignored;
        }
        self.dead()?;
        self.world.end_write(token.0);
        if let Err(e) = self.reach().await {
            self.end_write_failed(token);
            return Err(e);
        }
        let w = if self.world.cfg.protocol == Protocol::AmbiguityNotSticky {
            // The store that forgets ambiguity: the record goes as if released.
            self.shared.release(key, token).await?
        } else {
            self.shared.mark_ambiguous(key, token, note, ttl).await?
        };
        self.dropped_claim_ended(token, w);
        let w = self.written(token, w);
        self.reply().await?;
        Ok(w)
    }
}

#[async_trait::async_trait]
impl OperationIds for SimStore {
    async fn operation_id(&self, name: &str, fresh: Uuid) -> Result<Uuid, StoreError> {
        self.shared.operation_id(name, fresh).await
    }
}
