//! A deterministic simulation of agents calling a payment provider through idemkit.
//!
//! One seed makes one world: a few agent hosts, each running a plan of charges through
//! `Tool::side_effect` with a store they all share; an in-memory provider that deduplicates by
//! `Idempotency-Key` (and is the ground truth: it counts every charge it makes); a network that
//! loses, delays and partitions messages in both directions; hosts that crash mid-plan and
//! restart; a store that fails or loses its replies. Every random choice comes from the seed
//! (idemkit's own jitter too, through fastrand's thread-local generator), and time is tokio's
//! paused clock, so a seed replays exactly.
//!
//! Faults are injected until the world "heals" (a time drawn per seed); agents keep retrying
//! each operation after that, so every operation must end with its outcome.
//!
//! The world sees body runs, not only charges: every attempt idemkit starts is recorded with
//! its call, key, start and end (returned, failed, dropped or panicked), whether its request
//! reached the provider and whether it charged. In some worlds the provider does not
//! deduplicate by key, so that a second run of an operation shows as a second charge. Each
//! call runs in a task of its own (a panicking body fails that task, not the agent), under a
//! task-local call id that ties the lease token the store sees to the call.
#![allow(dead_code)]

mod agent;
mod net;
mod store;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use uuid::Uuid;

/// How long, in simulated time, a world may take before the run counts as a hang (faults stop
/// within 60 s; the slowest of the 10,000 default worlds is done after 48 s).
const SIM_DEADLINE: Duration = Duration::from_secs(600);
/// How long the world keeps running after every agent finished, so that messages still in
/// flight land at the provider (a late duplicate must be counted too).
const SETTLE: Duration = Duration::from_secs(60);

/// How the agents use idemkit: the correct way, or a deliberately broken one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// The key is derived once per operation from its fields, through `Tool::side_effect`.
    Correct,
    /// Broken: the body sends a freshly minted key on every attempt (the C4 mistake).
    KeyPerAttempt,
    /// Broken: the key includes a nonce minted per call, so a re-run after a crash or an
    /// exhausted call gets a new key.
    KeyPerCall,
    /// Broken store: it never hands a dead holder's expired lease over (no S8), so the
    /// operation's callers wait for ever.
    NoTakeover,
    /// Broken (S12): renewals are answered `Applied` but never extend the lease, as if the
    /// holder did not renew: a body longer than the lease is taken over while it runs.
    NoRenewal,
    /// Broken (S14): ambiguity is forgotten once a later attempt fails otherwise. Emulated from
    /// outside the runtime, since a correct executor's choices cannot be undone inside it: the
    /// store's `mark_ambiguous` deletes the record (a store that forgets ambiguity), and the
    /// agent is handed the last attempt's own error instead of `Error::Ambiguous` (what an
    /// executor that releases after "ambiguous, then transient" returns). The store half alone
    /// is invisible here (a claim takes an ambiguous record over exactly like an absent one);
    /// what the checks catch is the caller told "attempts exhausted" (nothing happened) when
    /// an attempt of its own call charged.
    AmbiguityNotSticky,
    /// Broken (S15): a dropped call (cancelled, or its body panicked) leaves its claim behind;
    /// emulated by a store that ignores the release or mark_ambiguous a dropped call's guard
    /// sends (as if none were sent), so the claim stays until its lease ends.
    NoDropGuard,
    /// Broken (S17): a completion write that failed is not retried. Emulated by a store link
    /// that, once a token's completion write failed, lets none of its later ones through (as if
    /// they were never sent): the record stays claimed until its lease ends and is taken over.
    NoCompletionRetry,
}

impl Protocol {
    /// The value of `IDEMKIT_SIM_BREAK` that selects this protocol.
    pub fn env_name(self) -> Option<&'static str> {
        match self {
            Protocol::Correct => None,
            Protocol::KeyPerAttempt => Some("key-per-attempt"),
            Protocol::KeyPerCall => Some("key-per-call"),
            Protocol::NoTakeover => Some("no-takeover"),
            Protocol::NoRenewal => Some("no-renewal"),
            Protocol::AmbiguityNotSticky => Some("ambiguity-not-sticky"),
            Protocol::NoDropGuard => Some("no-drop-guard"),
            Protocol::NoCompletionRetry => Some("no-completion-retry"),
        }
    }

    /// The protocol named by `IDEMKIT_SIM_BREAK` (unset: the correct one).
    pub fn from_env() -> Protocol {
        match std::env::var("IDEMKIT_SIM_BREAK").ok().as_deref() {
            None | Some("") => Protocol::Correct,
            Some("key-per-attempt") => Protocol::KeyPerAttempt,
            Some("key-per-call") => Protocol::KeyPerCall,
            Some("no-takeover") => Protocol::NoTakeover,
            Some("no-renewal") => Protocol::NoRenewal,
            Some("ambiguity-not-sticky") => Protocol::AmbiguityNotSticky,
            Some("no-drop-guard") => Protocol::NoDropGuard,
            Some("no-completion-retry") => Protocol::NoCompletionRetry,
            Some(other) => {
                panic!(
                    "IDEMKIT_SIM_BREAK={other}: expected key-per-attempt, key-per-call, no-takeover, \
                     no-renewal, ambiguity-not-sticky, no-drop-guard or no-completion-retry"
                )
            }
        }
    }
}

/// The one command that replays `seed` with `protocol`, printing every event.
pub fn replay_command(seed: u64, protocol: Protocol) -> String {
    let brk = protocol
        .env_name()
        .map(|n| format!("IDEMKIT_SIM_BREAK={n} "))
        .unwrap_or_default();
    format!(
        "{brk}IDEMKIT_SIM_SEED={seed} cargo test -p idem-runtime --test simulation exactly_once -- --nocapture"
    )
}

/// One logical operation: a charge identified by customer and period.
#[derive(Debug, Clone)]
pub struct Op {
    pub customer: String,
    pub period: String,
    pub amount_cents: u64,
    /// The provider declines it (a `Permanent` failure): it must take effect zero times.
    pub declined: bool,
    /// While faults are injected, the provider works on it longer than the lease (1.3-2.5
    /// leases); the client waits for it.
    pub slow_body: bool,
    /// While faults are injected, its first request commits and loses its response (an
    /// ambiguous attempt), and the next `max_attempts` requests get 503 (transient).
    pub ambiguous_then_transient: bool,
    /// Its receipt carries `fee_rate = inf`, which serialises to `null` and does not read
    /// back: its outcome does not round-trip.
    pub unreplayable: bool,
}

/// What the provider returns for a charge it made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Receipt {
    pub charge_id: u64,
    pub op: usize,
    pub amount_cents: u64,
    /// 0.029, or infinite for an operation whose outcome does not round-trip.
    pub fee_rate: f64,
}

/// A seed's world: everything drawn from the seed before the first event.
#[derive(Debug, Clone)]
pub struct Config {
    pub seed: u64,
    pub protocol: Protocol,
    pub ops: Vec<Op>,
    /// The operations each host runs, in order (an operation in two plans is raced).
    pub plans: Vec<Vec<usize>>,
    pub lease: Duration,
    pub in_flight_wait: Duration,
    pub max_attempts: u32,
    pub client_timeout: Duration,
    /// From then on no fault is injected.
    pub heal_at: Duration,
    pub p_request_loss: f64,
    pub p_response_loss: f64,
    pub p_slow_message: f64,
    pub p_unavailable: f64,
    pub p_rate_limited: f64,
    pub p_slow_provider: f64,
    pub p_store_down: f64,
    pub p_store_reply_lost: f64,
    /// Per host, the windows in which it does not reach the store (nor the provider, unless
    /// the window is `store_only`).
    pub partitions: Vec<Vec<Partition>>,
    /// Per host, when it crashes (each crash ends the running incarnation).
    pub crashes: Vec<Vec<Duration>>,
    /// Whether the provider deduplicates by `Idempotency-Key` (like Stripe); if not, every
    /// request that reaches its commit charges, so a second body run shows as a second charge.
    pub provider_dedup: bool,
    /// Per call, the chance that its caller drops it at a random point (and retries later).
    pub p_cancel: f64,
    /// Per attempt, the chance that the body panics (before sending, or with the answer in hand).
    pub p_panic: f64,
    /// Per completion write, the chance that it fails before reaching the store (at most twice
    /// per lease token).
    pub p_complete_fails: f64,
}

/// A window in which a host does not reach the store.
#[derive(Debug, Clone, Copy)]
pub struct Partition {
    pub from: Duration,
    pub to: Duration,
    /// The provider stays reachable: the holder keeps talking to the provider while its lease
    /// cannot be renewed.
    pub store_only: bool,
}

fn ms(rng: &mut fastrand::Rng, range: std::ops::RangeInclusive<u64>) -> Duration {
    Duration::from_millis(rng.u64(range))
}

impl Config {
    pub fn from_seed(seed: u64, protocol: Protocol) -> Config {
        let mut rng = fastrand::Rng::with_seed(seed);
        let n_hosts = rng.usize(2..=3);
        let n_ops = rng.usize(3..=6);
        let mut ops: Vec<Op> = (0..n_ops)
            .map(|i| Op {
                customer: format!("cus_{}", i % 3),
                period: format!("2026-{:02}", i + 1),
                amount_cents: rng.u64(100..=10_000),
                declined: rng.f64() < 0.1,
                slow_body: false,
                ambiguous_then_transient: false,
                unreplayable: false,
            })
            .collect();
        let mut plans = vec![Vec::new(); n_hosts];
        for op in 0..n_ops {
            let first = rng.usize(..n_hosts);
            plans[first].push(op);
            if rng.f64() < 0.35 {
                let second = (first + rng.usize(1..n_hosts)) % n_hosts;
                plans[second].push(op);
            }
        }
        for plan in &mut plans {
            rng.shuffle(plan);
        }
        for (i, op) in ops.iter_mut().enumerate() {
            // Slow bodies matter most where another agent waits on the same operation.
            let raced = plans.iter().filter(|p| p.contains(&i)).count() > 1;
            op.slow_body = rng.f64() < if raced { 0.4 } else { 0.1 };
            op.ambiguous_then_transient = rng.f64() < 0.12;
            op.unreplayable = rng.f64() < 0.08;
        }
        let heal_at = ms(&mut rng, 10_000..=60_000);
        // Most plans finish within seconds, so partitions and crashes come early to hit them.
        let early = heal_at.min(Duration::from_secs(10)).as_millis() as u64;
        let window = |rng: &mut fastrand::Rng| {
            let from = ms(rng, 0..=early);
            let to = (from + ms(rng, 1_000..=15_000)).min(heal_at);
            Partition {
                from,
                to,
                store_only: rng.bool(),
            }
        };
        let partitions = (0..n_hosts)
            .map(|_| (0..rng.usize(0..=2)).map(|_| window(&mut rng)).collect())
            .collect();
        let crashes = (0..n_hosts)
            .map(|_| {
                let mut at: Vec<Duration> = (0..rng.usize(0..=2))
                    .map(|_| ms(&mut rng, 0..=early))
                    .collect();
                at.sort();
                at
            })
            .collect();
        Config {
            seed,
            protocol,
            ops,
            plans,
            lease: ms(&mut rng, 1_000..=5_000),
            in_flight_wait: ms(&mut rng, 500..=8_000),
            max_attempts: rng.u32(2..=5),
            client_timeout: ms(&mut rng, 300..=2_500),
            heal_at,
            p_request_loss: rng.f64() * 0.25,
            p_response_loss: rng.f64() * 0.3,
            p_slow_message: rng.f64() * 0.15,
            p_unavailable: rng.f64() * 0.1,
            p_rate_limited: rng.f64() * 0.05,
            p_slow_provider: rng.f64() * 0.1,
            p_store_down: rng.f64() * 0.05,
            p_store_reply_lost: rng.f64() * 0.03,
            partitions,
            crashes,
            provider_dedup: rng.f64() < 0.7,
            p_cancel: rng.f64() * 0.08,
            p_panic: rng.f64() * 0.04,
            p_complete_fails: rng.f64() * 0.4,
        }
    }

    /// Whether `host` was cut from the store at some time in `[from, to]`.
    pub fn cut_from_store_during(&self, host: usize, from: Duration, to: Duration) -> bool {
        self.partitions[host]
            .iter()
            .any(|p| p.from <= to && from < p.to)
    }

    /// Whether `host` crashed at some time in `(from, to]`.
    pub fn crashed_during(&self, host: usize, from: Duration, to: Duration) -> bool {
        self.crashes[host].iter().any(|&c| from < c && c <= to)
    }
}

/// Counts by kind, printed in a stable order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts(pub BTreeMap<&'static str, u64>);

impl Counts {
    pub fn add(&mut self, kind: &'static str) {
        *self.0.entry(kind).or_default() += 1;
    }

    pub fn merge(&mut self, other: &Counts) {
        for (k, v) in &other.0 {
            *self.0.entry(k).or_default() += v;
        }
    }

    pub fn get(&self, kind: &str) -> u64 {
        self.0.get(kind).copied().unwrap_or(0)
    }
}

impl fmt::Display for Counts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (k, v) in &self.0 {
            writeln!(f, "  {v:>8}  {k}")?;
        }
        Ok(())
    }
}

/// The fault kinds the simulation injects: a run over many seeds must inject each of them.
pub const FAULT_KINDS: &[&str] = &[
    "request lost",
    "response lost after commit",
    "response lost before commit",
    "message delayed 0.5-6 s",
    "message dropped by a partition",
    "provider 503 before commit",
    "provider 429 Retry-After",
    "provider slow (1-6 s)",
    "provider body slower than the lease",
    "ambiguous attempt then transient ones (scripted)",
    "outcome does not round-trip (fee_rate = inf)",
    "store unavailable",
    "store reply lost after the write",
    "store unreachable while the provider is (store-only partition)",
    "completion write failed before reaching the store",
    "host crash mid-plan",
    "host crash while holding a lease",
    "caller dropped its call (cancelled)",
    "body panicked before sending",
    "body panicked with the answer in hand",
    "operation raced by two agents (in both plans)",
    "provider does not deduplicate (world)",
];

/// What the world saw happen because of the faults: evidence that the hard paths ran.
pub const CONSEQUENCES: &[&str] = &[
    "client timeout (ambiguous attempt)",
    "provider deduplicated a repeated key",
    "replayed from the store",
    "waited on another holder's live lease",
    "lease taken over (expired holder)",
    "ambiguous record taken over",
    "late write fenced (holder was taken over)",
    "lease renewed while the body ran",
    "completion write retried under its token",
    "dropped call's claim ended at once",
    "call dropped before it held the key",
    "call dropped while an attempt ran",
    "call dropped after an attempt (backoff or end write)",
    "caller got InFlight",
    "caller got a store error",
    "caller got LeaseLost",
    "caller got Ambiguous (an earlier attempt was ambiguous)",
    "caller got Unreplayable",
    "caller saw its body panic",
];

/// What one seed did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    pub faults: Counts,
    pub consequences: Counts,
    /// What happened across partitions between a holder and the store (not failures): the
    /// provider's deduplication, or nothing, was the fence.
    pub across_partitions: Counts,
    /// Calls that returned to a caller, and charges the provider made.
    pub calls: u64,
    pub charges: u64,
    /// Body runs (attempts started) and those whose request reached the provider.
    pub body_runs: u64,
    pub attempts_at_provider: u64,
    /// When the last agent finished (simulated time); over many seeds, the slowest world.
    pub finished_at: Duration,
    /// The provider's charges in order: (simulated ms, op, key): pins determinism.
    pub trace: Vec<(u128, usize, String)>,
}

/// Why a seed failed.
#[derive(Debug, Default)]
pub struct SimFailure {
    pub seed: u64,
    pub protocol: Option<Protocol>,
    pub duplicates: bool,
    /// Some caller never got its operation's outcome.
    pub stuck: bool,
    /// Two body runs of one key overlapped while both holders reached the store.
    pub overlap: bool,
    /// An operation ran again after an attempt of it had succeeded.
    pub reran: bool,
    /// A caller was told its call failed without effect, though an attempt of it charged.
    pub misinformed: bool,
    /// A dropped call's claim was not ended at once.
    pub stale_claim: bool,
    /// A caller got an answer that is none of the clear ones.
    pub unclear: bool,
    pub problems: Vec<String>,
}

impl fmt::Display for SimFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let protocol = self.protocol.unwrap_or(Protocol::Correct);
        writeln!(f, "simulation seed {} ({:?}) failed:", self.seed, protocol)?;
        for p in &self.problems {
            writeln!(f, "  - {p}")?;
        }
        write!(f, "  replay: {}", replay_command(self.seed, protocol))
    }
}

/// One charge the provider made.
#[derive(Debug, Clone)]
struct Charge {
    receipt: Receipt,
    /// The body run whose request made it.
    attempt: usize,
    /// When it was made.
    at: Duration,
}

/// The provider's ground truth.
#[derive(Debug, Default)]
struct Provider {
    /// The charge made under each idempotency key.
    by_key: BTreeMap<String, Receipt>,
    /// Every charge made for each operation (more than one is a duplicate).
    effects: BTreeMap<usize, Vec<Charge>>,
    next_charge: u64,
    trace: Vec<(u128, usize, String)>,
    /// Per operation with a scripted "ambiguous then transient" sequence: 503s still to give.
    scripted: BTreeMap<usize, u32>,
}

/// How a body run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptEnd {
    Running,
    /// The body returned the receipt.
    Ok,
    /// The body returned an error.
    Failed(&'static str),
    /// The body's future was dropped (cancelled, lease lost, host crashed) or it panicked.
    Dropped,
}

/// One body run: what the simulation sees of an attempt.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub call: usize,
    pub host: usize,
    pub op: usize,
    /// The runtime's key (what the body was handed).
    pub key: String,
    pub start: Duration,
    pub end: Option<Duration>,
    pub how: AttemptEnd,
    pub reached_provider: bool,
    /// It made a new charge at the provider.
    pub charged: bool,
    /// The provider answered it with the receipt of an earlier request of its key.
    pub deduplicated: bool,
    /// When it returned the receipt: whether its call's token still held the record.
    pub lease_live_at_ok: bool,
}

/// One call of the tool by an agent.
#[derive(Debug, Clone, Default)]
struct CallRec {
    host: usize,
    op: usize,
    token: Option<Uuid>,
    /// When its caller dropped it (cancelled, or its body panicked).
    dropped_at: Option<Duration>,
    /// Its claim was applied in the shared store.
    acquired: bool,
    /// The first end write (complete, release, mark_ambiguous) that reached the store link.
    end_write_at: Option<Duration>,
    /// A completion write of it was stopped by the store being down or cut off.
    completion_blocked: bool,
    /// An end write of it was stopped by the store being down or cut off.
    end_write_failed: bool,
    /// Dropped while holding its claim: whether the record still held its token (live) a
    /// moment (`DROP_PROBE`) after the drop.
    stale_after_drop: Option<bool>,
    completions: u32,
    injected_completion_failures: u32,
    /// The error of its last attempt, and whether an earlier one was ambiguous.
    last_error: Option<&'static str>,
    attempts: Vec<usize>,
    /// The key it claimed.
    key: Option<String>,
}

/// How long after a call is dropped its claim must be gone (S15: at once; the guard's write
/// takes up to ~20 ms over the simulated link).
const DROP_PROBE: Duration = Duration::from_millis(200);

/// One simulated millisecond: a crash ends a body run within it.
const MS: Duration = Duration::from_millis(1);

/// The mutable state of one world.
#[derive(Debug, Default)]
struct State {
    rng: Option<fastrand::Rng>,
    provider: Provider,
    faults: Counts,
    consequences: Counts,
    /// Every result a caller got: (host, op, call, Ok(receipt) or the error's text).
    results: Vec<(usize, usize, usize, Result<Receipt, String>)>,
    /// The last result of each (host, op) in the host's plan.
    finals: BTreeMap<(usize, usize), Result<Receipt, String>>,
    calls: Vec<CallRec>,
    attempts: Vec<Attempt>,
    /// The call that holds each lease token.
    tokens: HashMap<Uuid, usize>,
}

tokio::task_local! {
    /// The call a task runs: lets the store tie a claim's token to its call.
    pub static CALL: usize;
}

/// One seed's world, shared by every task in it.
pub struct World {
    pub cfg: Config,
    start: Instant,
    verbose: bool,
    /// The durable store every host shares; it survives their crashes.
    pub shared_store: Arc<idem_runtime::MemoryStore>,
    state: Mutex<State>,
}

/// Polls a future once: the memory store answers at its first poll.
pub fn now_or_never<F: std::future::Future>(f: F) -> Option<F::Output> {
    let mut f = std::pin::pin!(f);
    match f
        .as_mut()
        .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
    {
        std::task::Poll::Ready(v) => Some(v),
        std::task::Poll::Pending => None,
    }
}

impl World {
    fn new(cfg: Config, verbose: bool) -> World {
        let rng = fastrand::Rng::with_seed(cfg.seed ^ 0x5eed_1de4_c0de_0001);
        World {
            cfg,
            start: Instant::now(),
            verbose,
            shared_store: Arc::new(idem_runtime::MemoryStore::new()),
            state: Mutex::new(State {
                rng: Some(rng),
                ..State::default()
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("sim state")
    }

    /// Simulated time since the world began.
    pub fn now(&self) -> Duration {
        self.start.elapsed()
    }

    /// Whether faults are still being injected.
    pub fn faulty(&self) -> bool {
        self.now() < self.cfg.heal_at
    }

    /// The partition cutting `host` from the store now, if any.
    pub fn store_cut(&self, host: usize) -> Option<Partition> {
        let now = self.now();
        self.cfg.partitions[host]
            .iter()
            .find(|p| p.from <= now && now < p.to)
            .copied()
    }

    /// Whether `host` is cut from the provider now.
    pub fn partitioned(&self, host: usize) -> bool {
        self.store_cut(host).is_some_and(|p| !p.store_only)
    }

    /// Draws from the world's generator.
    pub fn rng<T>(&self, f: impl FnOnce(&mut fastrand::Rng) -> T) -> T {
        f(self.state().rng.as_mut().expect("rng"))
    }

    /// True with probability `p`, while faults are injected.
    pub fn fault_chance(&self, p: f64) -> bool {
        self.faulty() && self.rng(|r| r.f64()) < p
    }

    pub fn delay(&self, range: std::ops::RangeInclusive<u64>) -> Duration {
        self.rng(|r| ms(r, range))
    }

    pub fn fault(&self, host: usize, kind: &'static str) {
        self.state().faults.add(kind);
        self.log(host, || format!("FAULT {kind}"));
    }

    pub fn saw(&self, host: usize, kind: &'static str) {
        self.state().consequences.add(kind);
        self.log(host, || kind.to_owned());
    }

    pub fn log(&self, host: usize, line: impl FnOnce() -> String) {
        if self.verbose {
            eprintln!(
                "[{:>9.3}s] host {host}: {}",
                self.now().as_secs_f64(),
                line()
            );
        }
    }

    /// A new call of `op` by `host`.
    pub fn new_call(&self, host: usize, op: usize) -> usize {
        let mut st = self.state();
        st.calls.push(CallRec {
            host,
            op,
            ..CallRec::default()
        });
        st.calls.len() - 1
    }

    /// The call's caller dropped it (or its body is about to panic).
    pub fn call_dropped(&self, call: usize) {
        let now = self.now();
        self.state().calls[call].dropped_at.get_or_insert(now);
    }

    /// Where in its call a cancellation landed.
    pub fn where_dropped(&self, call: usize) -> &'static str {
        let st = self.state();
        let c = &st.calls[call];
        match c.attempts.last().map(|&a| st.attempts[a].end) {
            None if !c.acquired => "call dropped before it held the key",
            None => "call dropped holding the key, before its first attempt",
            Some(None) => "call dropped while an attempt ran",
            Some(Some(_)) => "call dropped after an attempt (backoff or end write)",
        }
    }

    /// The claim of `call` under `token` was applied in the shared store.
    pub fn token_acquired(&self, call: Option<usize>, token: Uuid) {
        let Some(call) = call else { return };
        let mut st = self.state();
        st.tokens.insert(token, call);
        st.calls[call].token = Some(token);
        st.calls[call].acquired = true;
    }

    /// The call holding `token`, if it was dropped.
    pub fn dropped_call_of(&self, token: Uuid) -> Option<usize> {
        let st = self.state();
        let call = *st.tokens.get(&token)?;
        st.calls[call].dropped_at.map(|_| call)
    }

    /// An end write (complete, release, mark_ambiguous) for `token` reached the store link.
    pub fn end_write(&self, token: Uuid) {
        let now = self.now();
        let mut st = self.state();
        if let Some(&call) = st.tokens.get(&token) {
            st.calls[call].end_write_at.get_or_insert(now);
        }
    }

    /// A completion write for `token` arrives: how many came before it, and whether to fail it
    /// before the store (at most twice per token).
    pub fn completion_arrives(&self, token: Uuid) -> (u32, bool) {
        if self.cfg.protocol == Protocol::NoCompletionRetry {
            let st = self.state();
            if let Some(&call) = st.tokens.get(&token)
                && st.calls[call].injected_completion_failures > 0
            {
                // The broken executor would not have sent this retry: it never arrives.
                return (0, true);
            }
        }
        let p = self.cfg.p_complete_fails;
        let fail = self.fault_chance(p);
        let mut st = self.state();
        let Some(&call) = st.tokens.get(&token) else {
            return (0, false);
        };
        let rec = &mut st.calls[call];
        let before = rec.completions;
        rec.completions += 1;
        let fail = fail && rec.injected_completion_failures < 2;
        if fail {
            rec.injected_completion_failures += 1;
        }
        (before, fail)
    }

    /// An end write for `token` was stopped by the store being down or cut off.
    pub fn end_write_failed(&self, token: Uuid) {
        let mut st = self.state();
        if let Some(&call) = st.tokens.get(&token) {
            st.calls[call].end_write_failed = true;
        }
    }

    /// A moment after `call` was dropped: is its key claimable again (S15), i.e. does the
    /// record no longer hold the call's token? Looked at from a task of its own.
    pub fn probe_after_drop(self: &Arc<Self>, call: usize) {
        let world = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(DROP_PROBE).await;
            let (token, key) = {
                let st = world.state();
                let c = &st.calls[call];
                let Some(token) = c.token.filter(|_| c.acquired) else {
                    return;
                };
                let Some(key) = c.key.clone() else {
                    return;
                };
                (token, key)
            };
            let stale = world.holds(&key, token);
            world.state().calls[call].stale_after_drop = Some(stale);
        });
    }

    /// The key `call` claims (known once its claim was applied).
    pub fn claimed_key(&self, token: Uuid, key: String) {
        let mut st = self.state();
        if let Some(&call) = st.tokens.get(&token) {
            st.calls[call].key = Some(key);
        }
    }

    /// A completion write for `token` was stopped by the store being down or cut off.
    pub fn completion_blocked(&self, token: Uuid) {
        let mut st = self.state();
        if let Some(&call) = st.tokens.get(&token) {
            st.calls[call].completion_blocked = true;
        }
    }

    /// A body run of `call` begins.
    pub fn attempt_begins(&self, call: usize, key: String) -> usize {
        let now = self.now();
        let mut st = self.state();
        let (host, op) = (st.calls[call].host, st.calls[call].op);
        let id = st.attempts.len();
        st.attempts.push(Attempt {
            call,
            host,
            op,
            key,
            start: now,
            end: None,
            how: AttemptEnd::Running,
            reached_provider: false,
            charged: false,
            deduplicated: false,
            lease_live_at_ok: false,
        });
        st.calls[call].attempts.push(id);
        id
    }

    /// A body run ended so.
    pub fn attempt_ends(&self, id: usize, how: AttemptEnd) {
        let now = self.now();
        let mut st = self.state();
        let a = &mut st.attempts[id];
        if a.end.is_some() {
            return;
        }
        a.end = Some(now);
        a.how = how;
        let call = a.call;
        if let AttemptEnd::Failed(e) = how {
            st.calls[call].last_error = Some(e);
        }
        if how == AttemptEnd::Ok {
            let token = st.calls[call].token;
            let key = st.attempts[id].key.clone();
            drop(st);
            let live = token.is_some_and(|t| self.holds(&key, t));
            self.state().attempts[id].lease_live_at_ok = live;
        }
    }

    /// Whether `token` holds the live lease of `key` in the shared store.
    fn holds(&self, key: &str, token: Uuid) -> bool {
        let Ok(key) = key.parse::<idem_runtime::IdempotencyKey>() else {
            return false;
        };
        matches!(
            now_or_never(idem_runtime::Records::get(&*self.shared_store, &key)),
            Some(Ok(Some(idem_runtime::store::Record {
                state: idem_runtime::store::RecordState::Running { token: t, lease_remaining },
                ..
            }))) if t.0 == token && lease_remaining > Duration::ZERO
        )
    }

    /// A request of body run `id` reached the provider.
    pub fn reached_provider(&self, id: usize) {
        self.state().attempts[id].reached_provider = true;
    }

    /// The call's last attempt's error (`None` if it had none).
    pub fn last_error(&self, call: usize) -> Option<&'static str> {
        self.state().calls[call].last_error
    }

    /// The provider's atomic commit: the charge made under `key` (made now if there is none,
    /// or always when the provider does not deduplicate).
    #[allow(clippy::result_large_err)] // the agent's own error type, which carries idemkit's
    fn provider_commit(
        &self,
        host: usize,
        key: &str,
        op: usize,
        attempt: usize,
    ) -> Result<Receipt, net::PayError> {
        let now = self.now().as_millis();
        let mut st = self.state();
        st.attempts[attempt].reached_provider = true;
        if self.cfg.provider_dedup
            && let Some(receipt) = st.provider.by_key.get(key).cloned()
        {
            st.consequences.add("provider deduplicated a repeated key");
            st.attempts[attempt].deduplicated = true;
            drop(st);
            self.log(host, || {
                format!("provider: key {key} seen before; same receipt")
            });
            return if receipt.op == op {
                Ok(receipt)
            } else {
                Err(net::PayError::KeyConflict)
            };
        }
        let spec = &self.cfg.ops[op];
        if spec.declined {
            drop(st);
            self.log(host, || format!("provider: op {op} declined"));
            return Err(net::PayError::Declined);
        }
        let receipt = Receipt {
            charge_id: st.provider.next_charge,
            op,
            amount_cents: spec.amount_cents,
            fee_rate: if spec.unreplayable {
                f64::INFINITY
            } else {
                0.029
            },
        };
        if spec.unreplayable {
            st.faults
                .add("outcome does not round-trip (fee_rate = inf)");
        }
        st.provider.next_charge += 1;
        st.provider.by_key.insert(key.to_owned(), receipt.clone());
        st.provider.effects.entry(op).or_default().push(Charge {
            receipt: receipt.clone(),
            attempt,
            at: self.now(),
        });
        st.provider.trace.push((now, op, key.to_owned()));
        st.attempts[attempt].charged = true;
        drop(st);
        self.log(host, || {
            format!("provider: CHARGED op {op} key {key} (attempt {attempt}) -> {receipt:?}")
        });
        Ok(receipt)
    }

    fn provider_has(&self, key: &str) -> bool {
        self.state().provider.by_key.contains_key(key)
    }

    /// The scripted "ambiguous then transient" sequence of `op`: `Some(true)` to commit and
    /// lose the response (its first request while faults are injected), `Some(false)` to
    /// answer 503, `None` to behave normally.
    fn scripted(&self, op: usize) -> Option<bool> {
        if !self.cfg.ops[op].ambiguous_then_transient {
            return None;
        }
        let faulty = self.faulty();
        let mut st = self.state();
        match st.provider.scripted.get_mut(&op) {
            None if faulty => {
                st.provider.scripted.insert(op, self.cfg.max_attempts);
                st.faults
                    .add("ambiguous attempt then transient ones (scripted)");
                Some(true)
            }
            Some(left) if *left > 0 => {
                *left -= 1;
                Some(false)
            }
            _ => None,
        }
    }

    fn record_result(
        &self,
        host: usize,
        op: usize,
        call: usize,
        result: Result<Receipt, String>,
        last: bool,
    ) {
        let mut st = self.state();
        st.results.push((host, op, call, result.clone()));
        if last {
            st.finals.insert((host, op), result);
        }
    }

    /// Whether `host`'s holder could reach the store throughout `[from, to]`.
    fn reached_store(&self, host: usize, from: Duration, to: Duration) -> bool {
        !self.cfg.cut_from_store_during(host, from, to)
    }

    /// Checks the properties of the seed (see the module docs of `simulation.rs`).
    fn check(&self, finished: bool) -> Result<Report, SimFailure> {
        let st = self.state();
        let mut f = SimFailure {
            seed: self.cfg.seed,
            protocol: Some(self.cfg.protocol),
            ..SimFailure::default()
        };
        let mut across = Counts::default();
        // Printed even at zero: S13 stops a holder cut from the store before its lease ends
        // (by the store's clock), so its body never overlaps the next holder's.
        across
            .0
            .entry("body runs of one key overlapped, a holder cut from the store")
            .or_default();
        if !finished {
            f.stuck = true;
            f.problems.push(format!(
                "hang: the agents had not finished after {SIM_DEADLINE:?} of simulated time"
            ));
        }
        let end_of = |a: &Attempt| a.end.unwrap_or(Duration::MAX);
        // (a) No two body runs of one key overlap while both holders reach the store.
        let mut by_key: BTreeMap<&str, Vec<&Attempt>> = BTreeMap::new();
        for a in &st.attempts {
            by_key.entry(&a.key).or_default().push(a);
        }
        for runs in by_key.values() {
            for (i, a) in runs.iter().enumerate() {
                for b in &runs[i + 1..] {
                    if !(b.start < end_of(a) && a.start < end_of(b)) {
                        continue;
                    }
                    let a_ok = self.reached_store(a.host, a.start, end_of(a).min(self.now()));
                    let b_ok = self.reached_store(b.host, b.start, end_of(b).min(self.now()));
                    if a_ok && b_ok {
                        f.overlap = true;
                        f.problems.push(format!(
                            "two body runs of key {} overlapped while both holders reached the store: \
                             host {} (call {}) {:?}..{:?} and host {} (call {}) {:?}..{:?}",
                            a.key, a.host, a.call, a.start, a.end, b.host, b.call, b.start, b.end
                        ));
                    } else {
                        across.add("body runs of one key overlapped, a holder cut from the store");
                    }
                }
            }
        }
        // (b) After a body run returned the receipt (its holder holding the lease and reaching
        // the store), no further body run of that operation starts.
        for a in st.attempts.iter().filter(|a| a.how == AttemptEnd::Ok) {
            let ok_at = end_of(a);
            let call = &st.calls[a.call];
            // Body runs are kept in the order they started: the first one after the receipt.
            if let Some(b) = st.attempts.iter().find(|b| b.op == a.op && b.start > ok_at) {
                let until = b.start.min(ok_at + self.cfg.lease);
                let excuse = if self.cfg.crashed_during(a.host, ok_at, until) {
                    Some("re-run after a success: its holder crashed before recording it")
                } else if !self.reached_store(a.host, ok_at, until) {
                    Some("re-run after a success: its holder was cut from the store")
                } else if !a.lease_live_at_ok {
                    Some("re-run after a success: its holder's lease had ended (renewals failed)")
                } else if call.completion_blocked {
                    Some("re-run after a success: the store was down for its completion writes")
                } else {
                    None
                };
                if let Some(excuse) = excuse {
                    across.add(excuse);
                } else {
                    f.reran = true;
                    f.problems.push(format!(
                        "operation {} ran again (host {}, call {}, at {:?}) after host {} (call {}) had its \
                         receipt at {:?} and reached the store",
                        a.op, b.host, b.call, b.start, a.host, a.call, ok_at
                    ));
                }
            }
        }
        // Effects at the provider.
        for (op, spec) in self.cfg.ops.iter().enumerate() {
            let made = st.provider.effects.get(&op).map_or(&[][..], Vec::as_slice);
            let expected = usize::from(!spec.declined);
            if self.cfg.provider_dedup || made.len() < expected || spec.declined {
                if made.len() > expected {
                    f.duplicates = true;
                }
                if made.len() != expected {
                    f.problems.push(format!(
                        "operation {op} ({}/{}{}) took effect {} times at the provider (expected {expected}): {:?}",
                        spec.customer,
                        spec.period,
                        if spec.declined { ", declined" } else { "" },
                        made.len(),
                        made.iter().map(|c| &c.receipt).collect::<Vec<_>>()
                    ));
                }
                continue;
            }
            // (d) Without deduplication, each extra charge must be explained: by a request
            // still on its way when its body ended, by an earlier charge's holder that lost the
            // store (cut off, crashed), or by an earlier attempt that ended without its receipt
            // (ambiguous: re-run by design, with the same key, which only a deduplicating
            // provider makes safe). Any other is a failure: an operation charged again after an
            // attempt had its receipt and its holder could record it.
            for (k, later) in made.iter().enumerate().skip(1) {
                let b = &st.attempts[later.attempt];
                let mut label = None;
                let mut unexplained = false;
                if b.end.is_some_and(|end| end < later.at) {
                    let cut = !self.reached_store(b.host, b.start, end_of(b));
                    let crashed = self.cfg.crashed_during(b.host, b.start, end_of(b) + MS);
                    label = Some(match (crashed, cut) {
                        (true, _) => {
                            "duplicate charge: request in flight after its body ended (host crashed)"
                        }
                        (_, true) => {
                            "duplicate charge: request in flight after its body ended (holder cut from the store)"
                        }
                        _ => {
                            "duplicate charge: request in flight after its body ended (ambiguous attempt)"
                        }
                    });
                    across.add(label.unwrap_or_default());
                    continue;
                }
                for earlier in &made[..k] {
                    let a = &st.attempts[earlier.attempt];
                    let why = if a.how == AttemptEnd::Ok && b.start <= end_of(a) {
                        // They overlapped: check (a) fails it unless a holder was cut off.
                        "duplicate charge: body runs overlapped, a holder cut from the store"
                    } else if a.how == AttemptEnd::Ok {
                        let ok_at = end_of(a);
                        let until = b.start.max(ok_at).min(ok_at + self.cfg.lease);
                        if self.cfg.crashed_during(a.host, ok_at, until) {
                            "duplicate charge: an earlier holder had its receipt, then crashed"
                        } else if !self.reached_store(a.host, ok_at, until) {
                            "duplicate charge: an earlier holder had its receipt, then was cut from the store"
                        } else if !a.lease_live_at_ok || st.calls[a.call].completion_blocked {
                            "duplicate charge: an earlier holder had its receipt, but the store refused or failed its completion"
                        } else {
                            unexplained = true;
                            continue;
                        }
                    } else if self.cfg.crashed_during(a.host, a.start, end_of(a) + MS) {
                        "duplicate charge: an earlier attempt ended by a crash"
                    } else if !self.reached_store(a.host, a.start, end_of(a)) {
                        "duplicate charge: an earlier attempt ended while its holder was cut from the store"
                    } else {
                        "duplicate charge: an earlier attempt ended without its receipt (ambiguous)"
                    };
                    if std::ptr::eq(earlier, &made[k - 1]) {
                        label.get_or_insert(why);
                    }
                }
                if unexplained {
                    f.duplicates = true;
                    f.problems.push(format!(
                        "operation {op} charged again by host {} (call {}, body run from {:?}), unexplained: an \
                         earlier charge's holder had its receipt and reached the store",
                        b.host, b.call, b.start
                    ));
                } else if let Some(label) = label {
                    across.add(label);
                }
            }
        }
        // (c) Every answer a caller got is its outcome or a clear error, and truthful.
        for (host, op, call, result) in &st.results {
            match result {
                Err(e) if e.starts_with("UNCLEAR") => {
                    f.unclear = true;
                    f.problems
                        .push(format!("host {host} got {e} for operation {op}"));
                }
                Err(e) if e == "attempts exhausted" || e == "declined" => {
                    let charged: Vec<usize> = st.calls[*call]
                        .attempts
                        .iter()
                        .copied()
                        .filter(|&a| st.attempts[a].charged)
                        .collect();
                    if !charged.is_empty() {
                        f.misinformed = true;
                        f.problems.push(format!(
                            "host {host} was told `{e}` (nothing happened) for operation {op}, but attempt(s) \
                             {charged:?} of its call {call} charged"
                        ));
                    }
                }
                Err(e) if e == "unreplayable" => {
                    if st.provider.effects.get(op).is_none_or(Vec::is_empty) {
                        f.unclear = true;
                        f.problems.push(format!(
                            "host {host} was told operation {op} ran (unreplayable), but it never charged"
                        ));
                    }
                }
                Err(_) => {}
                Ok(receipt) => {
                    let made = st.provider.effects.get(op).map_or(&[][..], Vec::as_slice);
                    let known = if self.cfg.provider_dedup {
                        made.first().map(|c| &c.receipt) == Some(receipt)
                    } else {
                        made.iter().any(|c| &c.receipt == receipt)
                    };
                    if !known {
                        f.problems.push(format!(
                            "host {host} got {receipt:?} for operation {op}, but the provider's charges of it are {:?}",
                            made.iter().map(|c| &c.receipt).collect::<Vec<_>>()
                        ));
                    }
                }
            }
        }
        // A dropped call's claim is ended at once (S15): `DROP_PROBE` after the drop, the
        // record no longer holds the call's token (its key is claimable again), unless the
        // guard's write was stopped by the store being down or cut off.
        for (i, c) in st.calls.iter().enumerate() {
            let Some(dropped) = c.dropped_at else {
                continue;
            };
            if c.stale_after_drop != Some(true) {
                continue;
            }
            if c.end_write_failed
                || !self.reached_store(c.host, dropped, dropped + DROP_PROBE)
                || self
                    .cfg
                    .crashed_during(c.host, dropped, dropped + DROP_PROBE)
            {
                across.add("dropped call's claim left to its lease (store down or cut off)");
                continue;
            }
            f.stale_claim = true;
            f.problems.push(format!(
                "call {i} (host {}, operation {}) was dropped at {dropped:?} holding its claim, which still held \
                 the key {DROP_PROBE:?} later (first end write sent: {:?})",
                c.host, c.op, c.end_write_at
            ));
        }
        let problems_before_plans = f.problems.len();
        for (host, plan) in self.cfg.plans.iter().enumerate() {
            for &op in plan {
                let spec = &self.cfg.ops[op];
                match st.finals.get(&(host, op)) {
                    None => f.problems.push(format!(
                        "host {host} never got an outcome for operation {op}"
                    )),
                    Some(Ok(_)) if !spec.declined => {}
                    Some(Err(e)) if spec.declined && e == "declined" => {}
                    // S14, S14+: an attempt (of this call, or of an earlier one whose record this
                    // call took over) may have taken effect; a later decline does not clear that.
                    // The caller is told the effect may have happened, and a verification or an
                    // operator settles it: an honest end, not a stuck caller.
                    Some(Err(e)) if spec.declined && e == "kept ambiguous" => {}
                    Some(Err(e)) if spec.unreplayable && e == "unreplayable" => {}
                    Some(other) => f.problems.push(format!(
                        "host {host} ended operation {op} with {other:?} (declined: {})",
                        spec.declined
                    )),
                }
            }
        }
        if f.problems.len() > problems_before_plans {
            f.stuck = true;
        }
        if !f.problems.is_empty() {
            return Err(f);
        }
        let mut faults = st.faults.clone();
        for op in 0..self.cfg.ops.len() {
            if self.cfg.plans.iter().filter(|p| p.contains(&op)).count() > 1 {
                faults.add("operation raced by two agents (in both plans)");
            }
        }
        if !self.cfg.provider_dedup {
            faults.add("provider does not deduplicate (world)");
        }
        // Requests the provider saw from a holder cut from the store (its deduplication, or
        // nothing, is then the fence).
        for a in &st.attempts {
            if a.reached_provider && !self.reached_store(a.host, a.start, end_of(a).min(self.now()))
            {
                across.add("attempts reaching the provider from a holder cut from the store");
                if a.deduplicated {
                    across.add("attempts reaching the provider from a holder cut from the store, deduplicated by key");
                }
            }
        }
        Ok(Report {
            faults,
            consequences: st.consequences.clone(),
            across_partitions: across,
            calls: st.results.len() as u64,
            charges: st.provider.next_charge,
            body_runs: st.attempts.len() as u64,
            attempts_at_provider: st.attempts.iter().filter(|a| a.reached_provider).count() as u64,
            finished_at: Duration::ZERO,
            trace: st.provider.trace.clone(),
        })
    }
}
/// Runs the world of `seed` to its end and checks it.
pub fn run_seed(seed: u64, protocol: Protocol, verbose: bool) -> Result<Report, SimFailure> {
    agent::quiet_simulated_panics();
    // idemkit's jitter draws from fastrand's thread-local generator: seed it too.
    fastrand::seed(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x1de4);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    let cfg = Config::from_seed(seed, protocol);
    if verbose {
        eprintln!("{cfg:#?}");
    }
    runtime.block_on(async move {
        let world = Arc::new(World::new(cfg, verbose));
        let hosts: Vec<_> = (0..world.cfg.plans.len())
            .map(|host| tokio::spawn(agent::supervise(world.clone(), host)))
            .collect();
        let all = async {
            for h in hosts {
                h.await.expect("an agent host panicked");
            }
        };
        let finished = tokio::time::timeout(SIM_DEADLINE, all).await.is_ok();
        let finished_at = world.now();
        tokio::time::sleep(SETTLE).await;
        world.check(finished).map(|r| Report { finished_at, ..r })
    })
}

/// Runs `seeds` and gathers the reports and the failures.
pub fn run_seeds(
    seeds: impl IntoIterator<Item = u64>,
    protocol: Protocol,
) -> (Report, Vec<SimFailure>, u64) {
    // Each world is a thread-independent runtime of its own (its randomness comes from its
    // seed), so the seeds are shared out over the machine's cores; the totals are sums and
    // maxima, and failures are sorted by seed, so the result does not depend on the split.
    let seeds: Vec<u64> = seeds.into_iter().collect();
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(seeds.len().max(1));
    let results: Vec<(Report, Vec<SimFailure>)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let mine: Vec<u64> = seeds.iter().copied().skip(t).step_by(threads).collect();
                scope.spawn(move || run_seeds_here(mine, protocol))
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a simulation thread panicked"))
            .collect()
    });
    let mut total = Report::default();
    let mut failures = Vec::new();
    for (r, f) in results {
        total.faults.merge(&r.faults);
        total.consequences.merge(&r.consequences);
        total.across_partitions.merge(&r.across_partitions);
        total.calls += r.calls;
        total.charges += r.charges;
        total.body_runs += r.body_runs;
        total.attempts_at_provider += r.attempts_at_provider;
        total.finished_at = total.finished_at.max(r.finished_at);
        failures.extend(f);
    }
    failures.sort_by_key(|f| f.seed);
    (total, failures, seeds.len() as u64)
}

/// Runs `seeds` one after the other on this thread.
fn run_seeds_here(seeds: Vec<u64>, protocol: Protocol) -> (Report, Vec<SimFailure>) {
    let mut total = Report::default();
    let mut failures = Vec::new();
    for seed in seeds {
        match run_seed(seed, protocol, false) {
            Ok(r) => {
                total.faults.merge(&r.faults);
                total.consequences.merge(&r.consequences);
                total.across_partitions.merge(&r.across_partitions);
                total.calls += r.calls;
                total.charges += r.charges;
                total.body_runs += r.body_runs;
                total.attempts_at_provider += r.attempts_at_provider;
                total.finished_at = total.finished_at.max(r.finished_at);
            }
            Err(f) => failures.push(f),
        }
    }
    (total, failures)
}
