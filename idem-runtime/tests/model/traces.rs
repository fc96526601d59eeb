//! Trace validation: the store transitions of a real run (the real executor on `MemoryStore`
//! under tokio's paused clock, or on SQLite, PostgreSQL or Redis in real time), recorded by a
//! wrapping store, are checked to be a behaviour the model allows. The model's other steps
//! (ticks, attempts, verifications, crashes) are unobserved: the checker searches for any
//! interleaving of them that explains each recorded transition at its recorded time
//! ([`validate`]) or, for runs in real time whose ticks jitter, in its recorded order with any
//! time between ([`validate_untimed`]).

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::Duration;

use idem_runtime::store::OperationIds;
use idem_runtime::store::{
    Claim, ClaimRequest, ExistingState, LeaseToken, Outcome, StoreFuture, Written,
};
use idem_runtime::{IdempotencyKey, MemoryStore, Store, StoreError};
use tokio::time::Instant;
use uuid::Uuid;

use super::protocol::{Action, Config, Phase, Rec, Run, State, Step, Write, next, unused};

/// What the store saw and answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Seen {
    /// A claim that took the key (`takeover`: of a live record).
    Acquired {
        takeover: bool,
    },
    /// A claim that found the key running under another holder.
    Waits,
    /// A claim that found it completed.
    Replayed,
    Renew {
        applied: bool,
    },
    Complete {
        applied: bool,
    },
    MarkAmbiguous {
        applied: bool,
    },
    Release {
        applied: bool,
    },
    /// S27: a claim given back (`Store::restore`).
    Restore {
        applied: bool,
    },
    /// Not the store's: the provider's log of an effect, by the caller whose body sent it.
    Effect,
}

/// One recorded transition: when (in ticks of one second), by which caller (numbered by their
/// first claim), what.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    pub tick: u32,
    pub caller: u8,
    pub seen: Seen,
}

/// A store (`MemoryStore` by default), recording each transition the store answered, with its
/// time in ticks of `tick`; its first claim's reply may be held back (a slow network, or a
/// holder stalled right after the claim was applied).
pub struct Recorder<S = MemoryStore> {
    inner: S,
    start: Instant,
    tick: Duration,
    log: Mutex<(Vec<Event>, HashMap<LeaseToken, u8>)>,
    first_reply_after: Option<Duration>,
    delayed: AtomicBool,
}

impl Recorder {
    /// A `MemoryStore`, ticks of one second.
    pub fn new(first_reply_after: Option<Duration>) -> Self {
        Recorder::wrap(
            MemoryStore::new(),
            Duration::from_secs(1),
            first_reply_after,
        )
    }
}

impl<S> Recorder<S> {
    /// `inner`, ticks of `tick`.
    pub fn wrap(inner: S, tick: Duration, first_reply_after: Option<Duration>) -> Self {
        Recorder {
            inner,
            start: Instant::now(),
            tick,
            log: Mutex::new((Vec::new(), HashMap::new())),
            first_reply_after,
            delayed: AtomicBool::new(false),
        }
    }

    /// The wrapped store.
    #[allow(dead_code)] // Used by failover_redis.rs.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    fn now(&self) -> u32 {
        (self.start.elapsed().as_micros() / self.tick.as_micros()) as u32
    }

    pub fn events(&self) -> Vec<Event> {
        self.log.lock().unwrap().0.clone()
    }

    /// The provider's log: caller `caller`'s body sent the effect now (callers are numbered by
    /// their first claim, which the test knows).
    pub fn effect(&self, caller: u8) {
        let tick = self.now();
        let seen = Seen::Effect;
        self.log
            .lock()
            .unwrap()
            .0
            .push(Event { tick, caller, seen });
    }

    fn record(&self, token: LeaseToken, seen: Seen) {
        let tick = self.now();
        let mut log = self.log.lock().unwrap();
        let next = log.1.len() as u8;
        let caller = *log.1.entry(token).or_insert(next);
        log.0.push(Event { tick, caller, seen });
    }

    fn written(&self, token: LeaseToken, r: &Result<Written, StoreError>, f: fn(bool) -> Seen) {
        if let Ok(w) = r {
            self.record(token, f(*w == Written::Applied));
        }
    }
}

impl<S: Store> Store for Recorder<S> {
    fn claim<'a>(&'a self, req: &'a ClaimRequest<'_>) -> StoreFuture<'a, Claim> {
        StoreFuture::boxed(async move {
            let got = self.inner.claim(req).await;
            if let Ok(claim) = &got {
                let seen = match claim {
                    Claim::Acquired { takeover } => Seen::Acquired {
                        takeover: takeover.is_some(),
                    },
                    Claim::Existing(e) => match e.state {
                        ExistingState::Completed { .. } => Seen::Replayed,
                        _ => Seen::Waits,
                    },
                    _ => unreachable!(),
                };
                self.record(req.token, seen);
            }
            if let Some(after) = self.first_reply_after
                && !self.delayed.swap(true, SeqCst)
            {
                tokio::time::sleep(after).await;
            }
            got
        })
    }

    fn renew(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        lease: Duration,
    ) -> StoreFuture<'_, Written> {
        StoreFuture::boxed(async move {
            let r = self.inner.renew(key, token, lease).await;
            self.written(token, &r, |applied| Seen::Renew { applied });
            r
        })
    }

    fn complete(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        outcome: Outcome,
        ttl: Duration,
    ) -> StoreFuture<'_, Written> {
        StoreFuture::boxed(async move {
            let r = self.inner.complete(key, token, outcome, ttl).await;
            self.written(token, &r, |applied| Seen::Complete { applied });
            r
        })
    }

    fn release(&self, key: IdempotencyKey, token: LeaseToken) -> StoreFuture<'_, Written> {
        StoreFuture::boxed(async move {
            let r = self.inner.release(key, token).await;
            self.written(token, &r, |applied| Seen::Release { applied });
            r
        })
    }

    fn mark_ambiguous<'a>(
        &'a self,
        key: IdempotencyKey,
        token: LeaseToken,
        note: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, Written> {
        StoreFuture::boxed(async move {
            let r = self.inner.mark_ambiguous(key, token, note, ttl).await;
            self.written(token, &r, |applied| Seen::MarkAmbiguous { applied });
            r
        })
    }

    fn restore<'a>(
        &'a self,
        key: IdempotencyKey,
        token: LeaseToken,
        note: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, Written> {
        StoreFuture::boxed(async move {
            let r = self.inner.restore(key, token, note, ttl).await;
            self.written(token, &r, |applied| Seen::Restore { applied });
            r
        })
    }
}

#[async_trait::async_trait]
impl<S: Store + OperationIds> OperationIds for Recorder<S> {
    async fn operation_id(&self, name: &str, fresh: Uuid) -> Result<Uuid, StoreError> {
        self.inner.operation_id(name, fresh).await
    }
}

/// What a model step shows the store, if anything.
fn observed(s: &State, a: Action) -> Option<(u8, Seen)> {
    let holds = |i: u8| matches!(s.rec, Rec::Running { holder, .. } if holder == i);
    let write = |w: Write, applied: bool| match w {
        Write::Complete => Seen::Complete { applied },
        Write::MarkAmbiguous => Seen::MarkAmbiguous { applied },
        Write::Release => Seen::Release { applied },
        Write::Restore => Seen::Restore { applied },
    };
    Some(match a {
        Action::Claim(i) => (
            i,
            match s.rec {
                Rec::Completed => Seen::Replayed,
                Rec::Absent => Seen::Acquired { takeover: false },
                _ => Seen::Acquired { takeover: true },
            },
        ),
        Action::ClaimWaits(i) => (i, Seen::Waits),
        Action::Reach(i) => (i, Seen::Effect),
        Action::Renew(i) => (i, Seen::Renew { applied: holds(i) }),
        Action::Write(i) => match s.callers[i as usize].phase {
            Phase::Writing(w, _) => (i, write(w, holds(i))),
            _ => unreachable!(),
        },
        Action::Drop(i) => match s.callers[i as usize].phase {
            Phase::Run(r @ Run { amb, step, .. }) => {
                let attempting = matches!(step, Step::Attempting { .. } | Step::Verifying { .. });
                let w = if unused(&r) && amb {
                    Write::Restore
                } else if amb || attempting {
                    Write::MarkAmbiguous
                } else {
                    Write::Release
                };
                (i, write(w, holds(i)))
            }
            _ => unreachable!(),
        },
        _ => return None,
    })
}

/// Where a trace left the model.
#[derive(Debug)]
pub struct Divergence {
    /// The first recorded transition no behaviour of the model explains.
    pub at: usize,
    pub event: Event,
    /// How many model states explained the trace up to it.
    pub candidates: usize,
}

/// Whether `trace` is a behaviour of the model `cfg` allows (its store transitions, at their
/// times); `Ok(states)`: how many (state, time) pairs the search visited.
pub fn validate(cfg: &Config, trace: &[Event]) -> Result<usize, Divergence> {
    search(cfg, trace, true)
}

/// Whether `trace` is a behaviour of the model `cfg` allows, its store transitions in their
/// order with any time passing between them (a run in real time, whose ticks jitter): what it
/// checks is every transition's kind, caller and answer, in sequence.
#[allow(dead_code)] // Used by model_stores.rs (real stores), not by model.rs.
pub fn validate_untimed(cfg: &Config, trace: &[Event]) -> Result<usize, Divergence> {
    search(cfg, trace, false)
}

fn search(cfg: &Config, trace: &[Event], timed: bool) -> Result<usize, Divergence> {
    let mut frontier: HashSet<(State, u32)> = HashSet::from([(State::initial(cfg), 0)]);
    let mut visited = 0;
    let mut succ = Vec::new();
    for (at, &recorded) in trace.iter().enumerate() {
        // Untimed: every event at time 0, and time passes freely (the model's state keeps time
        // relative, so the search stays finite).
        let ev = Event {
            tick: if timed { recorded.tick } else { 0 },
            ..recorded
        };
        // Every unobserved step, until the event's time.
        let mut seen: HashSet<(State, u32)> = frontier.clone();
        let mut queue: Vec<(State, u32)> = frontier.into_iter().collect();
        while let Some((s, k)) = queue.pop() {
            next(cfg, &s, &mut succ);
            let mut steps: Vec<(State, u32)> = Vec::new();
            if k < ev.tick || !timed {
                // Time passes (a tick may change nothing the model keeps).
                let ticked = succ
                    .iter()
                    .find(|(a, ..)| *a == Action::Tick)
                    .map_or(s, |(_, t, _)| *t);
                steps.push((ticked, if timed { k + 1 } else { k }));
            }
            for &(a, t, _) in &succ {
                if a != Action::Tick && observed(&s, a).is_none() {
                    steps.push((t, k));
                }
            }
            for step in steps {
                if seen.insert(step) {
                    queue.push(step);
                }
            }
        }
        visited += seen.len();
        // The recorded transition, at its time.
        let mut after = HashSet::new();
        for &(s, k) in seen.iter().filter(|(_, k)| *k == ev.tick) {
            next(cfg, &s, &mut succ);
            for &(a, t, _) in &succ {
                if observed(&s, a) == Some((ev.caller, ev.seen)) {
                    after.insert((t, k));
                }
            }
            // A claim that waits and changes nothing (the claim loop asks again).
            let i = ev.caller as usize;
            if ev.seen == Seen::Waits
                && s.callers[i].phase == Phase::Idle
                && matches!(s.rec, Rec::Running { holder, .. } if holder != ev.caller)
                && succ.iter().any(|(a, ..)| *a == Action::GiveUp(ev.caller))
            {
                after.insert((s, k));
            }
        }
        if after.is_empty() {
            return Err(Divergence {
                at,
                event: recorded,
                candidates: seen.len(),
            });
        }
        frontier = after;
    }
    Ok(visited)
}
