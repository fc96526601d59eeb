//! The logic of the example agents, asserted: the lost-response tables (idemkit charges once in
//! every scenario; the naive loop charges more where a lost response was retried; against an SMS
//! gateway that cannot deduplicate, idemkit never sends a message twice, and settles an unknown
//! outcome by asking the gateway when it has `verify`), and the crash-and-replay agent (every
//! effect exactly once across SIGKILLs).

#[path = "../examples/agent/mod.rs"]
mod agent;

use agent::crash::{Crashes, crash_runs, is_child};
use agent::sms::{Answer, render_sms, sms_table};

/// The test binary as a child agent of the SMS table's SIGKILL scenario.
fn sms_child() -> tokio::process::Command {
    let mut c = tokio::process::Command::new(std::env::current_exe().unwrap());
    c.args([
        "sms_child_entry",
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ]);
    c
}

/// The SMS table's child agent, when its SIGKILL scenario starts this binary as one.
#[tokio::test]
async fn sms_child_entry() {
    if agent::sms::is_child() {
        std::process::exit(agent::sms::child_main().await);
    }
}

#[tokio::test]
async fn lost_response_table_idemkit_charges_once_in_every_scenario() {
    let rows = agent::lost_response_table().await;
    println!("{}", agent::render(&rows));
    let by_name = |name: &str| {
        rows.iter()
            .find(|r| r.name.starts_with(name))
            .unwrap()
            .clone()
    };
    assert_eq!(rows.len(), 5);
    assert!(
        rows.iter().all(|r| r.idemkit == 1),
        "idemkit charges exactly once everywhere"
    );
    assert_eq!(by_name("the response arrives").naive, 1);
    assert_eq!(
        by_name("5xx before commit").naive,
        1,
        "nothing was committed before the retry"
    );
    assert_eq!(
        by_name("the response is lost").naive,
        2,
        "the retry after a lost response charges again"
    );
    assert_eq!(by_name("the agent re-runs").naive, 2);
    assert_eq!(
        by_name("the key is minted per attempt").naive,
        4,
        "a fresh key per attempt dedupes nothing"
    );
}

/// The lost-response example's second table (issue 31), as it prints it: for each scenario
/// against the SMS gateway that does not deduplicate, the messages sent and what the agent's last
/// run got, (a) with a naive retry loop, (b) `#[side_effect]` without `verify` (S20: an unknown
/// outcome is not sent again; the call ends `Error::Ambiguous`), (c) with `verify = was_sent`
/// (S19: the gateway is asked; applied completes the record, not applied sends once more, a
/// failed lookup keeps it ambiguous).
#[tokio::test]
async fn lost_response_sms_table_s20_never_resends_s19_verify_settles() {
    use Answer::{Ambiguous, Ok, Replayed, Resent, Verified};
    let rows = sms_table(sms_child).await;
    let table = render_sms(&rows);
    println!("{table}");
    #[rustfmt::skip]
    let expected = [
        // scenario, (a) naive, (b) no verify, (c) verify, verify asked in (c)
        ("the response arrives",                              (1, Ok), (1, Ok),        (1, Ok),        0),
        ("the response is lost after sending",                (2, Ok), (1, Ambiguous), (1, Verified),  1),
        ("503 before sending",                                (1, Ok), (1, Ok),        (1, Ok),        0),
        ("no response, nothing sent",                         (1, Ok), (0, Ambiguous), (1, Resent),    1),
        ("the agent re-runs the same step",                   (2, Ok), (1, Replayed),  (1, Replayed),  0),
        ("the response is lost, the agent re-runs the step",  (3, Ok), (1, Ambiguous), (1, Replayed),  1),
        ("the response is lost and lookups fail",             (2, Ok), (1, Ambiguous), (1, Ambiguous), 1),
        ("SIGKILL after sending, a new process replays",      (2, Ok), (1, Ambiguous), (1, Verified),  1),
    ];
    // The SIGKILL row's agents keep their records in the default SQLite store.
    let expected = &expected[..expected.len() - usize::from(!cfg!(feature = "sqlite"))];
    assert_eq!(rows.len(), expected.len(), "{table}");
    for (row, &(name, naive, no_verify, verify, asked)) in rows.iter().zip(expected) {
        assert_eq!(row.name, name);
        let got = |c: agent::sms::Cell| (c.sent, c.answer);
        assert_eq!(got(row.naive), naive, "naive loop, {name}:\n{table}");
        assert_eq!(got(row.no_verify), no_verify, "no verify, {name}:\n{table}");
        assert_eq!(got(row.verify), verify, "verify, {name}:\n{table}");
        assert_eq!(row.no_verify.checks, 0, "{name}");
        assert_eq!(row.verify.checks, asked, "verify asked, {name}:\n{table}");
        // What the agent says after an unknown outcome: never "not sent".
        match &row.no_verify_says {
            Some(says) => {
                assert_eq!(row.no_verify.answer, Ambiguous, "{name}");
                assert!(
                    says.contains("may have been sent; it was not re-sent")
                        && says.contains("idemkit resolve "),
                    "{name}: {says}"
                );
            }
            None => assert_ne!(row.no_verify.answer, Ambiguous, "{name}"),
        }
    }
    // The README's section "When the provider cannot deduplicate" quotes the table as measured.
    let readme = include_str!("../README.md");
    assert!(
        !cfg!(feature = "sqlite") || readme.contains(&table),
        "README.md's SMS table differs from the example's output; paste this one there:\n{table}"
    );
    // The table as the example prints it.
    for line in [
        "| the response is lost after sending               |           2 (ok) |             1 (Ambiguous) |     1 (ok, verified) |",
        "| no response, nothing sent                        |           1 (ok) |             0 (Ambiguous) | 1 (ok, re-sent once) |",
    ] {
        assert!(table.lines().any(|l| l == line), "no `{line}` in:\n{table}");
    }
}

/// The child agent, when the crash test below starts this binary as one.
#[tokio::test]
async fn crash_replay_child_entry() {
    if is_child() {
        std::process::exit(agent::crash::child_main().await);
    }
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_replay_every_effect_exactly_once_across_sigkills() {
    let exe = std::env::current_exe().unwrap();
    let command = || {
        let mut c = tokio::process::Command::new(&exe);
        c.args([
            "crash_replay_child_entry",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ]);
        c
    };
    let reports = crash_runs(
        command,
        Crashes {
            runs: 4,
            seed: 7,
            max_kills: 2,
            window_ms: 200,
        },
    )
    .await;
    println!("{}", agent::crash::render(&reports));
    assert_eq!(reports.len(), 4);
    for report in &reports {
        assert!(report.exactly_once(), "{report:?}");
    }
}
