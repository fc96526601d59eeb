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
#![allow(dead_code)]

mod agent;
mod net;
mod store;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

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
}

impl Protocol {
    /// The value of `IDEMKIT_SIM_BREAK` that selects this protocol.
    pub fn env_name(self) -> Option<&'static str> {
        match self {
            Protocol::Correct => None,
            Protocol::KeyPerAttempt => Some("key-per-attempt"),
            Protocol::KeyPerCall => Some("key-per-call"),
            Protocol::NoTakeover => Some("no-takeover"),
        }
    }

    /// The protocol named by `IDEMKIT_SIM_BREAK` (unset: the correct one).
    pub fn from_env() -> Protocol {
        match std::env::var("IDEMKIT_SIM_BREAK").ok().as_deref() {
            None | Some("") => Protocol::Correct,
            Some("key-per-attempt") => Protocol::KeyPerAttempt,
            Some("key-per-call") => Protocol::KeyPerCall,
            Some("no-takeover") => Protocol::NoTakeover,
            Some(other) => {
                panic!(
                    "IDEMKIT_SIM_BREAK={other}: expected key-per-attempt, key-per-call or no-takeover"
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
}

/// What the provider returns for a charge it made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Receipt {
    pub charge_id: u64,
    pub op: usize,
    pub amount_cents: u64,
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
    /// Per host, the windows (from, to) in which it reaches neither the provider nor the store.
    pub partitions: Vec<Vec<(Duration, Duration)>>,
    /// Per host, when it crashes (each crash ends the running incarnation).
    pub crashes: Vec<Vec<Duration>>,
}

fn ms(rng: &mut fastrand::Rng, range: std::ops::RangeInclusive<u64>) -> Duration {
    Duration::from_millis(rng.u64(range))
}

impl Config {
    pub fn from_seed(seed: u64, protocol: Protocol) -> Config {
        let mut rng = fastrand::Rng::with_seed(seed);
        let n_hosts = rng.usize(2..=3);
        let n_ops = rng.usize(3..=6);
        let ops: Vec<Op> = (0..n_ops)
            .map(|i| Op {
                customer: format!("cus_{}", i % 3),
                period: format!("2026-{:02}", i + 1),
                amount_cents: rng.u64(100..=10_000),
                declined: rng.f64() < 0.1,
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
        let heal_at = ms(&mut rng, 10_000..=60_000);
        // Most plans finish within seconds, so partitions and crashes come early to hit them.
        let early = heal_at.min(Duration::from_secs(10)).as_millis() as u64;
        let window = |rng: &mut fastrand::Rng| {
            let from = ms(rng, 0..=early);
            let to = (from + ms(rng, 1_000..=15_000)).min(heal_at);
            (from, to)
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
        }
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
    "store unavailable",
    "store reply lost after the write",
    "host crash mid-plan",
    "host crash while holding a lease",
    "operation raced by two agents (in both plans)",
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
    "caller got InFlight",
    "caller got a store error",
];

/// What one seed did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    pub faults: Counts,
    pub consequences: Counts,
    /// Calls that returned to a caller, and charges the provider made.
    pub calls: u64,
    pub charges: u64,
    /// When the last agent finished (simulated time); over many seeds, the slowest world.
    pub finished_at: Duration,
    /// The provider's charges in order: (simulated ms, op, key): pins determinism.
    pub trace: Vec<(u128, usize, String)>,
}

/// Why a seed failed.
#[derive(Debug)]
pub struct SimFailure {
    pub seed: u64,
    pub protocol: Protocol,
    pub duplicates: bool,
    /// Some caller never got its operation's outcome.
    pub stuck: bool,
    pub problems: Vec<String>,
}

impl fmt::Display for SimFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "simulation seed {} ({:?}) failed:",
            self.seed, self.protocol
        )?;
        for p in &self.problems {
            writeln!(f, "  - {p}")?;
        }
        write!(f, "  replay: {}", replay_command(self.seed, self.protocol))
    }
}

/// The provider's ground truth.
#[derive(Debug, Default)]
struct Provider {
    /// The charge made under each idempotency key.
    by_key: BTreeMap<String, Receipt>,
    /// Every charge made for each operation (more than one is a duplicate).
    effects: BTreeMap<usize, Vec<Receipt>>,
    next_charge: u64,
    trace: Vec<(u128, usize, String)>,
}

/// The mutable state of one world.
#[derive(Debug, Default)]
struct State {
    rng: Option<fastrand::Rng>,
    provider: Provider,
    faults: Counts,
    consequences: Counts,
    /// Every result a caller got: (host, op, Ok(receipt) or the error's text).
    results: Vec<(usize, usize, Result<Receipt, String>)>,
    /// The last result of each (host, op) in the host's plan.
    finals: BTreeMap<(usize, usize), Result<Receipt, String>>,
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

    pub fn partitioned(&self, host: usize) -> bool {
        let now = self.now();
        self.cfg.partitions[host]
            .iter()
            .any(|&(from, to)| from <= now && now < to)
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

    /// The provider's atomic commit: the charge made under `key`, made now if there is none.
    #[allow(clippy::result_large_err)] // the agent's own error type, which carries idemkit's
    fn provider_commit(&self, host: usize, key: &str, op: usize) -> Result<Receipt, net::PayError> {
        let now = self.now().as_millis();
        let mut st = self.state();
        if let Some(receipt) = st.provider.by_key.get(key).cloned() {
            st.consequences.add("provider deduplicated a repeated key");
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
        };
        st.provider.next_charge += 1;
        st.provider.by_key.insert(key.to_owned(), receipt.clone());
        st.provider
            .effects
            .entry(op)
            .or_default()
            .push(receipt.clone());
        st.provider.trace.push((now, op, key.to_owned()));
        drop(st);
        self.log(host, || {
            format!("provider: CHARGED op {op} key {key} -> {receipt:?}")
        });
        Ok(receipt)
    }

    fn provider_has(&self, key: &str) -> bool {
        self.state().provider.by_key.contains_key(key)
    }

    fn record_result(&self, host: usize, op: usize, result: Result<Receipt, String>, last: bool) {
        let mut st = self.state();
        st.results.push((host, op, result.clone()));
        if last {
            st.finals.insert((host, op), result);
        }
    }

    /// Checks the property: each operation took effect exactly once (zero times if declined),
    /// every result a caller got is the provider's receipt, and every plan ended with its outcome.
    fn check(&self, finished: bool) -> Result<Report, SimFailure> {
        let st = self.state();
        let mut problems = Vec::new();
        let mut duplicates = false;
        if !finished {
            problems.push(format!(
                "hang: the agents had not finished after {SIM_DEADLINE:?} of simulated time"
            ));
        }
        for (op, spec) in self.cfg.ops.iter().enumerate() {
            let made = st.provider.effects.get(&op).map_or(&[][..], Vec::as_slice);
            let expected = usize::from(!spec.declined);
            if made.len() > expected {
                duplicates = true;
            }
            if made.len() != expected {
                problems.push(format!(
                    "operation {op} ({}/{}{}) took effect {} times at the provider (expected {expected}): {made:?}",
                    spec.customer,
                    spec.period,
                    if spec.declined { ", declined" } else { "" },
                    made.len()
                ));
            }
        }
        for (host, op, result) in &st.results {
            if let Err(e) = result
                && e.starts_with("UNCLEAR")
            {
                problems.push(format!("host {host} got {e} for operation {op}"));
            }
            if let Ok(receipt) = result {
                let made = st.provider.effects.get(op).map_or(&[][..], Vec::as_slice);
                if made.first() != Some(receipt) {
                    problems.push(format!(
                        "host {host} got {receipt:?} for operation {op}, but the provider's first charge of it is {:?}",
                        made.first()
                    ));
                }
            }
        }
        let problems_before_plans = problems.len();
        for (host, plan) in self.cfg.plans.iter().enumerate() {
            for &op in plan {
                let declined = self.cfg.ops[op].declined;
                match st.finals.get(&(host, op)) {
                    None => problems.push(format!(
                        "host {host} never got an outcome for operation {op}"
                    )),
                    Some(Ok(_)) if !declined => {}
                    Some(Err(e)) if declined && e == "declined" => {}
                    Some(other) => problems.push(format!(
                        "host {host} ended operation {op} with {other:?} (declined: {declined})"
                    )),
                }
            }
        }
        if !problems.is_empty() {
            return Err(SimFailure {
                seed: self.cfg.seed,
                protocol: self.cfg.protocol,
                duplicates,
                stuck: !finished || problems.len() > problems_before_plans,
                problems,
            });
        }
        let mut faults = st.faults.clone();
        for op in 0..self.cfg.ops.len() {
            if self.cfg.plans.iter().filter(|p| p.contains(&op)).count() > 1 {
                faults.add("operation raced by two agents (in both plans)");
            }
        }
        Ok(Report {
            faults,
            consequences: st.consequences.clone(),
            calls: st.results.len() as u64,
            charges: st.provider.next_charge,
            finished_at: Duration::ZERO,
            trace: st.provider.trace.clone(),
        })
    }
}

/// Runs the world of `seed` to its end and checks it.
pub fn run_seed(seed: u64, protocol: Protocol, verbose: bool) -> Result<Report, SimFailure> {
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
    let mut total = Report::default();
    let mut failures = Vec::new();
    let mut runs = 0;
    for seed in seeds {
        runs += 1;
        match run_seed(seed, protocol, false) {
            Ok(r) => {
                total.faults.merge(&r.faults);
                total.consequences.merge(&r.consequences);
                total.calls += r.calls;
                total.charges += r.charges;
                total.finished_at = total.finished_at.max(r.finished_at);
            }
            Err(f) => failures.push(f),
        }
    }
    (total, failures, runs)
}
