//! A store written outside the crate, as a third party would write one, with nothing but the
//! public API: a `Mutex<HashMap>` that answers every transition at once. It proves itself with
//! the published conformance suite in two lines at the bottom.
//!
//! Store v2 asks of it: five transitions ([`Store`]), one name → id map ([`OperationIds`]), and
//! the operator reads ([`Records`]) that the suite checks its records through.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use idem_runtime::store::{
    Claim, ClaimRequest, Count, Decision, Existing, ExistingState, Forgot, LeaseToken,
    OperationIds, Outcome, Record, RecordFilter, RecordState, Released, Resolution, Resolved,
    StoreFuture, Takeover, Written, check_resolution, count_records,
};
use idem_runtime::{Fingerprint, IdempotencyKey, Records, Store, StoreError};
use uuid::Uuid;

#[derive(Default)]
struct MapStore {
    map: Mutex<(HashMap<IdempotencyKey, Rec>, HashMap<String, Uuid>)>,
}

#[derive(Clone)]
struct Rec {
    tool: String,
    fingerprint: Fingerprint,
    state: State,
    /// `None`: never by time (running or ambiguous, S34); completion and decisions set it.
    expires: Option<Instant>,
    created: SystemTime,
    updated: SystemTime,
    tenant: Option<String>,
    /// An operator's decision, and (after not-applied) until when the record is kept to show it.
    resolution: Option<(Resolution, Instant)>,
}

/// Completed and Ambiguous keep the token that wrote them: that holder's write sent again is
/// applied again.
#[derive(Clone)]
enum State {
    Running(LeaseToken, Instant),
    Completed(Outcome, LeaseToken),
    Ambiguous(String, LeaseToken),
}

impl Rec {
    /// Whether it still counts at `now`: a running or ambiguous record never expires by time
    /// (S34).
    /// (S34); a completed one past its time-to-live is a tombstone (S33), which counts until
    /// pruned past the tombstone setting or forgotten.
    fn live(&self, now: Instant) -> bool {
        !self.forgotten()
            && (self.expires.is_none_or(|e| e > now) || matches!(self.state, State::Completed(..)))
    }

    /// S33: a tombstone an operator forgot: no longer counts, kept to show that decision.
    fn forgotten(&self) -> bool {
        self.resolution
            .as_ref()
            .is_some_and(|(res, _)| res.decision == Decision::Forgotten)
    }

    /// S33: completed, past its time-to-live.
    fn tombstone(&self, now: Instant) -> bool {
        matches!(self.state, State::Completed(..)) && self.expires.is_some_and(|e| e <= now)
    }
}

impl MapStore {
    /// Runs `f` on `key`'s record if `token` holds it, or says it was done already if `done`
    /// says so of the live record (the holder's write sent again); fenced otherwise.
    fn held(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        done: impl Fn(&State) -> bool,
        f: impl FnOnce(&mut HashMap<IdempotencyKey, Rec>, Instant),
    ) -> StoreFuture<'_, Written> {
        let (now, mut map) = (Instant::now(), self.map.lock().unwrap());
        if map
            .0
            .get(&key)
            .is_some_and(|r| r.live(now) && done(&r.state))
        {
            return StoreFuture::ready(Ok(Written::Applied));
        }
        let holds = map
            .0
            .get(&key)
            .is_some_and(|r| r.live(now) && matches!(r.state, State::Running(t, _) if t == token));
        if holds {
            f(&mut map.0, now);
            if let Some(r) = map.0.get_mut(&key) {
                r.updated = SystemTime::now();
            }
        }
        StoreFuture::ready(Ok(if holds {
            Written::Applied
        } else {
            Written::Fenced
        }))
    }

    /// Live records, and records released by an operator's not-applied still kept to show it.
    fn shown(&self) -> Vec<Record> {
        let (now, map) = (Instant::now(), self.map.lock().unwrap());
        let view = |(key, r): (&IdempotencyKey, &Rec)| {
            let state = match &r.state {
                State::Running(token, until) => RecordState::Running {
                    token: *token,
                    lease_remaining: until.saturating_duration_since(now),
                },
                State::Completed(..) if r.tombstone(now) => RecordState::Tombstone,
                State::Completed(o, _) => RecordState::Completed {
                    outcome: o.to_vec(),
                },
                State::Ambiguous(note, _) => RecordState::Ambiguous { note: note.clone() },
            };
            let expires_in = r
                .expires
                .map_or(Duration::MAX, |e| e.saturating_duration_since(now));
            Record::new(*key, r.tool.clone(), r.fingerprint, state, expires_in)
                .with_times(r.created, r.updated)
                .with_tenant(r.tenant.clone())
                .with_resolution(r.resolution.as_ref().map(|(res, _)| res.clone()))
        };
        map.0
            .iter()
            .filter(|(_, r)| Self::kept(r, now))
            .map(view)
            .collect()
    }

    /// Live records.
    fn live(&self) -> Vec<Record> {
        self.shown().into_iter().filter(Record::is_live).collect()
    }

    /// Whether `r` is live, or kept to show an operator's not-applied.
    fn kept(r: &Rec, now: Instant) -> bool {
        r.live(now) || r.resolution.as_ref().is_some_and(|(_, until)| *until > now)
    }
}

impl Store for MapStore {
    fn claim<'a>(&'a self, req: &'a ClaimRequest<'_>) -> StoreFuture<'a, Claim> {
        let (now, mut map) = (Instant::now(), self.map.lock().unwrap());
        // A new record (`None`: absent, or past its time-to-live), or a takeover.
        let mut takeover = None;
        if let Some(r) = map.0.get(&req.key).filter(|r| r.live(now)) {
            let same = r.fingerprint == req.fingerprint;
            let took = match &r.state {
                // The same operation, its holder gone or given up: take it over.
                State::Running(_, until) if same && *until <= now => Ok(Takeover::ExpiredHolder),
                State::Ambiguous(..) if same => Ok(Takeover::Ambiguous),
                State::Running(_, until) => Err(ExistingState::Running {
                    lease_remaining: until.saturating_duration_since(now),
                }),
                State::Completed(..) if r.tombstone(now) => Err(ExistingState::Tombstone {
                    done: r.updated,
                    resolved: r.resolution.is_some(),
                }),
                State::Completed(outcome, _) => Err(ExistingState::Completed {
                    outcome: outcome.clone(),
                }),
                State::Ambiguous(..) => Err(ExistingState::Ambiguous),
            };
            match took {
                Ok(from) => takeover = Some(from),
                Err(state) => {
                    return StoreFuture::ready(Ok(Existing::new(r.fingerprint, state).into()));
                }
            }
        }
        let at = SystemTime::now();
        let rec = Rec {
            tool: req.tool.to_owned(),
            fingerprint: req.fingerprint,
            state: State::Running(req.token, now + req.lease),
            expires: None,
            created: at,
            updated: at,
            tenant: req.tenant.as_deref().map(str::to_owned),
            resolution: None,
        };
        map.0.insert(req.key, rec);
        StoreFuture::ready(Ok(Claim::Acquired { takeover }))
    }

    fn renew(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        lease: Duration,
    ) -> StoreFuture<'_, Written> {
        self.held(
            key,
            token,
            |_| false,
            |map, now| {
                let r = map.get_mut(&key).unwrap();
                r.state = State::Running(token, now + lease);
                r.expires = r.expires.map(|e| e.max(now + lease));
            },
        )
    }

    fn complete(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        outcome: Outcome,
        ttl: Duration,
    ) -> StoreFuture<'_, Written> {
        let done = move |s: &State| matches!(s, State::Completed(_, by) if *by == token);
        self.held(key, token, done, |map, now| {
            let r = map.get_mut(&key).unwrap();
            (r.state, r.expires) = (State::Completed(outcome, token), Some(now + ttl));
        })
    }

    fn release(&self, key: IdempotencyKey, token: LeaseToken) -> StoreFuture<'_, Written> {
        self.held(
            key,
            token,
            |_| false,
            |map, _| {
                map.remove(&key);
            },
        )
    }

    fn mark_ambiguous<'a>(
        &'a self,
        key: IdempotencyKey,
        token: LeaseToken,
        note: &'a str,
        _ttl: Duration,
    ) -> StoreFuture<'a, Written> {
        let done = move |s: &State| matches!(s, State::Ambiguous(_, by) if *by == token);
        self.held(key, token, done, |map, _now| {
            let r = map.get_mut(&key).unwrap();
            (r.state, r.expires) = (State::Ambiguous(note.to_owned(), token), None);
        })
    }
}

#[async_trait::async_trait]
impl OperationIds for MapStore {
    async fn operation_id(&self, name: &str, fresh: Uuid) -> Result<Uuid, StoreError> {
        Ok(*self
            .map
            .lock()
            .unwrap()
            .1
            .entry(name.to_owned())
            .or_insert(fresh))
    }
}

#[async_trait::async_trait]
impl Records for MapStore {
    async fn get(&self, key: &IdempotencyKey) -> Result<Option<Record>, StoreError> {
        Ok(self.shown().into_iter().find(|r| r.key == *key))
    }

    async fn list(&self, filter: &RecordFilter) -> Result<Vec<Record>, StoreError> {
        let now = SystemTime::now();
        let mut records: Vec<_> = self
            .live()
            .into_iter()
            .filter(|r| filter.matches(r, now))
            .collect();
        filter.newest_first(&mut records);
        Ok(records)
    }

    async fn release_key(&self, key: &IdempotencyKey, force: bool) -> Result<Released, StoreError> {
        let live = self.get(key).await?.filter(Record::is_live);
        let answer = match live.map(|r| r.state) {
            None => return Ok(Released::NotFound),
            Some(RecordState::Running {
                lease_remaining, ..
            }) if !force && !lease_remaining.is_zero() => {
                return Ok(Released::LeaseLive {
                    remaining: lease_remaining,
                });
            }
            Some(RecordState::Running { .. }) => Released::Released,
            Some(other) => return Ok(Released::NotRunning(other.kind())),
        };
        self.map.lock().unwrap().0.remove(key);
        Ok(answer)
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
        let (now, mut map) = (Instant::now(), self.map.lock().unwrap());
        // S33: a tombstone is kept as forgotten, shown for the tombstone setting.
        if let Some(r) = map
            .0
            .get_mut(key)
            .filter(|r| r.live(now) && r.tombstone(now))
        {
            let forgotten = Resolution::new(
                Decision::Forgotten,
                SystemTime::now(),
                note.map(str::to_owned),
            );
            r.resolution = Some((forgotten, now + idem_runtime::store::DEFAULT_TOMBSTONES));
            return Ok(Forgot::Forgotten);
        }
        let live = map.0.get(key).filter(|r| r.live(now));
        if let Some(State::Running(_, until)) = live.map(|r| &r.state)
            && *until > now
            && !force
        {
            return Ok(Forgot::LeaseLive {
                remaining: until.saturating_duration_since(now),
            });
        }
        let was_live = live.is_some();
        map.0.remove(key);
        Ok(if was_live {
            Forgot::Forgotten
        } else {
            Forgot::NotFound
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
        let (now, mut map) = (Instant::now(), self.map.lock().unwrap());
        // The same decision sent again (its reply was lost), while it stands.
        if let Some(r) = map.0.get(key)
            && let Some((kept, until)) = &r.resolution
            && *until > now
            && (kept.decision, kept.note.as_deref()) == (decision, note)
            && match (&r.state, outcome) {
                (State::Completed(stored, _), Some(given)) => r.live(now) && stored == given,
                (_, None) => !r.live(now),
                _ => false,
            }
        {
            return Ok(Resolved::Resolved);
        }
        let Some(r) = map.0.get_mut(key).filter(|r| r.live(now)) else {
            return Ok(Resolved::NotFound);
        };
        match &r.state {
            State::Completed(..) => return Ok(Resolved::Completed),
            State::Running(_, until) if *until > now => {
                return Ok(Resolved::LeaseLive {
                    remaining: until.saturating_duration_since(now),
                });
            }
            _ => {}
        }
        match outcome {
            // A token no holder has: the holder that lost the record is fenced.
            Some(o) => {
                (r.state, r.expires) = (
                    State::Completed(o.into(), LeaseToken::new()),
                    Some(now + ttl),
                )
            }
            // Released: absent for every operation, kept to show the decision.
            None => r.expires = Some(now),
        }
        let at = SystemTime::now();
        r.updated = at;
        let resolution = Resolution::new(decision, at, note.map(str::to_owned));
        r.resolution = Some((resolution, now + ttl));
        Ok(Resolved::Resolved)
    }

    async fn prune(&self, limit: usize) -> Result<usize, StoreError> {
        let (now, mut map) = (Instant::now(), self.map.lock().unwrap());
        let expired: Vec<_> = map
            .0
            .iter()
            .filter(|(_, r)| match r.tombstone(now) && !r.forgotten() {
                // S33: a tombstone goes once the tombstone setting has passed too.
                true => r
                    .expires
                    .is_some_and(|e| e + idem_runtime::store::DEFAULT_TOMBSTONES <= now),
                false => !Self::kept(r, now),
            })
            .map(|(k, _)| *k)
            .take(limit)
            .collect();
        expired.iter().for_each(|k| drop(map.0.remove(k)));
        // What a tombstone keeps: no outcome.
        for r in map.0.values_mut() {
            if r.tombstone(now)
                && let State::Completed(outcome, _) = &mut r.state
            {
                *outcome = Outcome::from(&b""[..]);
            }
        }
        Ok(expired.len())
    }

    async fn counts(&self) -> Result<Vec<Count>, StoreError> {
        let live = self.live();
        // S31: a running record whose holder's lease lapsed counts as ambiguous.
        let kind = |r: &Record| match r.state {
            RecordState::Running {
                lease_remaining, ..
            } if lease_remaining.is_zero() => idem_runtime::store::StateKind::Ambiguous,
            ref state => state.kind(),
        };
        Ok(count_records(
            live.iter().map(|r| (r.tool.as_str(), kind(r))),
        ))
    }

    async fn operation(&self, name: &str) -> Result<Option<Uuid>, StoreError> {
        Ok(self.map.lock().unwrap().1.get(name).copied())
    }
}

async fn fresh() -> MapStore {
    MapStore::default()
}

idem_runtime::conformance_tests!(fresh);
idem_runtime::records_conformance_tests!(fresh);
