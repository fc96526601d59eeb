//! The PostgreSQL store behind PgBouncer in transaction mode, built with
//! `prepared_statements(false)`: the conformance rows and 32 tasks over 4 pools on one key, with
//! the pooler handing each statement to any of its few server connections. Needs
//! `IDEMKIT_TEST_PGBOUNCER_URL` (`scripts/test-servers.sh start` runs PgBouncer, `pool_mode =
//! transaction`, `max_prepared_statements = 0`, 4 server connections, in front of its
//! PostgreSQL).

mod servers;

mod needs_pgbouncer {
    use super::*;

    use idem_runtime::PostgresStore;

    use servers::unique;

    fn bouncer_url() -> String {
        servers::server_url("IDEMKIT_TEST_PGBOUNCER_URL", "PgBouncer")
    }

    async fn store_at(url: &str, table: &str, connections: usize) -> PostgresStore {
        PostgresStore::builder(url)
            .schema("idemkit_test")
            .table(table)
            .max_connections(connections)
            .prepared_statements(false)
            .connect()
            .await
            .expect("the store connects through PgBouncer and creates its table")
    }

    async fn fresh_store() -> PostgresStore {
        let url = bouncer_url();
        store_at(&url, &unique("pgbouncer"), 8).await
    }

    idem_runtime::conformance_tests!(fresh_store);
    idem_runtime::records_conformance_tests!(fresh_store);
    idem_runtime::restore_conformance_tests!(fresh_store);

    /// 32 tasks over 4 pools of 4 client connections each (16 clients on PgBouncer's 4 server
    /// connections) call one key at once: one body runs, all get its output.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn contention_32_tasks_over_4_pools_through_pgbouncer_run_the_body_once() {
        let url = bouncer_url();
        let table = unique("pgbouncer_contention");
        let mut stores = Vec::new();
        for _ in 0..4 {
            stores.push(store_at(&url, &table, 4).await);
        }
        servers::contention_32_tasks_over_4_workers(stores).await;
    }
}
