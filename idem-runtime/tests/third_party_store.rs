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
    Claim, ClaimRequest, Count, Existing, ExistingState, LeaseToken, OperationIds, Outcome, Record,
    RecordFilter, RecordState, Records, Released, Store, StoreFuture, Takeover, Written,
    count_records,
};
use idem_runtime::{Fingerprint, IdempotencyKey, StoreError};
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
    expires: Instant,
    created: SystemTime,
    updated: SystemTime,
    tenant: Option<String>,
}

#[derive(Clone)]
enum State {
    Running(LeaseToken, Instant),
    Completed(Outcome),
    Ambiguous(String),
}

impl MapStore {
    /// Runs `f` on `key`'s record if `token` holds it; fenced otherwise.
    fn held(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        f: impl FnOnce(&mut HashMap<IdempotencyKey, Rec>, Instant),
    ) -> StoreFuture<'_, Written> {
        let (now, mut map) = (Instant::now(), self.map.lock().unwrap());
        let holds = map.0.get(&key).is_some_and(|r| {
            r.expires > now && matches!(r.state, State::Running(t, _) if t == token)
        });
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

    fn live(&self) -> Vec<Record> {
        let (now, map) = (Instant::now(), self.map.lock().unwrap());
        let view = |(key, r): (&IdempotencyKey, &Rec)| {
            let state = match &r.state {
                State::Running(token, until) => RecordState::Running {
                    token: *token,
                    lease_remaining: until.saturating_duration_since(now),
                },
                State::Completed(o) => RecordState::Completed {
                    outcome: o.to_vec(),
                },
                State::Ambiguous(note) => RecordState::Ambiguous { note: note.clone() },
            };
            let expires_in = r.expires.saturating_duration_since(now);
            Record::new(*key, r.tool.clone(), r.fingerprint, state, expires_in)
                .with_times(r.created, r.updated)
                .with_tenant(r.tenant.clone())
        };
        map.0
            .iter()
            .filter(|(_, r)| r.expires > now)
            .map(view)
            .collect()
    }
}

impl Store for MapStore {
    fn claim<'a>(&'a self, req: &'a ClaimRequest<'_>) -> StoreFuture<'a, Claim> {
        let (now, mut map) = (Instant::now(), self.map.lock().unwrap());
        // A new record (`None`: absent, or past its time-to-live), or a takeover.
        let mut takeover = None;
        if let Some(r) = map.0.get(&req.key).filter(|r| r.expires > now) {
            let same = r.fingerprint == req.fingerprint;
            let took = match &r.state {
                // The same operation, its holder gone or given up: take it over.
                State::Running(_, until) if same && *until <= now => Ok(Takeover::ExpiredHolder),
                State::Ambiguous(_) if same => Ok(Takeover::Ambiguous),
                State::Running(_, until) => Err(ExistingState::Running {
                    lease_remaining: until.saturating_duration_since(now),
                }),
                State::Completed(outcome) => Err(ExistingState::Completed {
                    outcome: outcome.clone(),
                }),
                State::Ambiguous(_) => Err(ExistingState::Ambiguous),
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
            expires: now + req.ttl,
            created: at,
            updated: at,
            tenant: req.tenant.as_deref().map(str::to_owned),
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
        self.held(key, token, |map, now| {
            let r = map.get_mut(&key).unwrap();
            r.state = State::Running(token, now + lease);
            r.expires = r.expires.max(now + lease);
        })
    }

    fn complete(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        outcome: Outcome,
        ttl: Duration,
    ) -> StoreFuture<'_, Written> {
        self.held(key, token, |map, now| {
            let r = map.get_mut(&key).unwrap();
            (r.state, r.expires) = (State::Completed(outcome), now + ttl);
        })
    }

    fn release(&self, key: IdempotencyKey, token: LeaseToken) -> StoreFuture<'_, Written> {
        self.held(key, token, |map, _| {
            map.remove(&key);
        })
    }

    fn mark_ambiguous<'a>(
        &'a self,
        key: IdempotencyKey,
        token: LeaseToken,
        note: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, Written> {
        self.held(key, token, |map, now| {
            let r = map.get_mut(&key).unwrap();
            (r.state, r.expires) = (State::Ambiguous(note.to_owned()), now + ttl);
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
        Ok(self.live().into_iter().find(|r| r.key == *key))
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
        let answer = match self.get(key).await?.map(|r| r.state) {
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

    async fn forget(&self, key: &IdempotencyKey) -> Result<bool, StoreError> {
        let live = self.get(key).await?.is_some();
        self.map.lock().unwrap().0.remove(key);
        Ok(live)
    }

    async fn prune(&self, limit: usize) -> Result<usize, StoreError> {
        let (now, mut map) = (Instant::now(), self.map.lock().unwrap());
        let expired: Vec<_> = map
            .0
            .iter()
            .filter(|(_, r)| r.expires <= now)
            .map(|(k, _)| *k)
            .take(limit)
            .collect();
        expired.iter().for_each(|k| drop(map.0.remove(k)));
        Ok(expired.len())
    }

    async fn counts(&self) -> Result<Vec<Count>, StoreError> {
        let live = self.live();
        Ok(count_records(
            live.iter().map(|r| (r.tool.as_str(), r.state.kind())),
        ))
    }
}

async fn fresh() -> MapStore {
    MapStore::default()
}

idem_runtime::conformance_tests!(fresh);
idem_runtime::records_conformance_tests!(fresh);
