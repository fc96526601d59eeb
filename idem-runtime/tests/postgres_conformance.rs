//! The conformance suite (S1–S13) on the PostgreSQL store, against the server at
//! `IDEMKIT_TEST_POSTGRES_URL` (`scripts/test-servers.sh start` runs one). Each row gets a table
//! of its own.

mod servers;

mod needs_postgres {
    use super::*;

    use idem_runtime::PostgresStore;

    async fn fresh_store() -> PostgresStore {
        let url = server_url();
        let table = format!("conformance_{}", uuid::Uuid::new_v4().simple());
        PostgresStore::builder(url)
            .schema("idemkit_test")
            .table(&table[..40])
            .max_connections(8)
            .connect()
            .await
            .expect("the PostgreSQL store connects and creates its table")
    }

    fn server_url() -> String {
        servers::server_url("IDEMKIT_TEST_POSTGRES_URL", "PostgreSQL")
    }

    idem_runtime::conformance_tests!(fresh_store);
    idem_runtime::records_conformance_tests!(fresh_store);
    idem_runtime::restore_conformance_tests!(fresh_store);
}
