//! Shared by the SQLite tests that need separate processes: the re-exec trick (the test binary
//! runs its own `child` test as a child process, told what to do by environment variables) and
//! the side-effect tool every child calls.
#![allow(dead_code)]

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use idem_runtime::{CallOutcome, Classify, Failure, Tool, observe};

/// What a child does: `call` (call the tool once), or `call` with a hook below.
const ROLE: &str = "IDEMKIT_TEST_ROLE";
/// The directory where children leave their traces (effect log, provider, signal files).
const WORK: &str = "IDEMKIT_TEST_WORK";
/// The tool's lease in milliseconds.
const LEASE_MS: &str = "IDEMKIT_TEST_LEASE_MS";
/// If set, a file the child waits for before it calls: a start line for many children.
pub const GO: &str = "IDEMKIT_TEST_GO";
/// If set, the child installs a `tracing` subscriber that prints INFO and above to stderr, as a
/// program's `tracing_subscriber::fmt::init()` does.
pub const LOG_TO_STDERR: &str = "IDEMKIT_TEST_LOG_TO_STDERR";

/// Prints each event at INFO or above on stderr: its level, its message and its other fields.
struct StderrLog;

struct Line(String);

impl tracing::field::Visit for Line {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        use std::fmt::Write as _;
        let _ = write!(self.0, " {}={value:?}", field.name());
    }
}

impl tracing::Subscriber for StderrLog {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        *metadata.level() <= tracing::Level::INFO
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut line = Line(event.metadata().level().to_string());
        event.record(&mut line);
        eprintln!("{}", line.0);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Where the child stops on purpose, to be killed there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hang {
    /// Never: the call runs to its end and the child exits.
    Nowhere,
    /// Inside the body, after the provider made the effect, before the outcome is recorded.
    AfterEffect,
    /// After the call returned (its outcome recorded), before the child exits.
    AfterRecord,
}

/// A child process running this binary's test `child` (which must call [`child_main`]) with
/// `hang`, leaving its traces in `work`. The store is the default one: `IDEMKIT_DB` is unset
/// unless the caller sets it.
pub fn child_command(work: &Path, hang: Hang, lease: Duration) -> Command {
    let role = match hang {
        Hang::Nowhere => "call",
        Hang::AfterEffect => "hang_after_effect",
        Hang::AfterRecord => "hang_after_record",
    };
    let mut cmd = Command::new(std::env::current_exe().expect("the test binary"));
    cmd.args([
        "child",
        "--exact",
        "--include-ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(ROLE, role)
    .env(WORK, work)
    .env(LEASE_MS, lease.as_millis().to_string())
    .env_remove("IDEMKIT_DB")
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    cmd
}

/// What a child's call returned, as it printed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reported {
    /// The tool's output, and whether it was a replay of a stored outcome.
    Ok { output: String, replayed: bool },
    /// idemkit refused: the kind of store error (if it was one) and the whole message.
    Err {
        store_kind: Option<String>,
        message: String,
    },
}

/// The one result line of a finished child.
pub fn reported(out: &Output) -> Reported {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.split_once("RESULT ").map(|(_, r)| r))
        .unwrap_or_else(|| {
            panic!(
                "the child printed no result (status {}):\n{stdout}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )
        });
    serde_json::from_str::<serde_json::Value>(line)
        .map(|v| match v["ok"].as_str() {
            Some(output) => Reported::Ok {
                output: output.to_owned(),
                replayed: v["replayed"] == true,
            },
            None => Reported::Err {
                store_kind: v["store_kind"].as_str().map(str::to_owned),
                message: v["error"].as_str().unwrap_or_default().to_owned(),
            },
        })
        .expect("a JSON result line")
}

/// Waits until `path` exists (a child's signal), or panics after a minute (a hung test).
pub fn wait_for(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The lines of a file, none if it does not exist.
pub fn lines(path: &Path) -> Vec<String> {
    fs::read_to_string(path)
        .map(|s| s.lines().map(str::to_owned).collect())
        .unwrap_or_default()
}

/// Every body run appends one line here: `pid key`.
pub fn body_log(work: &Path) -> PathBuf {
    work.join("bodies.log")
}

/// The provider appends one line here per effect it makes (not per request).
pub fn ledger(work: &Path) -> PathBuf {
    work.join("ledger.log")
}

/// Whether this process runs as root (which ignores file permissions).
pub fn is_root() -> bool {
    fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}

#[derive(Debug)]
pub struct ShipError(pub idem_runtime::Error);

impl Classify for ShipError {
    fn classify(&self) -> Failure {
        Failure::Permanent
    }
}

impl From<idem_runtime::Error> for ShipError {
    fn from(e: idem_runtime::Error) -> Self {
        ShipError(e)
    }
}

/// A provider that deduplicates by idempotency key, like Stripe: the first request with a key
/// makes the effect (a ledger line) and keeps its receipt in a file named by the key; a repeat
/// gets that receipt back and makes nothing.
fn provider_ship(work: &Path, key: &str) -> String {
    let dir = work.join("provider");
    fs::create_dir_all(&dir).unwrap();
    let receipt = format!("receipt-{}", std::process::id());
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(dir.join(key))
    {
        Ok(mut f) => {
            f.write_all(receipt.as_bytes()).unwrap();
            f.sync_all().unwrap();
            append(&ledger(work), &format!("shipped under {key}"));
            receipt
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            fs::read_to_string(dir.join(key)).unwrap()
        }
        Err(e) => panic!("provider: {e}"),
    }
}

fn append(path: &Path, line: &str) {
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    writeln!(f, "{line}").unwrap();
    f.sync_all().unwrap();
}

fn sleep_forever() -> ! {
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// The child's side: call the tool `ship(order = 42)` once under the runtime in force (the
/// default store: no runtime is installed), print `RESULT {json}`, and hang where told to.
pub fn child_main() {
    let Ok(role) = std::env::var(ROLE) else {
        return; // Run without a role (e.g. `--include-ignored` by hand): nothing to do.
    };
    if std::env::var_os(LOG_TO_STDERR).is_some() {
        tracing::subscriber::set_global_default(StderrLog).expect("the only subscriber");
    }
    let work = PathBuf::from(std::env::var(WORK).expect("IDEMKIT_TEST_WORK"));
    let lease = Duration::from_millis(std::env::var(LEASE_MS).expect("lease").parse().unwrap());
    if let Ok(go) = std::env::var(GO) {
        wait_for(Path::new(&go)); // Start together with the other children.
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (result, info) = runtime.block_on(observe(async {
        let order = 42u64;
        Tool::new("ship")
            .lease(lease)
            .in_flight_wait(Duration::from_secs(30))
            .max_attempts(1)
            .side_effect(
                &[("order", &order)],
                &serde_json::json!({ "to": "Lyon" }),
                |key| {
                    let work = work.clone();
                    let role = role.clone();
                    async move {
                        append(&body_log(&work), &format!("{} {key}", std::process::id()));
                        // Long enough for the other children to find the key claimed and wait.
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        let receipt = provider_ship(&work, key.as_str());
                        if role == "hang_after_effect" {
                            fs::write(work.join("effect_made"), b"").unwrap();
                            sleep_forever();
                        }
                        Ok::<_, ShipError>(format!("order {order} shipped: {receipt}"))
                    }
                },
            )
            .await
    }));
    let line = match &result {
        Ok(output) => serde_json::json!({
            "ok": output,
            "replayed": info.as_ref().is_some_and(|i| i.outcome == CallOutcome::Replayed),
        }),
        Err(ShipError(e)) => serde_json::json!({
            "error": e.to_string(),
            "store_kind": match e {
                idem_runtime::Error::Store { source, .. } => Some(format!("{:?}", source.kind())),
                _ => None,
            },
        }),
    };
    println!("\nRESULT {line}");
    std::io::stdout().flush().unwrap();
    if role == "hang_after_record" {
        fs::write(work.join("recorded"), b"").unwrap();
        sleep_forever();
    }
}
