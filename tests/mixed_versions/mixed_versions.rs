//! Two builds of one toolset sharing one store, as in a rolling deploy: an operation started by
//! the old build (`src/old.rs`) and retried by the new (`src/new.rs`) runs once, whether it
//! completed (the new build replays its outcome) or its outcome is unknown (the new build does
//! not send it again), for each kind of change: the key unchanged, the key changed with
//! `previous = "..."`, an outcome field added with `#[serde(default)]`. Each build is a binary
//! of its own, run one after the other against one SQLite file, and one PostgreSQL table (in
//! `needs_postgres`).

use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "../../idem-runtime/tests/servers/url.rs"]
#[allow(dead_code)]
mod url;

/// Runs `build` (`old` or `new`) once: `TOOL MODE CUSTOMER` against `store`; what it printed.
fn run(build: &str, store: &str, ledger: &Path, tool: &str, mode: &str, customer: &str) -> String {
    let exe = match build {
        "old" => env!("CARGO_BIN_EXE_toolset-old"),
        _ => env!("CARGO_BIN_EXE_toolset-new"),
    };
    let out = Command::new(exe)
        .args([store, tool, mode, customer])
        .env("IDEMKIT_LEDGER", ledger)
        .output()
        .expect("the build runs");
    assert!(
        out.status.success(),
        "{build} {tool} {mode} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// The ledger's lines for `tool` and `customer`: one per body run, naming the build.
fn runs(ledger: &Path, tool: &str, customer: &str) -> Vec<String> {
    let text = std::fs::read_to_string(ledger).unwrap_or_default();
    text.lines()
        .filter(|l| l.ends_with(&format!(" {tool} {customer}")))
        .map(str::to_owned)
        .collect()
}

/// Every tool, both ways an operation can be left by the old build, against `store`.
fn old_then_new_runs_each_operation_once(store: &str, ledger: &Path) {
    for tool in ["charge_same", "charge_rekeyed", "charge_outcome"] {
        // Completed by the old build: the new build replays its outcome.
        let customer = format!("{tool}_done");
        let old = run("old", store, ledger, tool, "ok", &customer);
        assert!(old.starts_with("ok "), "{tool}: {old}");
        let new = run("new", store, ledger, tool, "ok", &customer);
        let expected = match tool {
            // The old outcome, with the field it lacks read as its default.
            "charge_outcome" => format!(r#"ok {{"id":"old-{customer}-500","fee_cents":0}}"#),
            _ => old.clone(),
        };
        assert_eq!(
            new, expected,
            "{tool}: the new build replays the old build's outcome"
        );
        assert_eq!(
            runs(ledger, tool, &customer),
            [format!("old {tool} {customer}")],
            "{tool}"
        );

        // Its outcome unknown (the reply was lost) in the old build: the new build, which may
        // not re-send (`resend = false`), does not run it again.
        let customer = format!("{tool}_lost");
        let old = run("old", store, ledger, tool, "lost", &customer);
        assert!(old.starts_with("err "), "{tool}: {old}");
        let new = run("new", store, ledger, tool, "ok", &customer);
        assert!(
            new.starts_with("err ") && new.contains("the effect may or may not have happened"),
            "{tool}: the new build refuses an unknown outcome: {new}"
        );
        assert_eq!(
            runs(ledger, tool, &customer),
            [format!("old {tool} {customer}")],
            "{tool}"
        );

        // A new operation in the new build runs (once) there.
        let customer = format!("{tool}_fresh");
        let new = run("new", store, ledger, tool, "ok", &customer);
        assert!(new.starts_with("ok "), "{tool}: {new}");
        let again = run("new", store, ledger, tool, "ok", &customer);
        assert_eq!(again, new, "{tool}");
        assert_eq!(
            runs(ledger, tool, &customer),
            [format!("new {tool} {customer}")],
            "{tool}"
        );
    }
}

fn ledger_in(dir: &Path) -> PathBuf {
    dir.join("ledger")
}

#[test]
fn mixed_versions_one_sqlite_file_runs_each_operation_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("idem.db").display());
    old_then_new_runs_each_operation_once(&store, &ledger_in(dir.path()));
}

mod needs_postgres {
    use super::*;

    #[test]
    fn mixed_versions_one_postgres_table_runs_each_operation_once() {
        let url = super::url::server_url("IDEMKIT_TEST_POSTGRES_URL", "PostgreSQL");
        let dir = tempfile::tempdir().unwrap();
        let table = format!("mixed_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
        let store = format!("postgres:{table}:{url}");
        old_then_new_runs_each_operation_once(&store, &ledger_in(dir.path()));
    }
}
