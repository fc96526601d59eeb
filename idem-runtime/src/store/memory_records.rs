//! The memory store's operator reads and repairs ([`Records`]), under the same lock as claims.

use super::*;
use crate::store::records::count_records;
use crate::store::{Count, RecordFilter, RecordState, Records, Released, StateKind};

fn kind(state: &State) -> StateKind {
    match state {
        State::Running { .. } => StateKind::Running,
        State::Completed { .. } => StateKind::Completed,
        State::Ambiguous { .. } => StateKind::Ambiguous,
    }
}

impl MemoryStore {
    fn record(&self, key: [u8; 16], rec: &Rec, now: Tick) -> Record {
        Record {
            key: IdempotencyKey::from_uuid(Uuid::from_bytes(key)),
            tool: rec.tool.as_str().to_owned(),
            fingerprint: rec.fingerprint,
            state: match &rec.state {
                State::Running { token, lease_until } => RecordState::Running {
                    token: *token,
                    lease_remaining: now.until(*lease_until),
                },
                State::Completed { outcome } => RecordState::Completed {
                    outcome: outcome.to_vec(),
                },
                State::Ambiguous { note } => RecordState::Ambiguous {
                    note: note.to_string(),
                },
            },
            expires_in: now.until(rec.expires_at),
            created: self.clock.wall(rec.created),
            updated: self.clock.wall(rec.updated),
            tenant: rec.tenant.as_ref().map(|t| t.as_str().to_owned()),
        }
    }
}

impl MemoryStore {
    /// The live record of `key` (for `Store::get` and `Records::get`).
    pub(super) fn live_record(&self, key: &IdempotencyKey) -> Option<Record> {
        let now = self.clock.now();
        let inner = self.lock();
        inner
            .records
            .get(key.as_bytes())
            .filter(|r| r.expires_at > now)
            .map(|rec| self.record(*key.as_bytes(), rec, now))
    }

    /// Deletes up to `limit` expired records (for `Store::prune` and `Records::prune`).
    pub(super) fn prune_expired(&self, limit: usize) -> usize {
        let now = self.clock.now();
        let mut inner = self.lock();
        let expired: Vec<[u8; 16]> = inner
            .records
            .iter()
            .filter(|(_, r)| r.expires_at <= now)
            .map(|(k, _)| *k)
            .take(limit)
            .collect();
        for k in &expired {
            inner.records.remove(k);
        }
        expired.len()
    }
}

#[async_trait::async_trait]
impl Records for MemoryStore {
    async fn get(&self, key: &IdempotencyKey) -> Result<Option<Record>, StoreError> {
        Ok(self.live_record(key))
    }

    async fn list(&self, filter: &RecordFilter) -> Result<Vec<Record>, StoreError> {
        let now = self.clock.now();
        let inner = self.lock();
        let wall_now = self.clock.wall(now);
        let mut found: Vec<Record> = inner
            .records
            .iter()
            .filter(|(_, r)| r.expires_at > now)
            .map(|(k, r)| self.record(*k, r, now))
            .filter(|r| filter.matches(r, wall_now))
            .collect();
        filter.newest_first(&mut found);
        Ok(found)
    }

    async fn release_key(&self, key: &IdempotencyKey, force: bool) -> Result<Released, StoreError> {
        let now = self.clock.now();
        let mut inner = self.lock();
        let Some(rec) = inner
            .records
            .get(key.as_bytes())
            .filter(|r| r.expires_at > now)
        else {
            return Ok(Released::NotFound);
        };
        match rec.state {
            State::Running { lease_until, .. } if lease_until > now && !force => {
                Ok(Released::LeaseLive {
                    remaining: now.until(lease_until),
                })
            }
            State::Running { .. } => {
                inner.records.remove(key.as_bytes());
                Ok(Released::Released)
            }
            ref other => Ok(Released::NotRunning(kind(other))),
        }
    }

    async fn forget(&self, key: &IdempotencyKey) -> Result<bool, StoreError> {
        let now = self.clock.now();
        let removed = self.lock().records.remove(key.as_bytes());
        Ok(removed.is_some_and(|r| r.expires_at > now))
    }

    async fn prune(&self, limit: usize) -> Result<usize, StoreError> {
        Ok(self.prune_expired(limit))
    }

    async fn counts(&self) -> Result<Vec<Count>, StoreError> {
        let now = self.clock.now();
        let inner = self.lock();
        Ok(count_records(
            inner
                .records
                .values()
                .filter(|r| r.expires_at > now)
                .map(|r| (r.tool.as_str(), kind(&r.state))),
        ))
    }
}
