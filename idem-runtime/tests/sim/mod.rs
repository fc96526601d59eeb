//! A deterministic simulation of agents calling a payment provider through idemkit.
//!
//! One seed makes one world: a few agent hosts, each running a plan of charges through
//! `Tool::side_effect` (with `Tool::verify` in the worlds whose tool verifies) with a store they
//! all share and a lease of its own; an in-memory provider that deduplicates by
//! `Idempotency-Key` or not (and is the ground truth: it counts every charge it makes, and
//! answers verifications by the key); a network that loses, delays and partitions messages in
//! both directions; hosts that crash mid-plan and restart, and that stall (none of their tasks
//! polled: `agent::Stallable`); a store that fails or loses its replies (a completion applied
//! whose reply is lost among them); an operator who releases and forgets records. Every random
//! choice comes from the seed (idemkit's own jitter too, through fastrand's thread-local
//! generator), and time is tokio's paused clock, so a seed replays exactly.
//!
//! Faults are injected until the world "heals" (a time drawn per seed); agents keep retrying
//! each operation after that, so every operation must end with its outcome (or, where the tool
//! cannot verify, with "kept ambiguous": only an operator settles that).
//!
//! The world sees body runs, not only charges: every attempt idemkit starts is recorded with
//! its call, key, start, last poll and end (returned, failed, dropped or panicked), whether its
//! request reached the provider and whether it charged. Each call runs in a task of its own (a
//! panicking body fails that task, not the agent), under a task-local call id that ties the
//! lease token the store sees to the call.
//!
//! Broken protocols (`Protocol`) are emulated from outside the runtime: by the store link
//! (`store.rs`), the tool's settings or verify function (`agent.rs`), or what the agent is told.
#![allow(dead_code)]

mod agent;
mod net;
mod operator;

pub use operator::UNFORCED_FORGET_OF_LIVE_RECORD;
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
    /// Broken (S20): in the worlds whose provider does not deduplicate, the tool re-sends an
    /// attempt whose outcome is unknown anyway (`resend(true)`, no `verify`): the C-level
    /// mistake of a blind retry loop.
    BlindResend,
    /// Broken (S14+): the store reports a takeover (of a record kept ambiguous, or of an expired
    /// holder's) as a fresh claim (`Claim::Acquired { takeover: None }`), so the taker starts as
    /// if nothing had run: where the provider cannot deduplicate, it sends again.
    AmbiguityDroppedOnTakeover,
    /// Broken (S19): a call that takes a record over does not ask `verify` before it sends.
    /// Emulated from outside: the tool's verify function answers `NotApplied` without asking the
    /// provider when its call has run no attempt yet (the verification at the claim).
    VerifyIgnoredAtTakeover,
    /// Broken (S22): a holder resumed after a stall polls its body on although its lease was
    /// taken over meanwhile. Emulated by a store link that answers a renewal `Applied` when the
    /// record was taken over and the renewing host stalled within the last lease (the late
    /// renewal a stalled holder sends before going on), as if the holder did not check it.
    StalledPollsOn,
    /// Broken (S23): a claimer caps a longer lease than its own as clock skew, by its own lease
    /// length (the SQLite bug of issue 30 #1). Emulated by a store link that, when a claim finds
    /// a live lease ending further ahead than the claimer's lease, notes the capped end, and
    /// hands the record over (as an expired holder's) to a claim that comes after it, unless
    /// the holder renewed in between.
    ClaimerLeaseCap,
    /// Broken (issue 30 #8): a completion sent again by the holder that completed the record
    /// (its reply was lost) is refused as if the record had been taken over. Emulated by a
    /// store link that answers such a retry `Fenced`: the call ends `Unrecorded`.
    CompletionNotIdempotent,
    /// Broken (issue 30 #4, S16): an outcome that serializes but does not read back (a field
    /// skipped when empty, without `default`) is stored as if replayable, so every repeat gets
    /// `Error::Store { Corrupt }` instead of `Unreplayable`. The executor now seals the JSON it
    /// stores (issue 42), so a replay that does not decode tells its own intact outcome (S16)
    /// from a damaged one (S9); emulated from the store's side by a store link that stores, for
    /// an operation whose receipt does not read back, the receipt's bare JSON (what the old
    /// executor stored).
    UnreadableStoredAsReplayable,
    /// Broken (issue 30 #6, S24): an operator's `forget` without `--force` removes a record
    /// whose holder's lease is live (the old stores did; they now answer `LeaseLive`). Emulated
    /// by the operator's un-forced forget being sent as a forced one, while the world still
    /// takes it for the un-forced repair it was: it does not excuse what follows it as "operator
    /// forced" (the next call runs beside the live holder).
    UnforcedForgetOfLiveRecord,
    /// Broken (issue 30 #9): an executor without the marker fallback. When the store refuses a
    /// large outcome (a full disk), the executor now writes the small unreplayable marker
    /// half-way to the lease's end, so the operation is never run again; the old one retried
    /// the large write until the lease ended, left the record running, and the next call after
    /// the lease ran the body again. Emulated by a store link that, once a token's large
    /// completion was refused, refuses its marker too while the disk is full: nothing is
    /// written, as with the old executor (whose writes were all the refused large one).
    NoMarkerFallback,
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
            Protocol::BlindResend => Some("blind-resend"),
            Protocol::AmbiguityDroppedOnTakeover => Some("ambiguity-dropped-on-takeover"),
            Protocol::VerifyIgnoredAtTakeover => Some("verify-ignored-at-takeover"),
            Protocol::StalledPollsOn => Some("stalled-polls-on"),
            Protocol::ClaimerLeaseCap => Some("claimer-lease-cap"),
            Protocol::CompletionNotIdempotent => Some("completion-not-idempotent"),
            Protocol::UnreadableStoredAsReplayable => Some("unreadable-stored-as-replayable"),
            Protocol::UnforcedForgetOfLiveRecord => Some("unforced-forget-of-live-record"),
            Protocol::NoMarkerFallback => Some("no-marker-fallback"),
        }
    }

    /// Every broken protocol.
    pub const BROKEN: &[Protocol] = &[
        Protocol::KeyPerAttempt,
        Protocol::KeyPerCall,
        Protocol::NoTakeover,
        Protocol::NoRenewal,
        Protocol::AmbiguityNotSticky,
        Protocol::NoDropGuard,
        Protocol::NoCompletionRetry,
        Protocol::BlindResend,
        Protocol::AmbiguityDroppedOnTakeover,
        Protocol::VerifyIgnoredAtTakeover,
        Protocol::StalledPollsOn,
        Protocol::ClaimerLeaseCap,
        Protocol::CompletionNotIdempotent,
        Protocol::UnreadableStoredAsReplayable,
        Protocol::UnforcedForgetOfLiveRecord,
        Protocol::NoMarkerFallback,
    ];

    /// The protocol named by `IDEMKIT_SIM_BREAK` (unset: the correct one).
    pub fn from_env() -> Protocol {
        let name = std::env::var("IDEMKIT_SIM_BREAK").unwrap_or_default();
        if name.is_empty() {
            return Protocol::Correct;
        }
        Protocol::BROKEN
            .iter()
            .copied()
            .find(|p| p.env_name() == Some(name.as_str()))
            .unwrap_or_else(|| {
                let names: Vec<_> = Protocol::BROKEN
                    .iter()
                    .filter_map(|p| p.env_name())
                    .collect();
                panic!(
                    "IDEMKIT_SIM_BREAK={name}: expected one of {}",
                    names.join(", ")
                )
            })
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
    /// Its receipt has no tags: the field is skipped when empty and has no `default`, so the
    /// outcome serializes but does not read back (issue 30 #4, S16).
    pub unreadable: bool,
    /// Its receipt carries a long memo: its outcome is larger than the executor's small
    /// outcomes (512 bytes), so a full disk refuses it (issue 30 #9).
    pub large: bool,
}

impl Op {
    /// Whether its outcome cannot be replayed (a repeat is told it ran: `Unreplayable`).
    pub fn not_replayable(&self) -> bool {
        self.unreplayable || self.unreadable
    }
}

/// What the provider returns for a charge it made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Receipt {
    pub charge_id: u64,
    pub op: usize,
    pub amount_cents: u64,
    /// 0.029, or infinite for an operation whose outcome does not round-trip.
    pub fee_rate: f64,
    /// `["card"]`, or empty for an operation whose outcome does not read back: skipped when
    /// empty, without `#[serde(default)]` (the mistake of issue 30 #4).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Empty, or over 512 bytes for an operation whose outcome is large.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub memo: String,
}

/// How the world's provider treats a repeated request, and how the tool is set up for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The provider deduplicates by `Idempotency-Key` (like Stripe); the tool re-sends an
    /// unknown outcome with the same key (`resend` left at its default, true).
    Dedup,
    /// The provider does not deduplicate (e-mail, SMS, an insert without a unique key): every
    /// request that reaches its commit is an effect. The tool says `resend(false)`; with
    /// `verify`, it asks the provider (by the key) before anything unknown is sent again.
    NoDedup { verify: bool },
}

/// An operator's repair of one operation's record, at a moment of the world.
#[derive(Debug, Clone, Copy)]
pub struct OperatorAction {
    pub at: Duration,
    pub op: usize,
    pub kind: OperatorKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperatorKind {
    /// `Records::release_key(key, force)`.
    Release { force: bool },
    /// `Records::forget(key, force)` (refused under a live lease unless forced).
    Forget { force: bool },
    /// `Records::resolve(key, …)` (S24) as a truthful operator decides it: `applied` with the
    /// provider's receipt if the provider made the charge (the operator looked it up), else
    /// `not-applied`.
    Resolve,
}

/// A seed's world: everything drawn from the seed before the first event.
#[derive(Debug, Clone)]
pub struct Config {
    pub seed: u64,
    pub protocol: Protocol,
    pub ops: Vec<Op>,
    /// The operations each host runs, in order (an operation in two plans is raced).
    pub plans: Vec<Vec<usize>>,
    /// Each host's own lease (mixed lengths in half the worlds: S23).
    pub leases: Vec<Duration>,
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
    /// request that reaches its commit charges, so a second body run shows as a second charge,
    /// and the tool is set up for that (`resend(false)`, with or without `verify`).
    pub mode: Mode,
    /// Per verification, the chance that the provider's lookup cannot tell (`Unknown`).
    pub p_verify_unknown: f64,
    /// Per host, the windows in which none of its tasks is polled (SIGSTOP, a paused VM), time
    /// moving on for everybody else.
    pub stalls: Vec<Vec<(Duration, Duration)>>,
    /// Per attempt, the chance that its host stalls while the body waits before sending, and
    /// (after a transient failure) while the executor waits between attempts.
    pub p_stall: f64,
    /// Per completion write applied, the chance that its reply is lost (the executor retries
    /// it under its token).
    pub p_complete_reply_lost: f64,
    /// Operator repairs at random moments.
    pub operator: Vec<OperatorAction>,
    /// Per call, the chance that its caller drops it at a random point (and retries later).
    pub p_cancel: f64,
    /// Per attempt, the chance that the body panics (before sending, or with the answer in hand).
    pub p_panic: f64,
    /// Per completion write, the chance that it fails before reaching the store (at most twice
    /// per lease token).
    pub p_complete_fails: f64,
    /// While faults are injected, the store's disk is full: a completion of a large outcome
    /// (over 512 bytes) is refused, smaller writes pass (issue 30 #9).
    pub disk_full: bool,
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
                unreadable: false,
                large: false,
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
            op.unreplayable = rng.f64() < 0.06;
            op.unreadable = !op.unreplayable && rng.f64() < 0.05;
        }
        // Drawn apart, so that the worlds drawn before them stay as they were.
        let mut more = fastrand::Rng::with_seed(seed ^ 0xd15c_f011_0000_0009);
        for op in &mut ops {
            op.large = more.f64() < 0.2;
        }
        let disk_full = more.f64() < 0.2;
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
        // Half the worlds give every host its own lease, 1-10 s log-uniformly (S23: a short
        // lease beside a long one is what a claimer's cap got wrong); the others one lease.
        let leases = if rng.bool() {
            (0..n_hosts)
                .map(|_| Duration::from_millis((1_000.0 * 10f64.powf(rng.f64())) as u64))
                .collect()
        } else {
            vec![ms(&mut rng, 1_000..=5_000); n_hosts]
        };
        let stall_len = |rng: &mut fastrand::Rng, lease: Duration| {
            // Any length: from a blink to several leases.
            lease.mul_f64(0.05 + rng.f64() * rng.f64() * 4.0)
        };
        let stalls = (0..n_hosts)
            .map(|h| {
                (0..rng.usize(0..=2))
                    .map(|_| {
                        let from = ms(&mut rng, 0..=early);
                        (from, (from + stall_len(&mut rng, leases[h])).min(heal_at))
                    })
                    .collect()
            })
            .collect();
        let mode = match rng.u32(0..4) {
            0 | 1 => Mode::Dedup,
            2 => Mode::NoDedup { verify: true },
            _ => Mode::NoDedup { verify: false },
        };
        let operator = (0..rng.usize(0..=2))
            .map(|_| OperatorAction {
                at: ms(&mut rng, 0..=early),
                op: rng.usize(..n_ops),
                kind: match rng.u32(0..20) {
                    0..=4 => OperatorKind::Release { force: false },
                    5..=8 => OperatorKind::Release { force: true },
                    9..=10 => OperatorKind::Forget { force: false },
                    11..=13 => OperatorKind::Forget { force: true },
                    _ => OperatorKind::Resolve,
                },
            })
            .collect();
        Config {
            seed,
            protocol,
            ops,
            plans,
            leases,
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
            mode,
            p_verify_unknown: rng.f64() * 0.3,
            stalls,
            p_stall: rng.f64() * 0.06,
            p_complete_reply_lost: rng.f64() * 0.2,
            operator,
            p_cancel: rng.f64() * 0.08,
            p_panic: rng.f64() * 0.04,
            p_complete_fails: rng.f64() * 0.4,
            disk_full,
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

    /// Whether the provider deduplicates by key.
    pub fn dedup(&self) -> bool {
        self.mode == Mode::Dedup
    }

    /// Whether the tool has a verify function.
    pub fn verifies(&self) -> bool {
        self.mode == Mode::NoDedup { verify: true }
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
    "provider deduplicates by key (world)",
    "provider does not deduplicate, tool verifies (world)",
    "provider does not deduplicate, tool cannot verify (world)",
    "hosts with leases of their own lengths (world)",
    "host stalled at a random moment (all its tasks unpolled)",
    "host stalled while its body waited before sending",
    "host stalled while waiting between attempts",
    "outcome serializes but does not read back (skipped empty field)",
    "completion reply lost after the write was applied",
    "verify cannot tell (Unknown)",
    "verify lookup cut off by a partition (error)",
    "operator released a running record (forced)",
    "operator released a dead holder's record",
    "operator forgot a record",
    "operator's release refused: the holder's lease is live",
    "operator resolved a record: applied (with the provider's receipt)",
    "operator resolved a record: not applied",
    "operator forgot a record (forced)",
    "operator's forget refused: the holder's lease is live",
    "completion of a large outcome refused (disk full)",
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
    "verify answered Applied",
    "verify answered NotApplied",
    "verify answered Unknown",
    "caller got the outcome verify found (verified)",
    "caller kept ambiguous as its final answer (no verify: an operator settles it)",
    "stalled holder's late renewal applied: it went on (S22)",
    "stalled holder's late renewal refused: it stopped (S22)",
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
    /// Verifications the provider answered (S19).
    pub verifications: u64,
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
    /// A caller got an answer that is none of the clear ones, or an untruthful one.
    pub unclear: bool,
    /// An unknown outcome was sent again (or released) where the provider cannot deduplicate,
    /// without a verification saying it did not happen (S19, S20).
    pub resent: bool,
    /// A record was left ambiguous although verify could answer (S19).
    pub unsettled: bool,
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
    /// When its body was last polled (a body dropped unpolled after a stall did nothing since).
    pub last_poll: Duration,
    /// When its request arrived at the provider.
    pub arrived_at: Option<Duration>,
}

/// A verification of an operation's key, as the provider answered it.
#[derive(Debug, Clone)]
pub struct Verification {
    pub op: usize,
    pub call: usize,
    pub at: Duration,
    /// "applied", "not applied" or "unknown".
    pub answer: &'static str,
}

/// One call of the tool by an agent.
#[derive(Debug, Clone, Default)]
struct CallRec {
    host: usize,
    op: usize,
    token: Option<Uuid>,
    /// When its caller dropped it (cancelled, or its body panicked).
    dropped_at: Option<Duration>,
    /// Its claim was applied in the shared store, and when.
    acquired: bool,
    acquired_at: Option<Duration>,
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
    /// It ended `CallOutcome::Unrecorded` (its outcome not written).
    unrecorded: bool,
    /// Its completion was applied, and a retry of it (the reply lost) was answered `Fenced`.
    fenced_after_applied: bool,
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
    /// Per host, the windows in which it was stalled (scheduled, and those its bodies drew).
    stalls: Vec<Vec<(Duration, Duration)>>,
    /// Every verification the provider answered.
    verifications: Vec<Verification>,
    /// Operator repairs that removed a record: (when, operation, what).
    removals: Vec<(Duration, usize, &'static str)>,
    /// Per operation, when its outcome first became unknown to the runtime (an attempt cut off
    /// or ambiguous, a holder gone or cut off with its claim): "kept ambiguous" is then honest.
    uncertain: BTreeMap<usize, Duration>,
    /// Tokens whose completion write was applied.
    completed_tokens: std::collections::HashSet<Uuid>,
    /// `claimer-lease-cap`: per key, the holder's token and the lease end a claimer capped.
    caps: HashMap<[u8; 16], (Uuid, Duration)>,
    /// Tokens whose completion of a large outcome a full disk refused.
    refused_large: std::collections::HashSet<Uuid>,
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

/// The record of `key` as it stands in `store`, not as operators read it: a Running record
/// whose holder's lease lapsed reads as ambiguous for operators (S31), which the checks here
/// tell apart from one marked ambiguous by a claim with other arguments (never taking a live
/// record, it answers what the record is). `None` when no live record is there.
pub fn stored_state(
    store: &idem_runtime::MemoryStore,
    key: &idem_runtime::IdempotencyKey,
) -> Option<idem_runtime::store::ExistingState> {
    use idem_runtime::Store as _;
    use idem_runtime::store::{Claim, ClaimRequest, LeaseToken};
    let live = now_or_never(idem_runtime::Records::get(store, key))?.ok()??;
    let probe = idem_runtime::Fingerprint::of(&"idemkit-sim: a probe of the record's state")
        .expect("a string fingerprints");
    assert_ne!(
        live.fingerprint, probe,
        "the probe's arguments are no call's"
    );
    let token = LeaseToken::new();
    let second = std::time::Duration::from_secs(1);
    let req = ClaimRequest::new(*key, "probe", probe, token, second, second);
    match now_or_never(store.claim(&req))?.ok()? {
        Claim::Existing(existing) => Some(existing.state),
        _ => {
            // It expired in between: the probe's own record is removed again.
            let _ = now_or_never(store.release(*key, token));
            None
        }
    }
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
        let stalls = cfg.stalls.clone();
        World {
            cfg,
            start: Instant::now(),
            verbose,
            shared_store: Arc::new(idem_runtime::MemoryStore::new()),
            state: Mutex::new(State {
                rng: Some(rng),
                stalls,
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

    /// When the stall `host` is in now ends, if it is stalled.
    pub fn stall_end(&self, host: usize) -> Option<Duration> {
        let now = self.now();
        self.state().stalls[host]
            .iter()
            .filter(|(from, to)| *from <= now && now < *to)
            .map(|w| w.1)
            .max()
    }

    /// `host` stalls from now, for a length drawn from its lease: none of its tasks is polled.
    pub fn stall(&self, host: usize, kind: &'static str) {
        let lease = self.cfg.leases[host];
        let len = self.rng(|r| lease.mul_f64(0.05 + r.f64() * r.f64() * 4.0));
        let now = self.now();
        self.state().stalls[host].push((now, now + len));
        self.fault(host, kind);
        self.log(host, || format!("stalls for {len:?}"));
    }

    /// Whether `host` was stalled at some time in `(from, to]` (the state locked by the caller).
    fn stalled_during(&self, st: &State, host: usize, from: Duration, to: Duration) -> bool {
        st.stalls[host]
            .iter()
            .any(|&(s, e)| s <= to && from < e && s < e)
    }

    /// The start of the first stall of `host` that began in `[after, until]` (a stall drawn
    /// while the body was being polled began after that poll).
    fn stall_began(
        &self,
        st: &State,
        host: usize,
        after: Duration,
        until: Duration,
    ) -> Option<Duration> {
        st.stalls[host]
            .iter()
            .map(|w| w.0)
            .filter(|&s| after <= s && s <= until)
            .min()
    }

    /// Whether `host` resumed from a stall within the last `within`.
    pub fn resumed_within(&self, host: usize, within: Duration) -> bool {
        let now = self.now();
        self.state().stalls[host]
            .iter()
            .any(|&(s, e)| s < e && e <= now && now <= e + within)
    }

    /// The body of attempt `id` is being polled.
    pub fn attempt_polled(&self, id: usize) {
        let now = self.now();
        self.state().attempts[id].last_poll = now;
    }

    /// `op`'s outcome became unknown to the runtime now (if it was not already).
    pub fn uncertain(&self, op: usize) {
        let now = self.now();
        self.state().uncertain.entry(op).or_insert(now);
    }

    /// The operation a call is of.
    pub fn op_of_call(&self, call: usize) -> usize {
        self.state().calls[call].op
    }

    /// The operation whose key `token`'s call claimed.
    pub fn op_of_token(&self, token: Uuid) -> Option<usize> {
        let st = self.state();
        st.tokens.get(&token).map(|&c| st.calls[c].op)
    }

    /// The provider's lookup by key, for a verification of `call` (S19).
    pub fn verify_lookup(
        &self,
        host: usize,
        call: usize,
        key: &str,
    ) -> idem_runtime::Verified<Receipt> {
        let cannot_tell = self.fault_chance(self.cfg.p_verify_unknown);
        let now = self.now();
        let mut st = self.state();
        let op = st.calls[call].op;
        let found = st.provider.by_key.get(key).cloned();
        // What `Verified::NotApplied` promises: the effect did not happen and cannot still
        // happen. A request of this operation sent less than `may_still_land_for` ago that made no
        // effect yet may still be on the wire or in progress at the provider: the lookup cannot
        // see it, so a verify function that keeps the promise answers Unknown until then.
        // How long a request may take to land: the network's longest delay (6 s), then the
        // provider's longest work (6 s when slow, up to 2.5 leases for a slow body), and 1 s.
        let longest_lease = self.cfg.leases.iter().copied().max().unwrap_or_default();
        let may_still_land_for =
            Duration::from_secs(7) + Duration::from_secs(6).max(longest_lease.mul_f64(2.5));
        let may_still_land = found.is_none()
            && st
                .attempts
                .iter()
                .any(|a| a.op == op && !a.charged && now < a.last_poll + may_still_land_for);
        let unknown = cannot_tell || may_still_land;
        let answer = match (&found, unknown) {
            (_, true) => "unknown",
            (Some(_), false) => "applied",
            (None, false) => "not applied",
        };
        st.verifications.push(Verification {
            op,
            call,
            at: now,
            answer,
        });
        st.consequences.add(match answer {
            "applied" => "verify answered Applied",
            "not applied" => "verify answered NotApplied",
            _ => "verify answered Unknown",
        });
        if may_still_land && !cannot_tell {
            st.consequences
                .add("verify answered Unknown: a request of the operation may still land");
        }
        drop(st);
        if cannot_tell {
            self.fault(host, "verify cannot tell (Unknown)");
        }
        self.log(host, || format!("verify op {op} key {key}: {answer}"));
        match (found, unknown) {
            (_, true) => idem_runtime::Verified::Unknown,
            (Some(receipt), false) => idem_runtime::Verified::Applied(receipt),
            (None, false) => idem_runtime::Verified::NotApplied,
        }
    }

    /// Where `start + at` is on tokio's clock.
    pub fn instant(&self, at: Duration) -> Instant {
        self.start + at
    }

    /// How many attempts `call` started.
    pub fn attempts_of(&self, call: usize) -> usize {
        self.state().calls[call].attempts.len()
    }

    /// `call` ended `Unrecorded` (its outcome not written).
    pub fn unrecorded(&self, call: usize) {
        self.state().calls[call].unrecorded = true;
    }

    /// `host` crashed: the operations whose record a call of it held have an unknown outcome.
    pub fn host_crashed(&self, host: usize) {
        let held: Vec<(usize, Uuid, String)> = {
            let st = self.state();
            st.calls
                .iter()
                .filter(|c| c.host == host && c.acquired)
                .filter_map(|c| Some((c.op, c.token?, c.key.clone()?)))
                .collect()
        };
        for (op, token, key) in held {
            if self.held_by(&key, token) {
                self.uncertain(op);
            }
        }
    }

    /// What the provider made under `key` (the operator looks it up before resolving).
    pub fn provider_receipt(&self, key: &str) -> Option<Receipt> {
        self.state().provider.by_key.get(key).cloned()
    }

    /// An operator repair removed `op`'s record now.
    pub fn removed_by_operator(&self, op: usize, what: &'static str) {
        let now = self.now();
        self.state().removals.push((now, op, what));
    }

    /// When the call of attempt `a` took the record (its attempt's start if not known): an
    /// operator's removal from then on may let another run of the operation start.
    fn claimed_at(st: &State, a: &Attempt) -> Duration {
        st.calls[a.call].acquired_at.unwrap_or(a.start).min(a.start)
    }

    /// Whether an operator removed the record of body runs `a` and `b` (one operation) while
    /// either call held it and before the later one started: the second run is then forced.
    fn forced(&self, st: &State, a: &Attempt, b: &Attempt) -> bool {
        let from = Self::claimed_at(st, a).min(Self::claimed_at(st, b));
        self.removals_between(st, a.op, from, a.start.max(b.start)) > 0
    }

    /// Operator removals of `op`'s record in `[from, to]`.
    fn removals_between(&self, st: &State, op: usize, from: Duration, to: Duration) -> usize {
        st.removals
            .iter()
            .filter(|&&(at, o, _)| o == op && from <= at && at <= to)
            .count()
    }

    /// Whether the full disk (issue 30 #9) refuses a completion of `token` of `len` bytes: one
    /// over 512 bytes while faults are injected in a world whose disk fills; with
    /// `no-marker-fallback`, also the small marker written after such a refusal.
    pub fn disk_full_refuses(&self, host: usize, token: Uuid, len: usize) -> bool {
        if !(self.cfg.disk_full && self.faulty()) {
            return false;
        }
        let mut st = self.state();
        if len > 512 {
            st.refused_large.insert(token);
            drop(st);
            self.fault(host, "completion of a large outcome refused (disk full)");
            return true;
        }
        if self.cfg.protocol == Protocol::NoMarkerFallback && st.refused_large.contains(&token) {
            drop(st);
            self.log(host, || {
                "(broken) no marker fallback: its write refused like the large one".to_owned()
            });
            return true;
        }
        false
    }

    /// Whether a completion of `token` was applied already (a write now is a retry of it).
    pub fn completion_was_applied(&self, token: Uuid) -> bool {
        self.state().completed_tokens.contains(&token)
    }

    /// The store answered a completion write of `token` with `w`: a retry of one that was
    /// applied (its reply lost) is applied again when the store's completion is idempotent for
    /// its token (issue 30 #8), or fenced.
    pub fn completion_answered(&self, host: usize, token: Uuid, w: idem_runtime::store::Written) {
        let retry = self.state().completed_tokens.contains(&token);
        if retry && w != idem_runtime::store::Written::Applied {
            let mut st = self.state();
            if let Some(&call) = st.tokens.get(&token) {
                st.calls[call].fenced_after_applied = true;
            }
        }
        if retry {
            self.saw(
                host,
                if w == idem_runtime::store::Written::Applied {
                    "completion retried after its write was applied: applied again"
                } else {
                    "completion retried after its write was applied: fenced (not idempotent)"
                },
            );
        } else if w == idem_runtime::store::Written::Applied {
            self.state().completed_tokens.insert(token);
        }
    }

    /// `claimer-lease-cap`: a claim with lease `claimer` finds `key` running under `token`
    /// with `remaining`: how long until the capped end (zero: past it), or `None` if no cap.
    pub fn capped(
        &self,
        key: [u8; 16],
        token: Uuid,
        remaining: Duration,
        claimer: Duration,
    ) -> Option<Duration> {
        let now = self.now();
        let mut st = self.state();
        let cap = match st.caps.get(&key) {
            Some(&(t, at)) if t == token => Some(at.min(now + claimer)),
            _ if remaining > claimer => Some(now + claimer),
            _ => None,
        }?;
        st.caps.insert(key, (token, cap));
        Some(cap.saturating_sub(now))
    }

    /// A renewal of `token` was applied: the lease end it wrote replaces any cap.
    pub fn renewed(&self, key: [u8; 16], token: Uuid) {
        let mut st = self.state();
        if st.caps.get(&key).is_some_and(|&(t, _)| t == token) {
            st.caps.remove(&key);
        }
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
            let who = match host {
                usize::MAX => "operator".to_owned(),
                h => format!("host {h}"),
            };
            eprintln!("[{:>9.3}s] {who}: {}", self.now().as_secs_f64(), line());
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
        let now = self.now();
        let mut st = self.state();
        st.tokens.insert(token, call);
        st.calls[call].token = Some(token);
        st.calls[call].acquired = true;
        st.calls[call].acquired_at.get_or_insert(now);
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
            last_poll: now,
            arrived_at: None,
        });
        st.calls[call].attempts.push(id);
        id
    }

    /// A body run ended so.
    pub fn attempt_ends(&self, id: usize, how: AttemptEnd) {
        let now = self.now();
        let mut st = self.state();
        if st.attempts[id].end.is_some() {
            return;
        }
        // A body dropped unpolled since its host stalled did nothing after the stall began.
        let (host, last_poll) = (st.attempts[id].host, st.attempts[id].last_poll);
        let end = match how {
            AttemptEnd::Dropped => self.stall_began(&st, host, last_poll, now).unwrap_or(now),
            _ => now,
        };
        if matches!(how, AttemptEnd::Dropped | AttemptEnd::Failed("timeout")) {
            let op = st.attempts[id].op;
            st.uncertain.entry(op).or_insert(now);
        }
        let a = &mut st.attempts[id];
        a.end = Some(end);
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

    /// Whether the record of `key` is running under `token` (its lease live or not).
    fn held_by(&self, key: &str, token: Uuid) -> bool {
        let Ok(key) = key.parse::<idem_runtime::IdempotencyKey>() else {
            return false;
        };
        matches!(
            now_or_never(idem_runtime::Records::get(&*self.shared_store, &key)),
            Some(Ok(Some(idem_runtime::store::Record {
                state: idem_runtime::store::RecordState::Running { token: t, .. },
                ..
            }))) if t.0 == token
        )
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
        let now = self.now();
        let mut st = self.state();
        st.attempts[id].reached_provider = true;
        st.attempts[id].arrived_at.get_or_insert(now);
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
        if self.cfg.dedup()
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
            tags: if spec.unreadable {
                Vec::new()
            } else {
                vec!["card".to_owned()]
            },
            memo: if spec.large {
                format!("{op}: ").repeat(200)
            } else {
                String::new()
            },
        };
        if spec.unreplayable {
            st.faults
                .add("outcome does not round-trip (fee_rate = inf)");
        }
        if spec.unreadable {
            st.faults
                .add("outcome serializes but does not read back (skipped empty field)");
        }
        st.provider.next_charge += 1;
        st.provider
            .by_key
            .entry(key.to_owned())
            .or_insert_with(|| receipt.clone());
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
        let lease_of = |host: usize| self.cfg.leases[host];
        let unknown =
            |a: &Attempt| matches!(a.how, AttemptEnd::Dropped | AttemptEnd::Failed("timeout"));
        // (a) No two body runs of one key overlap while both holders reach the store (a body
        // dropped unpolled after its host stalled ends where the stall began), unless an
        // operator removed the record in between.
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
                    if !(a_ok && b_ok) {
                        across.add("body runs of one key overlapped, a holder cut from the store");
                    } else if self.forced(&st, a, b) {
                        across.add("body runs of one key overlapped after an operator removed the record (operator forced)");
                    } else {
                        f.overlap = true;
                        f.problems.push(format!(
                            "two body runs of key {} overlapped while both holders reached the store: \
                             host {} (call {}) {:?}..{:?} and host {} (call {}) {:?}..{:?}",
                            a.key, a.host, a.call, a.start, a.end, b.host, b.call, b.start, b.end
                        ));
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
                let until = b.start.min(ok_at + lease_of(a.host));
                let excuse = if self.cfg.crashed_during(a.host, ok_at, until) {
                    Some("re-run after a success: its holder crashed before recording it")
                } else if !self.reached_store(a.host, ok_at, until) {
                    Some("re-run after a success: its holder was cut from the store")
                } else if self.stalled_during(&st, a.host, ok_at, until) {
                    Some("re-run after a success: its holder stalled before recording it")
                } else if !a.lease_live_at_ok {
                    Some("re-run after a success: its holder's lease had ended (renewals failed)")
                } else if call.completion_blocked {
                    Some("re-run after a success: the store was down for its completion writes")
                } else if self.forced(&st, a, b) {
                    Some("re-run after a success: an operator removed the record (operator forced)")
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
        // Effects at the provider: at most one per operation (exactly one with a deduplicating
        // provider, none if declined), unless an operator forced another.
        for (op, spec) in self.cfg.ops.iter().enumerate() {
            let made = st.provider.effects.get(&op).map_or(&[][..], Vec::as_slice);
            let expected = usize::from(!spec.declined);
            if self.cfg.dedup() || spec.declined {
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
            // Without deduplication every further effect must have been forced by an operator
            // (a record removed between the two). Anything else is a duplicate (named apart
            // when it landed after a NotApplied verification).
            for (k, later) in made.iter().enumerate().skip(1) {
                let b = &st.attempts[later.attempt];
                let earlier = &made[k - 1];
                let a = &st.attempts[earlier.attempt];
                if self.forced(&st, a, b) {
                    across.add(
                        "second effect after an operator removed the record (operator forced)",
                    );
                    continue;
                }
                // One request was sent before the answer and made its effect after it; the
                // other was sent after the answer.
                let late = st.verifications.iter().find_map(|v| {
                    let sent_before = |x: &Attempt, landed: Duration, other: &Attempt| {
                        v.op == op
                            && v.answer == "not applied"
                            && x.start <= v.at
                            && v.at < landed
                            && v.at <= other.start
                    };
                    if sent_before(a, earlier.at, b) {
                        Some((a, v.at))
                    } else if sent_before(b, later.at, a) {
                        Some((b, v.at))
                    } else {
                        None
                    }
                });
                // The world's verify answers Unknown while a request may still land (what
                // `Verified::NotApplied` promises), so a request that landed after a NotApplied
                // is a failure too: named as such.
                if let Some((x, asked)) = late {
                    f.duplicates = true;
                    f.problems.push(format!(
                        "operation {op} took effect again after verify answered NotApplied at {asked:?} while a request \
                         of it (host {}, call {}) was {}",
                        x.host,
                        x.call,
                        if x.arrived_at.is_some_and(|t| t <= asked) {
                            "in progress at the provider"
                        } else {
                            "still on the wire"
                        }
                    ));
                    continue;
                }
                f.duplicates = true;
                f.problems.push(format!(
                    "operation {op} took effect again (host {}, call {}, body run from {:?}, charged at {:?}) \
                     after host {} (call {}, body run from {:?}) charged at {:?}, the provider not deduplicating: {:?}",
                    b.host, b.call, b.start, later.at, a.host, a.call, a.start, earlier.at,
                    made.iter().map(|c| &c.receipt).collect::<Vec<_>>()
                ));
            }
        }
        // An unknown outcome is never sent again where the provider cannot deduplicate (S20),
        // unless a verification answered NotApplied after it (S19) or an operator removed the
        // record.
        if !self.cfg.dedup() {
            for a in st.attempts.iter().filter(|a| unknown(a)) {
                let Some(b) = st
                    .attempts
                    .iter()
                    .find(|b| b.op == a.op && b.start > end_of(a))
                else {
                    continue;
                };
                let (from, to) = (a.start.min(end_of(a)), b.start);
                if self.forced(&st, a, b) {
                    across.add("unknown outcome sent again after an operator removed the record (operator forced)");
                    continue;
                }
                let not_applied = st.verifications.iter().any(|v| {
                    v.op == a.op && v.answer == "not applied" && from <= v.at && v.at <= to
                });
                if not_applied {
                    continue;
                }
                f.resent = true;
                f.problems.push(format!(
                    "operation {}'s attempt by host {} (call {}, {:?}..{:?}) ended with its outcome unknown ({:?}), \
                     and host {} (call {}) sent it again at {:?} without a verification saying it did not happen",
                    a.op, a.host, a.call, a.start, a.end, a.how, b.host, b.call, b.start
                ));
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
                    // A request on the wire (or in progress at the provider) when verify
                    // answered NotApplied, which made its charge after the answer: the caller
                    // was told what the provider knew.
                    let charged_at = |a: usize| {
                        st.provider
                            .effects
                            .get(op)
                            .and_then(|c| c.iter().find(|c| c.attempt == a))
                            .map(|c| c.at)
                    };
                    let landed_late = |&a: &usize| {
                        let at = charged_at(a).unwrap_or(Duration::ZERO);
                        st.verifications.iter().any(|v| {
                            v.call == *call
                                && v.answer == "not applied"
                                && st.attempts[a].start <= v.at
                                && v.at < at
                        })
                    };
                    if !charged.is_empty() && charged.iter().all(landed_late) {
                        across.add("caller told nothing happened: its request landed after verify answered NotApplied");
                    } else if !charged.is_empty() {
                        f.misinformed = true;
                        f.problems.push(format!(
                            "host {host} was told `{e}` (nothing happened) for operation {op}, but attempt(s) \
                             {charged:?} of its call {call} charged"
                        ));
                    }
                }
                Err(e) if e == "kept ambiguous" => {
                    // Honest only if the runtime could not know whether it took effect.
                    if !st.uncertain.contains_key(op) {
                        f.unclear = true;
                        f.problems.push(format!(
                            "host {host} was told operation {op} may have taken effect (kept ambiguous), \
                             but no attempt or holder of it ever had an unknown outcome"
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
                    let known = if self.cfg.dedup() {
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
        // guard's write was stopped by the store being down or cut off, or its host stalled.
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
                || self.stalled_during(&st, c.host, dropped, dropped + DROP_PROBE)
            {
                across.add(
                    "dropped call's claim left to its lease (store down, cut off or host stalled)",
                );
                continue;
            }
            f.stale_claim = true;
            f.problems.push(format!(
                "call {i} (host {}, operation {}) was dropped at {dropped:?} holding its claim, which still held \
                 the key {DROP_PROBE:?} later (first end write sent: {:?})",
                c.host, c.op, c.end_write_at
            ));
        }
        // Issue 30 #8: a completion applied whose reply was lost, retried under its token, is
        // applied again: the call ends Completed, not Unrecorded ("taken over").
        for (i, c) in st.calls.iter().enumerate() {
            let applied = c.token.is_some_and(|t| st.completed_tokens.contains(&t));
            if !(c.unrecorded && applied) {
                continue;
            }
            if !c.fenced_after_applied {
                across.add("call ended Unrecorded: its completion was applied, but no retry's reply came back before the lease's end");
            } else if st.removals.iter().any(|r| r.1 == c.op) {
                across.add("call ended Unrecorded: its completion's retry fenced after an operator removed the record");
            } else if completions_idempotent() {
                f.unclear = true;
                f.problems.push(format!(
                    "call {i} (host {}, operation {}) ended Unrecorded: its completion was applied, its reply lost, \
                     and the retry under its token was refused as a takeover",
                    c.host, c.op
                ));
            } else {
                across.add("call ended Unrecorded although its completion was applied (the store's completion is not idempotent for its token: issue 30 #8)");
            }
        }
        let problems_before_plans = f.problems.len();
        let no_verify = self.cfg.mode == Mode::NoDedup { verify: false };
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
                    // S20 without verify: only an operator settles an unknown outcome.
                    Some(Err(e)) if no_verify && e == "kept ambiguous" => {}
                    Some(Err(e)) if spec.not_replayable() && e == "unreplayable" => {}
                    // Issue 30 #9: its large outcome could not be stored half-way to the lease's
                    // end (a full disk, or the store down or failing its writes that long); the
                    // executor recorded that it ran instead.
                    Some(Err(e)) if spec.large && e == "unreplayable" => {}
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
        // The records left: with verify, none ambiguous (it could answer once faults stopped);
        // without, every operation with an unknown attempt still kept (never released), unless
        // an operator removed its record.
        if !self.cfg.dedup() {
            for op in 0..self.cfg.ops.len() {
                if st.removals.iter().any(|r| r.1 == op) {
                    continue;
                }
                let key = agent::key_of(self, op);
                let state =
                    match now_or_never(idem_runtime::Records::get(&*self.shared_store, &key)) {
                        Some(Ok(rec)) => rec.map(|r| r.state.kind()),
                        _ => continue,
                    };
                use idem_runtime::store::{ExistingState, StateKind};
                // Marked ambiguous, not a holder's record whose lease lapsed (which reads as
                // ambiguous, S31, and which a settler would settle).
                let state = match state {
                    Some(StateKind::Ambiguous)
                        if matches!(
                            stored_state(&self.shared_store, &key),
                            Some(ExistingState::Running { .. })
                        ) =>
                    {
                        Some(StateKind::Running)
                    }
                    other => other,
                };
                let unknown_attempt = st.attempts.iter().any(|a| a.op == op && unknown(a));
                if self.cfg.verifies() && state == Some(StateKind::Ambiguous) {
                    f.unsettled = true;
                    f.problems.push(format!(
                        "operation {op}'s record was left ambiguous although verify could answer"
                    ));
                } else if no_verify && unknown_attempt && state.is_none() {
                    f.resent = true;
                    f.problems.push(format!(
                        "operation {op} had an attempt whose outcome was unknown, but its record was released"
                    ));
                }
            }
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
        faults.add(match self.cfg.mode {
            Mode::Dedup => "provider deduplicates by key (world)",
            Mode::NoDedup { verify: true } => {
                "provider does not deduplicate, tool verifies (world)"
            }
            Mode::NoDedup { verify: false } => {
                "provider does not deduplicate, tool cannot verify (world)"
            }
        });
        if self.cfg.leases.iter().any(|&l| l != self.cfg.leases[0]) {
            faults.add("hosts with leases of their own lengths (world)");
        }
        let now = self.now();
        for (host, windows) in self.cfg.stalls.iter().enumerate() {
            for &(from, to) in windows {
                if from < to && from < now {
                    faults.add("host stalled at a random moment (all its tasks unpolled)");
                    if self.cfg.crashed_during(host, from, to) {
                        faults.add("host crashed while stalled");
                    }
                }
            }
        }
        let mut consequences = st.consequences.clone();
        for result in st.finals.values() {
            if matches!(result, Err(e) if e == "kept ambiguous") && no_verify {
                consequences.add(
                    "caller kept ambiguous as its final answer (no verify: an operator settles it)",
                );
            }
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
            consequences,
            across_partitions: across,
            calls: st.results.len() as u64,
            charges: st.provider.next_charge,
            body_runs: st.attempts.len() as u64,
            attempts_at_provider: st.attempts.iter().filter(|a| a.reached_provider).count() as u64,
            verifications: st.verifications.len() as u64,
            finished_at: Duration::ZERO,
            trace: st.provider.trace.clone(),
        })
    }
}
/// Whether the memory store applies a completion sent again by the holder that completed the
/// record (issue 30 #8: idempotent for its token). Once it does, a call whose completion was
/// applied and whose reply was lost must not end `Unrecorded`; until then that is counted.
fn completions_idempotent() -> bool {
    use idem_runtime::store::{ClaimRequest, LeaseToken, Outcome, Written};
    use idem_runtime::{Fingerprint, IdempotencyKey, MemoryStore, Store};
    static PROBED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PROBED.get_or_init(|| {
        let store = MemoryStore::new();
        let key = IdempotencyKey::derive("probe", &[("n", &1u32)]);
        let token = LeaseToken::new();
        let fingerprint = Fingerprint::of(&()).expect("() serializes");
        let hour = Duration::from_secs(3600);
        let req = ClaimRequest::new(key, "probe", fingerprint, token, hour, hour);
        let _ = now_or_never(store.claim(&req));
        let complete = || now_or_never(store.complete(key, token, Outcome::from(&b"1"[..]), hour));
        let first = complete();
        let again = complete();
        matches!(first, Some(Ok(Written::Applied))) && matches!(again, Some(Ok(Written::Applied)))
    })
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
        let operator = tokio::spawn(operator::run(world.clone()));
        let all = async {
            for h in hosts {
                h.await.expect("an agent host panicked");
            }
        };
        let finished = tokio::time::timeout(SIM_DEADLINE, all).await.is_ok();
        let finished_at = world.now();
        tokio::time::sleep(SETTLE).await;
        operator.abort();
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
        total.verifications += r.verifications;
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
                total.verifications += r.verifications;
                total.finished_at = total.finished_at.max(r.finished_at);
            }
            Err(f) => failures.push(f),
        }
    }
    (total, failures)
}
