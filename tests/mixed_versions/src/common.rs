//! What both builds share: the store named on the command line, the error type, the ledger of
//! body runs, and the command line itself. Each build defines the tools (`old.rs`, `new.rs`).
//!
//! `toolset-{old,new} STORE TOOL MODE CUSTOMER`: STORE is `sqlite:PATH` or
//! `postgres:TABLE:URL`; MODE is `ok` (the body succeeds) or `lost` (the body acts, then its
//! reply is lost: an unknown outcome); the body appends `BUILD TOOL CUSTOMER` to the file named
//! by `IDEMKIT_LEDGER`. Prints `ok JSON` or `err MESSAGE`.

use std::io::Write as _;
use std::sync::OnceLock;

use idemkit::{Classify, Failure, Idem};

#[derive(Debug)]
pub enum PayError {
    /// The provider acted, and its reply was lost.
    Lost,
    Idem(idemkit::Error),
}

impl std::fmt::Display for PayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PayError::Lost => f.write_str("the reply was lost"),
            PayError::Idem(e) => e.fmt(f),
        }
    }
}

impl Classify for PayError {
    fn classify(&self) -> Failure {
        match self {
            PayError::Lost => Failure::Ambiguous,
            PayError::Idem(_) => Failure::Permanent,
        }
    }
}

impl From<idemkit::Error> for PayError {
    fn from(e: idemkit::Error) -> Self {
        PayError::Idem(e)
    }
}

static MODE: OnceLock<(String, &'static str)> = OnceLock::new();

/// A body's run: recorded in the ledger, then what MODE says.
pub fn act(tool: &str, customer: &str) -> Result<(), PayError> {
    let (mode, build) = MODE.get().expect("set by main");
    let ledger = std::env::var("IDEMKIT_LEDGER").expect("IDEMKIT_LEDGER names the ledger file");
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(ledger)
        .expect("the ledger opens");
    writeln!(file, "{build} {tool} {customer}").expect("the ledger is written");
    match mode.as_str() {
        "ok" => Ok(()),
        "lost" => Err(PayError::Lost),
        other => panic!("unknown mode {other}"),
    }
}

/// The command line: the runtime on STORE, TOOL, CUSTOMER.
pub async fn start(build: &'static str) -> (Idem, String, String) {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [store, tool, mode, customer] = &args[..] else {
        panic!("usage: toolset-{build} STORE TOOL MODE CUSTOMER");
    };
    MODE.set((mode.clone(), build)).expect("set once");
    let idem = if let Some(path) = store.strip_prefix("sqlite:") {
        Idem::new(idemkit::SqliteStore::open(path).expect("the SQLite store opens"))
    } else if let Some(rest) = store.strip_prefix("postgres:") {
        let (table, url) = rest.split_once(':').expect("postgres:TABLE:URL");
        let store = idemkit::PostgresStore::builder(url)
            .schema("idemkit_test")
            .table(table)
            .connect()
            .await
            .expect("the PostgreSQL store connects");
        Idem::new(store)
    } else {
        panic!("STORE is sqlite:PATH or postgres:TABLE:URL, not {store}");
    };
    (idem, tool.clone(), customer.clone())
}

/// Prints a call's result for the test to read.
pub fn report<T: serde::Serialize>(result: Result<T, PayError>) {
    match result {
        Ok(value) => println!("ok {}", serde_json::to_string(&value).unwrap()),
        Err(e) => println!("err {e}"),
    }
}
