//! The SQLite store across a power cut, not only a killed process (issue 43): what
//! `synchronous = FULL` and `NORMAL` keep, measured with a crash VFS (`tests/crashvfs`).
//!
//! A process kill keeps what reached the operating system (`failover_sqlite.rs` kills at every
//! fsync: both settings keep everything). A power cut also loses what the operating system had
//! not written: every write since a file's last sync may be lost, in any subset, torn at the
//! sector. Each run here, on a database created beforehand (its creation is `failover_sqlite`'s
//! business), calls through a store opened over the crash VFS:
//!
//! 1. `charge(1)`, whose body outlasts a third of its lease (a renewal), then completes;
//! 2. `decline(2)`, whose body fails permanently before any effect: the claim is released;
//! 3. a checkpoint from another connection (as the store makes every 1000 WAL pages);
//! 4. `charge(3)`, renewed and completed (its claim starts the WAL over);
//! 5. `charge(4)` and `charge(5)` at once.
//!
//! The power is cut on entering sync N (N = 1, 2, … until a run ends before its N-th sync: every
//! sync of the claims, renewals, completions, the release and the checkpoint), and between the
//! steps (before 1, after each). Each cut's files are then rebuilt in fresh directories, once
//! per loss (every pending write lost, none, a random prefix, a random subset, torn sectors, the
//! last three with several seeds), a new store (the same setting, the default VFS) opens them,
//! and every order begun is called again. Counted: **double runs** (a key whose body ran twice)
//! and **lost outcomes** (a call told `Ok` whose next call does not replay that outcome).
//! Every call after a cut must end `Ok` or `Ambiguous` (S19/S20): the files always open.
//!
//! `cargo test -p idem-runtime --all-features --test power_sqlite -- --nocapture` prints the
//! counts (`POWER …` lines; `IDEMKIT_POWER_SEEDS=N` for N seeds per random loss, default 8).

#[path = "failover/common.rs"]
mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{E, Effects, Tally, ambiguous, charge};
use idem_runtime::{Classify, Error, Failure, Idem, SqliteStore, Synchronous, Tool};
use idemkit_crashvfs::{self as crash, Loss};

/// Short, so a call after a cut waits little for a dead holder; the first body outlasts a third
/// of it, so its lease is renewed once.
const LEASE: Duration = Duration::from_millis(150);
const BODY: Duration = Duration::from_millis(80);

/// What one run does, in order.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// `charge(order)`, whose body outlasts a third of its lease (a renewal), completed.
    Renewed(u64),
    /// `charge(order)`'s key, whose body fails permanently before any effect: released.
    Declined(u64),
    /// Another connection checkpoints the WAL into the database (as the store does itself every
    /// 1000 WAL pages, or another process): the next write starts the WAL over.
    Checkpoint,
    /// Two calls at once (under `FULL`, their writes may share a commit).
    Together(u64, u64),
}

const STEPS: [Step; 5] = [
    Step::Renewed(1),
    Step::Declined(2),
    Step::Checkpoint,
    Step::Renewed(3),
    Step::Together(4, 5),
];

/// A passive checkpoint through the crash VFS, from a connection of its own.
fn checkpoint(work: &Path) {
    let conn = rusqlite::Connection::open_with_flags_and_vfs(
        db(work),
        rusqlite::OpenFlags::default(),
        crash::NAME,
    )
    .unwrap();
    conn.busy_timeout(Duration::from_secs(10)).unwrap();
    // Cut off mid-way, it fails: the run stops there.
    let _ = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
}

/// The crash VFS is one world per process: one test at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn db(dir: &Path) -> PathBuf {
    dir.join("idemkit.db")
}

fn open(dir: &Path, sync: Synchronous, through_crash_vfs: bool) -> Idem {
    let mut builder = SqliteStore::builder(db(dir)).synchronous(sync);
    if through_crash_vfs {
        builder = builder.vfs(crash::register());
    }
    Idem::new(builder.open().unwrap())
}

/// The error of [`decline`]'s body: a definitive refusal (the claim is released).
#[derive(Debug)]
enum Declined {
    Runtime(Box<Error>),
    No,
}

impl Classify for Declined {
    fn classify(&self) -> Failure {
        Failure::Permanent
    }
}

impl From<Error> for Declined {
    fn from(e: Error) -> Self {
        Declined::Runtime(Box::new(e))
    }
}

/// `charge(order)`'s key, whose body fails permanently before any effect: a release.
async fn decline(idem: &Idem, order: u64) -> Result<String, Declined> {
    Tool::new("charge")
        .idem(idem)
        .lease(LEASE)
        .max_attempts(1)
        .resend(false)
        .side_effect(&[("order", &order)], &order, |_key| async {
            crash::set_label("release 2");
            Err::<String, _>(Declined::No)
        })
        .await
}

/// Where a run's power is cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum At {
    /// On entering the N-th sync.
    Sync(u64),
    /// After this many steps.
    Between(usize),
}

/// What a run before its cut did.
struct Run {
    /// Per order begun: `Some(Ok)` if acknowledged, `Some(Err)` if refused, the effects made.
    before: BTreeMap<u64, (Result<String, E>, u32)>,
    /// Whether the power was cut (an armed sync not reached: no).
    cut: bool,
    /// The label of the sync the cut came at, or where between the steps.
    label: String,
    cut_state: crash::Cut,
}

/// One run on a fresh database (created before the crash VFS tracks it), cut at `at`.
fn run(rt: &tokio::runtime::Runtime, sync: Synchronous, at: At) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path();
    crash::reset();
    drop(open(work, sync, true));
    wait_closed();
    crash::reset();
    let mut label = String::new();
    match at {
        At::Sync(n) => crash::arm_at_sync(n),
        At::Between(0) => {
            crash::cut_now();
            label = "before the first claim".to_owned();
        }
        At::Between(_) => {}
    }
    let idem = open(work, sync, true);
    let mut before = BTreeMap::new();
    for (i, step) in STEPS.iter().enumerate() {
        if crash::is_off() {
            break;
        }
        rt.block_on(async {
            match *step {
                Step::Renewed(order) => {
                    let effects = Effects::default();
                    crash::set_label(&format!("claim {order}"));
                    let r = charge(&idem, order, LEASE, &effects, async {
                        crash::set_label(&format!("renewal {order}"));
                        tokio::time::sleep(BODY).await;
                        crash::set_label(&format!("completion {order}"));
                    })
                    .await;
                    before.insert(order, (r, effects.count(order)));
                }
                Step::Declined(order) => {
                    crash::set_label(&format!("claim {order}"));
                    let r = decline(&idem, order).await.map_err(|e| match e {
                        Declined::Runtime(e) => E::Runtime(e),
                        Declined::No => E::Unrecorded("declined".to_owned()),
                    });
                    before.insert(order, (r, 0));
                }
                Step::Checkpoint => {
                    crash::set_label("checkpoint");
                    checkpoint(work);
                }
                Step::Together(a, b) => {
                    crash::set_label(&format!("claims, completions {a} and {b} (together)"));
                    let (ea, eb) = (Effects::default(), Effects::default());
                    let (ra, rb) = tokio::join!(
                        charge(&idem, a, LEASE, &ea, async {}),
                        charge(&idem, b, LEASE, &eb, async {})
                    );
                    before.insert(a, (ra, ea.count(a)));
                    before.insert(b, (rb, eb.count(b)));
                }
            }
        });
        if at == At::Between(i + 1) {
            crash::cut_now();
            label = format!("after {step:?}");
        }
    }
    let cut = crash::is_off();
    if let (At::Sync(n), true) = (at, cut) {
        let syncs = crash::syncs();
        assert_eq!(syncs.len() as u64, n, "the cut came at sync {n}: {syncs:?}");
        label = format!(
            "sync {n} ({}, {})",
            syncs[syncs.len() - 1].label,
            syncs[syncs.len() - 1].file
        );
    }
    assert_eq!(
        crash::deletions(),
        0,
        "a deletion before the cut (not modelled)"
    );
    drop(idem);
    wait_closed();
    // Every lease in the files ends before they are opened again: a caller after the cut takes a
    // dead holder's key over at once instead of waiting out its lease, per loss.
    std::thread::sleep(LEASE);
    Run {
        before,
        cut,
        label,
        cut_state: crash::snapshot(),
    }
}

/// Until every file of the crash VFS is closed (the store's thread lets go of its connection).
fn wait_closed() {
    let start = Instant::now();
    while crash::open_handles() > 0 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the store never closed its files"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The losses tried per cut, each with its seeds.
fn losses() -> Vec<(Loss, u64)> {
    let seeds: u64 = std::env::var("IDEMKIT_POWER_SEEDS").map_or(8, |s| s.parse().unwrap());
    let mut all = vec![(Loss::All, 0), (Loss::None, 0)];
    for loss in [Loss::Prefix, Loss::Random, Loss::Torn] {
        all.extend((0..seeds).map(|seed| (loss, seed)));
    }
    all
}

/// What the cuts of one setting measured, per loss.
#[derive(Debug, Default)]
struct Matrix {
    points: Vec<String>,
    sync_points: u64,
    per_loss: BTreeMap<String, Tally>,
    /// Where double runs and lost outcomes came, per cut point: (double runs, lost outcomes).
    where_lost: BTreeMap<String, (u32, u32)>,
}

impl Matrix {
    fn total(&self) -> Tally {
        let mut t = Tally::default();
        for x in self.per_loss.values() {
            t.runs += x.runs;
            t.double_runs += x.double_runs;
            t.lost_outcomes += x.lost_outcomes;
            t.acknowledged += x.acknowledged;
            t.ambiguous_after += x.ambiguous_after;
            t.refused_before += x.refused_before;
            t.cut_off += x.cut_off;
        }
        t
    }
}

/// Every cut of `sync`, every loss: the calls again after each.
fn power_cuts(sync: Synchronous) -> Matrix {
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut points = Vec::new();
    for n in 1.. {
        assert!(n < 200, "still syncing at sync {n}");
        let r = run(&rt, sync, At::Sync(n));
        if !r.cut {
            break;
        }
        points.push(r);
    }
    let sync_points = points.len() as u64;
    for k in 0..=STEPS.len() {
        points.push(run(&rt, sync, At::Between(k)));
    }
    let mut m = Matrix {
        sync_points,
        ..Matrix::default()
    };
    for r in &points {
        m.points.push(r.label.clone());
        for (loss, seed) in losses() {
            let dir = tempfile::tempdir().unwrap();
            r.cut_state.materialize(loss, seed, dir.path()).unwrap();
            let idem = open(dir.path(), sync, false);
            let tally = m.per_loss.entry(format!("{loss:?}")).or_default();
            let lost = m.where_lost.entry(r.label.clone()).or_default();
            // The provider as the run left it: a body run again says `effect 2`.
            let effects = Effects::already(r.before.iter().map(|(&o, (_, ran))| (o, *ran)));
            for (&order, (before, _)) in &r.before {
                let after = rt.block_on(charge(&idem, order, LEASE, &effects, async {}));
                assert!(
                    after.is_ok() || ambiguous(&after),
                    "{sync:?}, cut at {}, {loss:?} seed {seed}: order {order} after the cut: {after:?}",
                    r.label
                );
                let was = (tally.double_runs, tally.lost_outcomes);
                tally.add(Some(before), &after, effects.count(order));
                lost.0 += tally.double_runs - was.0;
                lost.1 += tally.lost_outcomes - was.1;
            }
        }
    }
    let setting = format!("{sync:?}").to_uppercase();
    let cuts = m.points.len() * losses().len();
    for (loss, t) in &m.per_loss {
        common::log_line(&format!(
            "POWER sqlite synchronous={setting} loss={loss}: {} calls again after {} cuts, {} double \
             runs, {} lost outcomes ({} acknowledged before the cut, {} ambiguous after)",
            t.runs,
            m.points.len()
                * losses()
                    .iter()
                    .filter(|(l, _)| format!("{l:?}") == *loss)
                    .count(),
            t.double_runs,
            t.lost_outcomes,
            t.acknowledged,
            t.ambiguous_after
        ));
    }
    for (point, (double, lost)) in &m.where_lost {
        if *double + *lost > 0 {
            common::log_line(&format!(
                "POWER sqlite synchronous={setting} cut {point}: {double} double runs, {lost} lost outcomes"
            ));
        }
    }
    common::log_line(&format!(
        "POWER sqlite synchronous={setting} cut points: {}",
        m.points.join("; ")
    ));
    let t = m.total();
    common::log_line(&format!(
        "POWER sqlite synchronous={setting}: {} sync points and {} points between calls, {cuts} cuts \
         (losses: all, none, {} seeds each of a prefix, a subset, torn sectors), {} calls again: \
         {} double runs, {} lost outcomes ({} acknowledged before the cut, {} ambiguous after)",
        m.sync_points,
        STEPS.len() + 1,
        (losses().len() - 2) / 3,
        t.runs,
        t.double_runs,
        t.lost_outcomes,
        t.acknowledged,
        t.ambiguous_after
    ));
    m
}

/// `synchronous = FULL` (the default): a power cut at any sync of a claim, a renewal, a
/// completion or a release, or between calls, losing any part of what was not synced: nothing
/// acknowledged is lost, nothing runs twice.
#[test]
fn sqlite_power_cut_full_loses_nothing_and_runs_nothing_twice() {
    let m = power_cuts(Synchronous::Full);
    let t = m.total();
    assert_eq!((t.double_runs, t.lost_outcomes), (0, 0), "{m:#?}");
    assert!(
        m.sync_points >= 7,
        "a claim, a renewal, a completion per call: {m:#?}"
    );
    assert!(t.acknowledged > 0, "{m:#?}");
}

/// `synchronous = NORMAL`: what a process kill leaves (no pending write lost) keeps everything;
/// a power cut that loses the WAL's frames since its last sync loses the claims and outcomes
/// committed since, and a lost claim whose body had run runs it again (the documented risk).
#[test]
fn sqlite_power_cut_normal_loses_the_last_commits_and_runs_them_again() {
    let m = power_cuts(Synchronous::Normal);
    let kill = &m.per_loss["None"];
    assert_eq!((kill.double_runs, kill.lost_outcomes), (0, 0), "{m:#?}");
    let all = &m.per_loss["All"];
    assert!(all.double_runs > 0 && all.lost_outcomes > 0, "{m:#?}");
    // A checkpoint syncs the WAL and the database: a cut right after it loses nothing.
    assert_eq!(m.where_lost["after Checkpoint"], (0, 0), "{m:#?}");
    assert!(m.sync_points >= 1, "the WAL's header: {m:#?}");
}

/// `synchronous = NORMAL`'s window, measured: calls one after the other, then a cut losing every
/// write not synced. The store checkpoints the WAL every 1000 pages (a sync of the WAL and the
/// database); what a cut loses is exactly the calls since the last one, the earlier ones kept.
#[test]
fn sqlite_power_cut_normal_loses_the_calls_since_the_last_checkpoint() {
    const CALLS: u64 = 1500;
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path();
    crash::reset();
    drop(open(work, Synchronous::Normal, true));
    wait_closed();
    crash::reset();
    let idem = open(work, Synchronous::Normal, true);
    let effects = Effects::default();
    let mut acked = BTreeMap::new();
    for order in 0..CALLS {
        crash::set_label(&order.to_string());
        let r = rt.block_on(charge(&idem, order, LEASE, &effects, async {}));
        acked.insert(order, r.unwrap());
    }
    crash::cut_now();
    assert_eq!(
        crash::deletions(),
        0,
        "a deletion before the cut (not modelled)"
    );
    // The calls during which the WAL was synced (its header, the checkpoints).
    let synced_at: Vec<u64> = crash::syncs()
        .iter()
        .map(|s| s.label.parse().unwrap())
        .collect();
    drop(idem);
    wait_closed();
    let cut = crash::snapshot();
    let after = tempfile::tempdir().unwrap();
    cut.materialize(Loss::All, 0, after.path()).unwrap();
    let idem = open(after.path(), Synchronous::Normal, false);
    let (mut lost, mut ambiguous_after) = (Vec::new(), 0);
    for order in 0..CALLS {
        let r = rt.block_on(charge(&idem, order, LEASE, &effects, async {}));
        ambiguous_after += u32::from(ambiguous(&r));
        if r.ok().as_ref() != Some(&acked[&order]) {
            lost.push(order);
        }
    }
    let double_runs = lost.iter().filter(|&&o| effects.count(o) > 1).count();
    let last_sync = *synced_at.last().unwrap();
    // Each checkpoint syncs the WAL and the database, then the next write the WAL's new header.
    let mut checkpoints: Vec<u64> = synced_at.iter().copied().filter(|&o| o > 0).collect();
    checkpoints.dedup();
    let checkpoints = checkpoints.len();
    common::log_line(&format!(
        "POWER sqlite synchronous=NORMAL window: {CALLS} calls, the WAL synced during calls \
         {synced_at:?} ({checkpoints} checkpoints), a cut losing every unsynced write lost the \
         last {} acknowledged outcomes (calls {:?}..={:?}): {double_runs} run again, \
         {ambiguous_after} ambiguous",
        lost.len(),
        lost.first(),
        lost.last()
    ));
    assert!(!lost.is_empty() && lost.len() < CALLS as usize, "{lost:?}");
    assert!(
        lost.iter().all(|&o| o >= last_sync),
        "only calls since the last checkpoint are lost: {lost:?}, synced at {synced_at:?}"
    );
    assert_eq!(
        lost,
        (lost[0]..CALLS).collect::<Vec<_>>(),
        "the lost calls are the last ones"
    );
    // A call whose claim came after the last sync runs again; the call during which the store
    // checkpointed may have had its claim checkpointed and only its completion lost (ambiguous).
    for &order in lost.iter().filter(|&&o| o > last_sync) {
        assert_eq!(effects.count(order), 2, "order {order} ran again");
    }
}
