//! What the command's tests share: running the built `idemkit`, an agent that runs real tools
//! against a store, and the checks every store passes through the command.
#![allow(dead_code)] // Each test file uses part of it.

use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use idem_runtime::store::{ClaimRequest, LeaseToken, OperationIds};
use idem_runtime::{
    CallOutcome, Classify, Error, Failure, Fingerprint, Idem, IdempotencyKey, Records, Store, Tool,
    observe,
};

/// Runs `idemkit args…` with `env` set (and `IDEMKIT_STORE`/`IDEMKIT_DB` unset unless given).
pub fn idemkit(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_idemkit"));
    cmd.args(args)
        .env_remove("IDEMKIT_STORE")
        .env_remove("IDEMKIT_DB");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("idemkit runs")
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `idemkit args…`, which must exit with `code`.
pub fn expect(args: &[&str], code: i32) -> Output {
    let out = idemkit(args, &[]);
    assert_eq!(
        out.status.code(),
        Some(code),
        "idemkit {args:?}\nstdout: {}\nstderr: {}",
        stdout(&out),
        stderr(&out)
    );
    out
}

#[path = "../../../idem-runtime/tests/servers/url.rs"]
mod url;
#[allow(unused_imports)] // Only the server tests read a URL.
pub use url::server_url;

#[derive(Debug)]
pub struct E(pub String);
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

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Receipt {
    pub charge_id: String,
    pub cents: u64,
}

pub fn key(tool: &str, order: u64) -> IdempotencyKey {
    IdempotencyKey::derive(tool, &[("order", &order)])
}

/// An agent with the tools `charge` and `refund`, counting its bodies' runs.
pub struct Agent {
    pub idem: Idem,
    pub runs: Arc<AtomicU32>,
}

impl Agent {
    pub fn new(store: impl Store + OperationIds) -> Self {
        Agent {
            idem: Idem::new(store),
            runs: Arc::default(),
        }
    }

    /// Runs `tool` for `order`, kept for `ttl`.
    pub async fn call(&self, tool: &str, order: u64, ttl: Duration) -> (Receipt, CallOutcome) {
        let runs = Arc::clone(&self.runs);
        let (result, info) = observe(
            Tool::new(tool)
                .idem(&self.idem)
                .lease(ttl.min(Duration::from_secs(10)))
                .ttl(ttl)
                .side_effect(&[("order", &order)], &4200u64, move |_key| {
                    runs.fetch_add(1, Ordering::SeqCst);
                    async move {
                        Ok::<_, E>(Receipt {
                            charge_id: format!("ch_{order}"),
                            cents: 4200,
                        })
                    }
                }),
        )
        .await;
        (result.unwrap(), info.unwrap().outcome)
    }

    pub fn runs(&self) -> u32 {
        self.runs.load(Ordering::SeqCst)
    }
}

pub const DAY: Duration = Duration::from_secs(86_400);

/// Every subcommand against `store`, which `at` (the command's store options) names: records
/// made by real tools, and a call in flight (a live lease).
pub async fn every_subcommand<S: Store + OperationIds + Records + Clone>(store: S, at: &[&str]) {
    let agent = Agent::new(store.clone());
    let run = |args: &[&str], code: i32| {
        let all: Vec<&str> = args.iter().chain(at).copied().collect();
        expect(&all, code)
    };
    // Issue 33: an operation's id, read by name, never minted.
    let op = store
        .operation_id("plan-42/step-3", uuid::Uuid::new_v4())
        .await
        .unwrap();
    assert_eq!(
        stdout(&run(&["key", "--operation", "plan-42/step-3"], 0)),
        format!("{op}\n")
    );
    run(&["key", "--operation", "plan-42/step-404"], 1);
    assert_eq!(store.operation("plan-42/step-404").await.unwrap(), None);
    agent.call("charge", 1, DAY).await;
    tokio::time::sleep(Duration::from_millis(15)).await;
    agent.call("charge", 2, DAY).await;
    agent.call("refund", 3, Duration::from_millis(50)).await;
    tokio::time::sleep(Duration::from_millis(15)).await;
    // A call in flight: its holder's lease is live for an hour.
    let in_flight = ClaimRequest::new(
        key("charge", 4),
        "charge",
        Fingerprint::of(&4200u64).unwrap(),
        LeaseToken::new(),
        Duration::from_secs(3600),
        DAY,
    );
    store.claim(&in_flight).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await; // refund 3 has expired
    let (k1, k2, k3, k4) = (
        key("charge", 1).to_string(),
        key("charge", 2).to_string(),
        key("refund", 3).to_string(),
        key("charge", 4).to_string(),
    );

    // list: what ran, newest first; the completed record past its ttl is a tombstone (S33).
    let table = stdout(&run(&["list"], 0));
    assert!(table.starts_with("KEY"), "{table}");
    for k in [&k1, &k2, &k3, &k4] {
        assert!(table.contains(k.as_str()), "{k} listed:\n{table}");
    }
    assert!(
        table
            .lines()
            .any(|l| l.contains(&k3) && l.contains("tombstone")),
        "a completed record past its ttl is listed as a tombstone:\n{table}"
    );
    let listed: serde_json::Value =
        serde_json::from_str(&stdout(&run(&["list", "--json"], 0))).unwrap();
    let keys: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, [&k4, &k3, &k2, &k1]);
    assert_eq!(listed[1]["state"], "tombstone");
    assert_eq!(listed[2]["outcome"]["charge_id"], "ch_2");
    assert_eq!(listed[0]["state"], "running");
    let running: serde_json::Value =
        serde_json::from_str(&stdout(&run(&["list", "--json", "--state", "running"], 0))).unwrap();
    assert_eq!(running.as_array().unwrap().len(), 1);
    let old: serde_json::Value =
        serde_json::from_str(&stdout(&run(&["list", "--json", "--older-than", "1h"], 0))).unwrap();
    assert_eq!(old, serde_json::json!([]));
    let one: serde_json::Value = serde_json::from_str(&stdout(&run(
        &["list", "--json", "--tool", "charge", "--limit", "1"],
        0,
    )))
    .unwrap();
    assert_eq!(one[0]["key"], k4.as_str());

    // show: the outcome as pretty JSON.
    let shown = stdout(&run(&["show", &k1], 0));
    assert!(shown.contains("state        completed"), "{shown}");
    assert!(shown.contains("\"charge_id\": \"ch_1\""), "{shown}");
    let shown = stdout(&run(&["show", &k4], 0));
    assert!(
        shown.contains("running") && shown.contains("live for"),
        "{shown}"
    );
    let missing = run(&["show", key("charge", 99).as_ref()], 1);
    assert!(
        stderr(&missing).contains("no live record"),
        "{}",
        stderr(&missing)
    );

    // release: refused under a live lease, saying what forcing risks; applied with --force.
    let refused = run(&["release", &k4], 1);
    let why = stderr(&refused);
    assert!(why.contains("--force") && why.contains("second"), "{why}");
    assert!(
        Records::get(&store, &key("charge", 4))
            .await
            .unwrap()
            .is_some()
    );
    let released = run(&["release", "--force", &k4], 0);
    assert!(stdout(&released).contains("released"));
    assert!(
        Records::get(&store, &key("charge", 4))
            .await
            .unwrap()
            .is_none()
    );
    let completed = run(&["release", &k1], 1);
    assert!(
        stderr(&completed).contains("forget"),
        "{}",
        stderr(&completed)
    );

    // forget: the next call runs again.
    let before = agent.runs();
    assert_eq!(agent.call("charge", 1, DAY).await.1, CallOutcome::Replayed);
    run(&["forget", &k1], 0);
    assert_eq!(agent.call("charge", 1, DAY).await.1, CallOutcome::Completed);
    assert_eq!(agent.runs(), before + 1);
    run(&["forget", key("charge", 99).as_ref()], 1);

    // prune: a tombstone (S33) stays until its setting passes (400 days by default); told the
    // agent's own setting, it goes; live records never do.
    let kept = "tombstones (S33) are kept until their setting passes";
    let pruned = stdout(&run(&["prune"], 0));
    assert_eq!(pruned, format!("pruned 0 expired record(s); {kept}\n"));
    let pruned = stdout(&run(&["prune", "--tombstones", "100ms"], 0));
    assert_eq!(pruned, format!("pruned 1 expired record(s); {kept}\n"));
    assert_eq!(
        stdout(&run(&["prune", "--tombstones", "100ms"], 0)),
        format!("pruned 0 expired record(s); {kept}\n")
    );
    let left: serde_json::Value =
        serde_json::from_str(&stdout(&run(&["list", "--json"], 0))).unwrap();
    assert_eq!(left.as_array().unwrap().len(), 2, "{left}");

    // counts
    let counts: serde_json::Value =
        serde_json::from_str(&stdout(&run(&["counts", "--json"], 0))).unwrap();
    assert_eq!(
        counts,
        serde_json::json!([{"tool": "charge", "state": "completed", "records": 2}])
    );
    let table = stdout(&run(&["counts"], 0));
    assert!(
        table.contains("charge") && table.contains("completed"),
        "{table}"
    );
}

/// An ambiguous record of `charge` for `order` (a call that may have acted), as the executor
/// leaves it.
pub async fn ambiguous<S: Store>(store: &S, order: u64) {
    let token = LeaseToken::new();
    let req = ClaimRequest::new(
        key("charge", order),
        "charge",
        Fingerprint::of(&4200u64).unwrap(),
        token,
        Duration::from_secs(3600),
        DAY,
    );
    store.claim(&req).await.unwrap();
    let note = "1 attempt(s); the last failed and may have taken effect: timed out";
    let marked = store.mark_ambiguous(key("charge", order), token, note, DAY);
    assert_eq!(marked.await.unwrap(), idem_runtime::store::Written::Applied);
}

/// S24 against `store`, which `at` names: `list --state ambiguous` as the queue, `resolve`
/// applied and not-applied (kept and shown), refused under a live lease or on a completed
/// record, and `forget` refused under a live lease unless `--force`, which warns.
pub async fn s24_resolve_and_forget<S: Store + OperationIds + Records + Clone>(
    store: S,
    at: &[&str],
) {
    let agent = Agent::new(store.clone());
    let run = |args: &[&str], code: i32| {
        let all: Vec<&str> = args.iter().chain(at).copied().collect();
        expect(&all, code)
    };
    ambiguous(&store, 5).await;
    ambiguous(&store, 6).await;
    let (k5, k6, k7) = (
        key("charge", 5).to_string(),
        key("charge", 6).to_string(),
        key("charge", 7).to_string(),
    );

    // The operator's queue, saying how to settle each.
    let queue = stdout(&run(&["list", "--state", "ambiguous"], 0));
    for k in [&k5, &k6] {
        assert!(
            queue.contains(&format!("idemkit resolve {k} applied --outcome JSON"))
                && queue.contains(&format!("idemkit resolve {k} not-applied")),
            "{queue}"
        );
    }
    // Issue 44: the command says how to settle in the words every surface uses.
    let settle = idem_runtime::sentences::how_to_settle("KEY");
    assert!(queue.contains(&settle), "{settle:?} in {queue}");
    let shown = stdout(&run(&["show", &k5], 0));
    let settle = idem_runtime::sentences::how_to_settle(&k5);
    assert!(shown.contains(&settle), "{settle:?} in {shown}");
    let listed: serde_json::Value = serde_json::from_str(&stdout(&run(
        &["list", "--state", "ambiguous", "--json"],
        0,
    )))
    .unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 2);
    assert!(listed[0]["settle"]["not_applied"].is_string(), "{listed}");

    // applied: the outcome is checked to be JSON before anything is written.
    let usage = run(&["resolve", &k5, "applied"], 2);
    assert!(stderr(&usage).contains("--outcome"), "{}", stderr(&usage));
    let usage = run(
        &["resolve", &k5, "applied", "--outcome", "{charge_id: ch_op"],
        2,
    );
    assert!(stderr(&usage).contains("not JSON"), "{}", stderr(&usage));
    let usage = run(&["resolve", &k6, "not-applied", "--outcome", "{}"], 2);
    assert!(
        stderr(&usage).contains("no --outcome"),
        "{}",
        stderr(&usage)
    );
    let record = Records::get(&store, &key("charge", 5))
        .await
        .unwrap()
        .unwrap();
    assert!(
        record.resolution.is_none(),
        "nothing was written: {record:?}"
    );

    let outcome = r#"{"charge_id":"ch_op","cents":4200}"#;
    let note = "the provider's dashboard shows ch_op";
    let done = run(
        &[
            "resolve",
            &k5,
            "applied",
            "--outcome",
            outcome,
            "--note",
            note,
        ],
        0,
    );
    assert!(stdout(&done).contains("resolved"), "{}", stdout(&done));
    let runs = agent.runs();
    let (receipt, how) = agent.call("charge", 5, DAY).await;
    assert_eq!(
        (receipt.charge_id.as_str(), how, agent.runs()),
        ("ch_op", CallOutcome::Replayed, runs),
        "a repeat replays the operator's outcome"
    );
    let shown = stdout(&run(&["show", &k5], 0));
    assert!(
        shown.contains("resolved     applied at") && shown.contains(note),
        "{shown}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&run(&["show", &k5, "--json"], 0))).unwrap();
    assert_eq!(json["resolution"]["decision"], "applied");
    assert_eq!(json["resolution"]["note"], note);
    let refused = run(&["resolve", &k5, "not-applied"], 1);
    assert!(
        stderr(&refused).contains("completed"),
        "{}",
        stderr(&refused)
    );

    // not-applied: released, the decision still shown; the next call runs.
    let note = "no such charge at the provider";
    let done = run(&["resolve", &k6, "not-applied", "--note", note], 0);
    assert!(stdout(&done).contains("next call"), "{}", stdout(&done));
    let shown = stdout(&run(&["show", &k6], 0));
    assert!(
        shown.contains("released by an operator")
            && shown.contains("resolved     not-applied at")
            && shown.contains(note),
        "{shown}"
    );
    let (_, how) = agent.call("charge", 6, DAY).await;
    assert_eq!((how, agent.runs()), (CallOutcome::Completed, runs + 1));

    // A live lease: resolve refused, forget refused unless --force, which warns.
    let in_flight = ClaimRequest::new(
        key("charge", 7),
        "charge",
        Fingerprint::of(&4200u64).unwrap(),
        LeaseToken::new(),
        Duration::from_secs(3600),
        DAY,
    );
    store.claim(&in_flight).await.unwrap();
    let refused = run(&["resolve", &k7, "not-applied"], 1);
    assert!(stderr(&refused).contains("lease"), "{}", stderr(&refused));
    let refused = run(&["forget", &k7], 1);
    let why = stderr(&refused);
    assert!(why.contains("--force") && why.contains("dead"), "{why}");
    assert!(
        Records::get(&store, &key("charge", 7))
            .await
            .unwrap()
            .is_some()
    );
    let forced = run(&["forget", "--force", &k7], 0);
    assert!(
        stderr(&forced).contains("warning") && stderr(&forced).contains("may still act"),
        "{}",
        stderr(&forced)
    );
    assert!(
        Records::get(&store, &key("charge", 7))
            .await
            .unwrap()
            .is_none()
    );
}
