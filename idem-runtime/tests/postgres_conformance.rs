//! The conformance suite (S1–S11) on the PostgreSQL store, against the server at
//! `IDEMKIT_TEST_POSTGRES_URL` (`scripts/test-servers.sh start` runs one). Each row gets a table
//! of its own.

use idem_runtime::PostgresStore;

async fn fresh_store() -> PostgresStore {
    let Some(url) = server_url() else {
        // A skip must be seen: the whole file stops here, after saying so.
        std::process::exit(0);
    };
    let table = format!("conformance_{}", uuid::Uuid::new_v4().simple());
    PostgresStore::builder(url)
        .schema("idemkit_test")
        .table(&table[..40])
        .max_connections(8)
        .connect()
        .await
        .expect("the PostgreSQL store connects and creates its table")
}

/// The test server's URL; under CI a missing one is a failure, elsewhere a loud skip.
fn server_url() -> Option<String> {
    const VAR: &str = "IDEMKIT_TEST_POSTGRES_URL";
    match std::env::var(VAR) {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false") => {
            panic!("{VAR} is not set under CI: .ci/run starts PostgreSQL and sets it")
        }
        _ => {
            eprintln!(
                "\n==========\nSKIPPED: set {VAR} to run the PostgreSQL store tests \
                 (eval \"$(scripts/test-servers.sh start)\")\n==========\n"
            );
            None
        }
    }
}

idem_runtime::conformance_tests!(fresh_store);
