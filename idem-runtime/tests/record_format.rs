//! The stored record format across versions (issue 21): a SQLite file written by idemkit 0.1.0
//! is checked in, and every later version must read it back as it was meant: the completed
//! outcome replays (and is never run again), the ambiguous record is taken over with the same key,
//! the unreplayable outcome is refused as "already ran", the live running record is not taken,
//! and the operation id is the one minted then.
//!
//! A second set of fixtures (`*-s24.*`) is in the format that keeps an operator's decisions (S24,
//! SQLite and PostgreSQL schema 4): beside the same records, one resolved as applied and one as
//! not applied, which must read back with their decisions.
//!
//! A third set (`*-s27.*`, SQLite and PostgreSQL schema 5) keeps what a takeover replaced (S27):
//! beside the same records, an ambiguous record and an expired holder's, each taken over by a
//! claim still running, which must give them back as they were.
//!
//! A fourth (`*-s32.*`, SQLite and PostgreSQL schema 6) keeps when an operation was first made
//! and its Unknown answers of verify (S32): beside the same records, one whose verify answered
//! Unknown once and which a claim still running took over, which must read back with its count
//! and when it was first made, and give back the ambiguous record with them.
//!
//! `IDEMKIT_WRITE_FIXTURES=1 cargo test -p idem-runtime --test record_format` writes the newest
//! fixtures (the `*-s32.*` ones) anew; do that only for a new fixture file (name it after the
//! format that writes it, and point the `NEWEST_*` constants at it), never over an existing one:
//! an old fixture is what proves an upgrade reads old records.

use idem_runtime::Records;
use std::path::{Path, PathBuf};
use std::time::Duration;

use idem_runtime::store::{
    Claim, ClaimRequest, Decision, ExistingState, LeaseToken, OperationIds, Outcome, RecordState,
    Resolved, Takeover, Written,
};
use idem_runtime::{
    CallOutcome, Classify, Error, Failure, Fingerprint, Idem, IdempotencyKey, SqliteStore, Store,
    Tool, observe,
};

/// The fixture written by 0.1.0.
const FIXTURE: &str = "tests/fixtures/sqlite-0.1.0.db";
/// The fixture in the format that keeps operators' decisions (schema 4).
const FIXTURE_S24: &str = "tests/fixtures/sqlite-s24.db";
/// The fixture in the format that keeps what a takeover replaced (schema 5).
const FIXTURE_S27: &str = "tests/fixtures/sqlite-s27.db";
/// The fixture in the format that keeps what a record keeps through takeovers (schema 6).
const FIXTURE_S32: &str = "tests/fixtures/sqlite-s32.db";

/// Which records a fixture holds: those of 0.1.0; with operators' decisions (S24); with
/// takeovers to give back (S27); with Unknown answers of verify counted (S32, the newest).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    V010,
    S24,
    S27,
    S32,
}

impl Format {
    fn resolved(self) -> bool {
        self != Format::V010
    }
    fn given_back(self) -> bool {
        matches!(self, Format::S27 | Format::S32)
    }
    fn counted(self) -> bool {
        self == Format::S32
    }
}

/// The token of the S32 fixture's claim of order 9, which took over a record whose verify
/// answered Unknown once, and that record's note.
const T9: LeaseToken = LeaseToken(uuid::Uuid::from_u128(0x3209));
const NOTE_9: &str = "1 attempt(s) in this call; the outcome is unknown and was not sent again: the verify function could not tell";

/// The tokens of the S27 fixture's claims: order 7's takeover of an ambiguous record, order 8's
/// expired holder and its takeover.
const T7: LeaseToken = LeaseToken(uuid::Uuid::from_u128(0x2707));
const T8_HOLDER: LeaseToken = LeaseToken(uuid::Uuid::from_u128(0x2708));
const T8: LeaseToken = LeaseToken(uuid::Uuid::from_u128(0x2718));
const NOTE_7: &str = "1 attempt(s); the last failed and may have taken effect";
/// Records that outlive every test run: 80 years.
const FOREVER: Duration = Duration::from_secs(80 * 365 * 24 * 3600);

fn key(order: u64) -> IdempotencyKey {
    IdempotencyKey::derive("charge", &[("order", &order)])
}

fn fingerprint() -> Fingerprint {
    Fingerprint::of(&4200u64).unwrap()
}

fn request(order: u64) -> ClaimRequest<'static> {
    ClaimRequest::new(
        key(order),
        "charge",
        fingerprint(),
        LeaseToken::new(),
        FOREVER,
        FOREVER,
    )
}

const OUTCOME: &[u8] = br#"{"charge_id":"ch_1","cents":4200}"#;

/// What an operator resolved order 5 as applied with.
const RESOLVED_OUTCOME: &[u8] = br#"{"charge_id":"ch_5","cents":4200}"#;

/// Writes the records of the fixture through `store`: order 1 completed, 2 ambiguous, 3 running
/// (a lease for ever), 4 completed but not replayable (as the executor records it), with
/// `resolved` 5 resolved as applied and 6 as not applied, and the operation id of
/// "plan-42/step-3", which is returned.
async fn write_records(
    store: impl Store + OperationIds + Records + Clone,
    format: Format,
) -> String {
    let resolved = format.resolved();
    for order in 1..=4 {
        let req = request(order);
        assert_eq!(
            store.claim(&req).await.unwrap(),
            Claim::Acquired { takeover: None }
        );
        let written = match order {
            1 => {
                store
                    .complete(key(1), req.token, Outcome::from(OUTCOME), FOREVER)
                    .await
            }
            2 => {
                let note = "1 attempt(s); the last failed and may have taken effect";
                store.mark_ambiguous(key(2), req.token, note, FOREVER).await
            }
            3 => Ok(Written::Applied),
            _ => {
                let outcome =
                    b"\0idemkit:unreplayable\0the outcome does not serialize: key must be a string";
                store
                    .complete(key(4), req.token, Outcome::from(&outcome[..]), FOREVER)
                    .await
            }
        };
        assert_eq!(written.unwrap(), Written::Applied);
    }
    let resolved_orders: &[u64] = if resolved { &[5, 6] } else { &[] };
    for &order in resolved_orders {
        let (req, key) = (request(order), key(order));
        assert_eq!(
            store.claim(&req).await.unwrap(),
            Claim::Acquired { takeover: None }
        );
        let note = "1 attempt(s); the last failed and may have taken effect";
        let marked = store.mark_ambiguous(key, req.token, note, FOREVER);
        assert_eq!(marked.await.unwrap(), Written::Applied);
        let (decision, outcome) = match order {
            5 => (Decision::Applied, Some(RESOLVED_OUTCOME)),
            _ => (Decision::NotApplied, None),
        };
        let note = format!("order {order}: checked with the provider");
        let resolved = store.resolve(&key, decision, outcome, Some(&note), FOREVER);
        assert_eq!(resolved.await.unwrap(), Resolved::Resolved);
    }
    if format.given_back() {
        // Order 7: kept ambiguous, then taken over by T7, which still runs.
        let req = request(7);
        let _ = store.claim(&req).await.unwrap();
        let marked = store.mark_ambiguous(key(7), req.token, NOTE_7, FOREVER);
        assert_eq!(marked.await.unwrap(), Written::Applied);
        let took = ClaimRequest::new(key(7), "charge", fingerprint(), T7, FOREVER, FOREVER);
        assert_eq!(
            store.claim(&took).await.unwrap(),
            Claim::Acquired {
                takeover: Some(Takeover::Ambiguous)
            }
        );
        // Order 8: a holder whose lease ran out, taken over by T8, which still runs.
        let holder = ClaimRequest::new(
            key(8),
            "charge",
            fingerprint(),
            T8_HOLDER,
            Duration::from_millis(50),
            FOREVER,
        );
        let _ = store.claim(&holder).await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let took = ClaimRequest::new(key(8), "charge", fingerprint(), T8, FOREVER, FOREVER);
        assert_eq!(
            store.claim(&took).await.unwrap(),
            Claim::Acquired {
                takeover: Some(Takeover::ExpiredHolder)
            }
        );
    }
    if format.counted() {
        // Order 9: its verify answered Unknown once, then T9 took it over, and still runs.
        let req = request(9);
        let _ = store.claim(&req).await.unwrap();
        let marked = store.mark_unknown(key(9), req.token, NOTE_9, FOREVER);
        assert_eq!(marked.await.unwrap(), Written::Applied);
        tokio::time::sleep(Duration::from_millis(50)).await;
        let took = ClaimRequest::new(key(9), "charge", fingerprint(), T9, FOREVER, FOREVER);
        assert_eq!(
            store.claim(&took).await.unwrap(),
            Claim::Acquired {
                takeover: Some(Takeover::Ambiguous)
            }
        );
    }
    let id = Idem::new(store).operation("plan-42/step-3").await.unwrap();
    id.to_string()
}

/// S32: order 9 of the S32 fixture reads with its Unknown answer and when it was first made
/// (before the takeover that still runs), and given back is ambiguous with them.
async fn check_counted(store: &(impl Store + Records)) {
    let rec = Records::get(store, &key(9))
        .await
        .unwrap()
        .expect("order 9");
    assert!(
        matches!(rec.state, RecordState::Running { token, .. } if token == T9),
        "{rec:?}"
    );
    assert_eq!(rec.unknowns, 1);
    let since = rec.unknown_since.expect("since its Unknown answer");
    assert!(rec.first_made <= since && since < rec.created, "{rec:?}");
    let given = store.restore(key(9), T9, "given back", FOREVER);
    assert_eq!(given.await.unwrap(), Written::Applied);
    let back = Records::get(store, &key(9))
        .await
        .unwrap()
        .expect("order 9");
    assert_eq!(
        back.state,
        RecordState::Ambiguous {
            note: NOTE_9.into()
        }
    );
    assert_eq!(
        (back.unknowns, back.unknown_since, back.first_made),
        (1, Some(since), rec.first_made)
    );
}

/// S27: the claims of the S27 fixture give back what they took over: order 7 ambiguous as it
/// was, order 8 its expired holder's again (whose completion is then applied).
async fn check_given_back(store: &(impl Store + Records)) {
    let given = store
        .restore(key(7), T7, "given back", FOREVER)
        .await
        .unwrap();
    assert_eq!(given, Written::Applied);
    let rec = Records::get(store, &key(7))
        .await
        .unwrap()
        .expect("order 7");
    assert_eq!(
        rec.state,
        RecordState::Ambiguous {
            note: NOTE_7.into()
        }
    );
    let given = store
        .restore(key(8), T8, "given back", FOREVER)
        .await
        .unwrap();
    assert_eq!(given, Written::Applied);
    let rec = Records::get(store, &key(8))
        .await
        .unwrap()
        .expect("order 8");
    // Its holder's lease lapsed long ago: it reads as the ambiguous record it may be (S31);
    // its holder's token holds again (its completion is applied).
    assert!(
        matches!(rec.state, RecordState::Ambiguous { ref note } if note.contains("lease lapsed")),
        "order 8 is its lapsed holder's again: {:?}",
        rec.state
    );
    let done = store.complete(key(8), T8_HOLDER, Outcome::from(OUTCOME), FOREVER);
    assert_eq!(done.await.unwrap(), Written::Applied);
}

/// Writes the SQLite fixture file (and the operation id beside it).
async fn write_sqlite_fixture(path: &Path) {
    let _ = std::fs::remove_file(path);
    let store = SqliteStore::open(path).unwrap();
    let id = write_records(store.clone(), Format::S32).await;
    std::fs::write(path.with_extension("operation-id"), id).unwrap();
    drop(store);
    // One file, no WAL beside it: fold the WAL in.
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    conn.pragma_update(None, "journal_mode", "DELETE").unwrap();
}

#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Receipt {
    charge_id: String,
    cents: u64,
}

#[derive(Debug)]
struct E(String);
impl Classify for E {
    fn classify(&self) -> Failure {
        Failure::Permanent
    }
}
impl From<Error> for E {
    fn from(e: Error) -> Self {
        E(e.to_string())
    }
}

fn manifest_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

/// Reads the fixture's records back through `store` as they were meant (with `resolved`, the
/// records an operator resolved too).
/// S28: a record written before records kept their calls' arguments reads without them, and a
/// settler leaves its ambiguous one (order 2) as it did then: for a verify listed by hand (given
/// the key) or an operator, never asking a tool's own verify with arguments it does not have.
async fn check_without_arguments(store: &(impl Store + OperationIds + Records + Clone)) {
    let all = store
        .list(&idem_runtime::store::RecordFilter::new())
        .await
        .unwrap();
    assert!(!all.is_empty());
    for record in &all {
        assert_eq!(record.arguments, None, "{record:?}");
    }
    let settler = idem_runtime::Settler::new(std::sync::Arc::new(store.clone()));
    let pass = idem_runtime::settle::Pass::new().dry_run(true);
    let report = settler.run_once(&pass).await.unwrap();
    assert!(
        report
            .records
            .iter()
            .any(|(k, _, s)| *k == key(2) && *s == idem_runtime::Settled::NoVerify),
        "{report:?}"
    );
}

async fn check_records(
    store: impl Store + OperationIds + Records + Clone,
    operation_id: &str,
    format: Format,
) {
    check_without_arguments(&store).await;
    if format.given_back() {
        check_given_back(&store).await;
    }
    if format.counted() {
        check_counted(&store).await;
    }
    if format.resolved() {
        check_resolved(&store).await;
    } else {
        for order in [5, 6] {
            assert!(store.get(&key(order)).await.unwrap().is_none());
        }
    }
    // Completed: the stored outcome, byte for byte, and a replay through the executor.
    let record = store.get(&key(1)).await.unwrap().expect("completed record");
    assert_eq!(record.tool, "charge");
    assert_eq!(record.fingerprint, fingerprint());
    assert_eq!(
        record.state,
        RecordState::Completed {
            outcome: OUTCOME.to_vec()
        }
    );
    let idem = Idem::new(store.clone());
    let charge = |order: u64| {
        observe(Tool::new("charge").idem(&idem).side_effect(
            &[("order", &order)],
            &4200u64,
            |_| async {
                Ok::<_, E>(Receipt {
                    charge_id: "ch_new".into(),
                    cents: 0,
                })
            },
        ))
    };
    let (replayed, info) = charge(1).await;
    assert_eq!(
        replayed.unwrap(),
        Receipt {
            charge_id: "ch_1".into(),
            cents: 4200
        }
    );
    assert_eq!(info.unwrap().outcome, CallOutcome::Replayed);

    // Ambiguous: kept with its note, taken over by the same arguments with the same key.
    let record = store.get(&key(2)).await.unwrap().expect("ambiguous record");
    assert!(
        matches!(record.state, RecordState::Ambiguous { ref note } if note.contains("may have taken effect"))
    );
    // S32: a row written before stores kept when its operation was first made reads as made at
    // its `created`, with no Unknown answer counted; its takeover keeps that.
    assert_eq!(record.first_made, record.created);
    assert_eq!((record.unknowns, record.unknown_since), (0, None));
    let made = record.first_made;
    assert_eq!(
        store.claim(&request(2)).await.unwrap(),
        Claim::Acquired {
            takeover: Some(Takeover::Ambiguous)
        }
    );
    let taken = store.get(&key(2)).await.unwrap().expect("taken over");
    assert_eq!(
        taken.first_made, made,
        "first made: unchanged by the takeover"
    );

    // Running, its lease live: not taken.
    match store.claim(&request(3)).await.unwrap() {
        Claim::Existing(e) => assert!(matches!(e.state, ExistingState::Running { .. })),
        other => panic!("a live lease is not taken: {other:?}"),
    }

    // Completed but not replayable: refused as already ran, never run again.
    let (refused, info) = charge(4).await;
    let err = refused.unwrap_err().0;
    assert!(
        err.contains("already ran") && err.contains("cannot be replayed"),
        "{err}"
    );
    assert_eq!(info.unwrap().outcome, CallOutcome::Unreplayable);

    // The operation id minted then.
    assert_eq!(
        idem.operation("plan-42/step-3").await.unwrap().to_string(),
        operation_id
    );
    // A record kept as running or ambiguous had no decision.
    let record = store.get(&key(3)).await.unwrap().expect("running record");
    assert!(record.resolution.is_none() && record.is_live());
}

/// Order 5, resolved as applied, replays the operator's outcome; order 6, resolved as not
/// applied, shows its decision and runs again.
async fn check_resolved(store: &(impl Store + Records)) {
    let record = store
        .get(&key(5))
        .await
        .unwrap()
        .expect("resolved as applied");
    assert_eq!(
        record.state,
        RecordState::Completed {
            outcome: RESOLVED_OUTCOME.to_vec()
        }
    );
    let resolution = record.resolution.expect("the decision is kept");
    assert_eq!(resolution.decision, Decision::Applied);
    assert_eq!(
        resolution.note.as_deref(),
        Some("order 5: checked with the provider")
    );
    assert!(resolution.at > std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000));
    match store.claim(&request(5)).await.unwrap() {
        Claim::Existing(e) => assert_eq!(
            e.state,
            ExistingState::Completed {
                outcome: Outcome::from(RESOLVED_OUTCOME)
            }
        ),
        other => panic!("an applied decision replays: {other:?}"),
    }

    let record = store.get(&key(6)).await.unwrap().expect("kept to show it");
    assert!(!record.is_live());
    let resolution = record.resolution.expect("the decision is kept");
    assert_eq!(resolution.decision, Decision::NotApplied);
    assert_eq!(
        resolution.note.as_deref(),
        Some("order 6: checked with the provider")
    );
    assert_eq!(
        store.claim(&request(6)).await.unwrap(),
        Claim::Acquired { takeover: None },
        "not applied: the next call runs"
    );
}

fn writing() -> bool {
    std::env::var_os("IDEMKIT_WRITE_FIXTURES").is_some()
}

#[tokio::test]
async fn a_sqlite_file_written_by_0_1_0_reads_back_as_it_was_meant() {
    check_sqlite(FIXTURE, Format::V010).await;
}

#[tokio::test]
async fn s24_a_sqlite_file_with_operators_decisions_reads_back_as_it_was_meant() {
    check_sqlite(FIXTURE_S24, Format::S24).await;
}

#[tokio::test]
async fn s27_a_sqlite_file_with_claims_to_give_back_reads_back_as_it_was_meant() {
    check_sqlite(FIXTURE_S27, Format::S27).await;
}

#[tokio::test]
async fn s32_a_sqlite_file_with_unknown_answers_reads_back_as_it_was_meant() {
    let fixture = manifest_path(FIXTURE_S32);
    if writing() {
        write_sqlite_fixture(&fixture).await;
    }
    check_sqlite(FIXTURE_S32, Format::S32).await;
}

async fn check_sqlite(fixture: &str, format: Format) {
    let fixture = manifest_path(fixture);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idemkit.db");
    std::fs::copy(&fixture, &path).expect("the checked-in fixture");
    let store = SqliteStore::open(&path).unwrap();
    let id = std::fs::read_to_string(fixture.with_extension("operation-id")).unwrap();
    check_records(store, &id, format).await;
}

mod servers;

/// The PostgreSQL fixture: `pg_dump` of a schema written by 0.1.0 (tables, schema version,
/// rows), its schema renamed `__SCHEMA__`; the operation id is in it.
#[cfg(feature = "postgres")]
const PG_FIXTURE: &str = "tests/fixtures/postgres-0.1.0.sql";
/// The same in the format that keeps operators' decisions (schema 4).
#[cfg(feature = "postgres")]
const PG_FIXTURE_S24: &str = "tests/fixtures/postgres-s24.sql";
/// The same in the format that keeps what a takeover replaced (schema 5).
#[cfg(feature = "postgres")]
const PG_FIXTURE_S27: &str = "tests/fixtures/postgres-s27.sql";
/// The same in the format that keeps what a record keeps through takeovers (schema 6).
#[cfg(feature = "postgres")]
const PG_FIXTURE_S32: &str = "tests/fixtures/postgres-s32.sql";

/// The Redis fixture: every key a store with the prefix `__PREFIX__` wrote, as JSON (type,
/// value, time to live).
#[cfg(feature = "redis")]
const REDIS_FIXTURE: &str = "tests/fixtures/redis-0.1.0.json";
/// The same in the format that keeps operators' decisions.
#[cfg(feature = "redis")]
const REDIS_FIXTURE_S24: &str = "tests/fixtures/redis-s24.json";
/// The same in the format that keeps what a takeover replaced (the `p:` fields).
#[cfg(feature = "redis")]
const REDIS_FIXTURE_S27: &str = "tests/fixtures/redis-s27.json";
/// The same in the format that keeps what a record keeps through takeovers.
#[cfg(feature = "redis")]
const REDIS_FIXTURE_S32: &str = "tests/fixtures/redis-s32.json";

mod needs_postgres {
    use super::*;

    #[cfg(feature = "postgres")]
    #[tokio::test]
    async fn a_postgres_dump_written_by_0_1_0_reads_back_as_it_was_meant() {
        check_postgres(PG_FIXTURE, Format::V010).await;
    }

    #[cfg(feature = "postgres")]
    #[tokio::test]
    async fn s24_a_postgres_dump_with_operators_decisions_reads_back_as_it_was_meant() {
        check_postgres(PG_FIXTURE_S24, Format::S24).await;
    }

    #[cfg(feature = "postgres")]
    #[tokio::test]
    async fn s27_a_postgres_dump_with_claims_to_give_back_reads_back_as_it_was_meant() {
        check_postgres(PG_FIXTURE_S27, Format::S27).await;
    }

    #[cfg(feature = "postgres")]
    #[tokio::test]
    async fn s32_a_postgres_dump_with_unknown_answers_reads_back_as_it_was_meant() {
        check_postgres(PG_FIXTURE_S32, Format::S32).await;
    }

    #[cfg(feature = "postgres")]
    #[tokio::test]
    async fn s33_a_postgres_dump_of_0_1_0_past_its_ttl_reads_its_completed_records_as_tombstones() {
        check_postgres_aged(PG_FIXTURE, Format::V010, true).await;
    }

    #[cfg(feature = "postgres")]
    #[tokio::test]
    async fn s33_a_postgres_dump_of_schema_6_past_its_ttl_reads_done_records_as_tombstones_and_runs_released_ones()
     {
        check_postgres_aged(PG_FIXTURE_S32, Format::S32, true).await;
    }

    /// Restores the dump `fixture` (written anew first when writing the newest, S32, one)
    /// and checks its records.
    #[cfg(feature = "postgres")]
    async fn check_postgres(fixture: &str, format: Format) {
        check_postgres_aged(fixture, format, false).await;
    }

    /// [`check_postgres`]; `aged`: the records aged past their ttl first, and checked as S33
    /// reads them ([`check_expired_under_old_rules`]).
    #[cfg(feature = "postgres")]
    async fn check_postgres_aged(fixture: &str, format: Format, aged: bool) {
        use idem_runtime::PostgresStore;
        let url = servers::server_url("IDEMKIT_TEST_POSTGRES_URL", "PostgreSQL");
        let fixture = manifest_path(fixture);
        let id_file = fixture.with_extension("operation-id");
        if writing() && format == Format::S32 {
            let schema = format!("fixture_{}", uuid::Uuid::new_v4().simple());
            let store = PostgresStore::builder(&url)
                .schema(&schema)
                .connect()
                .await
                .unwrap();
            let id = write_records(store, format).await;
            let dump = std::process::Command::new("pg_dump")
                .args([
                    "--schema",
                    &schema,
                    "--no-owner",
                    "--no-privileges",
                    "--inserts",
                    &url,
                ])
                .output()
                .expect("pg_dump runs");
            assert!(
                dump.status.success(),
                "{}",
                String::from_utf8_lossy(&dump.stderr)
            );
            let text = String::from_utf8(dump.stdout)
                .unwrap()
                .replace(&schema, "__SCHEMA__");
            std::fs::write(&fixture, text).unwrap();
            std::fs::write(&id_file, id).unwrap();
        }
        // Restored into a schema of its own; psql's meta-commands (`\restrict`) are left out.
        let schema = format!("fixture_{}", uuid::Uuid::new_v4().simple());
        let dump = std::fs::read_to_string(&fixture).expect("the checked-in fixture");
        let sql: String = dump
            .lines()
            .filter(|l| !l.starts_with('\\'))
            .map(|l| l.replace("__SCHEMA__", &schema) + "\n")
            .collect();
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        client.batch_execute(&sql).await.expect("the dump restores");
        if aged {
            client
                .batch_execute(&format!(
                    "UPDATE \"{schema}\".idemkit SET expires_at = '2001-01-01' WHERE key IN ('{}', '{}', '{}')",
                    key(1),
                    key(5),
                    key(6)
                ))
                .await
                .unwrap();
            if format.resolved() {
                client
                    .batch_execute(&format!(
                        "UPDATE \"{schema}\".idemkit SET kept_until = '2001-01-01' WHERE key = '{}'",
                        key(6)
                    ))
                    .await
                    .unwrap();
            }
        }
        let store = PostgresStore::builder(&url)
            .schema(&schema)
            .connect()
            .await
            .unwrap();
        // Migrated to schema 8, which adds the index prune finds the completed records that
        // still keep their outcome through (each batch read every expired row without it).
        let version: i32 = client
            .query_one(
                &format!("SELECT version FROM \"{schema}\".idemkit_schema"),
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(version, 8, "the fixture's tables are migrated to schema 8");
        let index: String = client
            .query_one(
                "SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND indexname = 'idemkit_outcome_kept'",
                &[&schema],
            )
            .await
            .expect("the migration adds the index of records that keep their outcome")
            .get(0);
        assert!(
            index.contains("WHERE ((state = 'completed'::text) AND (length(outcome) > 0))"),
            "{index}"
        );
        if aged {
            check_expired_under_old_rules(store, format.resolved(), format != Format::V010).await;
            return;
        }
        check_records(store, &std::fs::read_to_string(&id_file).unwrap(), format).await;
    }
}

mod needs_redis {
    use super::*;

    #[cfg(feature = "redis")]
    #[tokio::test]
    async fn a_redis_dump_written_by_0_1_0_reads_back_as_it_was_meant() {
        check_redis(REDIS_FIXTURE, Format::V010).await;
    }

    #[cfg(feature = "redis")]
    #[tokio::test]
    async fn s24_a_redis_dump_with_operators_decisions_reads_back_as_it_was_meant() {
        check_redis(REDIS_FIXTURE_S24, Format::S24).await;
    }

    #[cfg(feature = "redis")]
    #[tokio::test]
    async fn s27_a_redis_dump_with_claims_to_give_back_reads_back_as_it_was_meant() {
        check_redis(REDIS_FIXTURE_S27, Format::S27).await;
    }

    #[cfg(feature = "redis")]
    #[tokio::test]
    async fn s32_a_redis_dump_with_unknown_answers_reads_back_as_it_was_meant() {
        check_redis(REDIS_FIXTURE_S32, Format::S32).await;
    }

    #[cfg(feature = "redis")]
    #[tokio::test]
    async fn s33_a_redis_dump_of_0_1_0_past_its_ttl_reads_its_completed_records_as_tombstones() {
        check_redis_aged(REDIS_FIXTURE, Format::V010, true).await;
    }

    #[cfg(feature = "redis")]
    #[tokio::test]
    async fn s33_a_redis_dump_of_schema_6_past_its_ttl_reads_done_records_as_tombstones_and_runs_released_ones()
     {
        check_redis_aged(REDIS_FIXTURE_S32, Format::S32, true).await;
    }

    /// Loads the dump `fixture` (written anew first when writing the newest, S32, one) and
    /// checks its records.
    #[cfg(feature = "redis")]
    async fn check_redis(fixture: &str, format: Format) {
        check_redis_aged(fixture, format, false).await;
    }

    /// [`check_redis`]; `aged`: the records aged past their ttl first (their `expires_at`), and
    /// checked as S33 reads them ([`check_expired_under_old_rules`]).
    #[cfg(feature = "redis")]
    async fn check_redis_aged(fixture: &str, format: Format, aged: bool) {
        use idem_runtime::RedisStore;
        use redis::AsyncCommands;
        let url = servers::server_url("IDEMKIT_TEST_REDIS_URL", "Redis");
        let fixture = manifest_path(fixture);
        let client = redis::Client::open(url.as_str()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        if writing() && format == Format::S32 {
            let prefix = format!("fixture:{}:", uuid::Uuid::new_v4().simple());
            let store = RedisStore::builder(&url)
                .prefix(&prefix)
                .connect()
                .await
                .unwrap();
            let id = write_records(store, format).await;
            let keys: Vec<String> = conn.keys(format!("{prefix}*")).await.unwrap();
            let mut entries = Vec::new();
            for k in keys {
                let kind: String = redis::cmd("TYPE")
                    .arg(&k)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                let value = match kind.as_str() {
                    "hash" => {
                        let fields: std::collections::BTreeMap<String, String> =
                            conn.hgetall(&k).await.unwrap();
                        serde_json::json!(fields)
                    }
                    "string" => serde_json::json!(conn.get::<_, String>(&k).await.unwrap()),
                    other => panic!("unexpected key type {other}"),
                };
                let pttl: i64 = conn.pttl(&k).await.unwrap();
                let suffix = k.strip_prefix(&prefix).unwrap().to_owned();
                entries.push(
                    serde_json::json!({"key": suffix, "type": kind, "value": value, "pttl": pttl}),
                );
            }
            entries.sort_by_key(|e| e["key"].as_str().unwrap().to_owned());
            let dump = serde_json::json!({"operation_id": id, "keys": entries});
            std::fs::write(
                &fixture,
                serde_json::to_string_pretty(&dump).unwrap() + "\n",
            )
            .unwrap();
        }
        let dump: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(&fixture).expect("the checked-in fixture"),
        )
        .unwrap();
        let prefix = format!("fixture:{}:", uuid::Uuid::new_v4().simple());
        for entry in dump["keys"].as_array().unwrap() {
            let k = format!("{prefix}{}", entry["key"].as_str().unwrap());
            match entry["type"].as_str().unwrap() {
                "hash" => {
                    let fields: Vec<(String, String)> = entry["value"]
                        .as_object()
                        .unwrap()
                        .iter()
                        .map(|(f, v)| (f.clone(), v.as_str().unwrap().to_owned()))
                        .collect();
                    let _: () = conn.hset_multiple(&k, &fields).await.unwrap();
                }
                _ => {
                    let _: () = conn
                        .set(&k, entry["value"].as_str().unwrap())
                        .await
                        .unwrap();
                }
            }
            let pttl = entry["pttl"].as_i64().unwrap();
            if pttl > 0 {
                let _: () = conn.pexpire(&k, pttl).await.unwrap();
            }
        }
        if aged {
            for order in [1, 5, 6] {
                let k = format!("{prefix}rec:{}", key(order));
                if conn.exists(&k).await.unwrap() {
                    let _: () = conn.hset(&k, "expires_at", "1000").await.unwrap();
                    if order == 6 {
                        let _: () = conn.hset(&k, "kept_until", "1000").await.unwrap();
                    }
                }
            }
        }
        let store = RedisStore::builder(&url)
            .prefix(&prefix)
            .connect()
            .await
            .unwrap();
        if aged {
            check_expired_under_old_rules(store, format.resolved(), format != Format::V010).await;
            return;
        }
        check_records(store, dump["operation_id"].as_str().unwrap(), format).await;
    }
}

/// S33 after an upgrade: the fixture's records as an earlier version left them once their
/// time-to-live had passed and no prune had run (aged by hand in the store's own format).
/// Order 1 (completed) and, where the format kept decisions, 5 (resolved as applied) were done:
/// each reads as a tombstone, a claim answers it and a call runs nothing
/// (`Error::Expired`). Order 6 (resolved as not applied, `resolved` formats) did not happen:
/// it is absent, and a call runs it. `dated`: whether the format kept when a record changed
/// (0.1.0 did not: "a date this store did not keep").
async fn check_expired_under_old_rules(
    store: impl Store + OperationIds + Records + Clone + 'static,
    resolved: bool,
    dated: bool,
) {
    let done: &[u64] = if resolved { &[1, 5] } else { &[1] };
    for &order in done {
        let record = store.get(&key(order)).await.unwrap().expect("a tombstone");
        assert_eq!(record.state, RecordState::Tombstone, "order {order}");
        match store.claim(&request(order)).await.unwrap() {
            Claim::Existing(existing) => match existing.state {
                ExistingState::Tombstone {
                    done,
                    resolved: by_decision,
                } => {
                    assert_eq!(by_decision, order == 5, "order {order}");
                    assert_eq!(
                        done == std::time::UNIX_EPOCH,
                        !dated,
                        "order {order}: {done:?}"
                    );
                }
                other => panic!("order {order}: {other:?}"),
            },
            other => panic!("order {order}: {other:?}"),
        }
    }
    let idem = Idem::builder()
        .shared_store(std::sync::Arc::new(store.clone()))
        .build()
        .unwrap();
    let runs = std::sync::atomic::AtomicU32::new(0);
    let call = |order: u64| {
        let runs = &runs;
        let idem = &idem;
        async move {
            Tool::new("charge")
                .idem(idem)
                .side_effect(&[("order", &order)], &4200u64, |_key| async move {
                    runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    Ok::<_, Failing>(serde_json::json!({"charge_id": "ch_again"}))
                })
                .await
        }
    };
    let late = call(1).await;
    match &late {
        Err(Failing::Idem(Error::Expired { .. })) => {}
        other => panic!("a completed record expired under the old rules is a tombstone: {other:?}"),
    }
    let said = late.unwrap_err().to_string();
    assert!(
        said.contains(if dated {
            "done on 20"
        } else {
            "done on a date this store did not keep"
        }),
        "{said}"
    );
    assert_eq!(
        runs.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "not run again"
    );
    if resolved {
        assert!(call(6).await.is_ok(), "released by a decision: it runs");
        assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 1);
    }
}

/// The error of [`check_expired_under_old_rules`]' calls.
#[derive(Debug)]
enum Failing {
    Idem(Error),
}

impl std::fmt::Display for Failing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failing::Idem(e) => e.fmt(f),
        }
    }
}

impl Classify for Failing {
    fn classify(&self) -> Failure {
        Failure::Permanent
    }
}

impl From<Error> for Failing {
    fn from(e: Error) -> Self {
        Failing::Idem(e)
    }
}

/// The SQL that ages a fixture's records as an earlier version left them past their ttl: every
/// expiry (and a not-applied decision's `kept_until`) in the past.
fn aged_sqlite(path: &Path, resolved: bool) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute(
        "UPDATE records SET expires_at = 1000 WHERE key IN (?1, ?2, ?3)",
        rusqlite::params![key(1).to_string(), key(5).to_string(), key(6).to_string()],
    )
    .unwrap();
    if resolved {
        conn.execute(
            "UPDATE records SET kept_until = 1000 WHERE key = ?1",
            [key(6).to_string()],
        )
        .unwrap();
    }
}

#[tokio::test]
async fn s33_a_sqlite_file_of_0_1_0_past_its_ttl_reads_its_completed_records_as_tombstones() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idemkit.db");
    std::fs::copy(manifest_path(FIXTURE), &path).expect("the checked-in fixture");
    aged_sqlite(&path, false);
    check_expired_under_old_rules(SqliteStore::open(&path).unwrap(), false, false).await;
}

#[tokio::test]
async fn s33_a_sqlite_file_of_schema_6_past_its_ttl_reads_done_records_as_tombstones_and_runs_released_ones()
 {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idemkit.db");
    std::fs::copy(manifest_path(FIXTURE_S32), &path).expect("the checked-in fixture");
    aged_sqlite(&path, true);
    check_expired_under_old_rules(SqliteStore::open(&path).unwrap(), true, true).await;
}
