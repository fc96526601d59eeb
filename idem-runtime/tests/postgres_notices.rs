//! Issue 51 #7: a PostgreSQL store that starts on tables that exist logs no NOTICE. Every start
//! runs its `CREATE … IF NOT EXISTS`, and tokio-postgres logs each notice the server sends
//! (through `log`, at INFO): "relation … already exists, skipping" on every worker's start.
//! Needs `IDEMKIT_TEST_POSTGRES_URL` (`scripts/test-servers.sh start` runs such a server).

use std::sync::Mutex;

mod servers;

/// Every `log` record of tokio-postgres, as text.
static LOGGED: Mutex<Vec<String>> = Mutex::new(Vec::new());

struct Capture;

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        if record.target().starts_with("tokio_postgres") {
            LOGGED
                .lock()
                .unwrap()
                .push(format!("{} {}", record.level(), record.args()));
        }
    }
    fn flush(&self) {}
}

mod needs_postgres {
    use idem_runtime::PostgresStore;

    use super::{Capture, LOGGED, servers};

    #[tokio::test]
    async fn finding7_a_store_that_starts_on_its_tables_logs_no_notice() {
        let url = servers::server_url("IDEMKIT_TEST_POSTGRES_URL", "PostgreSQL");
        log::set_logger(&Capture).expect("the only logger");
        log::set_max_level(log::LevelFilter::Trace);
        let table = servers::unique("notices");
        let open = || async {
            PostgresStore::builder(&url)
                .schema("idemkit_test")
                .table(&table)
                .max_connections(1)
                .connect()
                .await
                .expect("the store connects")
        };
        // The first start creates the tables; the second finds them, as every later start does.
        drop(open().await);
        drop(open().await);
        let logged = LOGGED.lock().unwrap().clone();
        let notices: Vec<&String> = logged.iter().filter(|l| l.contains("NOTICE")).collect();
        assert!(notices.is_empty(), "{notices:#?}");
    }
}
