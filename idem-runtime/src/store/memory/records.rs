//! The memory store's operator reads and repairs ([`Records`]), under the same lock as claims.

use std::time::Duration;

use uuid::Uuid;

use super::rows::{kind, shown_kind};
use super::{Kept, MemoryStore, State};
use crate::error::StoreError;
use crate::key::IdempotencyKey;
use crate::store::records::count_records;
use crate::store::resolution::check_resolution;
use crate::store::{
    Count, Decision, Forgot, LeaseToken, Outcome, Record, RecordFilter, Records, Released,
    Resolution, Resolved, Written,
};

impl MemoryStore {
    /// The live record of `key` (for `Store::get` and `Records::get`).
    pub(super) fn live_record(&self, key: &IdempotencyKey) -> Option<Record> {
        let now = self.clock.now();
        let inner = self.lock();
        let key = key.as_bytes();
        inner
            .records
            .get(key)
            .filter(|rec| Self::shown(&inner, key, rec, now))
            .map(|rec| self.record(&inner, *key, rec, now))
    }

    /// Deletes up to `limit` expired records (for `Store::prune` and `Records::prune`): never a
    /// live one, and a tombstone (S33) only once the tombstone setting has passed too; the
    /// tombstones it keeps keep no outcome.
    pub(super) fn prune_expired(&self, limit: usize) -> usize {
        let now = self.clock.now();
        let keep = self.tombstones.unwrap_or(crate::store::DEFAULT_TOMBSTONES);
        let mut guard = self.lock();
        let inner = &mut *guard;
        let expired: Vec<[u8; 16]> = inner
            .records
            .iter()
            .filter(|(k, r)| match !r.forgotten && r.is_tombstone(now) {
                true => r.expires_at.after(keep) <= now,
                false => !Self::shown(inner, k, r, now),
            })
            .map(|(k, _)| *k)
            .take(limit)
            .collect();
        for k in &expired {
            inner.records.remove(k);
            inner.resolutions.remove(k);
            inner.forget_story(k);
        }
        // What a tombstone keeps: no outcome, and no arguments (S28: they serve verify only).
        for (k, rec) in &mut inner.records {
            if rec.is_tombstone(now)
                && let State::Completed { outcome, .. } = &mut rec.state
                && !outcome.is_empty()
            {
                *outcome = Outcome::from(&[][..]);
                if !inner.arguments.is_empty() {
                    inner.arguments.remove(k);
                }
            }
        }
        let records = &inner.records;
        inner.resolutions.retain(|k, kept| {
            kept.kept_until > now
                || (kept.resolution.decision == Decision::Applied && records.contains_key(k))
        });
        expired.len()
    }
}

#[async_trait::async_trait]
impl Records for MemoryStore {
    async fn operation(&self, name: &str) -> Result<Option<Uuid>, StoreError> {
        Ok(self.lock().operations.get(name).copied())
    }

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
            .filter(|(_, r)| r.counts(now))
            .map(|(k, r)| self.record(&inner, *k, r, now))
            .filter(|r| filter.matches(r, wall_now))
            .collect();
        filter.newest_first(&mut found);
        Ok(found)
    }

    async fn release_key(&self, key: &IdempotencyKey, force: bool) -> Result<Released, StoreError> {
        let now = self.clock.now();
        let mut inner = self.lock();
        let Some(rec) = inner.records.get(key.as_bytes()).filter(|r| r.counts(now)) else {
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
                inner.forget_story(key.as_bytes());
                Ok(Released::Released)
            }
            ref other => Ok(Released::NotRunning(kind(other))),
        }
    }

    async fn forget(&self, key: &IdempotencyKey, force: bool) -> Result<Forgot, StoreError> {
        self.forget_noted(key, force, None).await
    }

    async fn forget_noted(
        &self,
        key: &IdempotencyKey,
        force: bool,
        note: Option<&str>,
    ) -> Result<Forgot, StoreError> {
        let now = self.clock.now();
        let mut inner = self.lock();
        let key = key.as_bytes();
        if let Some(rec) = inner.records.get(key).filter(|r| r.counts(now))
            && let State::Running { lease_until, .. } = rec.state
            && lease_until > now
            && !force
        {
            return Ok(Forgot::LeaseLive {
                remaining: now.until(lease_until),
            });
        }
        // S33: a tombstone forgotten is kept to show the operator's decision, as a not-applied
        // one is, for the tombstone setting; it no longer counts, so the next call runs.
        if let Some(rec) = inner.records.get_mut(key).filter(|r| r.counts(now))
            && rec.is_tombstone(now)
        {
            rec.forgotten = true;
            let keep = self.tombstones.unwrap_or(crate::store::DEFAULT_TOMBSTONES);
            let resolution = Resolution::new(
                Decision::Forgotten,
                self.clock.wall(now),
                note.map(str::to_owned),
            );
            let kept_until = now.after(keep);
            inner.resolutions.insert(
                *key,
                Kept {
                    resolution,
                    kept_until,
                },
            );
            inner.forget_story(key);
            return Ok(Forgot::Forgotten);
        }
        inner.resolutions.remove(key);
        inner.forget_story(key);
        Ok(match inner.records.remove(key) {
            Some(rec) if rec.counts(now) => Forgot::Forgotten,
            _ => Forgot::NotFound,
        })
    }

    async fn resolve(
        &self,
        key: &IdempotencyKey,
        decision: Decision,
        outcome: Option<&[u8]>,
        note: Option<&str>,
        ttl: Duration,
    ) -> Result<Resolved, StoreError> {
        check_resolution(decision, outcome)?;
        let now = self.clock.now();
        let mut guard = self.lock();
        let inner = &mut *guard;
        // The same decision sent again (its reply was lost): it stands.
        if let Some(kept) = Self::kept(inner, key.as_bytes(), now)
            && kept.resolution.decision == decision
            && kept.resolution.note.as_deref() == note
            && inner
                .records
                .get(key.as_bytes())
                .is_some_and(|rec| match (&rec.state, outcome) {
                    (
                        State::Completed {
                            outcome: stored, ..
                        },
                        Some(given),
                    ) => rec.expires_at > now && stored.as_bytes() == given,
                    (_, None) => rec.expires_at <= now,
                    _ => false,
                })
        {
            return Ok(Resolved::Resolved);
        }
        let Some(rec) = inner
            .records
            .get_mut(key.as_bytes())
            .filter(|r| r.counts(now))
        else {
            return Ok(Resolved::NotFound);
        };
        match rec.state {
            State::Completed { .. } => return Ok(Resolved::Completed),
            State::Running { lease_until, .. } if lease_until > now => {
                return Ok(Resolved::LeaseLive {
                    remaining: now.until(lease_until),
                });
            }
            State::Running { .. } | State::Ambiguous { .. } => {}
        }
        // A token no holder has: the holder that lost the record is fenced.
        let operator = LeaseToken::new();
        let kept_until = now.after(ttl);
        match outcome {
            Some(outcome) => {
                rec.state = State::Completed {
                    outcome: Outcome::from(outcome),
                    by: operator,
                };
                rec.expires_at = kept_until;
            }
            // Released: absent for every operation from now; shown until `kept_until`.
            None => rec.expires_at = now,
        }
        rec.updated = now;
        let resolution = Resolution::new(decision, self.clock.wall(now), note.map(str::to_owned));
        inner.resolutions.insert(
            *key.as_bytes(),
            Kept {
                resolution,
                kept_until,
            },
        );
        Ok(Resolved::Resolved)
    }

    async fn settle(
        &self,
        key: &IdempotencyKey,
        token: LeaseToken,
        decision: Decision,
        outcome: Option<&[u8]>,
        note: Option<&str>,
        ttl: Duration,
    ) -> Result<Written, StoreError> {
        check_resolution(decision, outcome)?;
        let now = self.clock.now();
        let mut guard = self.lock();
        let inner = &mut *guard;
        let Some(rec) = Self::held(inner, key, token, now) else {
            return Ok(Written::Fenced);
        };
        let kept_until = now.after(ttl);
        match outcome {
            // Completed by the settler's token: its write sent again is applied again.
            Some(outcome) => {
                rec.state = State::Completed {
                    outcome: Outcome::from(outcome),
                    by: token,
                };
                rec.expires_at = kept_until;
            }
            None => rec.expires_at = now,
        }
        rec.updated = now;
        let resolution = Resolution::new(decision, self.clock.wall(now), note.map(str::to_owned));
        inner.resolutions.insert(
            *key.as_bytes(),
            Kept {
                resolution,
                kept_until,
            },
        );
        Ok(Written::Applied)
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
                .filter(|r| r.counts(now))
                .map(|r| (inner.names.str(r.tool), shown_kind(r, now))),
        ))
    }
}
