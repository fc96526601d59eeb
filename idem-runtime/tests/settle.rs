//! S28: the settler's rows (`idem_runtime::conformance::s28_*`) on all four stores: memory,
//! SQLite, PostgreSQL at `IDEMKIT_TEST_POSTGRES_URL` and Redis at `IDEMKIT_TEST_REDIS_URL`
//! (`scripts/test-servers.sh start` runs both; `scripts/test.sh` leaves the modules
//! `needs_postgres` and `needs_redis` out, saying so, where the server is not installed).

mod servers;

mod memory {
    async fn fresh_store() -> idem_runtime::MemoryStore {
        idem_runtime::MemoryStore::new()
    }
    idem_runtime::settle_conformance_tests!(fresh_store);
}

mod sqlite {
    use idem_runtime::store::OperationIds;
    use idem_runtime::testing::Intercept;
    use idem_runtime::{Records, SqliteStore, Store};

    /// A `SqliteStore` on a new file in a temporary directory, deleted with the store.
    async fn fresh_store() -> impl Store + OperationIds + Records {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = SqliteStore::builder(dir.path().join("idemkit.db"))
            .open()
            .expect("a new store opens");
        Intercept::new(store, move |_, _| {
            let _kept_until_the_store_is_dropped = &dir;
            None
        })
    }
    idem_runtime::settle_conformance_tests!(fresh_store);
}

mod needs_postgres {
    use idem_runtime::PostgresStore;

    async fn fresh_store() -> PostgresStore {
        let url = super::servers::server_url("IDEMKIT_TEST_POSTGRES_URL", "PostgreSQL");
        let table = format!("settle_{}", uuid::Uuid::new_v4().simple());
        PostgresStore::builder(url)
            .schema("idemkit_test")
            .table(&table)
            .max_connections(8)
            .connect()
            .await
            .expect("the PostgreSQL store connects and creates its table")
    }
    idem_runtime::settle_conformance_tests!(fresh_store);
}

mod needs_redis {
    use idem_runtime::RedisStore;

    async fn fresh_store() -> RedisStore {
        let url = super::servers::server_url("IDEMKIT_TEST_REDIS_URL", "Redis");
        RedisStore::builder(url)
            .prefix(format!("settle:{}:", uuid::Uuid::new_v4().simple()))
            .connect()
            .await
            .expect("the Redis store connects")
    }
    idem_runtime::settle_conformance_tests!(fresh_store);
}

/// What the ambiguous call below fails with: its answer was lost.
#[derive(Debug)]
struct Lost;

impl idem_runtime::Classify for Lost {
    fn classify(&self) -> idem_runtime::Failure {
        idem_runtime::Failure::Ambiguous
    }
}

impl From<idem_runtime::Error> for Lost {
    fn from(_: idem_runtime::Error) -> Self {
        Lost
    }
}

/// S26 for the settler (S28): a tool's verify function is asked with the record's key current
/// where it is made and where it is polled, as in a call (S19), so a verify that looks the
/// operation up by `current_key()` (a client other than reqwest) finds it there too. Failed
/// before: neither saw a key.
#[tokio::test]
async fn s26_the_settlers_verify_sees_the_records_key_as_current() {
    use std::sync::{Arc, Mutex};

    use idem_runtime::settle::{Pass, Settled, Settler};
    use idem_runtime::{Idem, IdempotencyKey, MemoryStore, Tool, Verified, current_key};

    let store = Arc::new(MemoryStore::new());
    let idem = Idem::builder().shared_store(store.clone()).build().unwrap();
    let lost: Result<String, Lost> = Tool::new("sms")
        .idem(&idem)
        .resend(false)
        .side_effect(&[("order", &1u32)], &(), |_key| async { Err(Lost) })
        .await;
    assert!(lost.is_err());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen_by_verify = seen.clone();
    let settler = Settler::new(store).verify("sms", move |key| {
        let made = current_key();
        let seen = seen_by_verify.clone();
        async move {
            seen.lock().unwrap().push((key, made, current_key()));
            Ok::<_, String>(Verified::Applied("sent".to_owned()))
        }
    });
    let report = settler.run_once(&Pass::new()).await.unwrap();
    let key = IdempotencyKey::derive("sms", &[("order", &1u32)]);
    assert_eq!(
        report.records,
        vec![(key, "sms".to_owned(), Settled::Applied)]
    );
    assert_eq!(*seen.lock().unwrap(), vec![(key, Some(key), Some(key))]);
    assert_eq!(
        current_key(),
        None,
        "the key is current only in the verification"
    );
}

/// S28 (issue 41's "done when"): a record kept as ambiguous, of a tool whose verify can tell, is
/// settled without any caller by the host program's `settle` subcommand (`Settler::run_cli`, on
/// a SQLite file as a second process would open it): a dry run changes nothing and exits 3, the
/// pass completes the record and exits 0, and the next call replays it without running the body.
#[tokio::test]
async fn s28_the_programs_settle_subcommand_settles_without_a_caller() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use idem_runtime::settle::Settler;
    use idem_runtime::store::RecordState;
    use idem_runtime::{Idem, IdempotencyKey, Records, SqliteStore, Tool, Verified};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idemkit.db");
    let sent = AtomicU32::new(0);
    let agent = Idem::new(SqliteStore::open(&path).unwrap());
    let send = || {
        Tool::new("sms")
            .idem(&agent)
            .resend(false)
            .side_effect(&[("order", &1u32)], &(), |_key| {
                sent.fetch_add(1, Ordering::SeqCst);
                async { Err::<String, _>(Lost) }
            })
    };
    assert!(send().await.is_err(), "its answer was lost");
    let key = IdempotencyKey::derive("sms", &[("order", &1u32)]);

    // The operator's cron, in the host's program: another store on the same file.
    let store = Arc::new(SqliteStore::open(&path).unwrap());
    let settler = Settler::new(store.clone()).verify("sms", |_key| async {
        Ok::<_, String>(Verified::Applied("sms-1".to_owned()))
    });
    assert_eq!(settler.run_cli(["--dry-run", "--tool", "sms"]).await, 3);
    let kept = store.get(&key).await.unwrap().unwrap();
    assert!(
        matches!(kept.state, RecordState::Ambiguous { .. }),
        "{kept:?}"
    );
    assert_eq!(settler.run_cli(["--tool", "sms"]).await, 0);
    let settled = store.get(&key).await.unwrap().unwrap();
    assert!(
        matches!(&settled.state, RecordState::Completed { outcome } if outcome.starts_with(b"\"sms-1\"")),
        "{settled:?}"
    );
    assert_eq!(settler.run_cli(["--tool", "sms"]).await, 0, "nothing left");

    let replayed: Result<String, Lost> = send().await;
    assert_eq!(replayed.ok().as_deref(), Some("sms-1"));
    assert_eq!(
        sent.load(Ordering::SeqCst),
        1,
        "the body ran once, before the settler"
    );
}
