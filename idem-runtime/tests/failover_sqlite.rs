//! The SQLite store's guarantees under process kills, a paused holder and a clock step,
//! measured (issue 32).
//!
//! - **Killed at many points**: a child process (this test binary, re-run as its `child` test)
//!   calls `charge(order)` for order after order on one database; the parent SIGKILLs it after a
//!   delay that grows by a few milliseconds each time, so the kills land all over claim, body,
//!   completion and their commits (each an fsync under `synchronous = FULL`). After every kill
//!   the database is reopened and each order the child touched is called again.
//!   `synchronous = FULL` and `NORMAL` are compared. A process kill keeps what reached the
//!   operating system, so both must keep every acknowledged outcome; what differs between them
//!   is a power loss (the last commits of `NORMAL` may be lost), which no test here makes.
//! - **A holder paused past its lease**: a child SIGSTOPped in its body after its effect, for
//!   twice its lease, then SIGCONTinued; another caller comes meanwhile.
//! - **A clock step**: every process's wall clock stepping forward an hour, made by moving the
//!   stored lease ends back an hour (the SQLite store compares them with the caller's clock).
//!
//! Every call is `charge(order)` of a provider that cannot deduplicate, with no `verify`; the
//! body's runs are lines of a file (`effect ORDER`), kept across kills. Counts print as
//! `FAILOVER …` lines (`-- --nocapture`).

#[path = "failover/common.rs"]
mod common;

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{E, Effects, Tally, ambiguous, charge, signal, wait_until};
use idem_runtime::{Idem, SqliteStore, Synchronous};

const ROLE: &str = "IDEMKIT_FAILOVER_ROLE";
const WORK: &str = "IDEMKIT_FAILOVER_WORK";
const SYNC: &str = "IDEMKIT_FAILOVER_SYNC";
const FIRST: &str = "IDEMKIT_FAILOVER_FIRST_ORDER";

/// The children's lease: short, so the checks after a kill wait little for a dead holder.
const LEASE: Duration = Duration::from_millis(200);

fn db(work: &Path) -> PathBuf {
    work.join("idemkit.db")
}

/// Every body run: `effect ORDER`. Acknowledged outcomes: `ok ORDER OUTPUT`.
fn effects_log(work: &Path) -> PathBuf {
    work.join("effects.log")
}

fn acks_log(work: &Path) -> PathBuf {
    work.join("acks.log")
}

/// One line, one `write` (O_APPEND): whole or absent after a kill.
fn append(path: &Path, line: &str) {
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    f.write_all(format!("{line}\n").as_bytes()).unwrap();
}

fn open(work: &Path, sync: Synchronous) -> Idem {
    Idem::new(
        SqliteStore::builder(db(work))
            .synchronous(sync)
            .open()
            .unwrap(),
    )
}

fn sync_of(name: &str) -> Synchronous {
    match name {
        "normal" => Synchronous::Normal,
        _ => Synchronous::Full,
    }
}

/// A call whose body logs its run to `work`'s effects log, then awaits `then`.
async fn logged<F: Future<Output = ()>>(
    idem: &Idem,
    work: &Path,
    order: u64,
    lease: Duration,
    then: F,
) -> Result<String, E> {
    let log = effects_log(work);
    charge(idem, order, lease, &Effects::default(), async move {
        append(&log, &format!("effect {order}"));
        then.await;
    })
    .await
}

/// Not a test: the body of the children the tests below start.
#[test]
#[ignore = "a child process of the tests in this file; they run it"]
fn child() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let work = PathBuf::from(std::env::var(WORK).unwrap());
    let sync = sync_of(&std::env::var(SYNC).unwrap_or_default());
    let first: u64 = std::env::var(FIRST).map_or(0, |f| f.parse().unwrap());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let idem = open(&work, sync);
        match role.as_str() {
            // Order after order until killed.
            "loop" => {
                for order in first..first + 10_000 {
                    if let Ok(out) = logged(&idem, &work, order, LEASE, async {}).await {
                        append(&acks_log(&work), &format!("ok {order} {out}"));
                    }
                }
            }
            // One call whose body, after its effect, says so and takes 1.5 s.
            "hold" => {
                let w = work.clone();
                let result = logged(&idem, &work, first, LEASE, async move {
                    append(&w.join("in_body"), "");
                    tokio::time::sleep(Duration::from_millis(1500)).await;
                })
                .await;
                let said = match &result {
                    Ok(out) => format!("ok {out}"),
                    Err(e) => format!("err {e:?}"),
                };
                append(&work.join("result"), &said);
            }
            other => panic!("unknown role {other}"),
        }
    });
}

fn spawn_child(work: &Path, role: &str, sync: &str, first: u64) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["child", "--exact", "--include-ignored", "--nocapture"])
        .args(["--test-threads=1"])
        .env(ROLE, role)
        .env(WORK, work)
        .env(SYNC, sync)
        .env(FIRST, first.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn kill(mut child: Child) {
    let _ = child.kill();
    child.wait().unwrap();
}

fn read_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .map(|s| s.lines().map(str::to_owned).collect())
        .unwrap_or_default()
}

/// Body runs per order.
fn effects_per_order(work: &Path) -> HashMap<u64, u32> {
    let mut n = HashMap::new();
    for l in read_lines(&effects_log(work)) {
        if let Some(order) = l.strip_prefix("effect ") {
            *n.entry(order.parse().unwrap()).or_default() += 1;
        }
    }
    n
}

/// `KILLS` children, each killed after 25 ms + 4 ms × its number, on one database; then every
/// order one of them touched is called again through a reopened store.
fn killed_at_many_points(sync: &str) -> Tally {
    const KILLS: u64 = 30;
    let work = tempfile::tempdir().unwrap();
    let work = work.path();
    for k in 0..KILLS {
        let child = spawn_child(work, "loop", sync, k * 10_000);
        std::thread::sleep(Duration::from_millis(25 + 4 * k));
        kill(child);
    }
    // And one killed right after its first acknowledged call (so some are, however slowly the
    // children start on a loaded machine).
    let child = spawn_child(work, "loop", sync, KILLS * 10_000);
    wait_until("an acknowledged call", Duration::from_secs(60), || {
        read_lines(&acks_log(work))
            .iter()
            .any(|l| l.starts_with(&format!("ok {} ", KILLS * 10_000)))
    });
    kill(child);
    let acked: HashMap<u64, String> = read_lines(&acks_log(work))
        .iter()
        .filter_map(|l| {
            let mut parts = l.splitn(3, ' ');
            parts.next()?;
            Some((parts.next()?.parse().ok()?, parts.next()?.to_owned()))
        })
        .collect();
    let mut orders: Vec<u64> = effects_per_order(work).into_keys().collect();
    orders.extend(acked.keys());
    orders.sort_unstable();
    orders.dedup();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let idem = open(work, sync_of(sync));
    let afters: Vec<(u64, Result<String, E>)> = rt.block_on(async {
        let mut afters = Vec::new();
        for &order in &orders {
            afters.push((order, logged(&idem, work, order, LEASE, async {}).await));
        }
        afters
    });
    let effects = effects_per_order(work);
    let mut tally = Tally::default();
    for (order, after) in &afters {
        let before = acked.get(order).map(|out| Ok(out.clone()));
        tally.add(before.as_ref(), after, effects[order]);
    }
    tally.print(&format!(
        "sqlite synchronous={sync}, {KILLS} processes SIGKILLed at 25..{} ms and one after its \
         first acknowledged call, every order they touched called again",
        25 + 4 * (KILLS - 1)
    ));
    tally
}

/// `synchronous = FULL`: no acknowledged outcome is lost to a kill, nothing runs twice.
#[test]
fn sqlite_killed_at_many_points_full_loses_nothing_and_runs_nothing_twice() {
    let t = killed_at_many_points("full");
    assert_eq!((t.double_runs, t.lost_outcomes), (0, 0), "{t:?}");
    assert!(
        t.acknowledged > 0,
        "some calls completed before the kills: {t:?}"
    );
}

/// `synchronous = NORMAL` (WAL): a process kill keeps every commit too (what it gives up is a
/// power loss's last commits, not made here).
#[test]
fn sqlite_killed_at_many_points_normal_loses_nothing_to_a_process_kill() {
    let t = killed_at_many_points("normal");
    assert_eq!((t.double_runs, t.lost_outcomes), (0, 0), "{t:?}");
    assert!(
        t.acknowledged > 0,
        "some calls completed before the kills: {t:?}"
    );
}

/// A holder SIGSTOPped in its body (after its effect) for 3 leases: a caller meanwhile takes
/// the key over and, with no dedup and no verify, ends ambiguous (S19, S20) instead of running
/// again; the holder, continued, finds its lease gone (S22, S13) and is not told its outcome is
/// recorded. Never a double run, never an acknowledged outcome lost.
#[test]
fn sqlite_holder_paused_past_its_lease_no_double_run() {
    const REPS: u64 = 3;
    let mut tally = Tally::default();
    let mut holders_acknowledged = 0;
    let rt = tokio::runtime::Runtime::new().unwrap();
    for order in 0..REPS {
        let work = tempfile::tempdir().unwrap();
        let work = work.path();
        let holder = spawn_child(work, "hold", "full", order);
        wait_until("the holder in its body", Duration::from_secs(30), || {
            work.join("in_body").exists()
        });
        signal(holder.id(), libc::SIGSTOP);
        std::thread::sleep(LEASE * 3);
        let idem = open(work, Synchronous::Full);
        let after = rt.block_on(logged(&idem, work, order, LEASE, async {}));
        signal(holder.id(), libc::SIGCONT);
        let mut holder = holder;
        holder.wait().unwrap();
        let said = read_lines(&work.join("result")).join("");
        holders_acknowledged += u32::from(said.starts_with("ok "));
        let before = said
            .strip_prefix("ok ")
            .map(|out| Ok::<_, E>(out.to_owned()));
        let effects = effects_per_order(work).get(&order).copied().unwrap_or(0);
        tally.add(before.as_ref(), &after, effects);
        assert!(ambiguous(&after), "{after:?}");
    }
    tally.print("sqlite holder SIGSTOPped for 3 leases after its effect, another caller meanwhile");
    assert_eq!(
        (tally.double_runs, tally.lost_outcomes),
        (0, 0),
        "{tally:?}"
    );
    assert_eq!(
        holders_acknowledged, 0,
        "the paused holder's outcome is never acknowledged"
    );
}

/// Every process's clock steps an hour forward while a holder (lease 30 s: no renewal falls
/// within its 1.5 s body, so nothing rewrites the stepped lease end) is in its body: its lease
/// looks an hour old, a second caller takes over at once (S12 holds only while clocks agree)
/// and ends ambiguous (S19, S20); the holder's completion is refused (fenced, S11) and it is
/// told its outcome is unrecorded. Never a double run with a provider that cannot deduplicate;
/// measured: how often the second caller held the key while the first one's body ran.
#[test]
fn sqlite_clock_step_forward_takeover_of_a_live_holder_no_double_run() {
    const REPS: u64 = 3;
    let lease = Duration::from_secs(30);
    let mut tally = Tally::default();
    let mut overlapping = 0;
    let rt = tokio::runtime::Runtime::new().unwrap();
    for order in 0..REPS {
        let work = tempfile::tempdir().unwrap();
        let work = work.path().to_owned();
        let idem = open(&work, Synchronous::Full);
        let (before, after, overlap) = rt.block_on(async {
            let (in_body, entered) = tokio::sync::oneshot::channel();
            let (done_tx, done) = tokio::sync::watch::channel(false);
            let holder = {
                let (idem, work) = (idem.clone(), work.clone());
                tokio::spawn(async move {
                    let r = logged(&idem, &work, order, lease, async move {
                        let _ = in_body.send(());
                        tokio::time::sleep(Duration::from_millis(1500)).await;
                    })
                    .await;
                    let _ = done_tx.send(true);
                    r
                })
            };
            entered.await.unwrap();
            let conn = rusqlite::Connection::open(db(&work)).unwrap();
            conn.execute("UPDATE records SET lease_until = lease_until - 3600000", [])
                .unwrap();
            let after = logged(&idem, &work, order, lease, async {}).await;
            // The second caller had the key while the holder's body still ran.
            let overlap = !*done.borrow();
            (holder.await.unwrap(), after, overlap)
        });
        overlapping += u32::from(overlap);
        let effects = effects_per_order(&work)[&order];
        tally.add(Some(&before), &after, effects);
        assert!(ambiguous(&after), "{after:?}");
        assert!(before.is_err(), "the holder is never told Ok: {before:?}");
    }
    tally.print("sqlite wall clock stepped 1 h forward while a holder is in its body");
    common::log_line(&format!(
        "FAILOVER sqlite clock step: the second caller took the key over while the first \
         holder's body ran in {overlapping} of {REPS}"
    ));
    assert_eq!(
        (tally.double_runs, tally.lost_outcomes),
        (0, 0),
        "{tally:?}"
    );
}
