//! The `idemkit` command against a real SQLite file made by running real tools; and what needs
//! no store (`key`, usage errors).

mod common;

use common::*;
use idem_runtime::{CallOutcome, Records, SqliteStore};

#[test]
fn key_prints_the_golden_key_alone_on_one_line() {
    let out = expect(
        &[
            "key",
            "charge",
            "customer_id=cus_1",
            "purpose=subscription",
            "period=2026-11",
        ],
        0,
    );
    assert_eq!(stdout(&out), "32e00e40-1a53-8058-93c7-e9d1adc8ecaa\n");
    let out = expect(
        &[
            "key",
            "charge",
            "customer_id=cus_1",
            "purpose=subscription",
            "period=2026-11",
            "--tenant",
            "acme",
        ],
        0,
    );
    assert_eq!(stdout(&out), "6a1557d2-fe2a-83ea-9696-a86f7991dfbf\n");
    let out = expect(&["key", "charge", "order=int:7"], 0);
    assert_eq!(stdout(&out), format!("{}\n", key("charge", 7)));
}

#[test]
fn usage_errors_exit_2_and_say_what_to_write() {
    let out = expect(&["key", "charge", "order=itn:7"], 2);
    assert!(
        stderr(&out).contains("order=text:itn:7"),
        "{}",
        stderr(&out)
    );
    expect(&["show", "not-a-key"], 2);
    expect(&["list", "--state", "done"], 2);
    expect(&["list", "--store", "mysql://db/x"], 2);
    expect(&["frobnicate"], 2);
}

#[tokio::test]
async fn every_subcommand_on_a_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.db");
    let store = SqliteStore::open(&path).unwrap();
    let at = format!("sqlite:{}", path.display());
    every_subcommand(store, &["--store", &at]).await;
}

#[tokio::test]
async fn the_default_store_is_idemkit_db_and_a_bare_path_works() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("elsewhere.db");
    let agent = Agent::new(SqliteStore::open(&path).unwrap());
    agent.call("charge", 1, DAY).await;
    let k = key("charge", 1).to_string();
    let p = path.to_str().unwrap();
    for env in [[("IDEMKIT_DB", p)], [("IDEMKIT_STORE", p)]] {
        let out = idemkit(&["list"], &env);
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(stdout(&out).contains(&k));
    }
    let out = idemkit(&["show", &k, "--store", p], &[]);
    assert!(stdout(&out).contains("ch_1"));
}

#[tokio::test]
async fn read_commands_create_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("none").join("idemkit.db");
    let at = format!("sqlite:{}", missing.display());
    for args in [
        vec!["list"],
        vec!["counts"],
        vec!["show", "32e00e40-1a53-8058-93c7-e9d1adc8ecaa"],
    ] {
        let all: Vec<&str> = args
            .iter()
            .copied()
            .chain(["--store", at.as_str()])
            .collect();
        let out = expect(&all, 1);
        assert!(stderr(&out).contains("no store at"), "{}", stderr(&out));
    }
    assert!(!missing.exists() && !missing.parent().unwrap().exists());

    // An existing store: its file is byte for byte the same after the reads.
    let path = dir.path().join("agent.db");
    let agent = Agent::new(SqliteStore::open(&path).unwrap());
    agent.call("charge", 1, DAY).await;
    drop(agent);
    // Closed on the store's own thread: the WAL is folded into the file and removed.
    let wal = path.with_extension("db-wal");
    for _ in 0..500 {
        if !wal.exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(!wal.exists(), "the agent's store closed");
    let before = std::fs::read(&path).unwrap();
    let at = format!("sqlite:{}", path.display());
    let k = key("charge", 1).to_string();
    for args in [
        vec!["list"],
        vec!["counts"],
        vec!["show", k.as_str()],
        vec!["list", "--json"],
    ] {
        let all: Vec<&str> = args
            .iter()
            .copied()
            .chain(["--store", at.as_str()])
            .collect();
        expect(&all, 0);
    }
    assert!(
        std::fs::read(&path).unwrap() == before,
        "a read changed the file"
    );
}

#[test]
fn a_store_password_is_never_printed() {
    for url in [
        "postgres://agent:s3cret-pw@127.0.0.1:1/agents",
        "redis://:s3cret-pw@127.0.0.1:1/0",
    ] {
        let out = idemkit(&["counts"], &[("IDEMKIT_STORE", url)]);
        assert_eq!(out.status.code(), Some(1));
        let said = stderr(&out) + &stdout(&out);
        assert!(said.contains("***"), "{said}");
        assert!(!said.contains("s3cret"), "{said}");
    }
}

/// A server store's URL given to a build without that store's client says how to get one.
#[test]
fn a_server_store_left_out_of_the_build_says_which_feature_adds_it() {
    for (url, feature, built_in) in [
        (
            "postgres://agent@127.0.0.1:1/agents",
            "postgres",
            cfg!(feature = "postgres"),
        ),
        ("redis://127.0.0.1:1/0", "redis", cfg!(feature = "redis")),
    ] {
        let out = idemkit(&["counts"], &[("IDEMKIT_STORE", url)]);
        assert_eq!(out.status.code(), Some(1));
        let said = stderr(&out);
        let hint = format!("cargo install --path cli --features {feature}");
        // Built in, the store is tried (and nothing listens on port 1); left out, the hint.
        assert_eq!(said.contains(&hint), !built_in, "{said}");
    }
}

/// `list --tenant` shows only that scope's records, and `show` says the tenant.
#[tokio::test]
async fn list_by_tenant_shows_only_that_tenants_records() {
    use std::time::Duration;

    use idem_runtime::store::{ClaimRequest, LeaseToken};
    use idem_runtime::{Fingerprint, Store};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("records.db");
    let store = SqliteStore::open(&path).unwrap();
    let hour = Duration::from_secs(3600);
    for (order, tenant) in [(1, Some("acme")), (2, Some("globex")), (3, None)] {
        let req = ClaimRequest::new(
            key("charge", order),
            "charge",
            Fingerprint::of(&4200u64).unwrap(),
            LeaseToken::new(),
            hour,
            hour,
        )
        .with_tenant(tenant.map(Into::into));
        store.claim(&req).await.unwrap();
    }
    let at = ["--store", path.to_str().unwrap()];
    let listed = |tenant: &str| -> Vec<String> {
        let out = expect(&["list", "--json", "--tenant", tenant, at[0], at[1]], 0);
        let all: Vec<serde_json::Value> = serde_json::from_str(&stdout(&out)).unwrap();
        all.iter()
            .map(|r| {
                assert_eq!(r["tenant"], tenant, "{r}");
                r["key"].as_str().unwrap().to_owned()
            })
            .collect()
    };
    assert_eq!(listed("acme"), [key("charge", 1).to_string()]);
    assert_eq!(listed("globex"), [key("charge", 2).to_string()]);
    assert!(listed("initech").is_empty());
    let shown = stdout(&expect(
        &["show", key("charge", 1).as_ref(), at[0], at[1]],
        0,
    ));
    assert!(
        shown
            .lines()
            .any(|l| l.starts_with("tenant") && l.ends_with("acme")),
        "{shown}"
    );
}

/// S24 on a SQLite file: `resolve`, the queue, `show` of a decision, `forget --force`.
#[tokio::test]
async fn s24_resolve_settles_ambiguous_records_on_a_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.db");
    let store = SqliteStore::open(&path).unwrap();
    let at = format!("sqlite:{}", path.display());
    s24_resolve_and_forget(store, &["--store", &at]).await;
}

/// Issue 33 #8: the manifest an application writes (`idemkit::tools_manifest()`), as it reads.
const MANIFEST: &str = r#"{
  "version": 1,
  "tools": [
    {"name": "charge", "kind": "side_effect", "key_fields": [
      {"name": "customer_id", "type": "&str", "kind": "text"},
      {"name": "purpose", "type": "&str", "kind": "text"},
      {"name": "period", "type": "&str", "kind": "text"}]},
    {"name": "send_apology", "kind": "side_effect", "key_fields": [
      {"name": "step", "type": "idem_runtime::key::operation::OperationId", "kind": "uuid"}]},
    {"name": "refund", "kind": "side_effect", "key_fields": [
      {"name": "order", "type": "u64", "kind": "int"}]},
    {"name": "balance", "kind": "read_only", "key_fields": []}
  ]
}"#;

#[test]
fn issue33_8_key_check_names_the_unknown_missing_or_misplaced_field_and_prints_no_key() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("tools.json");
    std::fs::write(&manifest, MANIFEST).unwrap();
    let check = manifest.to_str().unwrap();

    // The fields as the tool has them: the golden key.
    let out = expect(
        &[
            "key",
            "charge",
            "customer_id=cus_1",
            "purpose=subscription",
            "period=2026-11",
            "--check",
            check,
        ],
        0,
    );
    assert_eq!(stdout(&out), "32e00e40-1a53-8058-93c7-e9d1adc8ecaa\n");

    let refused = |args: &[&str]| -> String {
        let mut all = vec!["key"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--check", check]);
        let out = expect(&all, 2);
        assert_eq!(stdout(&out), "", "no key printed");
        stderr(&out)
    };
    // Another order: another key, silently, without --check.
    let why = refused(&[
        "charge",
        "purpose=subscription",
        "customer_id=cus_1",
        "period=2026-11",
    ]);
    assert!(
        why.contains("out of order")
            && why.contains("`purpose` is given where `customer_id` goes")
            && why.contains("customer_id, purpose, period"),
        "{why}"
    );
    let why = refused(&[
        "charge",
        "custmer_id=cus_1",
        "purpose=subscription",
        "period=2026-11",
    ]);
    assert!(
        why.contains("`custmer_id` is not a key field of `charge` (did you mean `customer_id`?)")
            && why.contains("key field `customer_id` of `charge` is missing"),
        "{why}"
    );
    let why = refused(&["charge", "customer_id=cus_1", "purpose=subscription"]);
    assert!(
        why.contains("key field `period` of `charge` is missing"),
        "{why}"
    );
    let why = refused(&[
        "charge",
        "customer_id=cus_1",
        "purpose=subscription",
        "period=2026-11",
        "amount=5",
    ]);
    assert!(
        why.contains("`amount` is not a key field of `charge`"),
        "{why}"
    );
    // A number typed as text would derive another key.
    let why = refused(&["refund", "order=7"]);
    assert!(
        why.contains(
            "key field `order` is an int in `refund` (`u64`), not text: write order=int:42"
        ),
        "{why}"
    );
    let why = refused(&["refnd", "order=int:7"]);
    assert!(
        why.contains("no tool is named `refnd` in the manifest (did you mean `refund`?)"),
        "{why}"
    );
    let why = refused(&["balance"]);
    assert!(
        why.contains("`balance` is read-only: it has no key"),
        "{why}"
    );
    expect(&["key", "refund", "order=int:7", "--check", check], 0);
}

#[tokio::test]
async fn issue33_1_key_resolves_an_operation_name_to_its_id_and_key_from_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.db");
    let at = format!("sqlite:{}", path.display());
    let id = {
        let idem = idem_runtime::Idem::new(SqliteStore::open(&path).unwrap());
        idem.operation("plan-42/step-3").await.unwrap()
    };
    let out = expect(&["key", "--operation", "plan-42/step-3", "--store", &at], 0);
    assert_eq!(stdout(&out), format!("{id}\n"));
    let out = expect(
        &[
            "key",
            "send_apology",
            "step=op:plan-42/step-3",
            "--store",
            &at,
        ],
        0,
    );
    let key = idem_runtime::IdempotencyKey::derive("send_apology", &[("step", &id)]);
    assert_eq!(stdout(&out), format!("{key}\n"));
    // The same through the uuid it printed.
    let out = expect(&["key", "send_apology", &format!("step=uuid:{id}")], 0);
    assert_eq!(stdout(&out), format!("{key}\n"));
    // An operation never named is not minted by the command.
    let out = expect(&["key", "--operation", "plan-42/step-9", "--store", &at], 1);
    assert!(
        stderr(&out).contains("no operation is named `plan-42/step-9`"),
        "{}",
        stderr(&out)
    );
    let out = expect(&["key", "--operation", "plan-42/step-9", "--store", &at], 1);
    assert!(
        stderr(&out).contains("nothing was minted"),
        "{}",
        stderr(&out)
    );
}

/// S18: operation ids are scoped to tenants as keys are: `key --operation NAME --tenant T` prints
/// tenant T's id, `key TOOL FIELD=op:NAME --tenant T` the key T's call has, and an operation T
/// never named is not found (not another tenant's, not the one without a tenant).
#[tokio::test]
async fn s18_key_operation_with_a_tenant_prints_that_tenants_id_and_key() {
    use idem_runtime::as_tenant;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.db");
    let at = format!("sqlite:{}", path.display());
    let (acme, unscoped) = {
        let idem = idem_runtime::Idem::new(SqliteStore::open(&path).unwrap());
        let acme = as_tenant("acme", idem.operation("plan-42/step-3"))
            .await
            .unwrap();
        (acme, idem.operation("plan-42/step-3").await.unwrap())
    };
    assert_ne!(acme, unscoped);
    let op = |tenant: &[&str], code| {
        let mut args = vec!["key", "--operation", "plan-42/step-3", "--store", &at];
        args.extend_from_slice(tenant);
        expect(&args, code)
    };
    assert_eq!(stdout(&op(&["--tenant", "acme"], 0)), format!("{acme}\n"));
    assert_eq!(stdout(&op(&[], 0)), format!("{unscoped}\n"));
    let out = op(&["--tenant", "globex"], 1);
    assert!(
        stderr(&out).contains("no operation is named `plan-42/step-3` for tenant `globex`"),
        "{}",
        stderr(&out)
    );
    let out = expect(
        &[
            "key",
            "send_apology",
            "step=op:plan-42/step-3",
            "--tenant",
            "acme",
            "--store",
            &at,
        ],
        0,
    );
    let key =
        idem_runtime::IdempotencyKey::derive("send_apology", &[("step", &acme)]).for_tenant("acme");
    assert_eq!(stdout(&out), format!("{key}\n"));
}

/// S28: a settler's decision is kept with the record and shown by `show` (as S24's are): the
/// decision, when, and the settler's note, in the text and in `--json`; `list` says the record
/// was resolved.
#[tokio::test]
async fn s28_show_displays_a_settlers_decision() {
    use idem_runtime::Verified;
    use idem_runtime::settle::{Pass, Settled, Settler};
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.db");
    let at = format!("sqlite:{}", path.display());
    let store = Arc::new(SqliteStore::open(&path).unwrap());
    ambiguous(&*store, 11).await;
    ambiguous(&*store, 12).await;
    let (applied, not_applied) = (key("charge", 11), key("charge", 12));
    let settler = Settler::new(store.clone()).verify("charge", move |k| async move {
        Ok::<_, String>(if k == applied {
            Verified::Applied(serde_json::json!({"charge_id": "ch_settled"}))
        } else {
            Verified::NotApplied
        })
    });
    let report = settler.run_once(&Pass::new()).await.unwrap();
    let mut settled: Vec<_> = report.records.iter().map(|r| (r.0, r.2.clone())).collect();
    settled.sort_by_key(|r| r.0.to_string());
    let mut expected = vec![
        (applied, Settled::Applied),
        (not_applied, Settled::NotApplied),
    ];
    expected.sort_by_key(|r| r.0.to_string());
    assert_eq!(settled, expected);
    drop(store);

    let shown = stdout(&expect(&["show", applied.as_str(), "--store", &at], 0));
    let line = |name: &str| {
        shown
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no `{name}` line in:\n{shown}"))
            .to_owned()
    };
    assert!(line("resolved").contains("applied at "), "{shown}");
    assert!(
        line("resolve note")
            .contains("idemkit settler: the tool's verify found the effect happened"),
        "{shown}"
    );
    assert!(
        shown.contains("ch_settled"),
        "the outcome verify found: {shown}"
    );

    let json: serde_json::Value = serde_json::from_str(&stdout(&expect(
        &["show", not_applied.as_str(), "--json", "--store", &at],
        0,
    )))
    .unwrap();
    assert_eq!(json["resolution"]["decision"], "not-applied", "{json}");
    assert_eq!(json["live"], false, "released: {json}");
    assert_eq!(
        (&json["state"], &json["lease"]),
        (&serde_json::json!("released"), &serde_json::Value::Null),
        "shown as released, not as the settler's running claim: {json}"
    );
    assert!(
        json["resolution"]["note"]
            .as_str()
            .unwrap()
            .starts_with("idemkit settler: the tool's verify found the effect did not happen"),
        "{json}"
    );
    let shown = stdout(&expect(&["show", not_applied.as_str(), "--store", &at], 0));
    assert!(
        shown.contains("released by the settler (its tool's verify)")
            && shown.contains("resolved     not-applied at"),
        "{shown}"
    );
    let listed = stdout(&expect(&["list", "--store", &at], 0));
    assert!(listed.contains("resolved applied"), "{listed}");
}

/// Issue 39 #6: `resolve … applied --outcome` is checked against the outcomes the tool stored
/// itself: one of another shape (`{"id": 1}` for a receipt) is refused, nothing written, saying
/// what it lacks; `--unchecked` writes it with a warning; a right one is written; with nothing
/// to compare with, a warning says the shape was not checked.
#[tokio::test]
async fn issue39_6_resolve_checks_an_outcome_against_the_tools_own_outcomes() {
    let file = StoreFile::new();
    let (store, run) = (file.store.clone(), |args: &[&str], code| {
        file.run(args, code)
    });

    // Nothing of the tool completed yet: written, with a warning that nothing was checked.
    ambiguous(&store, 1).await;
    let k1 = key("charge", 1).to_string();
    let out = run(&["resolve", &k1, "applied", "--outcome", r#"{"id": 1}"#], 0);
    assert!(
        stderr(&out).contains("was not checked") && stderr(&out).contains("`charge`"),
        "{}",
        stderr(&out)
    );

    // A call of the tool completes: its outcome is what the next resolve is compared with.
    let agent = Agent::new(store.clone());
    agent.call("charge", 2, DAY).await;
    ambiguous(&store, 3).await;
    let k3 = key("charge", 3).to_string();
    let out = run(&["resolve", &k3, "applied", "--outcome", r#"{"id": 1}"#], 1);
    let why = stderr(&out);
    assert!(
        why.contains("refused")
            && why.contains("`cents`, `charge_id`")
            && why.contains("`id`")
            && why.contains("Nothing was written"),
        "{why}"
    );
    let record = Records::get(&store, &key("charge", 3))
        .await
        .unwrap()
        .unwrap();
    assert!(
        record.resolution.is_none(),
        "nothing was written: {record:?}"
    );

    let out = run(
        &[
            "resolve",
            &k3,
            "applied",
            "--outcome",
            r#"{"charge_id": "ch_op", "cents": 12.5}"#,
        ],
        1,
    );
    assert!(stderr(&out).contains("`cents` is 12.5"), "{}", stderr(&out));

    // The right shape is written, and a repeat replays it.
    let out = run(
        &[
            "resolve",
            &k3,
            "applied",
            "--outcome",
            r#"{"charge_id": "ch_op", "cents": 4200}"#,
        ],
        0,
    );
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));
    let (receipt, how) = agent.call("charge", 3, DAY).await;
    assert_eq!(
        (receipt.charge_id.as_str(), how),
        ("ch_op", CallOutcome::Replayed)
    );

    // --unchecked writes the wrong shape, saying so.
    ambiguous(&store, 4).await;
    let k4 = key("charge", 4).to_string();
    let out = run(
        &[
            "resolve",
            &k4,
            "applied",
            "--outcome",
            r#"{"id": 1}"#,
            "--unchecked",
        ],
        0,
    );
    assert!(
        stderr(&out).contains("written unchecked"),
        "{}",
        stderr(&out)
    );
}

/// S28 for an operator's cron: `idemkit settle` (no verify functions: the program's own
/// `Settler` has them) changes nothing, exits 0 when nothing waits and 4 when records kept as
/// ambiguous wait for a verify function or an operator, says where they are settled, and keeps
/// to `--tool` and `--tenant`.
#[tokio::test]
async fn s28_idemkit_settle_counts_what_waits_for_cron_and_changes_nothing() {
    let file = StoreFile::new();
    let (store, run) = (file.store.clone(), |args: &[&str], code| {
        file.run(args, code)
    });
    let out = run(&["settle"], 0);
    assert!(
        stdout(&out).contains("changed 0 of 0 record(s)"),
        "{}",
        stdout(&out)
    );

    ambiguous(&store, 1).await;
    ambiguous(&store, 2).await;
    let out = run(&["settle"], 4);
    assert!(
        stdout(&out).contains("changed 0 of 2 record(s)"),
        "it changed nothing, and says so: {}",
        stdout(&out)
    );
    assert!(
        stdout(&out).contains("2 without a verify function"),
        "{}",
        stdout(&out)
    );
    assert!(
        stderr(&out).contains("Settler::run_cli")
            && stderr(&out).contains("tools: charge)")
            && stderr(&out).contains("The host's settler task verifies")
            && stderr(&out).contains("0 of these 2 record(s) keep them"),
        "{}",
        stderr(&out)
    );
    let out = run(&["settle", "--dry-run"], 4);
    assert!(
        stdout(&out).contains("dry run: 2 record(s)"),
        "{}",
        stdout(&out)
    );
    run(&["settle", "--tool", "refund"], 0);
    run(&["settle", "--tenant", "acme"], 0);
    for order in [1, 2] {
        let record = Records::get(&store, &key("charge", order))
            .await
            .unwrap()
            .unwrap();
        assert!(
            matches!(
                record.state,
                idem_runtime::store::RecordState::Ambiguous { .. }
            ) && record.resolution.is_none(),
            "nothing was changed: {record:?}"
        );
    }
}

/// S31 (issue 52 #3): a caller whose process died leaves its record Running with its lease
/// lapsed; `idemkit settle` reports it (exit 4) and `list --state ambiguous` lists it without
/// any caller coming back, and `show` says its holder's lease lapsed. Failed before: `settle`
/// exited 0, nothing waiting.
#[tokio::test]
async fn s31_idemkit_settle_reports_a_dead_callers_record() {
    use idem_runtime::store::{ClaimRequest, LeaseToken, RecordState};
    use idem_runtime::{Fingerprint, Store};

    let file = StoreFile::new();
    let (store, run) = (file.store.clone(), |args: &[&str], code| {
        file.run(args, code)
    });
    let req = ClaimRequest::new(
        key("charge", 31),
        "charge",
        Fingerprint::of(&4200u64).unwrap(),
        LeaseToken::new(),
        std::time::Duration::from_millis(100),
        DAY,
    );
    store.claim(&req).await.unwrap();
    // The caller dies: its lease lapses (polled, at most 10 s).
    for _ in 0..500 {
        let record = Records::get(&store, &key("charge", 31)).await.unwrap();
        if matches!(record.unwrap().state, RecordState::Ambiguous { .. }) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let k = key("charge", 31).to_string();
    let out = run(&["settle"], 4);
    assert!(stdout(&out).contains('1'), "{}", stdout(&out));
    let out = run(&["list", "--state", "ambiguous"], 0);
    assert!(stdout(&out).contains(&k), "{}", stdout(&out));
    let out = run(&["show", &k], 0);
    assert!(stdout(&out).contains("lease lapsed"), "{}", stdout(&out));
    // Released, the next call would run the operation blind: refused as an ambiguous record is,
    // pointing to how it is settled; `--force` is the operator's word that nothing ran.
    let out = run(&["release", &k], 1);
    assert!(
        stderr(&out).contains("ambiguous") && stderr(&out).contains("resolve"),
        "{}",
        stderr(&out)
    );
    assert!(
        Records::get(&store, &key("charge", 31))
            .await
            .unwrap()
            .is_some()
    );
    run(&["release", "--force", &k], 0);
    assert!(
        Records::get(&store, &key("charge", 31))
            .await
            .unwrap()
            .is_none()
    );
}

/// S32 (issue 52 #2): `show`'s "made" is when the operation was first made, not the time a
/// caller's takeover restarted the record, and it shows the Unknown answers of verify counted
/// with the record. Failed before: "made" was the takeover's time.
#[tokio::test]
async fn s32_show_says_when_the_operation_was_first_made_and_its_unknown_answers() {
    use idem_runtime::store::{ClaimRequest, LeaseToken};
    use idem_runtime::{Fingerprint, Store};

    let file = StoreFile::new();
    let (store, run) = (file.store.clone(), |args: &[&str], code| {
        file.run(args, code)
    });
    ambiguous(&store, 32).await;
    let made = Records::get(&store, &key("charge", 32))
        .await
        .unwrap()
        .unwrap()
        .created;
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    // A caller takes it over, its verify answers Unknown, and it keeps it ambiguous.
    let token = LeaseToken::new();
    let req = ClaimRequest::new(
        key("charge", 32),
        "charge",
        Fingerprint::of(&4200u64).unwrap(),
        token,
        std::time::Duration::from_secs(60),
        DAY,
    );
    store.claim(&req).await.unwrap();
    let marked = store.mark_unknown(key("charge", 32), token, "verify could not tell", DAY);
    assert_eq!(marked.await.unwrap(), idem_runtime::store::Written::Applied);
    let record = Records::get(&store, &key("charge", 32))
        .await
        .unwrap()
        .unwrap();
    assert_ne!(record.created, made, "the takeover restarted `created`");
    let k = key("charge", 32).to_string();
    let shown = stdout(&run(&["show", &k], 0));
    let made_line = shown
        .lines()
        .find(|l| l.starts_with("made "))
        .expect("a made line")
        .to_owned();
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&run(&["show", &k, "--json"], 0))).unwrap();
    assert_eq!(
        made_line.split_whitespace().last(),
        json["first_made"].as_str(),
        "{shown}"
    );
    assert_ne!(json["first_made"], json["created"], "{json}");
    assert!(
        shown.contains("verify answered unknown 1 time(s)"),
        "{shown}"
    );
    assert_eq!(json["unknowns"], 1, "{json}");
}

/// A new SQLite store in a temporary directory, and the `idemkit` command run against it.
struct StoreFile {
    _dir: tempfile::TempDir,
    store: SqliteStore,
    at: String,
}

impl StoreFile {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.db");
        StoreFile {
            store: SqliteStore::open(&path).unwrap(),
            at: format!("sqlite:{}", path.display()),
            _dir: dir,
        }
    }

    /// `idemkit ARGS --store THIS`, which must exit `code`.
    fn run(&self, args: &[&str], code: i32) -> std::process::Output {
        let all: Vec<&str> = args
            .iter()
            .copied()
            .chain(["--store", self.at.as_str()])
            .collect();
        expect(&all, code)
    }
}

/// S34: an ambiguous record never expires by time: `show` and `list` say so ("never"), `--json`
/// gives `expires_in_ms: null`, and `idemkit settle` says how long the oldest unknown outcome
/// has waited for a decision.
#[tokio::test]
async fn s34_show_list_and_settle_say_an_ambiguous_record_never_expires() {
    let file = StoreFile::new();
    let (store, run) = (file.store.clone(), |args: &[&str], code| {
        file.run(args, code)
    });
    ambiguous(&store, 34).await;
    let k = key("charge", 34).to_string();
    let out = run(&["show", &k], 0);
    assert!(
        stdout(&out)
            .contains("expires in   never: kept until it completes or a decision settles it"),
        "{}",
        stdout(&out)
    );
    let out = run(&["show", &k, "--json"], 0);
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(json["expires_in_ms"], serde_json::Value::Null, "{json}");
    let out = run(&["list"], 0);
    assert!(stdout(&out).contains("never"), "{}", stdout(&out));
    let out = run(&["settle"], 4);
    assert!(
        stdout(&out).contains("the oldest unknown outcome has waited") && stdout(&out).contains(&k),
        "{}",
        stdout(&out)
    );
}

/// S33: a completed record past its ttl is a tombstone: `list --state tombstone` lists it,
/// `show` says when it was done and that its result is no longer kept (`--json`: state
/// `tombstone`, `done`), and `forget` lets the next call run it again: the tombstone no longer
/// counts (not listed), and `show` says an operator forgot it, when, with the `--note`, and when it was done
/// (`--json`: state `forgotten`, the decision `forgotten` and its time).
#[tokio::test]
async fn s33_list_show_and_forget_a_tombstone() {
    use idem_runtime::store::{ClaimRequest, LeaseToken, Outcome, Written};
    use idem_runtime::{Fingerprint, Store};
    let file = StoreFile::new();
    let (store, run) = (file.store.clone(), |args: &[&str], code| {
        file.run(args, code)
    });
    let token = LeaseToken::new();
    let short = std::time::Duration::from_millis(50);
    let req = ClaimRequest::new(
        key("charge", 33),
        "charge",
        Fingerprint::of(&4200u64).unwrap(),
        token,
        short,
        short,
    );
    store.claim(&req).await.unwrap();
    let done = Outcome::from(&br#"{"charge_id":"ch_33","cents":4200}"#[..]);
    let completed = store.complete(key("charge", 33), token, done, short);
    assert_eq!(completed.await.unwrap(), Written::Applied);
    tokio::time::sleep(short * 4).await;
    let k = key("charge", 33).to_string();

    let out = run(&["list", "--state", "tombstone"], 0);
    assert!(
        stdout(&out).contains(&k) && stdout(&out).contains("tombstone"),
        "{}",
        stdout(&out)
    );
    let out = run(&["show", &k], 0);
    assert!(
        stdout(&out).contains("done on 20")
            && stdout(&out).contains("its result is no longer kept"),
        "{}",
        stdout(&out)
    );
    assert!(
        stdout(&out).contains(&format!("idemkit forget {k}")),
        "{}",
        stdout(&out)
    );
    let out = run(&["show", &k, "--json"], 0);
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(json["state"], "tombstone", "{json}");
    assert!(
        json["done"].as_str().is_some_and(|d| d.starts_with("20")),
        "{json}"
    );
    assert!(json.get("outcome").is_none(), "no outcome is shown: {json}");

    run(&["forget", &k, "--note", "ana: re-run, ticket 53"], 0);
    let out = run(&["show", &k], 0);
    assert!(
        stdout(&out).contains("forgotten by an operator (it was a tombstone, done on 20")
            && stdout(&out).contains("the next call with this key runs the operation again")
            && stdout(&out).contains("resolved     forgotten at 20")
            && stdout(&out).contains("ana: re-run, ticket 53"),
        "{}",
        stdout(&out)
    );
    let out = run(&["show", &k, "--json"], 0);
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(json["state"], "forgotten", "{json}");
    assert_eq!(json["live"], false, "{json}");
    assert_eq!(json["resolution"]["decision"], "forgotten", "{json}");
    assert_eq!(
        json["resolution"]["note"], "ana: re-run, ticket 53",
        "{json}"
    );
    assert!(
        json["resolution"]["at"]
            .as_str()
            .is_some_and(|at| at.starts_with("20") && at > json["done"].as_str().unwrap()),
        "forgotten after it was done: {json}"
    );
    let out = run(&["list", "--state", "tombstone"], 0);
    assert!(
        !stdout(&out).contains(&k),
        "no longer counts: {}",
        stdout(&out)
    );
    // The next call runs: a claim of the key is a new record.
    let again = ClaimRequest::new(
        key("charge", 33),
        "charge",
        Fingerprint::of(&4200u64).unwrap(),
        LeaseToken::new(),
        short,
        short,
    );
    assert_eq!(
        store.claim(&again).await.unwrap(),
        idem_runtime::store::Claim::Acquired { takeover: None }
    );
}
