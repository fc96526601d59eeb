//! The store as one agent host reaches it: the shared memory store behind a link that delays,
//! fails, loses replies and is cut by the host's partitions; it also notes what the protocol did
//! (takeovers, fenced writes, replays) as evidence that the hard paths ran.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem_runtime::store::{
    Claim, ClaimRequest, Existing, ExistingState, LeaseToken, Record, RecordState, Written,
};
use idem_runtime::{IdempotencyKey, MemoryStore, Store, StoreError};
use uuid::Uuid;

use super::{Protocol, World};

/// One incarnation's view of the shared store.
pub struct SimStore {
    world: Arc<World>,
    host: usize,
    shared: Arc<MemoryStore>,
    /// Tokens of leases this incarnation acquired and has not yet given up.
    held: Mutex<BTreeSet<Uuid>>,
}

impl SimStore {
    pub fn new(world: Arc<World>, host: usize, shared: Arc<MemoryStore>) -> Self {
        SimStore {
            world,
            host,
            shared,
            held: Mutex::new(BTreeSet::new()),
        }
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
        if self.world.partitioned(self.host) {
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
        if self.world.partitioned(self.host) {
            return Err(StoreError::unavailable("partitioned from the store"));
        }
        if self.world.fault_chance(self.world.cfg.p_store_reply_lost) {
            self.world
                .fault(self.host, "store reply lost after the write");
            return Err(StoreError::unavailable("injected: reply lost"));
        }
        Ok(())
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

#[async_trait::async_trait]
impl Store for SimStore {
    async fn claim(&self, req: &ClaimRequest<'_>) -> Result<Claim, StoreError> {
        self.reach().await?;
        let before = self.shared.get(&req.key).await?;
        if self.world.cfg.protocol == Protocol::NoTakeover
            && let Some(Record {
                fingerprint,
                state:
                    RecordState::Running {
                        lease_remaining: Duration::ZERO,
                        ..
                    },
                ..
            }) = before
        {
            // The broken store: an expired lease is reported as live, never handed over.
            self.reply().await?;
            return Ok(Claim::Existing(Existing {
                fingerprint,
                state: ExistingState::Running {
                    lease_remaining: self.world.cfg.lease,
                },
            }));
        }
        let claim = self.shared.claim(req).await?;
        let (w, h) = (&self.world, self.host);
        match (&claim, before.map(|r| r.state)) {
            (Claim::Acquired, Some(RecordState::Running { .. })) => {
                w.saw(h, "lease taken over (expired holder)")
            }
            (Claim::Acquired, Some(RecordState::Ambiguous { .. })) => {
                w.saw(h, "ambiguous record taken over")
            }
            (Claim::Existing(e), _) => match e.state {
                ExistingState::Running { .. } => w.saw(h, "waited on another holder's live lease"),
                ExistingState::Completed { .. } => w.saw(h, "replayed from the store"),
                ExistingState::Ambiguous => {}
            },
            _ => {}
        }
        if claim == Claim::Acquired {
            self.held.lock().unwrap().insert(req.token.0);
            w.log(h, || format!("claimed {}", req.key));
        }
        self.reply().await?;
        Ok(claim)
    }

    async fn complete(
        &self,
        key: &IdempotencyKey,
        token: LeaseToken,
        outcome: &[u8],
        ttl: Duration,
    ) -> Result<Written, StoreError> {
        self.reach().await?;
        let w = self.shared.complete(key, token, outcome, ttl).await?;
        let w = self.written(token, w);
        self.reply().await?;
        Ok(w)
    }

    async fn renew(
        &self,
        key: &IdempotencyKey,
        token: LeaseToken,
        lease: Duration,
    ) -> Result<Written, StoreError> {
        self.reach().await?;
        let w = self.shared.renew(key, token, lease).await?;
        if w == Written::Fenced {
            self.world
                .saw(self.host, "renewal refused (holder was taken over)");
            self.held.lock().unwrap().remove(&token.0);
        }
        self.reply().await?;
        Ok(w)
    }

    async fn release(
        &self,
        key: &IdempotencyKey,
        token: LeaseToken,
    ) -> Result<Written, StoreError> {
        self.reach().await?;
        let w = self.shared.release(key, token).await?;
        let w = self.written(token, w);
        self.reply().await?;
        Ok(w)
    }

    async fn mark_ambiguous(
        &self,
        key: &IdempotencyKey,
        token: LeaseToken,
        note: &str,
        ttl: Duration,
    ) -> Result<Written, StoreError> {
        self.reach().await?;
        let w = self.shared.mark_ambiguous(key, token, note, ttl).await?;
        let w = self.written(token, w);
        self.reply().await?;
        Ok(w)
    }

    async fn get(&self, key: &IdempotencyKey) -> Result<Option<Record>, StoreError> {
        self.shared.get(key).await
    }

    async fn prune(&self, limit: usize) -> Result<usize, StoreError> {
        self.shared.prune(limit).await
    }

    async fn operation_id(&self, name: &str, fresh: Uuid) -> Result<Uuid, StoreError> {
        self.shared.operation_id(name, fresh).await
    }
}
