//! S28: the settler's rows (`idem_runtime::conformance::s28_*`) on all four stores: memory,
//! SQLite, PostgreSQL at `IDEMKIT_TEST_POSTGRES_URL` and Redis at `IDEMKIT_TEST_REDIS_URL`
//! (`scripts/test-servers.sh start` runs both; without them those two modules skip loudly, and
//! fail under CI).

mod servers;

mod memory {
    async fn fresh_store() -> idem_runtime::MemoryStore {
        idem_runtime::MemoryStore::new()
    }
    idem_runtime::settle_conformance_tests!(fresh_store);
}

mod sqlite {
    use idem_runtime::store::{Intercept, OperationIds};
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

mod postgres {
    use idem_runtime::PostgresStore;

    async fn fresh_store() -> PostgresStore {
        let Some(url) = super::servers::server_url("IDEMKIT_TEST_POSTGRES_URL", "PostgreSQL")
        else {
            std::process::exit(0);
        };
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

mod redis {
    use idem_runtime::RedisStore;

    async fn fresh_store() -> RedisStore {
        let Some(url) = super::servers::server_url("IDEMKIT_TEST_REDIS_URL", "Redis") else {
            std::process::exit(0);
        };
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
