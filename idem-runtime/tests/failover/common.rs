//! What the failover tests share: finding the Debian server binaries (a test fails without
//! them; `scripts/test.sh` leaves out those of a server that is not installed), a replication link that can lag on demand, the tool whose body counts
//! its effects the way a provider without deduplication would, and the tally of double runs and
//! lost outcomes.
#![allow(dead_code)] // Each test file uses part of it.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idem_runtime::{CallOutcome, Classify, Error, Failure, Idem, Tool, observe};

/// Whether this run is CI's (`CI` set and not `false`): a missing binary fails there.
pub fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false")
}

/// The path of server binary `name` (the newest `/usr/lib/postgresql/*/bin`, then PATH). A
/// missing one fails the test, saying which Debian package brings it: `scripts/test.sh` leaves
/// out the tests of a server that is not installed (they live in modules named
/// `needs_postgres` and `needs_redis`), saying so.
pub fn binary(name: &str, package: &str) -> PathBuf {
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(name));
    let mut pg: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin").join(name))
        .collect();
    pg.sort_by_key(|p| {
        p.components()
            .nth(4)
            .and_then(|c| c.as_os_str().to_str()?.parse::<u32>().ok())
    });
    // Debian's PostgreSQL directory first: its binaries belong together (PATH may hold wrappers).
    if let Some(found) = pg.into_iter().rev().chain(on_path).find(|p| p.is_file()) {
        return found;
    }
    panic!(
        "{name} not found: install it (Debian: apt-get install {package}), or leave these tests \
         out as `scripts/test.sh` does where it is not installed"
    )
}

/// A loopback port nobody listens on now: the OS's pick (bound at port 0 and read back), so
/// that two runs on one machine, and `scripts/test-servers.sh`'s servers, never meet. Every
/// server the failover tests start takes one; one that finds it taken by the time it binds
/// (another process got it meanwhile) takes another.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A fresh directory under `$TMPDIR` that the `postgres` user may enter (tempfile makes 0700).
pub fn workdir(name: &str) -> tempfile::TempDir {
    let dir = tempfile::Builder::new().prefix(name).tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// Polls `ready` every 20 ms until it holds; panics after `within` (a server that never came
/// up: a broken setup, not a measurement).
pub fn wait_until(what: &str, within: Duration, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !ready() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The replication link between a primary and its replica, through this process: the replica
/// connects to [`port`](Self::port), each connection is forwarded to the primary. While
/// [`lag`](Self::lag) is on, what the primary sends is held here (a slow or partitioned
/// network); [`cut`](Self::cut) closes every connection and drops what was held, as a primary
/// that dies with its replica behind does.
pub struct Link {
    port: u16,
    lagging: Arc<AtomicBool>,
    cut: Arc<AtomicBool>,
    streams: Arc<Mutex<Vec<TcpStream>>>,
}

impl Link {
    /// Listens on a free loopback port, forwarding to `127.0.0.1:upstream`.
    pub fn start(upstream: u16) -> Link {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let lagging = Arc::new(AtomicBool::new(false));
        let cut = Arc::new(AtomicBool::new(false));
        let streams = Arc::new(Mutex::new(Vec::new()));
        let (l, c, s) = (lagging.clone(), cut.clone(), streams.clone());
        std::thread::spawn(move || {
            for downstream in listener.incoming() {
                if c.load(SeqCst) {
                    return;
                }
                let Ok(downstream) = downstream else { continue };
                let Ok(upstream) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    continue;
                };
                let _ = downstream.set_nodelay(true);
                let _ = upstream.set_nodelay(true);
                {
                    let mut all = s.lock().unwrap();
                    all.push(downstream.try_clone().unwrap());
                    all.push(upstream.try_clone().unwrap());
                }
                // The replica's side (acknowledgements) always passes; the primary's may lag.
                pump(
                    downstream.try_clone().unwrap(),
                    upstream.try_clone().unwrap(),
                    None,
                );
                pump(upstream, downstream, Some(l.clone()));
            }
        });
        Link {
            port,
            lagging,
            cut,
            streams,
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// From now on, nothing the primary sends reaches the replica.
    pub fn lag(&self) {
        self.lagging.store(true, SeqCst);
    }

    /// Closes the link: what was held is lost.
    pub fn cut(&self) {
        self.cut.store(true, SeqCst);
        for s in self.streams.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
        let _ = TcpStream::connect(("127.0.0.1", self.port)); // Wakes the accept loop.
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.cut();
    }
}

/// Copies `from` to `to` on a thread; while `hold` is set, what is read is kept, not sent.
fn pump(mut from: TcpStream, mut to: TcpStream, hold: Option<Arc<AtomicBool>>) {
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        let mut held = Vec::new();
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if hold.as_ref().is_some_and(|h| h.load(SeqCst)) {
                held.extend_from_slice(&buf[..n]);
            } else if to.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Both);
    });
}

/// The error of the counting tool, and of [`charge`].
#[derive(Debug)]
pub enum E {
    Runtime(Box<Error>),
    /// The body's output, told unrecorded (S17): the store did not acknowledge it.
    Unrecorded(String),
}

impl Classify for E {
    fn classify(&self) -> Failure {
        Failure::Permanent
    }
}

impl From<Error> for E {
    fn from(e: Error) -> Self {
        E::Runtime(Box::new(e))
    }
}

/// A provider that cannot deduplicate: it counts every request its body sends, per order.
#[derive(Default, Clone)]
pub struct Effects(Arc<Mutex<HashMap<u64, u32>>>);

impl Effects {
    /// A provider that already saw `counts` (order, requests): a body run after them says so in
    /// its output (`effect n`), so its output differs from the one before.
    pub fn already(counts: impl IntoIterator<Item = (u64, u32)>) -> Self {
        Effects(Arc::new(Mutex::new(counts.into_iter().collect())))
    }

    pub fn count(&self, order: u64) -> u32 {
        self.0.lock().unwrap().get(&order).copied().unwrap_or(0)
    }
    fn add(&self, order: u64) -> u32 {
        let mut all = self.0.lock().unwrap();
        let n = all.entry(order).or_default();
        *n += 1;
        *n
    }
}

/// Calls `charge(order)` through `idem`: no deduplication at the provider and no `verify`
/// (`resend(false)`: S20 forbids a blind re-send), one attempt. The body counts the effect in
/// `effects`, then awaits `after_effect`; its output names the order. `Ok` only when the store
/// acknowledged the outcome (completed or replayed): an output whose outcome could not be
/// recorded (`CallOutcome::Unrecorded`, S17: the caller is told so) is [`Unrecorded`].
pub async fn charge<F: Future<Output = ()>>(
    idem: &Idem,
    order: u64,
    lease: Duration,
    effects: &Effects,
    after_effect: F,
) -> Result<String, E> {
    let (result, info) = observe(charge_observed(idem, order, lease, effects, after_effect)).await;
    let outcome = info.map(|i| i.outcome);
    match result {
        Ok(out) if outcome == Some(CallOutcome::Unrecorded) => Err(E::Unrecorded(out)),
        other => other,
    }
}

async fn charge_observed<F: Future<Output = ()>>(
    idem: &Idem,
    order: u64,
    lease: Duration,
    effects: &Effects,
    after_effect: F,
) -> Result<String, E> {
    let mut after = Some(after_effect);
    Tool::new("charge")
        .idem(idem)
        .lease(lease)
        .max_attempts(1)
        .resend(false)
        .in_flight_wait(lease * 4 + Duration::from_secs(5))
        .side_effect(&[("order", &order)], &order, |_key| {
            let n = effects.add(order);
            let after = after.take().expect("one body run per call");
            async move {
                after.await;
                Ok::<_, E>(format!("receipt of order {order} (effect {n})"))
            }
        })
        .await
}

/// One repetition's count, and the tally over many.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    pub runs: u32,
    /// Keys whose body made its effect more than once.
    pub double_runs: u32,
    /// Calls that returned `Ok` whose outcome the store no longer gives back.
    pub lost_outcomes: u32,
    /// Calls told `Ok` before the fault.
    pub acknowledged: u32,
    /// Calls after the fault that ended in `Error::Ambiguous` (a record found running with its
    /// holder gone: S19/S20 refuse to send again).
    pub ambiguous_after: u32,
    /// Calls before the fault that ended in an error, or in an output told unrecorded (S17):
    /// not acknowledged.
    pub refused_before: u32,
    /// Calls before the fault that it cut off mid-call (not acknowledged).
    pub cut_off: u32,
}

impl Tally {
    /// Adds one repetition: `before` the first caller's result, `after` the caller's after the
    /// fault (same key), `effects` how often the body made its effect.
    /// `None` for a first call cut off by the fault.
    pub fn add(
        &mut self,
        before: Option<&Result<String, E>>,
        after: &Result<String, E>,
        effects: u32,
    ) {
        self.runs += 1;
        self.double_runs += u32::from(effects > 1);
        match before {
            Some(Ok(out)) => {
                self.acknowledged += 1;
                if after.as_ref().ok() != Some(out) {
                    self.lost_outcomes += 1;
                }
            }
            Some(Err(_)) => self.refused_before += 1,
            None => self.cut_off += 1,
        }
        self.ambiguous_after += u32::from(ambiguous(after));
    }

    /// Prints the counts (a `FAILOVER …` line), also appended to the file `IDEMKIT_FAILOVER_LOG`
    /// names, if set (`.ci/run` shows it).
    pub fn print(&self, case: &str) {
        let line = format!(
            "FAILOVER {case}: {} runs, {} double runs, {} lost outcomes ({} acknowledged before \
             the fault, {} refused before it, {} cut off by it, {} ambiguous after it)",
            self.runs,
            self.double_runs,
            self.lost_outcomes,
            self.acknowledged,
            self.refused_before,
            self.cut_off,
            self.ambiguous_after
        );
        log_line(&line);
    }
}

/// Prints `line` and appends it to the file `IDEMKIT_FAILOVER_LOG` names, if set.
pub fn log_line(line: &str) {
    println!("{line}");
    if let Some(path) = std::env::var_os("IDEMKIT_FAILOVER_LOG") {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        writeln!(f, "{line}").unwrap();
    }
}

/// Whether `r` is `Error::Ambiguous`.
pub fn ambiguous(r: &Result<String, E>) -> bool {
    matches!(r, Err(E::Runtime(e)) if matches!(**e, Error::Ambiguous { .. }))
}

/// Runs the tests of one binary one at a time (held across awaits: tokio's): each starts and
/// kills servers, and its waits (a replica's lag, a primary's patience) assume the machine is
/// not also running another test's.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

pub async fn one_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().await
}

/// Runs `cmd` to its end; panics with its output if it failed.
pub fn run(cmd: &mut std::process::Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whether this process runs as root (PostgreSQL then runs as `postgres`).
pub fn is_root() -> bool {
    // SAFETY: getuid has no preconditions.
    unsafe { libc::getuid() == 0 }
}

/// Sends `signal` to process `pid`.
pub fn signal(pid: u32, signal: i32) {
    // SAFETY: kill has no memory effects; the pid is one of our children.
    let r = unsafe { libc::kill(pid as i32, signal) };
    assert_eq!(r, 0, "kill({pid}, {signal})");
}

pub fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}
