//! The settler's and the operator's rows of `docs/reliability.md` (S28, S30, S31, S32): actors
//! that hold a record to decide it, each through the faults that can meet them. Every cell is run
//! here, on the memory and SQLite stores, and the table between the `settler-rows` markers is this
//! run's output (`IDEMKIT_BLESS=1` rewrites it), as the surface × fault matrix is
//! `tests/surface_faults.rs`'s. The settler's cells run the conformance rows every store runs
//! (`idem-runtime/src/conformance/settle.rs`, `settle_cut_off.rs` and `settle_bounds.rs`, on
//! PostgreSQL and Redis too), and a
//! `#[side_effect(verify = …)]` tool whose holder died, settled by its own verify (S28, one verify
//! per tool); the operator's cells read records through `Records`, as `idemkit settle`, `list` and
//! `show` do (how the command renders them: `cli/tests/sqlite.rs`, named in the cells).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem_runtime::conformance;
use idemkit::store::{ClaimRequest, LeaseToken, RecordFilter, RecordState, StateKind, Written};
use idemkit::{
    Classify, Failure, Fingerprint, Idem, IdempotencyKey, MemoryStore, Pass, Records, SettleReport,
    Settled, Settler, SqliteStore, Store, Verified, side_effect,
};

/// The stores every cell runs on.
const STORES: [&str; 2] = ["memory", "SQLite"];

/// Runs `$body` (an async block using `store`, an `Arc` of a fresh store) on each store named by
/// `$kind`, on a runtime and thread of its own; whether it held (a panic is a failure).
macro_rules! on_store {
    ($kind:expr, |$store:ident| $body:expr) => {{
        let kind: &'static str = $kind;
        std::thread::spawn(move || match kind {
            "memory" => {
                let $store = Arc::new(MemoryStore::new());
                conformance::block_on($body)
            }
            _ => {
                let dir = tempfile::tempdir().unwrap();
                let $store = Arc::new(SqliteStore::open(dir.path().join("idemkit.db")).unwrap());
                conformance::block_on($body)
            }
        })
        .join()
        .is_ok()
    }};
}

/// A row of the conformance suite, on the store named `kind`.
macro_rules! conformance_row {
    ($row:ident) => {
        (
            stringify!($row),
            (|kind| {
                on_store!(kind, |store| conformance::$row(
                    Arc::into_inner(store).unwrap()
                ))
            }) as fn(&'static str) -> bool,
        )
    };
}

/// A check named in a cell, run on each store.
type Check = (&'static str, fn(&'static str) -> bool);

/// One cell: what the record reads as afterwards · what settles it, and the checks that show it.
struct Cell {
    text: &'static str,
    checks: Vec<Check>,
    /// Where the `idemkit` command's rendering of it is checked (not run here).
    rendered_by: Option<&'static str>,
}

const COLUMNS: [&str; 4] = [
    "cut off mid-verify (timeout, shutdown)",
    "dies mid-verify (never dropped)",
    "its holder died earlier (lease lapsed)",
    "caller retries between its passes",
];

fn rows() -> Vec<(&'static str, Vec<Cell>)> {
    let reads_only = || Cell {
        text: "n/a (reads only)",
        checks: Vec::new(),
        rendered_by: None,
    };
    vec![
        (
            "settler (`Settler::new(store)`: `run_once`, `spawn`)",
            vec![
                Cell {
                    text: "ambiguous at once, listed, its note kept · next pass",
                    checks: vec![conformance_row!(
                        s30_a_pass_cut_off_mid_verify_gives_the_record_back_at_once
                    )],
                    rendered_by: None,
                },
                Cell {
                    text: "ambiguous once its lease lapses, listed · next pass",
                    checks: vec![conformance_row!(
                        s30_a_settler_that_dies_mid_verify_leaves_the_record_listed_once_its_lease_lapses
                    )],
                    rendered_by: None,
                },
                Cell {
                    text: "ambiguous, listed, note kept or \"lease lapsed\" · settled by the tool's own \
                           verify, found by its name, with the arguments its call kept",
                    checks: vec![
                        conformance_row!(
                            s31_a_dead_callers_record_is_reported_and_settled_without_a_caller
                        ),
                        conformance_row!(
                            s31_a_lapsed_takeover_of_an_ambiguous_record_reads_with_its_note
                        ),
                        (
                            "s28_one_verify_settles_a_dead_callers_record",
                            s28_one_verify_settles_a_dead_callers_record,
                        ),
                    ],
                    rendered_by: None,
                },
                Cell {
                    text: "Unknown answers counted across takeovers, \"made\" unchanged · \
                           `operator_after_unknowns` / `operator_after` fire",
                    checks: vec![
                        conformance_row!(s32_the_operator_bound_counts_across_callers_retries),
                        conformance_row!(
                            s32_the_age_bound_counts_from_when_the_operation_was_first_made
                        ),
                    ],
                    rendered_by: None,
                },
            ],
        ),
        (
            "operator (`idemkit settle`, `list --state ambiguous`, `show`)",
            vec![
                reads_only(),
                reads_only(),
                Cell {
                    text: "reported (exit 4), listed, shown with \"lease lapsed\" · `idemkit \
                           resolve`, or the host's settler",
                    checks: vec![(
                        "s31_an_operator_reads_a_dead_callers_record_as_ambiguous",
                        s31_an_operator_reads_a_dead_callers_record_as_ambiguous,
                    )],
                    rendered_by: Some("s31_idemkit_settle_reports_a_dead_callers_record"),
                },
                Cell {
                    text: "\"made\" is the first claim's time, Unknown answers shown",
                    checks: vec![(
                        "s32_an_operator_reads_when_it_was_first_made_and_its_unknowns",
                        s32_an_operator_reads_when_it_was_first_made_and_its_unknowns,
                    )],
                    rendered_by: Some(
                        "s32_show_says_when_the_operation_was_first_made_and_its_unknown_answers",
                    ),
                },
            ],
        ),
    ]
}

// ---- the cells' own checks ----

#[derive(Debug)]
enum ShipError {
    Idem(#[allow(dead_code)] Box<idemkit::Error>),
}

impl Classify for ShipError {
    fn classify(&self) -> Failure {
        Failure::Permanent
    }
}

impl From<idemkit::Error> for ShipError {
    fn from(e: idemkit::Error) -> Self {
        ShipError::Idem(Box::new(e))
    }
}

/// Parcels handed to the carrier, by order (each check uses its own orders).
static SHIPPED: Mutex<BTreeMap<String, u32>> = Mutex::new(BTreeMap::new());

/// Hands a parcel to a carrier that keeps no keys; the holder dies while it waits for the answer.
#[side_effect(key = "order_id", verify = was_shipped, lease = "100ms", max_attempts = 1)]
async fn ship(order_id: &str, address: String) -> Result<String, ShipError> {
    let _ = address;
    *SHIPPED
        .lock()
        .unwrap()
        .entry(order_id.to_owned())
        .or_default() += 1;
    std::future::pending().await
}

/// The tool's one verify: asks the carrier whether the parcel was handed over.
async fn was_shipped(order_id: &str, address: String) -> Result<Verified<String>, ShipError> {
    let shipped = SHIPPED.lock().unwrap().contains_key(order_id);
    Ok(match shipped {
        true => Verified::Applied(format!("{order_id} to {address}")),
        false => Verified::NotApplied,
    })
}

/// S28, S31: a `#[side_effect(verify = …)]` call whose holder dies mid-body (its future never
/// dropped, never polled again: a process gone) leaves its record running; once its lease lapses
/// it reads as ambiguous, and `Settler::new(store)`, given nothing by hand, settles it by the
/// tool's own verify with the arguments the call kept; the next call replays that.
fn s28_one_verify_settles_a_dead_callers_record(kind: &'static str) -> bool {
    on_store!(kind, |store| async move {
        let order = format!("ord-{kind}");
        let idem = Idem::builder().shared_store(store.clone()).build().unwrap();
        let mut dying = Box::pin(idem.scope(ship(&order, "1 Main St".to_owned())));
        // Polled until its body has handed the parcel over (however long the claim takes).
        for _ in 0..1000 {
            if SHIPPED.lock().unwrap().contains_key(&order) {
                break;
            }
            let polled = tokio::time::timeout(Duration::from_millis(10), &mut dying).await;
            assert!(polled.is_err(), "the body never answers");
        }
        assert!(SHIPPED.lock().unwrap().contains_key(&order));
        std::mem::forget(dying); // the process is gone: no drop guard, no renewal
        tokio::time::sleep(Duration::from_millis(300)).await;
        let key = IdempotencyKey::derive("ship", &[("order_id", &order.as_str())]);
        let record = store.get(&key).await.unwrap().unwrap();
        assert!(
            matches!(record.state, RecordState::Ambiguous { .. }),
            "{record:?}"
        );
        assert!(record.arguments.is_some());
        let report = Settler::new(store.clone())
            .run_once(&Pass::new())
            .await
            .unwrap();
        assert_eq!(
            report.records,
            vec![(key, "ship".to_owned(), Settled::Applied)]
        );
        let again = idem.scope(ship(&order, "1 Main St".to_owned())).await;
        assert_eq!(again.unwrap(), format!("{order} to 1 Main St"));
        assert_eq!(SHIPPED.lock().unwrap()[&order], 1, "shipped once");
    })
}

const HOUR: Duration = Duration::from_secs(3600);

fn fingerprint() -> Fingerprint {
    Fingerprint::of(&4200u64).unwrap()
}

/// S31 as an operator reads it: a holder's record whose lease lapsed is listed with state
/// ambiguous and a note saying its lease lapsed, and a report as `idemkit settle` makes it (no
/// verify functions: nothing changed) exits 4.
fn s31_an_operator_reads_a_dead_callers_record_as_ambiguous(kind: &'static str) -> bool {
    on_store!(kind, |store| async move {
        let key = IdempotencyKey::derive("charge", &[("order", &31u64)]);
        let lease = Duration::from_millis(100);
        let req = ClaimRequest::new(key, "charge", fingerprint(), LeaseToken::new(), lease, HOUR);
        store.claim(&req).await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let filter = RecordFilter::new().state(StateKind::Ambiguous);
        let listed = store.list(&filter).await.unwrap();
        assert_eq!(listed.iter().map(|r| r.key).collect::<Vec<_>>(), vec![key]);
        let RecordState::Ambiguous { note } = &listed[0].state else {
            panic!("{:?}", listed[0]);
        };
        assert!(note.contains("lease lapsed"), "{note}");
        let mut report = SettleReport::default();
        for record in listed {
            report.left_unknown(&record);
            report
                .records
                .push((record.key, record.tool, Settled::NoVerify));
        }
        assert_eq!(report.exit_code(), 4);
    })
}

/// S32 as an operator reads it: after a takeover and an Unknown answer, the record says when its
/// operation was first made (the first claim's time, not the takeover's) and counts the answer.
fn s32_an_operator_reads_when_it_was_first_made_and_its_unknowns(kind: &'static str) -> bool {
    on_store!(kind, |store| async move {
        let key = IdempotencyKey::derive("charge", &[("order", &32u64)]);
        let first = LeaseToken::new();
        let req = ClaimRequest::new(key, "charge", fingerprint(), first, HOUR, HOUR);
        store.claim(&req).await.unwrap();
        let marked = store.mark_ambiguous(key, first, "timed out", HOUR).await;
        assert_eq!(marked.unwrap(), Written::Applied);
        let made = store.get(&key).await.unwrap().unwrap().first_made;
        tokio::time::sleep(Duration::from_millis(20)).await;
        let second = LeaseToken::new();
        let req = ClaimRequest::new(key, "charge", fingerprint(), second, HOUR, HOUR);
        store.claim(&req).await.unwrap();
        let counted = store.mark_unknown(key, second, "timed out", HOUR).await;
        assert_eq!(counted.unwrap(), Written::Applied);
        let record = store.get(&key).await.unwrap().unwrap();
        assert_eq!(record.first_made, made);
        assert!(record.created > made, "{record:?}");
        assert_eq!(record.unknowns, 1);
        assert!(record.unknown_since.is_some());
    })
}

// ---- the table ----

/// One check of a cell: its name, and the stores on which it failed.
type Checked = (&'static str, Vec<&'static str>);

fn table(results: &[Vec<Vec<Checked>>]) -> String {
    let mut out = String::new();
    writeln!(out, "| actor | {} |", COLUMNS.join(" | ")).unwrap();
    writeln!(out, "|---|{}", "---|".repeat(COLUMNS.len())).unwrap();
    for ((actor, cells), ran) in rows().iter().zip(results) {
        write!(out, "| {actor} |").unwrap();
        for (cell, ran) in cells.iter().zip(ran) {
            let mut text = cell.text.to_owned();
            if !cell.checks.is_empty() {
                let names: Vec<String> = ran
                    .iter()
                    .map(|(name, failed)| match failed.is_empty() {
                        true => format!("`{name}`"),
                        false => format!("`{name}` FAILED on {}", failed.join(", ")),
                    })
                    .collect();
                write!(text, " ({}", names.join(", ")).unwrap();
                if let Some(cli) = cell.rendered_by {
                    write!(text, "; rendered: `{cli}`").unwrap();
                }
                text.push(')');
            }
            write!(out, " {text} |").unwrap();
        }
        out.push('\n');
    }
    out
}

const BEGIN: &str =
    "<!-- settler-rows:begin (generated by tests/settler_rows.rs; IDEMKIT_BLESS=1 rewrites it) -->";
const END: &str = "<!-- settler-rows:end -->";

/// The settler's and the operator's rows: every cell's checks hold on every store, and the table
/// in `docs/reliability.md` is this run's.
#[test]
fn the_settlers_and_the_operators_rows_hold_as_documented() {
    let results: Vec<Vec<Vec<Checked>>> = rows()
        .iter()
        .map(|(_, cells)| {
            cells
                .iter()
                .map(|cell| {
                    cell.checks
                        .iter()
                        .map(|(name, check)| {
                            let failed = STORES.into_iter().filter(|s| !check(s)).collect();
                            (*name, failed)
                        })
                        .collect()
                })
                .collect()
        })
        .collect();
    let table = table(&results);
    println!("{table}");
    assert!(!table.contains("FAILED"), "cells fail:\n{table}");

    let docs_path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/reliability.md");
    let docs = std::fs::read_to_string(&docs_path).unwrap();
    let (Some(begin), Some(end)) = (docs.find(BEGIN), docs.find(END)) else {
        panic!("docs/reliability.md has no `{BEGIN}` … `{END}` section");
    };
    let want = format!("\n{table}");
    if docs[begin + BEGIN.len()..end] != want {
        if std::env::var_os("IDEMKIT_BLESS").is_some() {
            let updated = format!("{}{want}{}", &docs[..begin + BEGIN.len()], &docs[end..]);
            std::fs::write(&docs_path, updated).unwrap();
        } else {
            panic!(
                "docs/reliability.md's settler and operator rows differ from this run's; run with \
                 IDEMKIT_BLESS=1 to update them:\n{table}"
            );
        }
    }
}
