//! Every surface through every fault (issue 40), the way `idem_runtime::conformance` is for
//! stores: the attribute on a free function, `Tool::side_effect`, `Tool::verify`, a `json` tool
//! through `JsonTools`, `mcp::JsonToolsServer`, an rmcp `#[tool]` method, a rig tool and the HTTP
//! `IdempotencyLayer` (axum, in process), each through: the response lost after the effect, the
//! call cut off after it, a panic after it, a broken reply, SIGKILL and a repeat in another
//! process (SQLite file), a concurrent duplicate, the store down, the call nested inside another
//! call, a repeat with other arguments, and a repeat after the record's time-to-live (S33).
//!
//! Effects are counted at a provider on loopback that does **not** deduplicate
//! (`surface_faults/provider.rs`), with the `Idempotency-Key` each came with: every cell asserts
//! one effect per operation, each sent under its own call's key, and the answers the docs give.
//! The table in `docs/reliability.md` is this suite's output (`IDEMKIT_BLESS=1` rewrites it).
//! On JSON, MCP, rig and HTTP problems, each answer's advice (S35) is checked against its word
//! (`surfaces::advised`).
//! The broken variants re-introduce issue 40's holes 1–4 and show that the matrix catches each.
#![cfg(all(
    feature = "json",
    feature = "rmcp",
    feature = "rig",
    feature = "reqwest",
    feature = "tower",
    feature = "sqlite"
))]

#[path = "surface_faults/client.rs"]
mod client;
#[path = "surface_faults/provider.rs"]
mod provider;
#[path = "surface_faults/surfaces.rs"]
mod surfaces;

use std::fmt::Write as _;
use std::time::Duration;

use idemkit::{IdempotencyKey, Tool};
use tokio::io::{AsyncBufReadExt, BufReader};

use provider::{After, PayError, Reply};
use surfaces::{Answer, Cx, Kind, SURFACES, Surface};

/// Set in a child process: `surface|op|sqlite path`.
const CHILD_ENV: &str = "IDEMKIT_MATRIX_CHILD";
/// The child's entry below.
const CHILD_TEST: &str = "surface_faults_child";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    Lost,
    Cancelled,
    Panic,
    Broken,
    Killed,
    Duplicate,
    StoreDown,
    Nested,
    OtherArgs,
    AfterTtl,
}

const FAULTS: [Fault; 10] = [
    Fault::Lost,
    Fault::Cancelled,
    Fault::Panic,
    Fault::Broken,
    Fault::Killed,
    Fault::Duplicate,
    Fault::StoreDown,
    Fault::Nested,
    Fault::OtherArgs,
    Fault::AfterTtl,
];

impl Fault {
    fn id(self) -> &'static str {
        match self {
            Fault::Lost => "lost",
            Fault::Cancelled => "cancelled",
            Fault::Panic => "panic",
            Fault::Broken => "broken",
            Fault::Killed => "killed",
            Fault::Duplicate => "duplicate",
            Fault::StoreDown => "store-down",
            Fault::Nested => "nested",
            Fault::OtherArgs => "other-args",
            Fault::AfterTtl => "after-ttl",
        }
    }

    /// The table's column heading.
    fn heading(self) -> &'static str {
        match self {
            Fault::Lost => "response lost after the effect",
            Fault::Cancelled => "cut off after the effect",
            Fault::Panic => "panic after the effect",
            Fault::Broken => "broken reply",
            Fault::Killed => "SIGKILL, repeat in a new process",
            Fault::Duplicate => "concurrent duplicate",
            Fault::StoreDown => "store down",
            Fault::Nested => "nested in another call",
            Fault::OtherArgs => "repeat with other arguments",
            Fault::AfterTtl => "a repeat after the ttl",
        }
    }

    /// What the caller is told, in order (see each fault's procedure in [`run_cell`]): what the
    /// docs say of it.
    fn expected(self, kind: Kind) -> &'static [&'static str] {
        use Kind::{Client, Http, Plain, Verify};
        match (self, kind) {
            // S20: the outcome is unknown, nothing re-sends it; S19: verify finds it applied.
            (Fault::Lost, Plain | Client) => &["ambiguous", "ambiguous"],
            (Fault::Lost, Verify) => &["verified", "replay"],
            (Fault::Lost, Http) => &["lost", "201 replayed"],
            // S15: kept as ambiguous; S25: the handler's run is not the connection's.
            (Fault::Cancelled, Plain | Client) => &["dropped", "ambiguous"],
            (Fault::Cancelled, Verify) => &["dropped", "verified"],
            (Fault::Cancelled, Http) => &["dropped", "201 replayed"],
            (Fault::Panic, Plain) => &["panicked", "ambiguous"],
            (Fault::Panic, Verify) => &["panicked", "verified"],
            (Fault::Panic, Http) => &["500 ran", "500 ran"],
            // The upstream's handler panics: the client's attempt is unanswered, its outcome unknown.
            (Fault::Panic, Client) => &["ambiguous", "ambiguous"],
            // S16: the first caller gets its result; repeats are told it ran.
            (Fault::Broken, Plain | Verify) => &["ok", "unreplayable"],
            (Fault::Broken, Http) => &["500 ran", "500 ran"],
            // The client records the upstream's answer as the JSON it came as, which reads back.
            (Fault::Broken, Client) => &["ok", "replay"],
            // S8 with S19/S20/S25: the dead holder's record, taken over after its lease.
            (Fault::Killed, Plain | Client) => &["killed", "ambiguous"],
            (Fault::Killed, Verify) => &["killed", "verified"],
            (Fault::Killed, Http) => &["killed", "500 ran"],
            // S7: first, the duplicate while the first runs, a repeat after.
            (Fault::Duplicate, Plain | Verify | Client) => &["ok", "in_flight", "replay"],
            (Fault::Duplicate, Http) => &["201", "409", "201 replayed"],
            // S9: fail closed, nothing run; once the store is back, run once.
            (Fault::StoreDown, Plain | Verify | Client) => &["store_unavailable", "ok"],
            (Fault::StoreDown, Http) => &["503", "201"],
            // S26: two calls inside another call, then the first again at top level.
            (Fault::Nested, Plain | Verify | Client) => &["ok", "ok", "replay"],
            (Fault::Nested, Http) => &["201", "201", "201 replayed"],
            // S3.
            (Fault::OtherArgs, Plain | Verify | Client) => &["ok", "key_reuse"],
            (Fault::OtherArgs, Http) => &["201", "422"],
            // S33: done, then past its time-to-live: the same arguments are told it was done
            // (a tombstone), other arguments are still key reuse; never a second run.
            (Fault::AfterTtl, Plain | Verify | Client) => &["ok", "expired", "key_reuse"],
            (Fault::AfterTtl, Http) => &["201", "410", "422"],
        }
    }
}

/// What one (surface, fault) cell came to.
#[derive(Debug)]
struct Cell {
    surface: &'static str,
    fault: Fault,
    /// The most effects any of the cell's operations made.
    effects: usize,
    answers: Vec<Answer>,
    /// Why the cell fails, each naming it.
    failures: Vec<String>,
}

impl Cell {
    fn text(&self) -> String {
        format!("{} · {}", self.effects, self.answers.join(" → "))
    }
}

/// Runs one cell: its fault's procedure, then the checks: one effect per operation, each under
/// its call's key (and each verification too), and the documented answers.
async fn run_cell(surface: &'static dyn Surface, fault: Fault, variant: &str) -> Cell {
    let op = format!("{variant}.{}.{}", surface.id(), fault.id());
    let procedure = tokio::spawn(procedure(surface, fault, op.clone()));
    let name = format!("cell ({}, {})", surface.name(), fault.heading());
    let (answers, ops) = match procedure.await {
        Ok(Ok(done)) => done,
        Ok(Err(why)) => {
            return Cell {
                surface: surface.name(),
                fault,
                effects: 0,
                answers: Vec::new(),
                failures: vec![format!("{name}: {why}")],
            };
        }
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    };
    let mut failures = Vec::new();
    let mut effects = 0;
    for op in &ops {
        let made = provider::effects(op);
        effects = effects.max(made.len());
        if made.len() != 1 {
            failures.push(format!(
                "{name}: operation {op} made {} effects at the provider, not 1",
                made.len()
            ));
        }
        let key = surface.key(op).to_string();
        for effect in &made {
            if effect.key.as_deref() != Some(key.as_str()) {
                failures.push(format!(
                    "{name}: an effect of {op} was sent under key {:?}, not its call's {key}",
                    effect.key
                ));
            }
        }
        for under in provider::verified_under(op) {
            if under.map(|k| k.to_string()).as_deref() != Some(key.as_str()) {
                failures.push(format!(
                    "{name}: a verification of {op} was made under key {under:?}, not its call's {key}"
                ));
            }
        }
    }
    let expected = fault.expected(surface.kind());
    if answers != expected {
        failures.push(format!(
            "{name}: the callers were told {answers:?}; the docs say {expected:?}"
        ));
    }
    Cell {
        surface: surface.name(),
        fault,
        effects,
        answers,
        failures,
    }
}

/// A fault's procedure: the callers' answers, and the operations whose effects to count.
async fn procedure(
    surface: &'static dyn Surface,
    fault: Fault,
    op: String,
) -> Result<(Vec<Answer>, Vec<String>), String> {
    let http = surface.kind() == Kind::Http;
    let cx = Cx::memory(
        match fault {
            // A repeat waits for a run detached from its gone client (S25).
            Fault::Cancelled => Duration::from_secs(600),
            _ => Duration::ZERO,
        },
        // S33: records that outlive their time-to-live within the cell.
        (fault == Fault::AfterTtl).then_some(surfaces::LEASE),
    );
    let call = |op: &str, amount| surface.call(cx.clone(), op.to_owned(), amount);
    let answers = match fault {
        Fault::Lost if http => {
            // The layer's response is lost on its way to the client.
            let first = call(&op, 100).await;
            if first != "201" {
                return Err(format!("the first request answered {first}, not 201"));
            }
            vec!["lost".into(), call(&op, 100).await]
        }
        Fault::Lost => {
            provider::reply(&op, Reply::Lost);
            vec![call(&op, 100).await, call(&op, 100).await]
        }
        Fault::Cancelled => {
            provider::after(&op, After::Hang);
            let gate = provider::gate(&op);
            let mut first = call(&op, 100);
            let first = tokio::select! {
                answer = &mut first => answer,
                () = gate.reached.notified() => {
                    drop(first);
                    "dropped".into()
                }
            };
            provider::release(&op);
            vec![first, call(&op, 100).await]
        }
        Fault::Panic => {
            provider::after(&op, After::Panic);
            let first = match tokio::spawn(call(&op, 100)).await {
                Ok(answer) => answer,
                Err(e) if e.is_panic() => "panicked".into(),
                Err(e) => e.to_string(),
            };
            vec![first, call(&op, 100).await]
        }
        Fault::Broken => {
            if http {
                provider::after(&op, After::BreakBody);
            } else {
                provider::reply(&op, Reply::Broken);
            }
            vec![call(&op, 100).await, call(&op, 100).await]
        }
        Fault::Killed => killed(surface, &op).await?,
        Fault::Duplicate => {
            provider::after(&op, After::Hang);
            let gate = provider::gate(&op);
            let first = tokio::spawn(call(&op, 100));
            gate.reached.notified().await;
            let duplicate = call(&op, 100).await;
            provider::release(&op);
            let first = first.await.map_err(|e| e.to_string())?;
            vec![first, duplicate, call(&op, 100).await]
        }
        Fault::StoreDown => {
            cx.down.store(true, std::sync::atomic::Ordering::SeqCst);
            let down = call(&op, 100).await;
            cx.down.store(false, std::sync::atomic::Ordering::SeqCst);
            vec![down, call(&op, 100).await]
        }
        Fault::Nested => {
            let (a, b) = (format!("{op}.a"), format!("{op}.b"));
            let (ia, ib) = (a.clone(), b.clone());
            let inner_cx = cx.clone();
            let outer =
                Tool::new("m_outer")
                    .idem(&cx.idem)
                    .side_effect(&[("op", &op)], &(), move |_key| {
                        let (cx, a, b) = (inner_cx.clone(), ia.clone(), ib.clone());
                        async move {
                            let first = surface.call(cx.clone(), a, 100).await;
                            let second = surface.call(cx, b, 100).await;
                            Ok::<_, PayError>(vec![first, second])
                        }
                    });
            let mut answers = outer
                .await
                .map_err(|e| format!("the outer call failed: {e}"))?;
            answers.push(call(&a, 100).await);
            return Ok((answers, vec![a, b]));
        }
        Fault::OtherArgs => vec![call(&op, 100).await, call(&op, 200).await],
        Fault::AfterTtl => {
            let first = call(&op, 100).await;
            tokio::time::sleep(surfaces::LEASE + Duration::from_millis(500)).await;
            vec![first, call(&op, 100).await, call(&op, 200).await]
        }
    };
    Ok((answers, vec![op]))
}

/// SIGKILL after the effect: a child process (this binary, [`CHILD_TEST`]) calls `op` on a
/// SQLite file and hangs after its effect; it is killed there; once its lease has run out, this
/// process calls `op` again on the same file.
async fn killed(surface: &'static dyn Surface, op: &str) -> Result<Vec<Answer>, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let db = dir.path().join("matrix.sqlite");
    let mut child = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args([
            CHILD_TEST,
            "--exact",
            "--nocapture",
            "--quiet",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, format!("{}|{op}|{}", surface.id(), db.display()))
        .env(provider::PROVIDER_ENV, provider::base())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("the child did not start: {e}"))?;
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let effect = format!("EFFECT {op}");
    loop {
        match lines.next_line().await {
            Ok(Some(line)) if line == effect => break,
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => return Err("the child ended before its effect".into()),
        }
    }
    child.start_kill().map_err(|e| e.to_string())?; // SIGKILL
    let status = child.wait().await.map_err(|e| e.to_string())?;
    if std::os::unix::process::ExitStatusExt::signal(&status) != Some(9) {
        return Err(format!("the child was not killed: {status}"));
    }
    // Waiting for what certainly happens: the dead holder's lease ends.
    tokio::time::sleep(surfaces::LEASE + Duration::from_millis(500)).await;
    let repeat = surface.call(Cx::sqlite(&db), op.to_owned(), 100).await;
    Ok(vec!["killed".into(), repeat])
}

/// The child of a SIGKILL cell (does nothing unless started as one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn surface_faults_child() {
    let Ok(told) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mut parts = told.splitn(3, '|');
    let (id, op, db) = (
        parts.next().unwrap(),
        parts.next().unwrap(),
        parts.next().unwrap(),
    );
    provider::after(op, After::Hang);
    let answer = surfaces::by_id(id)
        .call(Cx::sqlite(std::path::Path::new(db)), op.to_owned(), 100)
        .await;
    panic!("the child's call answered ({answer}) instead of hanging after its effect");
}

/// Quiets the panics the panic cells make on purpose.
fn quiet_expected_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let expected = info
                .payload()
                .downcast_ref::<String>()
                .is_some_and(|m| m.starts_with("matrix: the body panics"));
            if !expected {
                default(info);
            }
        }));
    });
}

/// Runs `cells` at once, in their order.
async fn run_cells(cells: Vec<(&'static dyn Surface, Fault)>, variant: &'static str) -> Vec<Cell> {
    quiet_expected_panics();
    let running: Vec<_> = cells
        .into_iter()
        .map(|(s, f)| tokio::spawn(run_cell(s, f, variant)))
        .collect();
    let mut done = Vec::new();
    for cell in running {
        done.push(cell.await.expect("a cell's checks do not panic"));
    }
    done
}

/// The matrix as markdown: a row per surface, a column per fault, each cell "effects ·
/// answers" (the legend is the prose around it in docs/reliability.md).
fn table(cells: &[Cell]) -> String {
    let mut out = String::new();
    out.push_str("| surface |");
    for fault in FAULTS {
        write!(out, " {} |", fault.heading()).unwrap();
    }
    out.push_str("\n|---|");
    out.push_str(&"---|".repeat(FAULTS.len()));
    out.push('\n');
    for surface in SURFACES {
        write!(out, "| {} |", surface.name()).unwrap();
        for fault in FAULTS {
            // Every cell applies (docs/reliability.md says how each fault reads per surface).
            let cell = cells
                .iter()
                .find(|c| c.surface == surface.name() && c.fault == fault)
                .unwrap_or_else(|| panic!("no cell ({}, {})", surface.name(), fault.heading()));
            write!(out, " {} |", cell.text()).unwrap();
        }
        out.push('\n');
    }
    out
}

const BEGIN: &str = "<!-- surface-faults:begin (generated by tests/surface_faults.rs; IDEMKIT_BLESS=1 rewrites it) -->";
const END: &str = "<!-- surface-faults:end -->";

/// Every surface × every fault: one effect per operation, under its call's key, and the answers
/// the docs give; the table in `docs/reliability.md` is this run's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_surface_through_every_fault_makes_one_effect_and_answers_as_documented() {
    assert!(
        surfaces::rmcp_router_lists_the_tool(),
        "rmcp's router lists m_rmcp"
    );
    let all = SURFACES
        .iter()
        .flat_map(|s| FAULTS.map(|f| (*s, f)))
        .collect();
    let cells = run_cells(all, "m").await;
    let table = table(&cells);
    let generated = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("surface_faults.md");
    std::fs::write(&generated, &table).unwrap();
    println!("{table}");

    let failures: Vec<&String> = cells.iter().flat_map(|c| &c.failures).collect();
    assert!(
        failures.is_empty(),
        "{} of {} cells fail:\n{}",
        cells.iter().filter(|c| !c.failures.is_empty()).count(),
        cells.len(),
        failures
            .iter()
            .map(|f| f.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );

    let docs_path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/reliability.md");
    let docs = std::fs::read_to_string(&docs_path).unwrap();
    let (Some(begin), Some(end)) = (docs.find(BEGIN), docs.find(END)) else {
        panic!("docs/reliability.md has no `{BEGIN}` … `{END}` section");
    };
    let section = &docs[begin + BEGIN.len()..end];
    let want = format!("\n{table}");
    if section != want {
        if std::env::var_os("IDEMKIT_BLESS").is_some() {
            let updated = format!("{}{want}{}", &docs[..begin + BEGIN.len()], &docs[end..]);
            std::fs::write(&docs_path, updated).unwrap();
        } else {
            panic!(
                "docs/reliability.md's surface × fault table differs from this run's ({}); run with \
                 IDEMKIT_BLESS=1 to update it",
                generated.display()
            );
        }
    }
}

// ---- the broken variants: issue 40's holes re-introduced, each caught by the matrix ----

/// Hole 2 and 3: a layer told its handler is safe to re-run (`handler_resends(true)`) runs a
/// handler that panicked, or whose body broke off, again: the matrix counts 2 effects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s25_broken_variant_handler_resends_runs_a_panicked_or_broken_handler_twice() {
    static RESENDS: surfaces::Http = surfaces::Http {
        resends: true,
        attached: false,
    };
    let cells = run_cells(
        vec![(&RESENDS, Fault::Panic), (&RESENDS, Fault::Broken)],
        "resends",
    )
    .await;
    for cell in &cells {
        assert_eq!(cell.effects, 2, "{cell:?}");
        assert!(
            cell.failures.iter().any(|f| f.contains("made 2 effects")),
            "{cell:?}"
        );
    }
}

/// Hole 1: a layer whose run is the connection's (as before S25), and that re-sends, runs a
/// handler whose client went away again: the matrix counts 2 effects. (`handler_resends(true)`
/// alone does not: the run is detached from the connection whatever it says.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s25_broken_variant_a_run_attached_to_the_connection_runs_twice_after_a_disconnect() {
    static ATTACHED: surfaces::Http = surfaces::Http {
        resends: true,
        attached: true,
    };
    static DETACHED: surfaces::Http = surfaces::Http {
        resends: true,
        attached: false,
    };
    let attached = &run_cells(vec![(&ATTACHED, Fault::Cancelled)], "attached").await[0];
    assert_eq!(attached.effects, 2, "{attached:?}");
    assert!(
        attached
            .failures
            .iter()
            .any(|f| f.contains("made 2 effects")),
        "{attached:?}"
    );
    let detached = &run_cells(vec![(&DETACHED, Fault::Cancelled)], "detached").await[0];
    assert_eq!(detached.effects, 1, "{detached:?}");
    assert!(detached.failures.is_empty(), "{detached:?}");
}

/// Hole 4: `Tool::verify` with its closures called outside the call's key. At top level the
/// request is built with no key (`HttpError::NoCall`, no effect); nested in another call, both
/// inner calls send under the outer call's key. The matrix fails both cells, naming the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s26_broken_variant_verify_closures_outside_the_calls_key_are_caught() {
    static UNKEYED: surfaces::ToolVerifyUnkeyed = surfaces::ToolVerifyUnkeyed;
    let cells = run_cells(
        vec![(&UNKEYED, Fault::OtherArgs), (&UNKEYED, Fault::Nested)],
        "unkeyed",
    )
    .await;
    let top = &cells[0];
    assert_eq!(
        top.answers.first().map(String::as_str),
        Some("no_call"),
        "{top:?}"
    );
    assert!(
        top.failures.iter().any(|f| f.contains("made 0 effects")),
        "{top:?}"
    );
    let nested = &cells[1];
    let outer = IdempotencyKey::derive("m_outer", &[("op", &"unkeyed.verify-unkeyed.nested")]);
    assert!(
        nested
            .failures
            .iter()
            .any(|f| f.contains("was sent under key") && f.contains(&outer.to_string())),
        "{nested:?}"
    );
}

/// The MCP client told to re-send an unknown outcome (`RemoteTool::resend(true)`) to an upstream
/// that does not deduplicate by the key in `_meta`: after a lost answer, its repeat acts again,
/// and the matrix counts 2 effects. (As shipped, `resend` follows the tool's `idempotentHint`,
/// `false` here, and the cell counts 1.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s20_broken_variant_a_client_told_to_resend_to_an_upstream_that_does_not_deduplicate_acts_twice()
 {
    static RESENDS: client::McpClient = client::McpClient { resend: Some(true) };
    static SHIPPED: client::McpClient = client::McpClient { resend: None };
    let resends = &run_cells(vec![(&RESENDS, Fault::Lost)], "client-resends").await[0];
    assert_eq!(resends.effects, 2, "{resends:?}");
    assert!(
        resends
            .failures
            .iter()
            .any(|f| f.contains("made 2 effects")),
        "{resends:?}"
    );
    let shipped = &run_cells(vec![(&SHIPPED, Fault::Lost)], "client-shipped").await[0];
    assert_eq!(shipped.effects, 1, "{shipped:?}");
    assert!(shipped.failures.is_empty(), "{shipped:?}");
}

/// S33 on every surface (the attribute, `Tool::side_effect`, `Tool::verify`, JSON, MCP's JSON
/// server, an rmcp tool, rig, the HTTP layer and the MCP client): a call, then past its record's time-to-live
/// the same call is told it was done (a tombstone: `expired`, HTTP `410`) and runs nothing, and
/// one with other arguments is key reuse. One effect per operation at the provider.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s33_a_repeat_after_the_ttl_runs_nothing_on_every_surface() {
    let all = SURFACES.iter().map(|s| (*s, Fault::AfterTtl)).collect();
    let cells = run_cells(all, "s33").await;
    assert_eq!(cells.len(), SURFACES.len());
    let failures: Vec<&String> = cells.iter().flat_map(|c| &c.failures).collect();
    assert!(failures.is_empty(), "{failures:#?}");
    for cell in &cells {
        assert_eq!(cell.effects, 1, "{}: {}", cell.surface, cell.text());
    }
}
