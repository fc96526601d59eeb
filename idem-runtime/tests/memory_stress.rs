//! The memory store's state machine under concurrency.
//!
//! - Many tasks on tokio's paused clock claim, complete, release, mark ambiguous, prune and let
//!   leases and records' ttls expire in random interleavings; every answer and every record is checked
//!   against a sequential model of the state machine in `store/mod.rs`. Each store operation is
//!   atomic (one lock, no await inside), so stepping the model right after it, before anything
//!   else can run, linearizes them exactly.
//! - OS threads hammer a few keys at once: never two live holders of one key, a holder's own
//!   writes always apply, a stale token's writes never do, and a completed outcome never changes.

use idem_runtime::Records;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use idem_runtime::store::{
    Claim, ClaimRequest, Existing, ExistingState, LeaseToken, Outcome, Record, RecordState,
    Takeover, Written,
};
use idem_runtime::{Fingerprint, IdempotencyKey, MemoryStore, Store};
use tokio::time::Instant;

fn key(i: usize) -> IdempotencyKey {
    IdempotencyKey::derive("stress", &[("k", &i)])
}

fn fingerprint(i: u8) -> Fingerprint {
    Fingerprint([i; 32])
}

/// The state machine of `store/mod.rs`, one record per key, written from its docs.
#[derive(Debug, Clone, PartialEq)]
enum ModelState {
    Running {
        token: LeaseToken,
        lease_until: Instant,
    },
    /// `by`: the token that completed it (its completion sent again is applied again).
    Completed { outcome: Vec<u8>, by: LeaseToken },
    /// `by`: the token that marked it, likewise.
    Ambiguous { note: String, by: LeaseToken },
}

#[derive(Debug, Clone)]
struct ModelRec {
    fingerprint: Fingerprint,
    state: ModelState,
    /// `None`: never by time (a running or ambiguous record, S34).
    expires_at: Option<Instant>,
}

#[derive(Debug, Default)]
struct Model {
    records: BTreeMap<usize, ModelRec>,
    /// Per key, the outcome it completed with, until its record is gone.
    completed: BTreeMap<usize, Vec<u8>>,
    /// Counts of what happened, to show the interleavings reached every transition.
    seen: BTreeMap<&'static str, u64>,
}

impl Model {
    fn note(&mut self, what: &'static str) {
        *self.seen.entry(what).or_default() += 1;
    }

    /// The live record of `k` at `now`: every record the model makes stays until released (a
    /// running or ambiguous one never expires by time, S34; a completed one past its ttl is a
    /// tombstone, S33).
    fn live(&mut self, k: usize, _now: Instant) -> Option<&mut ModelRec> {
        self.records.get_mut(&k)
    }

    fn claim(&mut self, k: usize, req: &ClaimRequest<'_>, now: Instant) -> Claim {
        let running = ModelState::Running {
            token: req.token,
            lease_until: now + req.lease,
        };
        let Some(rec) = self.live(k, now) else {
            self.records.insert(
                k,
                ModelRec {
                    fingerprint: req.fingerprint,
                    state: running,
                    expires_at: None,
                },
            );
            self.note("claim: new record");
            return Claim::Acquired { takeover: None };
        };
        let same = rec.fingerprint == req.fingerprint;
        let existing = match &rec.state {
            ModelState::Running { lease_until, .. } if same && *lease_until <= now => None,
            ModelState::Ambiguous { .. } if same => None,
            ModelState::Running { lease_until, .. } => Some(ExistingState::Running {
                lease_remaining: lease_until.saturating_duration_since(now),
            }),
            // S33: past its ttl, a tombstone (when it was done is the store's: see `normal`).
            ModelState::Completed { .. } if rec.expires_at.is_some_and(|e| e <= now) => {
                Some(ExistingState::Tombstone {
                    done: std::time::UNIX_EPOCH,
                    resolved: false,
                })
            }
            ModelState::Completed { outcome, .. } => Some(ExistingState::Completed {
                outcome: outcome.clone().into(),
            }),
            ModelState::Ambiguous { .. } => Some(ExistingState::Ambiguous),
        };
        match existing {
            Some(state) => {
                let fingerprint = rec.fingerprint;
                self.note(match state {
                    ExistingState::Running { .. } => "claim: live holder",
                    ExistingState::Completed { .. } => "claim: completed",
                    ExistingState::Tombstone { .. } => "claim: tombstone",
                    ExistingState::Ambiguous => "claim: ambiguous, other arguments",
                    _ => unreachable!("the model makes no other state"),
                });
                Claim::Existing(Existing::new(fingerprint, state))
            }
            None => {
                let (what, from) = match rec.state {
                    ModelState::Running { .. } => {
                        ("claim: took over an expired lease", Takeover::ExpiredHolder)
                    }
                    _ => ("claim: took over an ambiguous record", Takeover::Ambiguous),
                };
                rec.state = running;
                rec.expires_at = None;
                self.note(what);
                Claim::Acquired {
                    takeover: Some(from),
                }
            }
        }
    }

    /// Whether `token` holds `k`'s record (a write by it applies).
    fn held(&mut self, k: usize, token: LeaseToken, now: Instant) -> bool {
        matches!(self.live(k, now), Some(ModelRec { state: ModelState::Running { token: t, .. }, .. }) if *t == token)
    }

    fn write(&mut self, k: usize, token: LeaseToken, now: Instant, op: &Op) -> Written {
        if !self.held(k, token, now) {
            // The holder's completion or mark, sent again (issue 30 #8): applied, no change.
            let again = match (self.live(k, now).map(|r| &r.state), op) {
                (Some(ModelState::Completed { by, .. }), Op::Complete(..)) => *by == token,
                (Some(ModelState::Ambiguous { by, .. }), Op::Ambiguous(..)) => *by == token,
                _ => false,
            };
            if again {
                self.note("write sent again applied");
                return Written::Applied;
            }
            self.note("write fenced");
            return Written::Fenced;
        }
        let rec = self.records.get_mut(&k).expect("held");
        match op {
            Op::Complete(outcome, ttl) => {
                rec.state = ModelState::Completed {
                    outcome: outcome.clone(),
                    by: token,
                };
                rec.expires_at = Some(now + *ttl);
                self.completed.insert(k, outcome.clone());
                self.note("complete applied");
            }
            Op::Release => {
                self.records.remove(&k);
                self.note("release applied");
            }
            Op::Ambiguous(note, _) => {
                rec.state = ModelState::Ambiguous {
                    note: note.clone(),
                    by: token,
                };
                rec.expires_at = None;
                self.note("mark_ambiguous applied");
            }
        }
        Written::Applied
    }

    fn record(&mut self, k: usize, now: Instant) -> Option<Seen> {
        self.live(k, now).map(|rec| Seen {
            tool: "stress".to_owned(),
            fingerprint: rec.fingerprint,
            state: match &rec.state {
                ModelState::Running { token, lease_until } => RecordState::Running {
                    token: *token,
                    lease_remaining: lease_until.saturating_duration_since(now),
                },
                ModelState::Completed { .. } if rec.expires_at.is_some_and(|e| e <= now) => {
                    RecordState::Tombstone
                }
                ModelState::Completed { outcome, .. } => RecordState::Completed {
                    outcome: outcome.clone(),
                },
                ModelState::Ambiguous { note, .. } => RecordState::Ambiguous { note: note.clone() },
            },
            expires_in: rec
                .expires_at
                .map_or(Duration::MAX, |e| e.saturating_duration_since(now)),
        })
    }

    fn live_holders(&self, k: usize, now: Instant) -> usize {
        self.records
            .get(&k)
            .filter(|r| r.expires_at.is_none_or(|e| e > now))
            .map_or(0, |r| {
                usize::from(
                    matches!(r.state, ModelState::Running { lease_until, .. } if lease_until > now),
                )
            })
    }
}

#[derive(Debug)]
enum Op {
    Complete(Vec<u8>, Duration),
    Release,
    Ambiguous(String, Duration),
}

const KEYS: usize = 3;

/// The store's records of every key, read at once (each read is ready at its first poll, so
/// no other task runs in between).
async fn records(store: &MemoryStore) -> Result<Vec<Option<Seen>>, String> {
    let mut all = Vec::new();
    for k in 0..KEYS {
        let record = store.get(&key(k)).await.map_err(|e| e.to_string())?;
        all.push(record.map(|r: Record| Seen {
            tool: r.tool,
            fingerprint: r.fingerprint,
            state: r.state,
            expires_in: r.expires_in,
        }));
    }
    Ok(all)
}

/// A claim's answer as the model predicts it: a tombstone's time is the store's clock's.
fn normal(claim: &Claim) -> Claim {
    match claim {
        Claim::Existing(Existing {
            fingerprint,
            state: ExistingState::Tombstone { resolved, .. },
            ..
        }) => Claim::Existing(Existing::new(
            *fingerprint,
            ExistingState::Tombstone {
                done: std::time::UNIX_EPOCH,
                resolved: *resolved,
            },
        )),
        other => other.clone(),
    }
}

/// What the model predicts of a record: all but its times.
#[derive(Debug, PartialEq)]
struct Seen {
    tool: String,
    fingerprint: idem_runtime::Fingerprint,
    state: RecordState,
    expires_in: Duration,
}

/// The store's records are the model's.
fn same_records(stored: &[Option<Seen>], m: &mut Model, now: Instant) -> Result<(), String> {
    for (k, stored) in stored.iter().enumerate() {
        let expected = m.record(k, now);
        // S31: a running record whose holder's lease lapsed reads as an ambiguous one (with the
        // note of the ambiguous record it took over, or one saying the lease lapsed).
        let same = match (stored, &expected) {
            (Some(s), Some(e)) if matches!(e.state, RecordState::Running { lease_remaining, .. } if lease_remaining.is_zero()) => {
                matches!(s.state, RecordState::Ambiguous { .. })
                    && (&s.tool, s.fingerprint, s.expires_in)
                        == (&e.tool, e.fingerprint, e.expires_in)
            }
            _ => *stored == expected,
        };
        if !same {
            return Err(format!(
                "record of key {k}: store has {stored:?}, model {expected:?}"
            ));
        }
    }
    Ok(())
}

/// One task: claims random keys, holds them for random times (sometimes past the lease),
/// finishes them in random ways or abandons them, and writes with old tokens (a slow holder
/// coming back after a takeover).
async fn worker(
    store: Arc<MemoryStore>,
    model: Arc<Mutex<Model>>,
    seed: u64,
    ops: usize,
) -> Result<(), String> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut old_tokens: Vec<(usize, LeaseToken)> = Vec::new();
    let ms = |rng: &mut fastrand::Rng, hi: u64| Duration::from_millis(rng.u64(1..=hi));
    for _ in 0..ops {
        let k = rng.usize(..KEYS);
        let kk = key(k);
        // Mostly the same operation; sometimes a reused key with other arguments.
        let fp = fingerprint(u8::from(rng.f64() < 0.15));
        let (lease, ttl) = (ms(&mut rng, 400), ms(&mut rng, 3_000));
        let req = ClaimRequest::new(kk, "stress", fp, LeaseToken::new(), lease, ttl);
        // The store's answer and its records, then the model's step: nothing runs in between.
        let got = store.claim(&req).await.map_err(|e| e.to_string())?;
        let stored = records(&store).await?;
        {
            let now = Instant::now();
            let mut m = model.lock().unwrap();
            let live_before = m.live_holders(k, now);
            let expected = m.claim(k, &req, now);
            if normal(&got) != expected {
                return Err(format!(
                    "claim of key {k}: store said {got:?}, model {expected:?}"
                ));
            }
            if matches!(got, Claim::Acquired { .. }) && live_before != 0 {
                return Err(format!("key {k} acquired while another lease was live"));
            }
            if let Claim::Existing(Existing {
                state: ExistingState::Completed { outcome },
                ..
            }) = &got
                && m.completed.get(&k).map(Vec::as_slice) != Some(outcome.as_bytes())
            {
                return Err(format!(
                    "key {k} replayed {outcome:?}, but it completed with {:?}",
                    m.completed.get(&k)
                ));
            }
            same_records(&stored, &mut m, now)?;
        }
        if matches!(got, Claim::Acquired { .. }) {
            old_tokens.push((k, req.token));
        }
        // A slow holder, or a dead one: the lease may expire meanwhile.
        tokio::time::sleep(ms(&mut rng, 600)).await;
        let token = if matches!(got, Claim::Acquired { .. }) && rng.f64() < 0.85 {
            req.token
        } else {
            // The holder died (its token is kept: it may come back late), or this is an old
            // holder of the key writing late.
            let mine: Vec<LeaseToken> = old_tokens
                .iter()
                .filter(|(ok, _)| *ok == k)
                .map(|(_, t)| *t)
                .collect();
            if mine.is_empty() || rng.bool() {
                continue;
            }
            mine[rng.usize(..mine.len())]
        };
        let op = match rng.u8(0..3) {
            0 => Op::Complete(rng.u64(..).to_be_bytes().to_vec(), ms(&mut rng, 3_000)),
            1 => Op::Release,
            _ => Op::Ambiguous("maybe".to_owned(), ms(&mut rng, 3_000)),
        };
        let before = records(&store).await?;
        let written = match &op {
            Op::Complete(outcome, ttl) => {
                store
                    .complete(kk, token, Outcome::from(&outcome[..]), *ttl)
                    .await
            }
            Op::Release => store.release(kk, token).await,
            Op::Ambiguous(note, ttl) => store.mark_ambiguous(kk, token, note, *ttl).await,
        }
        .map_err(|e| e.to_string())?;
        let stored = records(&store).await?;
        {
            let now = Instant::now();
            let mut m = model.lock().unwrap();
            same_records(&before, &mut m, now)?;
            let expected = m.write(k, token, now, &op);
            if written != expected {
                return Err(format!(
                    "{op:?} on key {k}: store said {written:?}, model {expected:?}"
                ));
            }
            if written == Written::Fenced && stored != before {
                return Err(format!("a fenced {op:?} on key {k} changed the store"));
            }
            same_records(&stored, &mut m, now)?;
        }
        if rng.f64() < 0.05 {
            store.prune(usize::MAX).await.map_err(|e| e.to_string())?;
            let stored = records(&store).await?;
            let now = Instant::now();
            same_records(&stored, &mut model.lock().unwrap(), now)?;
        }
    }
    Ok(())
}

#[test]
fn memory_store_matches_its_model_across_interleaved_tasks_and_expiries() {
    let mut seen: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut ops = 0;
    for seed in 0..40u64 {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        let store = Arc::new(MemoryStore::new());
        let model = Arc::new(Mutex::new(Model::default()));
        let tasks = 16;
        let per_task = 60;
        let outcome = runtime.block_on(async {
            let handles: Vec<_> = (0..tasks)
                .map(|t| {
                    tokio::spawn(worker(
                        store.clone(),
                        model.clone(),
                        seed * 1_000 + t,
                        per_task,
                    ))
                })
                .collect();
            for h in handles {
                h.await.unwrap()?;
            }
            Ok::<(), String>(())
        });
        if let Err(e) = outcome {
            panic!("seed {seed}: {e}");
        }
        ops += tasks * per_task as u64;
        for (k, v) in &model.lock().unwrap().seen {
            *seen.entry(k).or_default() += v;
        }
    }
    eprintln!("{ops} claims across 40 interleavings; transitions seen: {seen:#?}");
    for transition in [
        "claim: new record",
        "claim: live holder",
        "claim: completed",
        "claim: ambiguous, other arguments",
        "claim: took over an expired lease",
        "claim: took over an ambiguous record",
        "write fenced",
        "complete applied",
        "release applied",
        "mark_ambiguous applied",
        "claim: tombstone",
    ] {
        assert!(
            seen.get(transition).copied().unwrap_or(0) > 0,
            "the interleavings never reached `{transition}`"
        );
    }
}

#[test]
fn threads_never_see_two_live_holders_a_fenced_write_applied_or_an_outcome_change() {
    // Leases and records outlive the test, so every overlap of holders would be a bug.
    const THREADS: u64 = 8;
    const OPS: usize = 4_000;
    // A sliding window of 4 keys: threads at the same point contend on the same ones, and
    // the window moves on before every key is completed (a completed key only replays).
    const WINDOW: usize = 4;
    const STEP: usize = 25;
    const KEYS: usize = (OPS / STEP + 1) * WINDOW;
    let store = Arc::new(MemoryStore::new());
    // The token of the one live holder of each key (0: none).
    let holders: Arc<Vec<AtomicU64>> = Arc::new((0..KEYS).map(|_| AtomicU64::new(0)).collect());
    let outcomes: Arc<Vec<OnceLock<Vec<u8>>>> =
        Arc::new((0..KEYS).map(|_| OnceLock::new()).collect());
    let counts = Arc::new(Mutex::new(BTreeMap::<&'static str, u64>::new()));
    let next_id = Arc::new(AtomicU64::new(1));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (store, holders, outcomes, counts, next_id) = (
                store.clone(),
                holders.clone(),
                outcomes.clone(),
                counts.clone(),
                next_id.clone(),
            );
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .unwrap();
                let mut rng = fastrand::Rng::with_seed(t);
                // (key, token, the write it made: 0 complete, 1 release, 2 mark ambiguous)
                let mut stale: Vec<(usize, LeaseToken, u8)> = Vec::new();
                let count =
                    |what: &'static str| *counts.lock().unwrap().entry(what).or_default() += 1;
                for i in 0..OPS {
                    let k = (i / STEP) * WINDOW + rng.usize(..WINDOW);
                    let kk = key(k);
                    let id = next_id.fetch_add(1, Ordering::Relaxed);
                    let token = LeaseToken(uuid::Uuid::from_u128(u128::from(id)));
                    let req = ClaimRequest::new(
                        kk,
                        "stress",
                        fingerprint(0),
                        token,
                        Duration::from_secs(3_600),
                        Duration::from_secs(3_600),
                    );
                    match rt.block_on(store.claim(&req)).unwrap() {
                        Claim::Acquired { .. } => {
                            count("acquired");
                            let prev = holders[k].swap(id, Ordering::SeqCst);
                            assert_eq!(prev, 0, "key {k}: acquired by {id} while {prev} held it");
                            std::thread::yield_now();
                            // Give up the key logically before the store lets anyone else in.
                            assert_eq!(holders[k].swap(0, Ordering::SeqCst), id);
                            let kind = rng.u8(0..3);
                            let written = match kind {
                                0 => {
                                    let outcome = id.to_be_bytes().to_vec();
                                    let w = rt.block_on(store.complete(
                                        kk,
                                        token,
                                        Outcome::from(&outcome[..]),
                                        Duration::from_secs(3_600),
                                    ));
                                    let first = outcomes[k].get_or_init(|| outcome.to_vec());
                                    assert_eq!(first, &outcome, "key {k} completed twice");
                                    count("completed");
                                    w
                                }
                                1 => {
                                    count("released");
                                    rt.block_on(store.release(kk, token))
                                }
                                _ => {
                                    count("marked ambiguous");
                                    rt.block_on(store.mark_ambiguous(
                                        kk,
                                        token,
                                        "maybe",
                                        Duration::from_secs(3_600),
                                    ))
                                }
                            };
                            assert_eq!(
                                written.unwrap(),
                                Written::Applied,
                                "the live holder's write of key {k}"
                            );
                            stale.push((k, token, kind));
                        }
                        Claim::Existing(Existing {
                            state: ExistingState::Completed { outcome },
                            ..
                        }) => {
                            count("replayed");
                            let first = outcomes[k].get_or_init(|| outcome.to_vec());
                            assert_eq!(&first[..], outcome.as_bytes(), "key {k}'s outcome changed");
                        }
                        Claim::Existing(Existing {
                            state: ExistingState::Running { .. },
                            ..
                        }) => count("live holder seen"),
                        Claim::Existing(other) => panic!("unexpected {other:?}"),
                        other => panic!("unexpected {other:?}"),
                    }
                    if !stale.is_empty() && rng.f64() < 0.3 {
                        let (sk, st, made) = stale[rng.usize(..stale.len())];
                        let kk = key(sk);
                        let again = rng.u8(0..3);
                        let w = match again {
                            0 => rt.block_on(store.complete(
                                kk,
                                st,
                                Outcome::from(&b"stale"[..]),
                                Duration::from_secs(3_600),
                            )),
                            1 => rt.block_on(store.release(kk, st)),
                            _ => rt.block_on(store.mark_ambiguous(
                                kk,
                                st,
                                "stale",
                                Duration::from_secs(3_600),
                            )),
                        };
                        match w.unwrap() {
                            Written::Fenced => count("stale write fenced"),
                            // Its own completion or mark sent again while the record is still
                            // as it left it: applied again, changing nothing (the outcome
                            // check above sees any change).
                            Written::Applied if again == made && made != 1 => {
                                count("own write sent again")
                            }
                            Written::Applied => {
                                panic!("a stale token's write on key {sk} applied")
                            }
                        }
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("a stress thread failed");
    }
    let counts = counts.lock().unwrap();
    eprintln!("{counts:#?}");
    for what in [
        "acquired",
        "completed",
        "released",
        "marked ambiguous",
        "replayed",
        "stale write fenced",
    ] {
        assert!(counts.get(what).copied().unwrap_or(0) > 0, "never {what}");
    }
}
