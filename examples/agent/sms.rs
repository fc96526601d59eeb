//! The lost-response problem when the provider cannot deduplicate: an SMS gateway that sends a
//! message per request whatever its key ([`fake_provider::sms`]). For each scenario, the messages
//! sent (a) by a naive retry loop, (b) by `#[side_effect]` without `verify`, and (c) with
//! `verify = was_sent`, which asks the gateway "did message X go out?" before anything is sent
//! again.

use std::time::Duration;

use fake_provider::sms::{Lookup, Message, Sent, SmsClient, SmsFault, SmsGateway};
use idemkit::{
    Classify, Error, Failure, Idem, Verified,
    scope::{CallInfo, CallOutcome, observe},
    side_effect,
    store::MemoryStore,
};

use super::PayError;

/// The agent's texting tools over one gateway.
pub struct Texts {
    pub client: SmsClient,
    /// What `was_sent` answered, in order: `Some(true)` applied, `Some(false)` not applied,
    /// `None` could not tell.
    pub checks: std::sync::Mutex<Vec<Option<bool>>>,
}

/// The message id of an order's "shipped" text: chosen by us, from the order, so that the
/// gateway can be asked whether it went out.
pub fn message_id(order_id: &str) -> String {
    format!("{order_id}-shipped")
}

impl Texts {
    /// A client of the gateway at `base` that gives up on a request after `timeout`.
    pub fn new(base: String, timeout: Duration) -> Self {
        Texts {
            client: SmsClient::new(base, timeout),
            checks: std::sync::Mutex::default(),
        }
    }

    async fn send(&self, order_id: &str, to: &str) -> Result<Sent, PayError> {
        let message = Message::new(to, format!("Your order {order_id} has shipped."))
            .message_id(message_id(order_id));
        Ok(self.client.send(&message).await?)
    }

    /// (b) Texts the customer that the order shipped, once per order. It does not take the
    /// `&IdempotencyKey`: the gateway could not deduplicate by it anyway, so an attempt whose
    /// outcome is unknown is not sent again (S20) and the call ends `Error::Ambiguous`.
    #[side_effect(key = "order_id", lease = "1s")]
    pub async fn notify_shipped(&self, order_id: &str, to: &str) -> Result<Sent, PayError> {
        self.send(order_id, to).await
    }

    /// (c) The same, with a verify function: before anything whose outcome is unknown is sent
    /// again, the gateway is asked whether the message went out (S19).
    #[side_effect(key = "order_id", lease = "1s", verify = Self::was_sent)]
    pub async fn notify_shipped_verified(
        &self,
        order_id: &str,
        to: &str,
    ) -> Result<Sent, PayError> {
        self.send(order_id, to).await
    }

    /// "Did the order's text go out?", asked of the gateway by the message id we chose: the
    /// message as sent, not sent, or an error (the lookup failed: cannot tell).
    ///
    /// Its parameters are the tool's (`verify = Self::was_sent`).
    pub async fn was_sent(&self, order_id: &str, _to: &str) -> Result<Verified<Sent>, PayError> {
        let found = self
            .client
            .lookup(Lookup::MessageId(&message_id(order_id)))
            .await;
        let answer = found.as_ref().ok().map(|found| !found.is_empty());
        self.checks.lock().unwrap().push(answer);
        Ok(match found?.into_iter().next() {
            Some(sent) => Verified::Applied(sent),
            None => Verified::NotApplied,
        })
    }

    /// (a) How agents usually write it: retry on any failure that is not permanent.
    pub async fn naive_notify_shipped(&self, order_id: &str, to: &str) -> Result<Sent, PayError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.send(order_id, to).await {
                Ok(sent) => return Ok(sent),
                Err(e) => {
                    if attempt >= 4 || e.classify() == Failure::Permanent {
                        return Err(e);
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    }
}

/// What the agent tells the model (and the user) about a failed text. An unknown outcome is
/// never reported as "not sent": the message may have gone out, and it was not sent again.
pub fn agent_says(order_id: &str, error: &PayError) -> String {
    match error {
        PayError::Idem(Error::Ambiguous { key, .. }) => format!(
            "the text for order {order_id} may have been sent; it was not re-sent. \
             Check the gateway for message {}, then `idemkit resolve {key} applied --outcome JSON` \
             or `idemkit resolve {key} not-applied`.",
            message_id(order_id)
        ),
        e if e.classify() == Failure::Ambiguous => {
            format!("the text for order {order_id} may have been sent: {e}")
        }
        other => format!("the text for order {order_id} failed: {other}"),
    }
}

/// One scenario of the table.
#[derive(Debug, Clone)]
pub struct SmsScenario {
    /// What happens.
    pub name: &'static str,
    /// The faults the gateway injects into sends, in order.
    pub faults: Vec<SmsFault>,
    /// How many times the agent runs the step.
    pub agent_runs: u32,
    /// Lookups fail: the gateway cannot tell whether a message went out.
    pub lookups_fail: bool,
    /// The first run's process is killed (SIGKILL) once the message is sent, before any
    /// answer, and a new process, on the same SQLite file, runs the step again.
    pub killed_after_sending: bool,
}

/// The scenarios, in the order of the table.
pub fn sms_scenarios() -> Vec<SmsScenario> {
    let base = SmsScenario {
        name: "",
        faults: vec![],
        agent_runs: 1,
        lookups_fail: false,
        killed_after_sending: false,
    };
    vec![
        SmsScenario {
            name: "the response arrives",
            ..base.clone()
        },
        SmsScenario {
            name: "the response is lost after sending",
            faults: vec![SmsFault::DropAfterSend],
            ..base.clone()
        },
        SmsScenario {
            name: "503 before sending",
            faults: vec![SmsFault::FailBeforeSend],
            ..base.clone()
        },
        SmsScenario {
            name: "no response, nothing sent",
            faults: vec![SmsFault::DropBeforeSend],
            ..base.clone()
        },
        SmsScenario {
            name: "the agent re-runs the same step",
            agent_runs: 2,
            ..base.clone()
        },
        SmsScenario {
            name: "the response is lost, the agent re-runs the step",
            faults: vec![SmsFault::DropAfterSend],
            agent_runs: 2,
            ..base.clone()
        },
        SmsScenario {
            name: "the response is lost and lookups fail",
            faults: vec![SmsFault::DropAfterSend],
            lookups_fail: true,
            ..base.clone()
        },
        SmsScenario {
            name: "SIGKILL after sending, a new process replays",
            faults: vec![SmsFault::HangAfterSend],
            killed_after_sending: true,
            ..base
        },
    ]
    .into_iter()
    // The child agents keep their records in the default SQLite store.
    .filter(|s| cfg!(feature = "sqlite") || !s.killed_after_sending)
    .collect()
}

/// What the agent's last run of the step got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// `Ok`, the body's own result.
    Ok,
    /// `Ok`, an earlier call's recorded outcome replayed.
    Replayed,
    /// `Ok`, what the verify function found (the message had gone out).
    Verified,
    /// `Ok`, sent again once the verify function found that the message had not gone out.
    Resent,
    /// `Error::Ambiguous`: may have been sent, not re-sent.
    Ambiguous,
    /// Another error.
    Failed,
}

impl Answer {
    fn of(result: &Result<Sent, PayError>, info: Option<&CallInfo>, not_applied: bool) -> Self {
        match result {
            Ok(_) => match info.map(|i| (i.outcome, i.verified)) {
                Some((CallOutcome::Replayed, _)) => Answer::Replayed,
                Some((CallOutcome::Verified, _) | (_, true)) => Answer::Verified,
                _ if not_applied => Answer::Resent,
                _ => Answer::Ok,
            },
            Err(PayError::Idem(Error::Ambiguous { .. })) => Answer::Ambiguous,
            Err(_) => Answer::Failed,
        }
    }

    fn parse(debug: &str) -> Self {
        [
            Answer::Ok,
            Answer::Replayed,
            Answer::Verified,
            Answer::Resent,
            Answer::Ambiguous,
        ]
        .into_iter()
        .find(|a| format!("{a:?}") == debug)
        .unwrap_or(Answer::Failed)
    }

    fn label(self) -> &'static str {
        match self {
            Answer::Ok => "ok",
            Answer::Replayed => "ok, replayed",
            Answer::Verified => "ok, verified",
            Answer::Resent => "ok, re-sent once",
            Answer::Ambiguous => "Ambiguous",
            Answer::Failed => "error",
        }
    }
}

/// Messages sent in one scenario by one way of calling, and what the last run got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cell {
    /// Messages the gateway sent.
    pub sent: usize,
    /// What the agent's last run of the step got.
    pub answer: Answer,
    /// How many times the verify function was asked.
    pub checks: usize,
}

impl std::fmt::Display for Cell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.sent, self.answer.label())
    }
}

/// One row of the table.
#[derive(Debug, Clone)]
pub struct SmsRow {
    /// The scenario.
    pub name: &'static str,
    /// (a) The naive retry loop.
    pub naive: Cell,
    /// (b) `#[side_effect]` without `verify`.
    pub no_verify: Cell,
    /// (c) `#[side_effect]` with `verify = was_sent`.
    pub verify: Cell,
    /// What the agent said after (b)'s last run, when it failed.
    pub no_verify_says: Option<String>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Way {
    Naive,
    NoVerify,
    Verify,
}

impl Way {
    fn name(self) -> &'static str {
        match self {
            Way::Naive => "naive",
            Way::NoVerify => "no_verify",
            Way::Verify => "verify",
        }
    }
}

/// No scenario waits for this timeout: the gateway cuts the connection to lose an answer.
const TIMEOUT: Duration = Duration::from_secs(10);
const ORDER: &str = "ord_7";
const TO: &str = "+15550100";

/// Runs the step once in `way`, under `idem`, observed.
async fn run_once(
    texts: &Texts,
    idem: &Idem,
    way: Way,
) -> (Result<Sent, PayError>, Option<CallInfo>) {
    match way {
        Way::Naive => (texts.naive_notify_shipped(ORDER, TO).await, None),
        Way::NoVerify => observe(idem.scope(texts.notify_shipped(ORDER, TO))).await,
        Way::Verify => observe(idem.scope(texts.notify_shipped_verified(ORDER, TO))).await,
    }
}

/// Runs one scenario in one way against a fresh gateway and store; `command` makes a command
/// that starts this program as a child agent (for the scenario where a process is killed).
async fn run(
    scenario: &SmsScenario,
    way: Way,
    command: &impl Fn() -> tokio::process::Command,
) -> (Cell, Option<String>) {
    let gateway = SmsGateway::start().await.expect("a loopback port");
    gateway.inject(scenario.faults.clone());
    gateway.fail_lookups(scenario.lookups_fail);
    if scenario.killed_after_sending {
        return killed_after_sending(&gateway, way, command).await;
    }
    let texts = Texts::new(gateway.base_url(), TIMEOUT);
    let idem = Idem::new(MemoryStore::new());
    let mut last = None;
    for _ in 0..scenario.agent_runs {
        last = Some(run_once(&texts, &idem, way).await);
    }
    let (result, info) = last.expect("at least one run");
    cell(&gateway, &texts, &result, info.as_ref())
}

/// What the gateway sent, what the run got, and what the agent says about a failure.
fn cell(
    gateway: &SmsGateway,
    texts: &Texts,
    result: &Result<Sent, PayError>,
    info: Option<&CallInfo>,
) -> (Cell, Option<String>) {
    let checks = texts.checks.lock().unwrap().clone();
    let cell = Cell {
        sent: gateway.sent(),
        answer: Answer::of(result, info, checks.contains(&Some(false))),
        checks: checks.len(),
    };
    (cell, result.as_ref().err().map(|e| agent_says(ORDER, e)))
}

/// A child agent runs the step against the gateway, which sends and never answers; once the
/// message is out, the child is killed (SIGKILL). A new child, on the same SQLite file, runs the
/// step again and reports what it got.
async fn killed_after_sending(
    gateway: &SmsGateway,
    way: Way,
    command: &impl Fn() -> tokio::process::Command,
) -> (Cell, Option<String>) {
    let db = std::env::temp_dir().join(format!(
        "idemkit-lost-response-{}-{}.db",
        std::process::id(),
        way.name()
    ));
    let _ = std::fs::remove_file(&db);
    let child = |stdout: std::process::Stdio| {
        let mut c = command();
        c.env(CHILD_WAY, way.name())
            .env(CHILD_GATEWAY, gateway.base_url())
            .env("IDEMKIT_DB", &db)
            .stdin(std::process::Stdio::null())
            .stdout(stdout)
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        c
    };
    let mut first = child(std::process::Stdio::null())
        .spawn()
        .expect("the child agent starts");
    tokio::select! {
        status = first.wait() => panic!(
            "the first child agent exited ({status:?}) before its message was sent: {}",
            stderr_of(first).await
        ),
        () = until_sent(gateway) => {}
        // A child that neither sends nor exits (stuck): say so instead of waiting for ever.
        () = tokio::time::sleep(Duration::from_secs(120)) => {
            let _ = first.start_kill();
            panic!("the first child agent sent nothing in 120 s: {}", stderr_of(first).await)
        }
    }
    first.start_kill().expect("SIGKILL"); // Child::start_kill sends SIGKILL on Unix.
    first.wait().await.expect("the killed child's status");
    // The new process: it meets the dead holder's record (its lease runs out unrenewed).
    let output = child(std::process::Stdio::piped())
        .output()
        .await
        .expect("the second child agent runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report = stdout
        .lines()
        .find_map(|l| l.split_once(CHILD_REPORT).map(|(_, report)| report))
        .unwrap_or_else(|| {
            panic!(
                "the second child agent reported nothing ({}):\n{stdout}\n{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            )
        });
    let _ = std::fs::remove_file(&db);
    let mut fields = report.splitn(3, ' ');
    let answer = Answer::parse(fields.next().unwrap_or_default());
    let checks = fields.next().and_then(|n| n.parse().ok()).unwrap_or(0);
    let says = fields.next().map(str::to_owned).filter(|s| !s.is_empty());
    let cell = Cell {
        sent: gateway.sent(),
        answer,
        checks,
    };
    (cell, says)
}

async fn stderr_of(child: tokio::process::Child) -> String {
    match child.wait_with_output().await {
        Ok(output) => String::from_utf8_lossy(&output.stderr).into_owned(),
        Err(e) => e.to_string(),
    }
}

/// The child agent's environment: how it calls (`naive`, `no_verify`, `verify`), and where the
/// gateway is.
const CHILD_WAY: &str = "IDEMKIT_EXAMPLE_SMS_WAY";
const CHILD_GATEWAY: &str = "IDEMKIT_EXAMPLE_SMS_GATEWAY";
/// The line the child agent reports on: `SMS-CHILD answer checks says`.
const CHILD_REPORT: &str = "SMS-CHILD ";

/// Whether this process is a child agent of the `killed_after_sending` scenario.
pub fn is_child() -> bool {
    std::env::var_os(CHILD_WAY).is_some()
}

/// The child agent: runs the step once with the default runtime (SQLite at `IDEMKIT_DB`) and
/// prints what it got on one line.
pub async fn child_main() -> i32 {
    let way = std::env::var(CHILD_WAY).expect("the way to call");
    let way = [Way::Naive, Way::NoVerify, Way::Verify]
        .into_iter()
        .find(|w| w.name() == way)
        .expect("naive, no_verify or verify");
    let gateway = std::env::var(CHILD_GATEWAY).expect("the gateway's URL");
    let texts = Texts::new(gateway, TIMEOUT);
    let (result, info) = match way {
        Way::Naive => (texts.naive_notify_shipped(ORDER, TO).await, None),
        Way::NoVerify => observe(texts.notify_shipped(ORDER, TO)).await,
        Way::Verify => observe(texts.notify_shipped_verified(ORDER, TO)).await,
    };
    let checks = texts.checks.lock().unwrap().clone();
    let answer = Answer::of(&result, info.as_ref(), checks.contains(&Some(false)));
    let says = result
        .as_ref()
        .err()
        .map(|e| agent_says(ORDER, e))
        .unwrap_or_default();
    println!("{CHILD_REPORT}{answer:?} {} {says}", checks.len());
    0
}

/// Waits until the gateway has sent a message.
async fn until_sent(gateway: &SmsGateway) {
    while gateway.sent() == 0 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Runs every scenario in each of the three ways, each against a fresh gateway. `command`
/// makes a command that starts this program as a child agent ([`is_child`], [`child_main`]).
pub async fn sms_table(command: impl Fn() -> tokio::process::Command) -> Vec<SmsRow> {
    let mut rows = Vec::new();
    for scenario in sms_scenarios() {
        let (naive, _) = run(&scenario, Way::Naive, &command).await;
        let (no_verify, no_verify_says) = run(&scenario, Way::NoVerify, &command).await;
        let (verify, _) = run(&scenario, Way::Verify, &command).await;
        rows.push(SmsRow {
            name: scenario.name,
            naive,
            no_verify,
            verify,
            no_verify_says,
        });
    }
    rows
}

/// The table as the example prints it.
pub fn render_sms(rows: &[SmsRow]) -> String {
    let width = rows
        .iter()
        .map(|r| r.name.len())
        .max()
        .unwrap_or(0)
        .max("scenario".len());
    let heads = [
        "naive retry loop",
        "#[side_effect], no verify",
        "verify = was_sent",
    ];
    let cells = |r: &SmsRow| [r.naive, r.no_verify, r.verify];
    let mut widths = heads.map(str::len);
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(cells(row)) {
            *w = (*w).max(cell.to_string().len());
        }
    }
    let mut out = format!("| {:width$} |", "scenario");
    for (h, w) in heads.iter().zip(widths) {
        out += &format!(" {h:w$} |");
    }
    out += &format!("\n|{}|", "-".repeat(width + 2));
    for w in widths {
        out += &format!("{}|", "-".repeat(w + 2));
    }
    out += "\n";
    for row in rows {
        out += &format!("| {:width$} |", row.name);
        for (cell, w) in cells(row).iter().zip(widths) {
            out += &format!(" {:>w$} |", cell.to_string());
        }
        out += "\n";
    }
    out
}
