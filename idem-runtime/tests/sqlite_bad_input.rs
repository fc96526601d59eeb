//! Bad input to the SQLite store: each is refused with an error that names the file and says
//! what to do, and the tool's body never runs (idemkit fails closed).

mod support;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use idem_runtime::{Error, Idem, SqliteStore, StoreErrorKind, Tool};
use support::{Hang, Reported, ShipError, body_log, child_command, reported};

/// Not a test: the body of the children the tests below start.
#[test]
#[ignore = "a child process of the tests in this file; they run it"]
fn child() {
    support::child_main();
}

/// Calls the tool `ship(order = 42)` under a store at `path`, opened by that first call (as the
/// default store is); counts the body's runs in `runs`.
async fn ship(path: &Path, runs: &AtomicU32) -> Result<String, ShipError> {
    let idem = Idem::new(SqliteStore::builder(path).open_lazily());
    ship_with(&idem, runs).await
}

async fn ship_with(idem: &Idem, runs: &AtomicU32) -> Result<String, ShipError> {
    Tool::new("ship")
        .idem(idem)
        .max_attempts(1)
        .side_effect(
            &[("order", &42u64)],
            &serde_json::json!({ "to": "Lyon" }),
            |_key| {
                runs.fetch_add(1, Ordering::SeqCst);
                async { Ok("shipped".to_owned()) }
            },
        )
        .await
}

/// The kind and message of the store error a call was refused with.
fn refused(result: Result<String, ShipError>) -> (StoreErrorKind, String) {
    match result {
        Err(ShipError(e @ Error::Store { .. })) => {
            let Error::Store { source, .. } = &e else {
                unreachable!()
            };
            (source.kind(), e.to_string())
        }
        other => panic!("expected a store error, got {other:?}"),
    }
}

fn assert_names(message: &str, path: &Path, what_to_do: &str) {
    assert!(
        message.contains(&path.display().to_string()),
        "names the file {}: {message}",
        path.display()
    );
    assert!(
        message.contains(what_to_do),
        "says what to do ({what_to_do}): {message}"
    );
    assert!(message.contains("did not run the tool"), "{message}");
}

#[tokio::test]
async fn a_file_that_is_not_a_sqlite_database_is_refused_and_left_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.txt");
    let text = "shopping list: eggs, flour, milk\n".repeat(40);
    fs::write(&path, &text).unwrap();
    let runs = AtomicU32::new(0);

    let (kind, message) = refused(ship(&path, &runs).await);

    assert_eq!(kind, StoreErrorKind::Incompatible);
    assert_names(&message, &path, "is not a SQLite database");
    assert!(message.contains("move that file away"), "{message}");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the body never ran");
    assert_eq!(
        fs::read_to_string(&path).unwrap(),
        text,
        "the file was not touched"
    );
    let opened = SqliteStore::open(&path).expect_err("opening it eagerly fails the same way");
    assert_eq!(opened.kind(), StoreErrorKind::Incompatible);
}

#[test]
fn the_default_store_at_a_file_that_is_not_a_database_fails_the_first_call_and_the_body_never_runs()
{
    let work = tempfile::tempdir().unwrap();
    let path = work.path().join("not-a-db");
    fs::write(&path, "{\"this\": \"is json\"}\n".repeat(40)).unwrap();
    let out = child_command(work.path(), Hang::Nowhere, Duration::from_secs(30))
        .env("IDEMKIT_DB", &path)
        .output()
        .unwrap();
    let Reported::Err {
        store_kind,
        message,
    } = reported(&out)
    else {
        panic!("the call succeeded")
    };
    assert_eq!(store_kind.as_deref(), Some("Incompatible"));
    assert_names(&message, &path, "set IDEMKIT_DB");
    assert!(!body_log(work.path()).exists(), "the body never ran");
}

#[test]
fn a_directory_without_write_permission_is_refused_and_the_body_never_runs() {
    // Root ignores permissions, and tests run as root in CI: then the child that calls the tool
    // runs as `nobody` (uid/gid 65534), for whom the directory really is read-only.
    let work = tempfile::tempdir().unwrap();
    fs::set_permissions(work.path(), fs::Permissions::from_mode(0o777)).unwrap();
    let locked = work.path().join("locked");
    fs::create_dir(&locked).unwrap();
    fs::set_permissions(&locked, fs::Permissions::from_mode(0o555)).unwrap();
    let path = locked.join("idemkit.db");

    let mut cmd = child_command(work.path(), Hang::Nowhere, Duration::from_secs(30));
    cmd.env("IDEMKIT_DB", &path);
    if support::is_root() {
        cmd.uid(65534).gid(65534);
    }
    let out = cmd.output().unwrap();

    let Reported::Err {
        store_kind,
        message,
    } = reported(&out)
    else {
        panic!("the call succeeded")
    };
    assert_eq!(store_kind.as_deref(), Some("Unavailable"));
    assert_names(&message, &path, "writable");
    assert!(!path.exists(), "no store was created");
    assert!(!body_log(work.path()).exists(), "the body never ran");
}

#[tokio::test]
async fn a_store_path_under_a_regular_file_is_refused_naming_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    fs::write(&file, b"").unwrap();
    let path = file.join("idemkit.db");
    let runs = AtomicU32::new(0);

    let (kind, message) = refused(ship(&path, &runs).await);

    assert_eq!(kind, StoreErrorKind::Unavailable);
    assert_names(&message, &path, "cannot create the directory");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the body never ran");
}

#[tokio::test]
async fn a_database_from_a_newer_schema_version_is_refused_and_not_changed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idemkit.db");
    drop(SqliteStore::open(&path).unwrap());
    let conn = rusqlite::Connection::open(&path).unwrap();
    let current: i64 = conn
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .unwrap();
    let newer = current + 1;
    conn.pragma_update(None, "user_version", newer).unwrap();
    drop(conn);
    let runs = AtomicU32::new(0);

    let (kind, message) = refused(ship(&path, &runs).await);

    assert_eq!(kind, StoreErrorKind::Incompatible);
    assert_names(&message, &path, "upgrade idemkit");
    assert!(
        message.contains(&format!("schema version {newer}")),
        "{message}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the body never ran");
    let version: i64 = rusqlite::Connection::open(&path)
        .unwrap()
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, newer, "the newer file was left as it was");
}

#[tokio::test]
async fn a_sqlite_database_of_another_application_is_refused_and_not_changed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        .unwrap();
    let runs = AtomicU32::new(0);

    let (kind, message) = refused(ship(&path, &runs).await);

    assert_eq!(kind, StoreErrorKind::Incompatible);
    assert_names(&message, &path, "not an idemkit store");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    let tables: i64 = rusqlite::Connection::open(&path)
        .unwrap()
        .query_row(
            "SELECT count(*) FROM sqlite_schema WHERE type = 'table'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(tables, 1, "no idemkit table was added");
}

/// Rows damaged by hand, each in a way the schema's CHECK constraints would refuse (so the
/// damage is written with `ignore_check_constraints`, as a bad copy or an old bug could).
/// STRICT tables refuse a value of the wrong type outright, so that damage cannot be written
/// through SQL at all and is not among these.
const DAMAGE: &[(&str, &str)] = &[
    (
        "UPDATE records SET fingerprint = x'0badf00d'",
        "`fingerprint` is 4 bytes, not 32",
    ),
    ("UPDATE records SET state = 'done'", "`state` is `done`"),
    // (A lease still live: a running record whose lease expired is taken over, damage and all.)
    (
        "UPDATE records SET state = 'running', token = x'01', lease_until = 1 << 62",
        "`token` is 1 bytes, not 16",
    ),
    (
        "UPDATE records SET state = 'running', token = randomblob(16), lease_until = NULL",
        "`lease_until` is Null",
    ),
    ("UPDATE records SET outcome = NULL", "`outcome` is Null"),
];

#[tokio::test]
async fn a_corrupted_row_is_refused_as_corrupt_naming_file_key_and_column_and_the_body_never_runs()
{
    for (damage, says) in DAMAGE {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("idemkit.db");
        let idem = Idem::new(SqliteStore::open(&path).unwrap());
        let runs = AtomicU32::new(0);
        assert_eq!(ship_with(&idem, &runs).await.unwrap(), "shipped");
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch("PRAGMA ignore_check_constraints = ON")
            .unwrap();
        assert_eq!(conn.execute(damage, []).unwrap(), 1, "{damage}");
        let key: String = conn
            .query_row("SELECT key FROM records", [], |r| r.get(0))
            .unwrap();

        let result = ship_with(&idem, &runs).await;
        assert!(
            result.is_err(),
            "after `{damage}` the call was not refused: {result:?}"
        );
        let (kind, message) = refused(result);

        assert_eq!(kind, StoreErrorKind::Corrupt, "{damage}");
        assert_names(&message, &path, "DELETE FROM records WHERE key");
        assert!(message.contains(&key), "names the key: {message}");
        assert!(
            message.contains(says),
            "after `{damage}`, says {says}: {message}"
        );
        assert_eq!(
            runs.load(Ordering::SeqCst),
            1,
            "the body did not run again after `{damage}`"
        );
    }
}
