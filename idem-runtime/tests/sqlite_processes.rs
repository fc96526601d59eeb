//! The SQLite store shared by separate OS processes: one body per key across processes, a
//! crash (SIGKILL) in the body or after the outcome was recorded, and a restart that replays.
//!
//! Each test starts copies of this test binary as children (see `support`), which call the
//! tool `ship(order = 42)` through the zero-configuration default store.

mod support;

use std::os::unix::process::ExitStatusExt;
use std::process::Child;
use std::time::Duration;

use support::{Hang, Reported, body_log, child_command, ledger, lines, reported, wait_for};

/// Not a test: the body of the children the tests below start.
#[test]
#[ignore = "a child process of the tests in this file; they run it"]
fn child() {
    support::child_main();
}

const LEASE: Duration = Duration::from_millis(300);

fn kill(mut child: Child) {
    child.kill().expect("SIGKILL the child");
    let status = child.wait().unwrap();
    assert_eq!(status.signal(), Some(9), "the child died of SIGKILL");
}

fn ok(r: &Reported) -> (String, bool) {
    match r {
        Reported::Ok { output, replayed } => (output.clone(), *replayed),
        Reported::Err { message, .. } => panic!("the call failed: {message}"),
    }
}

#[test]
fn eight_processes_one_key_run_the_body_once_and_all_return_its_output() {
    let work = tempfile::tempdir().unwrap();
    let db = work.path().join("idemkit.db");
    let go = work.path().join("go");
    let children: Vec<Child> = (0..8)
        .map(|_| {
            child_command(work.path(), Hang::Nowhere, Duration::from_secs(30))
                .env("IDEMKIT_DB", &db)
                .env(support::GO, &go)
                .spawn()
                .unwrap()
        })
        .collect();
    std::fs::write(&go, b"").unwrap(); // All eight call at once.
    let results: Vec<Reported> = children
        .into_iter()
        .map(|c| reported(&c.wait_with_output().unwrap()))
        .collect();

    assert_eq!(
        lines(&body_log(work.path())).len(),
        1,
        "the body ran exactly once in all processes"
    );
    assert_eq!(lines(&ledger(work.path())).len(), 1, "one effect");
    let first = ok(&results[0]).0;
    assert!(first.starts_with("order 42 shipped: receipt-"), "{first}");
    for r in &results {
        assert_eq!(ok(r).0, first, "every process returns the same output");
    }
    assert_eq!(
        results.iter().filter(|r| ok(r).1).count(),
        7,
        "seven replays of the one run"
    );
}

#[test]
fn killed_inside_the_body_the_next_process_takes_over_with_the_same_key_and_the_provider_dedups() {
    let work = tempfile::tempdir().unwrap();
    let db = work.path().join("idemkit.db");
    let first = child_command(work.path(), Hang::AfterEffect, LEASE)
        .env("IDEMKIT_DB", &db)
        .spawn()
        .unwrap();
    wait_for(&work.path().join("effect_made"));
    kill(first); // The effect was made; the outcome was never recorded.

    let out = child_command(work.path(), Hang::Nowhere, LEASE)
        .env("IDEMKIT_DB", &db)
        .output()
        .unwrap();
    let (output, replayed) = ok(&reported(&out));

    let bodies = lines(&body_log(work.path()));
    assert_eq!(
        bodies.len(),
        2,
        "the body ran again after the lease expired: {bodies:?}"
    );
    let keys: Vec<&str> = bodies
        .iter()
        .map(|l| l.split(' ').nth(1).unwrap())
        .collect();
    assert_eq!(keys[0], keys[1], "with the same key");
    assert!(!replayed, "nothing was recorded to replay");
    assert_eq!(
        lines(&ledger(work.path())).len(),
        1,
        "the provider made exactly one effect"
    );
    let first_pid = bodies[0].split(' ').next().unwrap();
    assert_eq!(
        output,
        format!("order 42 shipped: receipt-{first_pid}"),
        "the provider's first receipt"
    );
}

#[test]
fn killed_after_the_outcome_was_recorded_the_restarted_caller_gets_it_without_running_the_body() {
    let work = tempfile::tempdir().unwrap();
    let db = work.path().join("idemkit.db");
    let mut first = child_command(work.path(), Hang::AfterRecord, LEASE)
        .env("IDEMKIT_DB", &db)
        .spawn()
        .unwrap();
    wait_for(&work.path().join("recorded"));
    let stdout = first.stdout.take().unwrap();
    kill(first);
    let first_out = std::io::read_to_string(stdout).unwrap();

    let out = child_command(work.path(), Hang::Nowhere, LEASE)
        .env("IDEMKIT_DB", &db)
        .output()
        .unwrap();
    let (output, replayed) = ok(&reported(&out));

    assert!(replayed, "the stored outcome is replayed");
    assert!(
        first_out.contains(&format!("\"ok\":\"{output}\"")),
        "the same output as the killed run: {first_out}"
    );
    assert_eq!(
        lines(&body_log(work.path())).len(),
        1,
        "the body did not run again"
    );
    assert_eq!(lines(&ledger(work.path())).len(), 1);
}

#[test]
fn outcomes_recorded_by_one_process_are_replayed_to_a_later_one_through_the_default_path() {
    let work = tempfile::tempdir().unwrap();
    // No IDEMKIT_DB: the default store opens at ./.idemkit/idemkit.db under the working directory.
    let run = || {
        child_command(work.path(), Hang::Nowhere, LEASE)
            .current_dir(work.path())
            .output()
            .unwrap()
    };
    let first = run();
    assert!(first.status.success());
    assert!(
        work.path().join(".idemkit/idemkit.db").is_file(),
        "the default store was created where documented"
    );
    let (first_output, first_replayed) = ok(&reported(&first));
    assert!(!first_replayed);
    // Issue 16: where the default store is, said once on stderr, without a tracing subscriber.
    let said = String::from_utf8_lossy(&first.stderr);
    let expected = format!(
        "idemkit: no runtime installed; recording outcomes in {}",
        std::fs::canonicalize(work.path())
            .unwrap()
            .join(".idemkit/idemkit.db")
            .display()
    );
    assert_eq!(
        said.matches("idemkit: no runtime installed").count(),
        1,
        "{said}"
    );
    assert!(said.contains(&expected), "{said}");

    let later = run();
    let (output, replayed) = ok(&reported(&later));
    assert_eq!(
        (output, replayed),
        (first_output, true),
        "the later process replays the recorded outcome"
    );
    assert_eq!(
        lines(&body_log(work.path())).len(),
        1,
        "the body ran once in all"
    );
}

/// Issue 51 #7: under a program's `tracing` subscriber (INFO and above to stderr), a new default
/// store says where it is once (not once on stderr and again through the subscriber), and its
/// schema migrations are not at INFO.
#[test]
fn finding7_a_new_default_store_says_where_it_is_once_and_migrates_quietly() {
    let work = tempfile::tempdir().unwrap();
    let out = child_command(work.path(), Hang::Nowhere, LEASE)
        .current_dir(work.path())
        .env(support::LOG_TO_STDERR, "1")
        .output()
        .unwrap();
    assert!(out.status.success());
    let (_, replayed) = ok(&reported(&out));
    assert!(!replayed);
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        said.matches("no runtime installed").count(),
        1,
        "said once: {said}"
    );
    assert!(
        said.lines()
            .any(|l| l.starts_with("INFO") && l.contains("no runtime installed")),
        "through the subscriber: {said}"
    );
    assert!(!said.contains("schema migrated"), "{said}");
}
