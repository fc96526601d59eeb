//! The memory store's transitions (`Store`) and operation ids (`OperationIds`), each answering
//! at once under the map's lock.

use std::collections::hash_map::Entry;
use std::time::Duration;

use uuid::Uuid;

use super::clock::Tick;
use super::{Inner, MemoryStore, Prior, Rec, State, Story};
use crate::error::StoreError;
use crate::key::IdempotencyKey;
use crate::store::{
    Claim, ClaimRequest, Existing, ExistingState, LeaseToken, OperationIds, Outcome, Store,
    StoreFuture, Takeover, Written,
};

impl MemoryStore {
    /// Whether the live record of `key` was completed (`completed`) or marked ambiguous (not)
    /// by `token`'s holder.
    fn done_by(
        inner: &Inner,
        key: &IdempotencyKey,
        token: LeaseToken,
        now: Tick,
        completed: bool,
    ) -> bool {
        inner
            .records
            .get(key.as_bytes())
            .filter(|rec| rec.counts(now))
            .is_some_and(|rec| match &rec.state {
                State::Completed { by, .. } => completed && *by == token,
                State::Ambiguous { by, .. } => !completed && *by == token,
                State::Running { .. } => false,
            })
    }
}

impl Inner {
    /// The holder wrote its own end: what its claim replaced is no longer to be brought back.
    fn forget_prior(&mut self, key: &IdempotencyKey) {
        if !self.priors.is_empty() {
            self.priors.remove(key.as_bytes());
        }
    }
}

impl MemoryStore {
    // Every transition answers at once (`StoreFuture::ready`): the executor neither allocates nor
    // polls for them.
    fn claim_sync(&self, req: &ClaimRequest<'_>) -> Claim {
        // The executor's reading of the same clock, taken just before it sent the claim.
        let now = match req.sent_at {
            Some(at) => self.clock.at(at),
            None => self.clock.now(),
        };
        let mut guard = self.lock();
        let inner = &mut *guard;
        let running = State::Running {
            token: req.token,
            lease_until: now.after(req.lease),
        };
        // One lookup: the entry is either live (decide below), or absent or expired (a new record).
        let rec = match inner.records.entry(*req.key.as_bytes()) {
            Entry::Occupied(live) if live.get().counts(now) => live.into_mut(),
            absent_or_expired => {
                // A decision on the record this one replaces is not this one's.
                if !inner.resolutions.is_empty() {
                    inner.resolutions.remove(req.key.as_bytes());
                }
                if !inner.priors.is_empty() {
                    inner.priors.remove(req.key.as_bytes());
                }
                if !inner.stories.is_empty() {
                    inner.stories.remove(req.key.as_bytes());
                }
                // S28: a new record keeps the arguments its claim sent, or none.
                if !inner.arguments.is_empty() {
                    inner.arguments.remove(req.key.as_bytes());
                }
                if let Some(arguments) = req.arguments {
                    inner
                        .arguments
                        .insert(*req.key.as_bytes(), arguments.into());
                }
                absent_or_expired.insert_entry(Box::new(Rec {
                    tool: inner.names.get(req.tool),
                    fingerprint: req.fingerprint,
                    state: running,
                    // S34: running (and ambiguous after it), it never expires by time; its
                    // completion gives it the time-to-live.
                    expires_at: Tick::NEVER,
                    created: now,
                    updated: now,
                    tenant: req.tenant.as_deref().map(|t| inner.names.get(t)),
                    forgotten: false,
                }));
                return Claim::Acquired { takeover: None };
            }
        };
        let same = rec.fingerprint == req.fingerprint;
        if same && matches!(rec.state, State::Running { token, .. } if token == req.token) {
            // This claim, sent again (its answer lost): ours still, with what it took over.
            let takeover = inner
                .priors
                .get(req.key.as_bytes())
                .map(|prior| match prior {
                    Prior::Record(rec) if matches!(rec.state, State::Ambiguous { .. }) => {
                        Takeover::Ambiguous
                    }
                    _ => Takeover::ExpiredHolder,
                });
            return Claim::Acquired { takeover };
        }
        let existing = match &rec.state {
            State::Running { lease_until, .. } if same && *lease_until <= now => {
                Err(Takeover::ExpiredHolder)
            }
            State::Ambiguous { .. } if same => Err(Takeover::Ambiguous),
            State::Running { lease_until, .. } => Ok(ExistingState::Running {
                lease_remaining: now.until(*lease_until),
            }),
            // S33: done, past its time-to-live: a tombstone, never a new run.
            State::Completed { .. } if rec.expires_at <= now => Ok(ExistingState::Tombstone {
                done: self.clock.wall(rec.updated),
                resolved: inner.resolutions.contains_key(req.key.as_bytes()),
            }),
            State::Completed { outcome, .. } => Ok(ExistingState::Completed {
                outcome: outcome.clone(),
            }),
            State::Ambiguous { .. } => Ok(ExistingState::Ambiguous),
        };
        match existing {
            Ok(state) => Claim::Existing(Existing {
                fingerprint: rec.fingerprint,
                state,
            }),
            Err(takeover) => {
                // Take over: same operation, its holder gone or given up. What it was is kept
                // until this holder writes, for a claim given back unused (S27).
                inner
                    .priors
                    .insert(*req.key.as_bytes(), Prior::Record(rec.clone()));
                // S32, S31: when it was first made, its Unknown answers and the note of the
                // ambiguous record it was stay through the takeover.
                let was = match &rec.state {
                    State::Ambiguous { note, .. } => Some(note.clone()),
                    _ => None,
                };
                let created = rec.created;
                let story = inner
                    .stories
                    .entry(*req.key.as_bytes())
                    .or_insert_with(|| Story {
                        first_made: created,
                        unknowns: 0,
                        unknown_since: None,
                        note: None,
                    });
                if was.is_some() {
                    story.note = was;
                }
                rec.state = running;
                rec.expires_at = Tick::NEVER;
                (rec.created, rec.updated) = (now, now);
                rec.tenant = req.tenant.as_deref().map(|t| inner.names.get(t));
                if let Some(arguments) = req.arguments {
                    inner
                        .arguments
                        .insert(*req.key.as_bytes(), arguments.into());
                }
                Claim::Acquired {
                    takeover: Some(takeover),
                }
            }
        }
    }

    fn complete_sync(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        outcome: Outcome,
        ttl: Duration,
    ) -> Written {
        let now = self.clock.now();
        let mut inner = self.lock();
        if let Some(rec) = Self::held(&mut inner, &key, token, now) {
            rec.state = State::Completed { outcome, by: token };
            rec.expires_at = now.after(ttl);
            rec.updated = now;
            inner.forget_prior(&key);
            return Written::Applied;
        }
        // This holder's completion, sent again (its reply was lost): done already.
        match Self::done_by(&inner, &key, token, now, true) {
            true => Written::Applied,
            false => Written::Fenced,
        }
    }

    fn renew_sync(&self, key: IdempotencyKey, token: LeaseToken, lease: Duration) -> Written {
        let now = self.clock.now();
        let mut inner = self.lock();
        match Self::held(&mut inner, &key, token, now) {
            Some(rec) => {
                let until = now.after(lease);
                rec.state = State::Running {
                    token,
                    lease_until: until,
                };
                rec.expires_at = rec.expires_at.max(until);
                rec.updated = now;
                Written::Applied
            }
            None => Written::Fenced,
        }
    }

    fn release_sync(&self, key: IdempotencyKey, token: LeaseToken) -> Written {
        let now = self.clock.now();
        let mut inner = self.lock();
        if Self::held(&mut inner, &key, token, now).is_none() {
            return Written::Fenced;
        }
        inner.records.remove(key.as_bytes());
        inner.forget_prior(&key);
        inner.forget_story(key.as_bytes());
        Written::Applied
    }

    fn restore_sync(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        note: &str,
        _ttl: Duration,
    ) -> Written {
        let now = self.clock.now();
        let mut inner = self.lock();
        if Self::held(&mut inner, &key, token, now).is_none() {
            return Written::Fenced;
        }
        let prior = match inner.priors.is_empty() {
            true => None,
            false => inner.priors.remove(key.as_bytes()),
        };
        match prior {
            // Taken over: back to what it was (one whose time-to-live passed meanwhile is
            // absent). A holder's record brought back: what its own claim replaced is gone.
            Some(Prior::Record(prior)) if prior.expires_at > now => {
                if matches!(prior.state, State::Running { .. }) {
                    inner.priors.insert(*key.as_bytes(), Prior::Unknown);
                }
                inner.records.insert(*key.as_bytes(), prior);
            }
            // Not known: kept as ambiguous, the safe side.
            Some(Prior::Unknown) => {
                if let Some(rec) = Self::held(&mut inner, &key, token, now) {
                    rec.state = State::Ambiguous {
                        note: note.into(),
                        by: token,
                    };
                    // S34: kept until a decision ends it, however long that takes.
                    rec.expires_at = Tick::NEVER;
                    rec.updated = now;
                }
            }
            // A new record: absent again.
            _ => {
                inner.records.remove(key.as_bytes());
                inner.forget_story(key.as_bytes());
            }
        }
        Written::Applied
    }

    /// `unknown`: after an Unknown answer of verify, counted (S32).
    fn mark_ambiguous_sync(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        note: &str,
        _ttl: Duration,
        unknown: bool,
    ) -> Written {
        let now = self.clock.now();
        let mut guard = self.lock();
        let inner = &mut *guard;
        if let Some(rec) = Self::held(inner, &key, token, now) {
            rec.state = State::Ambiguous {
                note: note.into(),
                by: token,
            };
            // S34: kept until a decision ends it, however long that takes.
            rec.expires_at = Tick::NEVER;
            rec.updated = now;
            if unknown {
                let created = rec.created;
                let story = inner.story(key.as_bytes(), created);
                story.unknowns = story.unknowns.saturating_add(1);
                story.unknown_since.get_or_insert(now);
            }
            inner.forget_prior(&key);
            return Written::Applied;
        }
        // This holder's mark, sent again (its reply was lost): done already.
        match Self::done_by(inner, &key, token, now, false) {
            true => Written::Applied,
            false => Written::Fenced,
        }
    }
}

impl Store for MemoryStore {
    #[inline]
    fn claim<'a>(&'a self, req: &'a ClaimRequest<'_>) -> StoreFuture<'a, Claim> {
        StoreFuture::ready(Ok(self.claim_sync(req)))
    }

    fn renew(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        lease: Duration,
    ) -> StoreFuture<'_, Written> {
        StoreFuture::ready(Ok(self.renew_sync(key, token, lease)))
    }

    #[inline]
    fn complete(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        outcome: Outcome,
        ttl: Duration,
    ) -> StoreFuture<'_, Written> {
        StoreFuture::ready(Ok(self.complete_sync(key, token, outcome, ttl)))
    }

    fn release(&self, key: IdempotencyKey, token: LeaseToken) -> StoreFuture<'_, Written> {
        StoreFuture::ready(Ok(self.release_sync(key, token)))
    }

    fn mark_ambiguous<'a>(
        &'a self,
        key: IdempotencyKey,
        token: LeaseToken,
        note: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, Written> {
        StoreFuture::ready(Ok(self.mark_ambiguous_sync(key, token, note, ttl, false)))
    }

    fn mark_unknown<'a>(
        &'a self,
        key: IdempotencyKey,
        token: LeaseToken,
        note: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, Written> {
        StoreFuture::ready(Ok(self.mark_ambiguous_sync(key, token, note, ttl, true)))
    }

    fn restore<'a>(
        &'a self,
        key: IdempotencyKey,
        token: LeaseToken,
        note: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, Written> {
        StoreFuture::ready(Ok(self.restore_sync(key, token, note, ttl)))
    }
}

#[async_trait::async_trait]
impl OperationIds for MemoryStore {
    async fn operation_id(&self, name: &str, fresh: Uuid) -> Result<Uuid, StoreError> {
        Ok(*self
            .lock()
            .operations
            .entry(name.to_owned())
            .or_insert(fresh))
    }
}
