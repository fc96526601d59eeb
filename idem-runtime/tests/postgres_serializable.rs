//! The PostgreSQL store under `default_transaction_isolation = serializable`, set for the store's
//! own connections (the URL's `options`, so nothing of the shared server changes): the conformance
//! rows, 32 tasks over 4 pools on one key, and a write the server rolls back as a serialization
//! failure (SQLSTATE 40001), which the store sends again and which then applies. Needs
//! `IDEMKIT_TEST_POSTGRES_URL` (`scripts/test-servers.sh start`).

mod servers;

mod needs_postgres {
    use super::*;

    use std::time::Duration;

    use idem_runtime::store::{Claim, ClaimRequest, LeaseToken, Outcome, RecordState, Written};
    use idem_runtime::{Fingerprint, PostgresStore, Records, Store};

    use servers::{key_of, unique};

    fn server_url() -> String {
        servers::server_url("IDEMKIT_TEST_POSTGRES_URL", "PostgreSQL")
    }

    /// `url` with every transaction of its connections SERIALIZABLE unless it says otherwise.
    fn serializable(url: &str) -> String {
        let sep = if url.contains('?') { '&' } else { '?' };
        format!("{url}{sep}options=-c%20default_transaction_isolation%3Dserializable")
    }

    async fn store_at(url: &str, table: &str, connections: usize) -> PostgresStore {
        let store = PostgresStore::builder(serializable(url))
            .schema("idemkit_test")
            .table(table)
            .max_connections(connections)
            .connect()
            .await
            .expect("the store connects and creates its table under SERIALIZABLE");
        // The setting took: the store's connections run SERIALIZABLE transactions.
        let client = store.pool().get().await.unwrap();
        let level: String = client
            .query_one("SHOW transaction_isolation", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(level, "serializable");
        store
    }

    async fn fresh_store() -> PostgresStore {
        let url = server_url();
        store_at(&url, &unique("serializable"), 8).await
    }

    idem_runtime::conformance_tests!(fresh_store);
    idem_runtime::records_conformance_tests!(fresh_store);
    idem_runtime::restore_conformance_tests!(fresh_store);

    /// 32 tasks over 4 pools (SERIALIZABLE) call one key at once: one body runs, all get its output
    /// (the claims that collide are serialization failures the store sends again).
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn contention_32_tasks_over_4_serializable_pools_run_the_body_once() {
        let url = server_url();
        let table = unique("serializable_contention");
        let mut stores = Vec::new();
        for _ in 0..4 {
            stores.push(store_at(&url, &table, 4).await);
        }
        servers::contention_32_tasks_over_4_workers(stores).await;
    }

    /// A transaction of another client holds the record's row while the store's `complete` waits for
    /// it; it commits a change of the row, so the store's statement, whose snapshot is older, is
    /// rolled back as a serialization failure (what READ COMMITTED would have re-read). The store
    /// sends it again, and it applies.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_rolled_back_as_a_serialization_failure_is_sent_again_and_applies() {
        let url = server_url();
        let table = unique("serializable_conflict");
        let store = store_at(&url, &table, 4).await;
        let token = LeaseToken::new();
        let req = ClaimRequest::new(
            key_of(1),
            "charge",
            Fingerprint::of(&4200u64).unwrap(),
            token,
            Duration::from_secs(60),
            Duration::from_secs(600),
        );
        assert_eq!(
            store.claim(&req).await.unwrap(),
            Claim::Acquired { takeover: None }
        );

        // Another client's SERIALIZABLE transaction locks the row by changing it.
        let mut other = store.pool().get().await.unwrap();
        let tx = other.transaction().await.unwrap();
        let changed = tx
            .execute(
                &format!("UPDATE \"idemkit_test\".\"{table}\" SET updated = now() WHERE key = $1"),
                &[&key_of(1).as_uuid()],
            )
            .await
            .unwrap();
        assert_eq!(changed, 1);

        // The store's complete starts, takes its snapshot and waits for the row.
        let completing = tokio::spawn({
            let store = store.clone();
            async move {
                store
                    .complete(
                        key_of(1),
                        token,
                        Outcome::from(&b"\"receipt\""[..]),
                        Duration::from_secs(600),
                    )
                    .await
            }
        });
        let watcher = store.pool().get().await.unwrap();
        loop {
            let waiting: i64 = watcher
                .query_one(
                    // Only the store's complete can wait for a lock on this test's own table.
                    "SELECT count(*) FROM pg_stat_activity
                  WHERE wait_event_type = 'Lock' AND strpos(query, $1) > 0",
                    &[&table],
                )
                .await
                .unwrap()
                .get(0);
            if waiting > 0 {
                break;
            }
            assert!(
                !completing.is_finished(),
                "complete did not wait for the row"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tx.commit().await.unwrap();

        // Rolled back once (40001), sent again on a new snapshot: applied.
        assert_eq!(completing.await.unwrap().unwrap(), Written::Applied);
        assert_eq!(
            store.get(&key_of(1)).await.unwrap().unwrap().state,
            RecordState::Completed {
                outcome: b"\"receipt\"".to_vec()
            }
        );
    }
}
