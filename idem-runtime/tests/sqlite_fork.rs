//! Issue 15, finding 8: `fork()` after the SQLite store was used. The child has no connection
//! thread and must not use its parent's connection; the store notices it is in a child and
//! opens its own there. (Before: the child's calls waited 10 s and failed as unavailable, then a
//! read hung; under NORMAL it wrote through the inherited connection.)
//!
//! Alone in its binary: a fork copies only the forking thread, so the fewer threads, the better.
#![cfg(unix)]

use idem_runtime::Records;
use std::time::Duration;

use idem_runtime::store::RecordState;
use idem_runtime::{
    Classify, Error, Failure, Idem, IdempotencyKey, SqliteStore, Synchronous, Tool,
};

#[derive(Debug)]
#[allow(dead_code)] // Read through `Debug`, in the child's report.
struct E(String);

impl Classify for E {
    fn classify(&self) -> Failure {
        Failure::Permanent
    }
}

impl From<Error> for E {
    fn from(e: Error) -> Self {
        E(e.to_string())
    }
}

async fn charge(idem: &Idem, order: u64, who: &'static str) -> Result<String, E> {
    Tool::new("charge")
        .idem(idem)
        .side_effect(&[("order", &order)], &(), |_| async move {
            Ok(format!("charged by {who}"))
        })
        .await
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn a_forked_child_opens_the_store_anew_and_both_see_each_others_records() {
    for synchronous in [Synchronous::Full, Synchronous::Normal] {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::builder(dir.path().join("idemkit.db"))
            .synchronous(synchronous)
            .open()
            .unwrap();
        let store = std::sync::Arc::new(store);
        let idem = Idem::new(store.clone());
        let rt = runtime();
        assert_eq!(
            rt.block_on(charge(&idem, 1, "parent")).unwrap(),
            "charged by parent"
        );
        let report = dir.path().join("child.txt");

        // SAFETY: the child only runs this store's code on a runtime of its own and leaves
        // with `_exit`, never returning into the test harness.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                runtime().block_on(async {
                    let limit = Duration::from_secs(20);
                    let replay = tokio::time::timeout(limit, charge(&idem, 1, "child")).await;
                    let own = tokio::time::timeout(limit, charge(&idem, 2, "child")).await;
                    format!("{replay:?} | {own:?}")
                })
            }));
            let text = match outcome {
                Ok(text) => text,
                Err(_) => "the child panicked".to_owned(),
            };
            let _ = std::fs::write(&report, text);
            unsafe { libc::_exit(0) };
        }

        let mut status = 0;
        let mut waited = Duration::ZERO;
        loop {
            // SAFETY: waits for our own child.
            let done = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if done == pid {
                break;
            }
            if waited > Duration::from_secs(60) {
                unsafe { libc::kill(pid, libc::SIGKILL) };
                panic!("the forked child hung ({synchronous:?})");
            }
            std::thread::sleep(Duration::from_millis(20));
            waited += Duration::from_millis(20);
        }
        let said = std::fs::read_to_string(&report).unwrap();
        assert_eq!(
            said, "Ok(Ok(\"charged by parent\")) | Ok(Ok(\"charged by child\"))",
            "the child replays the parent's record and records its own ({synchronous:?})"
        );
        let key = IdempotencyKey::derive("charge", &[("order", &2u64)]);
        let record = rt
            .block_on(store.get(&key))
            .unwrap()
            .expect("the child's record");
        assert!(
            matches!(record.state, RecordState::Completed { .. }),
            "the parent sees the child's record ({synchronous:?})"
        );
        assert_eq!(
            rt.block_on(charge(&idem, 3, "parent")).unwrap(),
            "charged by parent"
        );
    }
}
