//! The logic of the example agents, asserted: the lost-response table (idemkit charges once in
//! every scenario; the naive loop charges more where a lost response was retried), and the
//! crash-and-replay agent (every effect exactly once across SIGKILLs).

#[path = "../examples/agent/mod.rs"]
mod agent;

use agent::crash::{Crashes, crash_runs, is_child};

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
