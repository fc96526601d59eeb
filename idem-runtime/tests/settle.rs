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
