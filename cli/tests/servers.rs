//! The `idemkit` command against PostgreSQL and Redis (`IDEMKIT_TEST_POSTGRES_URL`,
//! `IDEMKIT_TEST_REDIS_URL`; `scripts/test-servers.sh start` runs both), each test in a
//! namespace of its own (in modules `needs_postgres` and `needs_redis`: `scripts/test.sh` leaves
//! them out, saying so, where the server is not installed).

mod common;

use common::*;
use idem_runtime::{PostgresStore, RedisStore};

fn unique(prefix: &str) -> String {
    format!(
        "{prefix}{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

mod needs_postgres {
    use super::*;

    #[tokio::test]
    async fn every_subcommand_on_postgres() {
        let url = server_url("IDEMKIT_TEST_POSTGRES_URL", "PostgreSQL");
        let table = unique("cli_");
        let store = PostgresStore::builder(&url)
            .schema("idemkit_test")
            .table(&table)
            .connect()
            .await
            .unwrap();
        every_subcommand(
            store,
            &[
                "--store",
                &url,
                "--pg-schema",
                "idemkit_test",
                "--pg-table",
                &table,
            ],
        )
        .await;
        // Read-only: a table that is not there is reported, not created.
        let missing = unique("cli_missing_");
        let out = idemkit(
            &[
                "list",
                "--store",
                &url,
                "--pg-schema",
                "idemkit_test",
                "--pg-table",
                &missing,
            ],
            &[],
        );
        assert_eq!(out.status.code(), Some(1));
        assert!(stderr(&out).contains("does not exist"), "{}", stderr(&out));
    }

    #[tokio::test]
    async fn s24_resolve_settles_ambiguous_records_on_postgres() {
        let url = server_url("IDEMKIT_TEST_POSTGRES_URL", "PostgreSQL");
        let table = unique("cli_");
        let store = PostgresStore::builder(&url)
            .schema("idemkit_test")
            .table(&table)
            .connect()
            .await
            .unwrap();
        let at = [
            "--store",
            &url,
            "--pg-schema",
            "idemkit_test",
            "--pg-table",
            &table,
        ];
        s24_resolve_and_forget(store, &at).await;
    }
}

mod needs_redis {
    use super::*;

    #[tokio::test]
    async fn every_subcommand_on_redis() {
        let url = server_url("IDEMKIT_TEST_REDIS_URL", "Redis");
        let prefix = unique("cli:") + ":";
        let store = RedisStore::builder(&url)
            .prefix(&prefix)
            .connect()
            .await
            .unwrap();
        every_subcommand(store, &["--store", &url, "--redis-prefix", &prefix]).await;
    }

    #[tokio::test]
    async fn s24_resolve_settles_ambiguous_records_on_redis() {
        let url = server_url("IDEMKIT_TEST_REDIS_URL", "Redis");
        let prefix = unique("cli:") + ":";
        let store = RedisStore::builder(&url)
            .prefix(&prefix)
            .connect()
            .await
            .unwrap();
        s24_resolve_and_forget(store, &["--store", &url, "--redis-prefix", &prefix]).await;
    }
}
