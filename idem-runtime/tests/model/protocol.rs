//! The protocol as a finite transition system: one key, 0-3 callers, 0-2 settlers, the store's
//! transitions as `MemoryStore` (and the SQLite store's lease cap) makes them, the executor's
//! decisions as `exec/core` makes them, the settler's as `settle/mod.rs` makes them (with issue
//! 52's parts), the provider, an operator, the record's time-to-live, and the faults. Every step
//! is optional (a caller, its body, its renewals, a settler may stall for any length), so a
//! property that holds here holds whatever the timing.
//!
//! Time is relative: a state keeps what is left of each lease (by the store's clock and by each
//! holder's own monotonic clock), not the hour, so the state space is finite without a horizon
//! and liveness is checked on the whole graph.

use std::fmt;

/// At most this many callers (the state is a fixed array).
pub const MAX_CALLERS: usize = 3;

/// How a store keeps time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    /// One clock for every caller (the memory store's tokio clock, PostgreSQL's `now()`, Redis's
    /// `TIME`): lease ends are compared on it, never capped.
    OneClock,
    /// Each claimer's wall clock (SQLite): a lease end further ahead than one lease from the
    /// claimer's now is capped as clock skew, by the holder's own lease (S23) or, as before the
    /// fix, by the claimer's.
    CallersClocks { cap_by_holders_lease: bool },
}

/// The executor, as the code makes it, or with one of its guards taken out (a broken variant).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exec {
    /// S12: the holder renews its lease while a body runs (and, S13, stops when refused).
    pub renews: bool,
    /// S22: past its lease end by its own clock, a holder polls its body no further and starts
    /// nothing until a renewal succeeds.
    pub gates_stalled_holder: bool,
    /// S22 as the code has it: an attempt's first poll after the claim reads no clock
    /// (`poll_gate`'s `unrenewed = false`; `poll_next` gates only once `attempts > 0` or a
    /// renewal exists). `true`: that first poll is gated too.
    pub gates_first_poll: bool,
    /// S22: past its lease's end, a holder sends one last renewal (applied if nobody took the
    /// key over) rather than waiting for one that will never come.
    pub renews_late: bool,
    /// S14: once an attempt answered `Ambiguous`, the call never ends in a release.
    pub ambiguity_sticky: bool,
    /// S14+/S19: a takeover (of an ambiguous record, or of an expired holder's) starts with the
    /// outcome unknown.
    pub takeover_keeps_ambiguity: bool,
    /// S15: a dropped call's claim is ended at once (ambiguous if an attempt ran, else released).
    pub drop_guard: bool,
    /// S27: a call dropped before anything ran under its claim gives the claim back (a new
    /// record released, a takeover restored). `false`: as before issue 41, kept as ambiguous
    /// (a claim dropped in flight).
    pub gives_back: bool,
    /// S27: the store restores what a takeover replaced. `false`: it releases instead (the
    /// broken variant the seed-1856 fix guarded against).
    pub restores: bool,
    /// The actors beside the callers (the settler) and how the store keeps records over time
    /// (issue 52). `Exec::CODE` has no settler and no expiry, so the models built before them
    /// (and the trace validation of `model_stores.rs`, `failover_redis.rs`) are unchanged.
    pub settle: Settle,
}

/// At most this many settlers (the state is a fixed array). A settler holds the record under the
/// holder number `MAX_CALLERS + j`.
pub const MAX_SETTLERS: usize = 2;

/// The settler (`settle/mod.rs`) and the store's keeping of records over time: how many settlers
/// run, their lease, the operator bound, expiry, and the design (as issue 52 builds it, or with one
/// of its parts taken out).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settle {
    /// How many settlers run at once (0-2). Each makes passes for ever (list, claim, verify,
    /// decide), and may be cut off (its pass dropped) or crash at each step.
    pub settlers: u8,
    /// The settler's lease, in ticks (it does not renew: its verify is bounded by half of it).
    pub lease: u8,
    /// The operator bound: after this many Unknown answers a record is flagged for an operator.
    pub bound: u8,
    pub expiry: Expiry,
    /// The record as an earlier call left it: `None`, none; `Some(e)`, kept as ambiguous, with
    /// `e` effects (0 or 1) at the provider (for checks of the settlers alone).
    pub start: Option<u8>,
    /// S31: the settler lists (and `list --state ambiguous` shows) a Running record whose lease
    /// lapsed as well as an Ambiguous one, and settles it as an ambiguous one. `false`: it lists
    /// state Ambiguous only (main before issue 52).
    pub lists_lapsed: bool,
    /// S30: a settler's pass dropped while it holds a record gives it back at once (ambiguous;
    /// a record its own claim made: released). `false`: nothing does (main before issue 52).
    pub drop_guard: bool,
    /// S32: a takeover (a caller's or a settler's) keeps the record's count of Unknown answers
    /// (and, with it, when the record was first made and since when it is unknown: the stores
    /// keep and reset them together). `false`: a caller that took the record over starts them
    /// afresh (main before issue 52: its claim rewrote `created`, and its mark replaced the note,
    /// where the count was kept, with its own; a claim given back brought the old note back).
    pub takeover_keeps_count: bool,
    /// S32 with two settlers: a settler counts its Unknown answer on the count of the record it
    /// holds. `false`: on the count it listed (main before issue 52: `unknowns_of(note)` of the
    /// listed record), which another settler's answer may have passed since.
    pub counts_held: bool,
    /// A claim of an absent key (a record settled and released since the settler listed it) is
    /// reported as what it is, a new record (which the settler releases). `false`: reported as
    /// a takeover (issue 52 #6: PostgreSQL's `RETURNING` read the statement's snapshot), so the
    /// settler verifies and decides again.
    pub claim_reports_truly: bool,
}

impl Settle {
    /// No settler, no expiry; the rest as issue 52 builds it.
    pub const NONE: Settle = Settle {
        settlers: 0,
        lease: 3,
        bound: 2,
        expiry: Expiry::Never,
        start: None,
        lists_lapsed: true,
        drop_guard: true,
        takeover_keeps_count: true,
        counts_held: true,
        claim_reports_truly: true,
    };

    /// The settler as main made it before issue 52: lists state Ambiguous only, no drop guard,
    /// a takeover starts the count afresh and the settler counts on what it listed.
    pub const BEFORE_ISSUE_52: Settle = Settle {
        lists_lapsed: false,
        drop_guard: false,
        takeover_keeps_count: false,
        counts_held: false,
        ..Settle::NONE
    };
}

/// When a record's time-to-live may pass (it is then absent to every transition, and `prune`
/// deletes it: the memory store's `claim`, `held`, `list` and `restore` all read a record past
/// its ttl as absent, so in the model expiry and prune are one step, at any time once no lease on
/// the record is live).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expiry {
    /// Never (the models before issue 52).
    Never,
    /// S10 as main has it: any record whose lease is not live, an ambiguous one included.
    S10,
    /// S34 (issue 53): a record kept as ambiguous, or counting as one (S31: running, its lease
    /// lapsed), never expires by time; a completed one may (S10: the next call runs anew, a new
    /// record, its effects counted afresh).
    S34,
    /// S33 with S34 (issue 53): as S34, and a completed record is never absent because time
    /// passed: past its ttl its tombstone answers a repeat, which ends without running (as at a
    /// replay: in the model the two are one state). Effects are counted across time: "the body
    /// never runs twice for one key" holds for ever, short of an operator's forget.
    S33,
    /// A broken S33: a claim treats a completed record past its ttl as absent (or a prune
    /// drops its tombstone before its setting): the next call runs the body again. Effects are
    /// counted across time, as S33 promises, so the checker finds the second.
    S33TombstoneDropped,
}

impl Exec {
    /// The executor as `main` makes it.
    pub const CODE: Exec = Exec {
        renews: true,
        gates_stalled_holder: true,
        gates_first_poll: true,
        renews_late: true,
        ambiguity_sticky: true,
        takeover_keeps_ambiguity: true,
        drop_guard: true,
        gives_back: true,
        restores: true,
        settle: Settle::NONE,
    };
}

/// Which faults and actors the model lets in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Faults {
    /// A holder's process dies (no write; its lease expires: S8).
    pub crash: bool,
    /// A call's future is dropped (cancelled) or its body panics (S15).
    pub drop: bool,
    /// A store write answers with an error (a renewal is retried, a late one loses the lease; an
    /// end write is given up after its retries, the record then left running).
    pub store_errors: bool,
    /// The retry schedule's time budget may run out before the attempts do.
    pub schedule_gives_up: bool,
}

/// One model: who calls, what the tool and provider are, what can go wrong.
#[derive(Clone, Debug)]
pub struct Config {
    /// Each caller's lease length, in ticks (a multiple of 3 keeps "renew at a third" exact).
    pub leases: Vec<u8>,
    /// Each caller's wall-clock offset, in ticks (used by [`StoreKind::CallersClocks`] only).
    pub offsets: Vec<i8>,
    pub store: StoreKind,
    /// The provider deduplicates by our key (a second send of the key is no second effect).
    pub dedup: bool,
    /// S20: the executor may re-send an attempt whose outcome is unknown.
    pub resend: bool,
    /// S19: the tool has a `verify` function.
    pub verifies: bool,
    pub max_attempts: u8,
    pub faults: Faults,
    /// How many operator actions (release, release --force, forget, forget --force, resolve
    /// applied / not-applied) may happen in a run.
    pub operator_actions: u8,
    pub exec: Exec,
}

impl Config {
    pub fn callers(&self) -> usize {
        self.leases.len()
    }

    pub fn settlers(&self) -> usize {
        self.exec.settle.settlers as usize
    }

    fn offset(&self, i: usize) -> i8 {
        match self.store {
            StoreKind::OneClock => 0,
            StoreKind::CallersClocks { .. } => self.offsets[i],
        }
    }

    /// Below this, a remaining store lease is expired for every caller and the operator.
    fn floor(&self) -> i8 {
        (0..self.callers())
            .map(|i| self.offset(i))
            .min()
            .unwrap_or(0)
            .min(0)
    }
}

/// The key's record in the store. The token is the holder's caller number (a call claims once).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rec {
    Absent,
    /// `rem`: the lease end minus now, both by the store's reference clock (a caller whose clock
    /// is ahead by `o` sees `rem - o`). The lease length kept with the record is the holder's.
    Running {
        holder: u8,
        rem: i8,
        /// What the holder's claim replaced, kept for its claim given back unused (S27).
        prior: Prior,
    },
    Completed,
    Ambiguous,
}

/// What a claim replaced, as the stores keep it (one level: a holder's record brought back
/// has lost its own, `Unknown`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Prior {
    Absent,
    Ambiguous,
    /// An expired holder's running record, `rem` as in [`Rec::Running`].
    Expired {
        holder: u8,
        rem: i8,
    },
    Unknown,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Failure {
    Transient,
    Permanent,
    Ambiguous,
}

/// Where a running call is between and in its steps (`exec/core`'s `Between`; `Backoff` is
/// `Ready` after a failure: every step may wait anyway).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    Ready,
    /// A verification is to start; `after`: an attempt of this call left the outcome unknown
    /// (`false`: met at the claim).
    Verify {
        after: bool,
    },
    /// The body runs; `reached`: it reached the provider (the effect, if any, happened).
    Attempting {
        reached: bool,
    },
    Verifying {
        after: bool,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Run {
    pub step: Step,
    pub attempts: u8,
    /// `Run::ambiguous`: the outcome of an attempt (or of the record taken over) is unknown.
    pub amb: bool,
    /// The lease's remaining time by this holder's own monotonic clock.
    pub ends: u8,
    /// Time until the next renewal is due.
    pub due: u8,
    /// An attempt or a verification was started: something ran under the claim (S27).
    pub stepped: bool,
    /// The `Renewal` exists (made at the first pending poll, or by a gate).
    pub renewed: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Write {
    Complete,
    MarkAmbiguous,
    Release,
    /// S27: the claim given back (`Store::restore`).
    Restore,
}

/// What a caller was told.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Told {
    Ok,
    Verified,
    Replayed,
    /// Its last attempt's error (said to be definite for `Transient`/`Permanent`).
    BodyError(Failure),
    /// `Error::Ambiguous`: the effect may have happened.
    Ambiguous,
    LeaseLost,
    /// `Error::InFlight`: another call holds the key; this one did not run.
    InFlight,
    /// The caller dropped the call (cancelled) or its body panicked.
    Dropped,
}

impl Told {
    /// Tells the caller that the operation did not happen.
    fn says_not_run(self) -> bool {
        matches!(
            self,
            Told::InFlight | Told::BodyError(Failure::Transient | Failure::Permanent)
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Claiming (the claim loop: claims again while another holder's lease is live).
    Idle,
    Run(Run),
    /// The end is being written.
    Writing(Write, Told),
    Done(Told),
    Crashed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Caller {
    pub phase: Phase,
    /// An attempt of this call started.
    pub started: bool,
    /// An attempt of this call reached the provider.
    pub reached: bool,
}

/// Where a settler is in its pass (`Settler::run_once_with`, `settle_record`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SPhase {
    /// Between passes: its next pass lists the records to settle.
    Idle,
    /// Listed the record; `count`: its Unknown answers as listed (kept only where the settler
    /// counts on what it listed, [`Settle::counts_held`] off).
    Listed { count: u8 },
    /// Holds the record (its claim took it over); verify is asked.
    Holding { count: u8 },
    /// Verify answered; the decision is being written under the settler's token.
    Deciding { verdict: Verdict, count: u8 },
    /// Its claim made a new record (the one it listed was settled meanwhile): releasing it.
    Discarding,
    /// Its process died (or the settler is not in this model).
    Crashed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct State {
    pub rec: Rec,
    pub callers: [Caller; MAX_CALLERS],
    pub settlers: [SPhase; MAX_SETTLERS],
    /// The record's count of Unknown answers (the settler's), up to the bound; 0 where there is
    /// no record or it is completed.
    pub count: u8,
    /// Ghost: the Unknown answers the settlers wrote on this record since it was made (up to the
    /// bound), whatever the record keeps.
    pub answers: u8,
    /// Ghost: decisions (a settler's Applied or NotApplied written, an operator's resolve) since a
    /// caller last made a new record, or a settler's claim that made one said so (up to 2).
    /// Tracked only with a settler.
    pub decided: u8,
    /// Effects at the provider (saturating at 2).
    pub effects: u8,
    /// Ghost: the key's ambiguity mark (an attempt of the holder answered `Ambiguous`, or the
    /// record was kept as ambiguous, and neither a `NotApplied`, a completion nor an operator
    /// settled it since).
    pub marked: bool,
    /// Ghost: an operator forced something (removed a record of an effect that happened, or a
    /// record whose lease was live).
    pub forced: bool,
    pub ops_left: u8,
}

impl State {
    pub fn initial(cfg: &Config) -> State {
        let idle = Caller {
            phase: Phase::Idle,
            started: false,
            reached: false,
        };
        let mut callers = [Caller {
            phase: Phase::Crashed,
            ..idle
        }; MAX_CALLERS];
        for c in callers.iter_mut().take(cfg.callers()) {
            *c = idle;
        }
        let mut settlers = [SPhase::Crashed; MAX_SETTLERS];
        for p in settlers.iter_mut().take(cfg.settlers()) {
            *p = SPhase::Idle;
        }
        let start = cfg.exec.settle.start;
        State {
            rec: match start {
                None => Rec::Absent,
                Some(_) => Rec::Ambiguous,
            },
            callers,
            settlers,
            count: 0,
            answers: 0,
            decided: 0,
            effects: start.unwrap_or(0),
            marked: start.is_some(),
            forced: false,
            ops_left: cfg.operator_actions,
        }
    }

    /// Every caller has ended (or its process died).
    pub fn all_ended(&self) -> bool {
        self.callers
            .iter()
            .all(|c| matches!(c.phase, Phase::Done(_) | Phase::Crashed))
    }

    /// An unknown outcome waits for a decision: the effect happened or the key is marked
    /// ambiguous, and the record neither completed nor an operator's forced repair.
    pub fn unknown_pending(&self) -> bool {
        (self.effects > 0 || self.marked) && self.rec != Rec::Completed && !self.forced
    }

    /// The record is in the settle queue's sight: held under a lease not yet lapsed (its holder
    /// decides it, or the lease lapses), or listed by the settler and `list --state ambiguous`.
    pub fn in_sight(&self, cfg: &Config) -> bool {
        match self.rec {
            Rec::Absent => false,
            Rec::Completed | Rec::Ambiguous => true,
            Rec::Running { rem, .. } => rem > 0 || cfg.exec.settle.lists_lapsed,
        }
    }

    /// What the settlers reach without a caller (S30/S31): no unknown outcome waits, or no
    /// settler is left to settle it.
    pub fn settled_or_no_settler(&self) -> bool {
        !self.unknown_pending() || self.settlers.iter().all(|p| *p == SPhase::Crashed)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verdict {
    Applied,
    NotApplied,
    Unknown,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Answer {
    Ok,
    Failed(Failure),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    Release,
    ReleaseForce,
    Forget,
    ForgetForce,
    ResolveApplied,
    ResolveNotApplied,
}

/// One step of the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    Tick,
    /// A claim that took the key (`takeover`: what it replaced) or found it completed.
    Claim(u8),
    /// A claim that found another holder's lease live (the SQLite store may cap it meanwhile).
    ClaimWaits(u8),
    /// Gave up waiting for another holder: `InFlight`.
    GiveUp(u8),
    Renew(u8),
    RenewFails(u8),
    /// The next attempt starts.
    Start(u8),
    /// A verification starts.
    StartVerify(u8),
    /// The outcome is unknown and not re-sent (S20).
    Unsettled(u8),
    /// The body (or the verification) waits at an await: the lease's renewals start (S12).
    Pending(u8),
    /// The body reaches the provider.
    Reach(u8),
    Answer(u8, Answer),
    /// The retry schedule's time ran out.
    GivesUp(u8),
    Verify(u8, Verdict),
    Write(u8),
    WriteFails(u8),
    /// Cancelled, or (while an attempt runs) the body panicked: the drop guard's write.
    Drop(u8),
    DropWriteFails(u8),
    Crash(u8),
    Operator(Op),
    /// A settler's pass lists the record (as one to settle).
    SettlerList(u8),
    /// Its claim took the record over (or made a new one).
    SettlerClaim(u8),
    /// Its claim found the record held under a live lease (`Busy`) or completed (`Gone`).
    SettlerBusy(u8),
    SettlerVerify(u8, Verdict),
    /// Its decision (or the release of a record its claim made), fenced by its token.
    SettlerWrite(u8),
    SettlerWriteFails(u8),
    /// Its pass is dropped (a timeout around `run_once`, a shutdown): the drop guard's write.
    SettlerDrop(u8),
    SettlerDropWriteFails(u8),
    SettlerCrash(u8),
    /// The record's time-to-live passes (and `prune` deletes it).
    Expire,
}

/// A property, named after its contract row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Property {
    /// S20 (with S7, S8, S19): at most one effect per key for a provider that does not
    /// deduplicate, unless an operator forced it.
    S20AtMostOneEffect,
    /// S12/S13 (and S7, S11): no body step of a caller while another holds the key in the store,
    /// or while both believe they hold the lease by their own clocks (unless an operator forced a
    /// release).
    S12NoTwoHolders,
    /// S22: a body step is taken only while the caller's lease is live by its own clock.
    S22NoStepPastItsLease,
    /// S14/S14+: the ambiguity mark is cleared only by a `NotApplied` verification, an operator
    /// or a completion; never by a release.
    S14AmbiguityClearedOnlyByNotAppliedOrOperator,
    /// S19/S20 (issue 30 #5): a caller is never told "not run" (in flight, or a definite failure)
    /// after an attempt of its call reached the provider.
    S19NeverNotRunAfterAnAttempt,
    /// S15: a dropped call's claim ends at once (unless the store failed the write).
    S15DroppedClaimEnds,
    /// S27: a call dropped before anything ran under its claim leaves the record as it was
    /// before the claim (where the store still knows it; else kept ambiguous): never a new
    /// unknown outcome.
    S27DroppedUnusedClaimLeavesTheRecordAsItWas,
    /// Every caller ends: from every reachable state, a state where all have ended is reachable
    /// by the protocol's own steps, without a fault or an operator (AG EF, which gives
    /// "eventually" under fairness); so no state but those is stuck either.
    EveryCallerEnds,
    /// S30: a settler's pass dropped while it holds the record gives it back at once (unless the
    /// store failed the write).
    S30DroppedSettlerHoldEnds,
    /// S30/S31: no unknown outcome is ever out of the settle queue's sight: whenever the effect
    /// happened or the key is marked ambiguous, and the record is neither completed nor forced
    /// by an operator, it is held under a lease not yet lapsed or listed by the settler.
    S31NoUnknownOutOfSight,
    /// S32: a settler's Unknown answer that is the bound's n-th on the record (across takeovers
    /// by callers and settlers) flags it for an operator.
    S32OperatorBoundCountsAcrossTakeovers,
    /// S28: each unknown is decided once: never two decisions (a settler's Applied or NotApplied,
    /// an operator's resolve) between a caller's making of a record and the next.
    S28EachDecisionOnce,
    /// S30/S31, liveness: from every reachable state, by the settlers' own steps and time alone
    /// (no caller, no fault, no operator), a state is reachable where no unknown outcome waits,
    /// unless no settler is left (AG EF).
    SettledWithoutACaller,
}

impl fmt::Display for Property {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// The properties a transition breaks, as a set (bit `Property as u8`).
pub type Broken = u16;

/// The successors of `s`, each with the properties its transition breaks.
pub fn next(cfg: &Config, s: &State, out: &mut Vec<(Action, State, Broken)>) {
    out.clear();
    let mut push = |a: Action, mut t: State| {
        // No count without a record to keep it, nor on a completed one.
        if matches!(t.rec, Rec::Absent | Rec::Completed) {
            t.count = 0;
            t.answers = 0;
        }
        let broken = check(cfg, s, a, &t);
        out.push((a, t, broken));
    };
    if let Some(t) = tick(cfg, s) {
        push(Action::Tick, t);
    }
    for i in 0..cfg.callers() {
        caller_steps(cfg, s, i, &mut push);
    }
    for j in 0..cfg.settlers() {
        settler_steps(cfg, s, j, &mut push);
    }
    if s.ops_left > 0 {
        operator_steps(cfg, s, &mut push);
    }
    expiry_steps(cfg, s, &mut push);
}

/// The holder number of settler `j`.
fn settler_holder(j: usize) -> u8 {
    (MAX_CALLERS + j) as u8
}

fn bump(n: u8, max: u8) -> u8 {
    (n + 1).min(max)
}

/// A settler's pass as `Settler::settle_record` makes it (with issue 52's parts as
/// [`Settle`] says): list, claim under a token of its own (taking the record over as a caller
/// does), ask verify, write the decision fenced by the token; cut off (the pass dropped: the drop
/// guard's write) or crashed at each step. A pass over, the next one may start.
fn settler_steps(cfg: &Config, s: &State, j: usize, push: &mut impl FnMut(Action, State)) {
    let sc = cfg.exec.settle;
    if !cfg.verifies {
        // `Settled::NoVerify`: the settler changes nothing.
        return;
    }
    let me = j as u8;
    let h = settler_holder(j);
    let holds = matches!(s.rec, Rec::Running { holder, .. } if holder == h);
    let listed = |count: u8| if sc.counts_held { 0 } else { count };
    let with = |p: SPhase| {
        let mut t = *s;
        t.settlers[j] = p;
        t
    };
    let phase = s.settlers[j];
    match phase {
        SPhase::Crashed => return,
        SPhase::Idle => {
            let listable = match s.rec {
                Rec::Ambiguous => true,
                Rec::Running { rem, .. } => rem <= 0 && sc.lists_lapsed,
                Rec::Absent | Rec::Completed => false,
            };
            if listable {
                let t = with(SPhase::Listed {
                    count: listed(s.count),
                });
                push(Action::SettlerList(me), t);
            }
            return;
        }
        SPhase::Listed { count } => {
            let takeover = match s.rec {
                Rec::Absent => None,
                Rec::Running { holder, rem, .. } if rem <= 0 => {
                    Some(Prior::Expired { holder, rem })
                }
                Rec::Ambiguous => Some(Prior::Ambiguous),
                Rec::Running { .. } | Rec::Completed => {
                    push(Action::SettlerBusy(me), with(SPhase::Idle));
                    return;
                }
            };
            let mut t = *s;
            t.rec = Rec::Running {
                holder: h,
                rem: sc.lease as i8,
                prior: takeover.unwrap_or(Prior::Absent),
            };
            t.settlers[j] = match takeover {
                // A new record (the one listed was settled or expired since), released at once:
                // not the record listed, and no decision of it.
                None if sc.claim_reports_truly => {
                    t.decided = 0;
                    SPhase::Discarding
                }
                _ => SPhase::Holding { count },
            };
            push(Action::SettlerClaim(me), t);
        }
        SPhase::Holding { count } => {
            let truth = if s.effects > 0 {
                Verdict::Applied
            } else {
                Verdict::NotApplied
            };
            for verdict in [Verdict::Unknown, truth] {
                push(
                    Action::SettlerVerify(me, verdict),
                    with(SPhase::Deciding { verdict, count }),
                );
            }
        }
        SPhase::Deciding { verdict, count } => {
            let mut t = with(SPhase::Idle);
            if holds {
                match verdict {
                    Verdict::Applied => {
                        t.rec = Rec::Completed;
                        t.marked = false;
                        t.decided = bump(t.decided, 2);
                    }
                    Verdict::NotApplied => {
                        t.rec = Rec::Absent;
                        t.marked = false;
                        t.decided = bump(t.decided, 2);
                    }
                    Verdict::Unknown => {
                        let counted = if sc.counts_held { s.count } else { count };
                        t.count = bump(counted, sc.bound);
                        t.answers = bump(s.answers, sc.bound);
                        t.rec = Rec::Ambiguous;
                        t.marked = true;
                    }
                }
            }
            push(Action::SettlerWrite(me), t);
            if cfg.faults.store_errors {
                push(Action::SettlerWriteFails(me), with(SPhase::Idle));
            }
        }
        SPhase::Discarding => {
            let mut t = with(SPhase::Idle);
            if holds {
                t.rec = Rec::Absent;
            }
            push(Action::SettlerWrite(me), t);
            if cfg.faults.store_errors {
                push(Action::SettlerWriteFails(me), with(SPhase::Idle));
            }
        }
    }
    // Cut off: the pass is dropped; its drop guard gives the record back.
    if cfg.faults.drop {
        let mut t = with(SPhase::Idle);
        let guarded = sc.drop_guard && holds;
        if guarded {
            if phase == SPhase::Discarding {
                t.rec = Rec::Absent;
            } else {
                t.rec = Rec::Ambiguous;
                t.marked = true;
            }
        }
        push(Action::SettlerDrop(me), t);
        if guarded && cfg.faults.store_errors {
            push(Action::SettlerDropWriteFails(me), with(SPhase::Idle));
        }
    }
    // Its process dies (before its claim, that is a settler that does nothing more: no new
    // behaviour).
    if cfg.faults.crash && !matches!(phase, SPhase::Listed { .. }) {
        push(Action::SettlerCrash(me), with(SPhase::Crashed));
    }
}

/// The record's time-to-live passes (`Expiry`), and `prune` deletes it.
fn expiry_steps(cfg: &Config, s: &State, push: &mut impl FnMut(Action, State)) {
    let expiry = cfg.exec.settle.expiry;
    let expires = match (expiry, s.rec) {
        (Expiry::Never, _) | (_, Rec::Absent) => false,
        (Expiry::S10, Rec::Completed) => true,
        (Expiry::S10, Rec::Ambiguous) => true,
        (Expiry::S10, Rec::Running { rem, .. }) => rem <= 0,
        (
            Expiry::S34 | Expiry::S33 | Expiry::S33TombstoneDropped,
            Rec::Ambiguous | Rec::Running { .. },
        ) => false,
        // S33: a completed record past its ttl is a tombstone, never absent by time.
        (Expiry::S33, Rec::Completed) => false,
        (_, Rec::Completed) => true,
    };
    if expires {
        let mut t = *s;
        let across_time = matches!(expiry, Expiry::S33 | Expiry::S33TombstoneDropped);
        if s.rec == Rec::Completed && !s.forced && !across_time {
            // The next call runs anew (S10, by contract): the effects counted are the new
            // record's. No earlier holder can take a step: none holds a lease (S12, S22), unless
            // an operator forced one out, which S20 excuses anyway.
            t.effects = 0;
        }
        t.rec = Rec::Absent;
        push(Action::Expire, t);
    }
}

fn tick(cfg: &Config, s: &State) -> Option<State> {
    let mut t = *s;
    if let Rec::Running { rem, prior, .. } = &mut t.rec {
        *rem = (*rem - 1).max(cfg.floor());
        if let Prior::Expired { rem, .. } = prior {
            *rem = (*rem - 1).max(cfg.floor());
        }
    }
    for c in t.callers.iter_mut() {
        if let Phase::Run(r) = &mut c.phase {
            r.ends = r.ends.saturating_sub(1);
            r.due = r.due.saturating_sub(1);
        }
    }
    (t != *s).then_some(t)
}

fn lease(cfg: &Config, i: usize) -> u8 {
    cfg.leases[i]
}

fn fresh_run(cfg: &Config, i: usize, amb: bool) -> Run {
    let l = lease(cfg, i);
    Run {
        step: Step::Ready,
        attempts: 0,
        amb,
        ends: l,
        due: l / 3,
        renewed: false,
        stepped: false,
    }
}

fn caller_steps(cfg: &Config, s: &State, i: usize, push: &mut impl FnMut(Action, State)) {
    let me = i as u8;
    let c = s.callers[i];
    match c.phase {
        Phase::Idle => claim(cfg, s, i, push),
        Phase::Run(r) => run_steps(cfg, s, i, r, push),
        Phase::Writing(w, told) => {
            let mut t = *s;
            write(cfg, &mut t, i, w);
            t.callers[i].phase = Phase::Done(told);
            push(Action::Write(me), t);
            if cfg.faults.store_errors {
                let mut t = *s;
                t.callers[i].phase = Phase::Done(told);
                push(Action::WriteFails(me), t);
            }
            if cfg.faults.crash {
                let mut t = *s;
                t.callers[i].phase = Phase::Crashed;
                push(Action::Crash(me), t);
            }
        }
        Phase::Done(_) | Phase::Crashed => {}
    }
}

/// `MemoryStore::claim_sync` (and the SQLite store's cap), then `claim::answer`.
fn claim(cfg: &Config, s: &State, i: usize, push: &mut impl FnMut(Action, State)) {
    let me = i as u8;
    let o = cfg.offset(i);
    let mut t = *s;
    let takeover = match s.rec {
        Rec::Absent => None,
        Rec::Running { holder, rem, .. } if rem - o <= 0 => Some(Prior::Expired { holder, rem }),
        Rec::Ambiguous => Some(Prior::Ambiguous),
        Rec::Completed => {
            t.callers[i].phase = Phase::Done(Told::Replayed);
            push(Action::Claim(me), t);
            return;
        }
        Rec::Running { holder, rem, prior } => {
            // Another holder's lease is live: wait (the claim loop asks again), or give up.
            if let StoreKind::CallersClocks {
                cap_by_holders_lease,
            } = cfg.store
            {
                let cap = if cap_by_holders_lease {
                    lease(cfg, holder as usize)
                } else {
                    lease(cfg, i)
                } as i8;
                if rem - o > cap {
                    t.rec = Rec::Running {
                        holder,
                        rem: o + cap,
                        prior,
                    };
                    push(Action::ClaimWaits(me), t);
                }
            }
            let mut t = *s;
            t.callers[i].phase = Phase::Done(Told::InFlight);
            push(Action::GiveUp(me), t);
            return;
        }
    };
    t.rec = Rec::Running {
        holder: me,
        rem: o + lease(cfg, i) as i8,
        prior: takeover.unwrap_or(Prior::Absent),
    };
    if takeover.is_none() && cfg.settlers() > 0 {
        // A new record: its decisions are its own.
        t.decided = 0;
    }
    let amb = takeover.is_some() && cfg.exec.takeover_keeps_ambiguity;
    t.callers[i].phase = Phase::Run(fresh_run(cfg, i, amb));
    push(Action::Claim(me), t);
}

/// Whether the holder's lease is live by its own clock, or it need not look (`poll_gate`).
/// Without renewals, or without S22's gate (the broken variants), a holder looks only where the
/// fix of the first poll makes it (so their counterexamples are the holes they re-introduce).
fn gate_open(cfg: &Config, r: &Run, between_attempts: bool) -> bool {
    let first_poll = !(r.renewed || (between_attempts && r.attempts > 0));
    let looks = if cfg.exec.renews && cfg.exec.gates_stalled_holder {
        !first_poll || cfg.exec.gates_first_poll
    } else {
        first_poll && cfg.exec.gates_first_poll
    };
    !looks || r.ends > 0
}

fn run_steps(cfg: &Config, s: &State, i: usize, r: Run, push: &mut impl FnMut(Action, State)) {
    let me = i as u8;
    let set = |t: &mut State, r: Run| t.callers[i].phase = Phase::Run(r);
    let attempting = matches!(r.step, Step::Attempting { .. } | Step::Verifying { .. });

    // Renewals (`Holder::poll_lease`): when due, and once the lease's end passed (S22: the last
    // chance). A renewal exists once an attempt waited, or a gate or a backoff made it.
    let renewal_exists = r.renewed || r.attempts > 0 || cfg.exec.gates_first_poll;
    let due = (r.due == 0 && r.ends > 0) || (r.ends == 0 && cfg.exec.renews_late);
    if cfg.exec.renews && renewal_exists && due {
        let late = r.ends == 0;
        let mut t = *s;
        match s.rec {
            Rec::Running { holder, prior, .. } if holder == me => {
                t.rec = Rec::Running {
                    holder: me,
                    rem: cfg.offset(i) + lease(cfg, i) as i8,
                    prior,
                };
                let l = lease(cfg, i);
                set(
                    &mut t,
                    Run {
                        ends: l,
                        due: l / 3,
                        renewed: true,
                        ..r
                    },
                );
            }
            // Fenced: taken over (S13).
            _ => lose(&mut t, i, r, attempting),
        }
        push(Action::Renew(me), t);
        if cfg.faults.store_errors {
            let mut t = *s;
            if late {
                lose(&mut t, i, r, attempting);
            } else {
                set(
                    &mut t,
                    Run {
                        due: (lease(cfg, i) / 10).max(1),
                        renewed: true,
                        ..r
                    },
                );
            }
            push(Action::RenewFails(me), t);
        }
    }

    // The body or the verification waits: `poll_lease` makes the renewal.
    if attempting && !r.renewed {
        let mut t = *s;
        set(&mut t, Run { renewed: true, ..r });
        push(Action::Pending(me), t);
    }

    match r.step {
        Step::Ready | Step::Verify { .. } => {
            if gate_open(cfg, &r, true) {
                let mut t = *s;
                if let Step::Verify { after } = r.step {
                    set(
                        &mut t,
                        Run {
                            step: Step::Verifying { after },
                            stepped: true,
                            ..r
                        },
                    );
                    push(Action::StartVerify(me), t);
                } else if r.amb && (cfg.verifies || !cfg.resend) {
                    if cfg.verifies {
                        set(
                            &mut t,
                            Run {
                                step: Step::Verifying { after: false },
                                stepped: true,
                                ..r
                            },
                        );
                        push(Action::StartVerify(me), t);
                    } else {
                        t.callers[i].phase = Phase::Writing(Write::MarkAmbiguous, Told::Ambiguous);
                        push(Action::Unsettled(me), t);
                    }
                } else {
                    set(
                        &mut t,
                        Run {
                            step: Step::Attempting { reached: false },
                            attempts: r.attempts + 1,
                            stepped: true,
                            ..r
                        },
                    );
                    t.callers[i].started = true;
                    push(Action::Start(me), t);
                }
            }
        }
        Step::Attempting { reached } => {
            if gate_open(cfg, &r, false) {
                if !reached {
                    let mut t = *s;
                    if !(cfg.dedup && t.effects > 0) {
                        t.effects = (t.effects + 1).min(2);
                    }
                    t.callers[i].reached = true;
                    set(
                        &mut t,
                        Run {
                            step: Step::Attempting { reached: true },
                            ..r
                        },
                    );
                    push(Action::Reach(me), t);
                }
                let answers: &[Answer] = if reached {
                    &[Answer::Ok, Answer::Failed(Failure::Ambiguous)]
                } else {
                    &[
                        Answer::Failed(Failure::Transient),
                        Answer::Failed(Failure::Permanent),
                        Answer::Failed(Failure::Ambiguous),
                    ]
                };
                for &a in answers {
                    attempt_ended(cfg, s, i, r, a, push);
                }
            }
        }
        Step::Verifying { after } => {
            if gate_open(cfg, &r, false) {
                let mut verdicts = vec![Verdict::Unknown];
                verdicts.push(if s.effects > 0 {
                    Verdict::Applied
                } else {
                    Verdict::NotApplied
                });
                for v in verdicts {
                    let mut t = *s;
                    match v {
                        Verdict::Applied => {
                            t.callers[i].phase = Phase::Writing(Write::Complete, Told::Verified);
                        }
                        Verdict::Unknown => {
                            t.callers[i].phase =
                                Phase::Writing(Write::MarkAmbiguous, Told::Ambiguous);
                        }
                        Verdict::NotApplied => {
                            t.marked = false;
                            let r = Run {
                                amb: false,
                                step: Step::Ready,
                                ..r
                            };
                            if !after {
                                set(&mut t, r);
                            } else {
                                // `next_delay(Transient)`.
                                let mut ends = Vec::new();
                                if r.attempts < cfg.max_attempts {
                                    let mut u = t;
                                    set(&mut u, r);
                                    ends.push(u);
                                }
                                if r.attempts >= cfg.max_attempts || cfg.faults.schedule_gives_up {
                                    let mut u = t;
                                    end_failed(&mut u, i, r, Failure::Transient);
                                    ends.push(u);
                                }
                                for u in ends {
                                    push(Action::Verify(me, v), u);
                                }
                                continue;
                            }
                        }
                    }
                    push(Action::Verify(me, v), t);
                }
            }
        }
    }

    // S15: dropped (cancelled, or the body panicked while an attempt ran).
    if cfg.faults.drop {
        let may_have_happened = r.amb || attempting;
        let mut t = *s;
        t.callers[i].phase = Phase::Done(Told::Dropped);
        if cfg.exec.drop_guard {
            // S27 (`dropped.rs`): nothing ran under the claim.
            let unused = unused(&r);
            let w = if unused && !cfg.exec.gives_back {
                Write::MarkAmbiguous
            } else if unused && r.amb {
                Write::Restore
            } else if may_have_happened {
                Write::MarkAmbiguous
            } else {
                Write::Release
            };
            write(cfg, &mut t, i, w);
            if w == Write::Restore && !cfg.exec.restores {
                // The broken store: a release under the claim's token, the prior forgotten.
                t.rec = Rec::Absent;
            }
        }
        push(Action::Drop(me), t);
        if cfg.faults.store_errors && cfg.exec.drop_guard {
            let mut t = *s;
            t.callers[i].phase = Phase::Done(Told::Dropped);
            push(Action::DropWriteFails(me), t);
        }
    }
    if cfg.faults.crash {
        let mut t = *s;
        t.callers[i].phase = Phase::Crashed;
        push(Action::Crash(me), t);
    }
}

/// `Call::attempt_ended`.
fn attempt_ended(
    cfg: &Config,
    s: &State,
    i: usize,
    r: Run,
    a: Answer,
    push: &mut impl FnMut(Action, State),
) {
    let me = i as u8;
    let mut t = *s;
    let failure = match a {
        Answer::Ok => {
            t.callers[i].phase = Phase::Writing(Write::Complete, Told::Ok);
            push(Action::Answer(me, a), t);
            return;
        }
        Answer::Failed(f) => f,
    };
    let unknown = failure == Failure::Ambiguous;
    let mut r = r;
    if cfg.exec.ambiguity_sticky {
        r.amb |= unknown;
    } else {
        r.amb = unknown;
    }
    if unknown && matches!(s.rec, Rec::Running { holder, .. } if holder == me) {
        t.marked = true;
    }
    if unknown && cfg.verifies {
        t.callers[i].phase = Phase::Run(Run {
            step: Step::Verify { after: true },
            ..r
        });
        push(Action::Answer(me, a), t);
        return;
    }
    if unknown && !cfg.resend {
        t.callers[i].phase = Phase::Writing(Write::MarkAmbiguous, Told::Ambiguous);
        push(Action::Answer(me, a), t);
        return;
    }
    let retries = failure != Failure::Permanent && r.attempts < cfg.max_attempts;
    if retries {
        let mut u = t;
        u.callers[i].phase = Phase::Run(Run {
            step: Step::Ready,
            renewed: true,
            ..r
        });
        push(Action::Answer(me, a), u);
    }
    if !retries || cfg.faults.schedule_gives_up {
        let mut u = t;
        end_failed(&mut u, i, r, failure);
        push(
            if retries {
                Action::GivesUp(me)
            } else {
                Action::Answer(me, a)
            },
            u,
        );
    }
}

/// `Run::end` for `Ended::Failed`.
fn end_failed(t: &mut State, i: usize, r: Run, failure: Failure) {
    t.callers[i].phase = match failure {
        Failure::Ambiguous => Phase::Writing(Write::MarkAmbiguous, Told::BodyError(failure)),
        _ if r.amb => Phase::Writing(Write::MarkAmbiguous, Told::Ambiguous),
        _ => Phase::Writing(Write::Release, Told::BodyError(failure)),
    };
}

/// `Ended::Lost`: the lease is lost; the end write (fenced if taken over) is made at once.
fn lose(t: &mut State, i: usize, r: Run, attempting: bool) {
    let w = if attempting || r.amb {
        Write::MarkAmbiguous
    } else {
        Write::Release
    };
    t.callers[i].phase = Phase::Writing(w, Told::LeaseLost);
}

/// A holder's write, fenced by its token (`MemoryStore::held`: the record Running under it, its
/// lease ended or not).
/// S27: nothing ran under the claim (no attempt, no verification started).
pub fn unused(r: &Run) -> bool {
    !r.stepped && matches!(r.step, Step::Ready | Step::Verify { .. })
}

/// What a claim given back leaves (`Store::restore`): the record it replaced; a holder's record
/// brought back without its own prior; where that is unknown, ambiguous.
fn restored(prior: Prior) -> Rec {
    match prior {
        Prior::Absent => Rec::Absent,
        Prior::Ambiguous | Prior::Unknown => Rec::Ambiguous,
        Prior::Expired { holder, rem } => Rec::Running {
            holder,
            rem,
            prior: Prior::Unknown,
        },
    }
}

fn write(cfg: &Config, t: &mut State, i: usize, w: Write) {
    let held = matches!(t.rec, Rec::Running { holder, .. } if holder as usize == i);
    if !held {
        return;
    }
    // Before issue 52 (S32), the count lived in the note, which a caller's mark replaces with
    // its own.
    let notes = |t: &mut State| {
        if !cfg.exec.settle.takeover_keeps_count {
            t.count = 0;
        }
    };
    if let (Write::Restore, Rec::Running { prior, .. }) = (w, t.rec) {
        if prior == Prior::Unknown {
            t.marked = true;
            notes(t);
        }
        t.rec = restored(prior);
        return;
    }
    t.rec = match w {
        Write::Complete => {
            t.marked = false;
            Rec::Completed
        }
        Write::MarkAmbiguous => {
            t.marked = true;
            notes(t);
            Rec::Ambiguous
        }
        Write::Release | Write::Restore => Rec::Absent,
    };
}

fn operator_steps(cfg: &Config, s: &State, push: &mut impl FnMut(Action, State)) {
    let live = matches!(s.rec, Rec::Running { rem, .. } if rem > 0);
    let mut act = |op: Op, rec: Rec, forced: bool| {
        let mut t = *s;
        t.ops_left -= 1;
        t.rec = rec;
        t.marked = false;
        // Removing a record of an effect that happened says it did not: the operator's call.
        t.forced |= forced || (rec == Rec::Absent && s.effects > 0);
        if matches!(op, Op::ResolveApplied | Op::ResolveNotApplied) && cfg.settlers() > 0 {
            t.decided = bump(t.decided, 2);
        }
        push(Action::Operator(op), t);
    };
    match s.rec {
        Rec::Absent => {}
        Rec::Running { .. } => {
            if live {
                act(Op::ReleaseForce, Rec::Absent, true);
                act(Op::ForgetForce, Rec::Absent, true);
            } else {
                act(Op::Release, Rec::Absent, false);
                act(Op::Forget, Rec::Absent, false);
                // `Records::resolve` takes a running record whose lease lapsed as it takes an
                // ambiguous one (S31: it counts as one).
                act(Op::ResolveApplied, Rec::Completed, false);
                act(Op::ResolveNotApplied, Rec::Absent, false);
            }
        }
        Rec::Completed => act(Op::Forget, Rec::Absent, false),
        Rec::Ambiguous => {
            act(Op::ResolveApplied, Rec::Completed, false);
            act(Op::ResolveNotApplied, Rec::Absent, false);
            act(Op::Forget, Rec::Absent, false);
        }
    }
}

/// The properties the step `a` from `s` to `t` breaks.
fn check(cfg: &Config, s: &State, a: Action, t: &State) -> Broken {
    let mut broken = 0;
    let mut brk = |p: Property| broken |= 1 << p as u8;
    if !cfg.dedup && t.effects >= 2 && !t.forced {
        brk(Property::S20AtMostOneEffect);
    }
    let body_step = match a {
        Action::Reach(i) => Some(i),
        Action::Answer(i, _) => Some(i),
        Action::GivesUp(i) => Some(i),
        _ => None,
    };
    if let Some(i) = body_step
        && !s.forced
    {
        let believes = |j: usize| matches!(s.callers[j].phase, Phase::Run(r) if r.ends > 0);
        let i = i as usize;
        let other_holds = matches!(s.rec, Rec::Running { holder, .. } if holder as usize != i);
        if other_holds || (believes(i) && (0..cfg.callers()).any(|j| j != i && believes(j))) {
            brk(Property::S12NoTwoHolders);
        }
        if !believes(i) {
            brk(Property::S22NoStepPastItsLease);
        }
    }
    // A holder's release applied while the key is marked ambiguous (a settler's is its
    // NotApplied decision; expiry is S31's).
    if s.marked && matches!(s.rec, Rec::Running { .. }) && t.rec == Rec::Absent {
        let by_holder = match a {
            Action::Operator(_) | Action::Expire => false,
            Action::SettlerWrite(j) => !matches!(
                s.settlers[j as usize],
                SPhase::Deciding {
                    verdict: Verdict::NotApplied,
                    ..
                }
            ),
            _ => true,
        };
        if by_holder {
            brk(Property::S14AmbiguityClearedOnlyByNotAppliedOrOperator);
        }
    }
    if let Action::SettlerDrop(j) = a
        && matches!(t.rec, Rec::Running { holder, .. } if holder == settler_holder(j as usize))
    {
        brk(Property::S30DroppedSettlerHoldEnds);
    }
    if t.unknown_pending() && !t.in_sight(cfg) {
        brk(Property::S31NoUnknownOutOfSight);
    }
    if let Action::SettlerWrite(j) = a
        && let SPhase::Deciding {
            verdict: Verdict::Unknown,
            ..
        } = s.settlers[j as usize]
        && matches!(s.rec, Rec::Running { holder, .. } if holder == settler_holder(j as usize))
    {
        let bound = cfg.exec.settle.bound;
        if t.answers >= bound && t.count < bound {
            brk(Property::S32OperatorBoundCountsAcrossTakeovers);
        }
    }
    if t.decided >= 2 {
        brk(Property::S28EachDecisionOnce);
    }
    for i in 0..cfg.callers() {
        if let Phase::Done(told) = t.callers[i].phase
            && s.callers[i].phase != t.callers[i].phase
            && told.says_not_run()
            && t.callers[i].reached
        {
            brk(Property::S19NeverNotRunAfterAnAttempt);
        }
    }
    if let Action::Drop(i) = a
        && matches!(t.rec, Rec::Running { holder, .. } if holder == i)
    {
        brk(Property::S15DroppedClaimEnds);
    }
    if let Action::Drop(i) = a
        && let Phase::Run(r) = s.callers[i as usize].phase
        && unused(&r)
        && let Rec::Running { holder, prior, .. } = s.rec
        && holder == i
    {
        let as_it_was = match (prior, t.rec) {
            (Prior::Absent, Rec::Absent) => true,
            (Prior::Ambiguous, Rec::Ambiguous) => true,
            // A holder's record brought back (its own prior lost): its call knows whether its
            // claim took anything over; if it did, ambiguous is the safe side.
            (Prior::Unknown, Rec::Ambiguous) => r.amb,
            (Prior::Unknown, Rec::Absent) => !r.amb,
            (
                Prior::Expired { holder, rem },
                Rec::Running {
                    holder: h, rem: r, ..
                },
            ) => holder == h && rem == r,
            _ => false,
        };
        if !as_it_was {
            brk(Property::S27DroppedUnusedClaimLeavesTheRecordAsItWas);
        }
    }
    broken
}

/// A fault or an operator's action: not counted on for liveness (every caller must be able to
/// end without one).
pub fn is_fault(a: Action) -> bool {
    matches!(
        a,
        Action::Crash(_)
            | Action::Drop(_)
            | Action::DropWriteFails(_)
            | Action::RenewFails(_)
            | Action::WriteFails(_)
            | Action::Operator(_)
            | Action::SettlerWriteFails(_)
            | Action::SettlerDrop(_)
            | Action::SettlerDropWriteFails(_)
            | Action::SettlerCrash(_)
            | Action::Expire
    )
}

/// A settler's own step, or time passing: what [`Property::SettledWithoutACaller`] counts on.
pub fn is_settlers_step(a: Action) -> bool {
    matches!(
        a,
        Action::Tick
            | Action::SettlerList(_)
            | Action::SettlerClaim(_)
            | Action::SettlerBusy(_)
            | Action::SettlerVerify(..)
            | Action::SettlerWrite(_)
    )
}

/// One line per state, for counterexamples.
pub fn show(cfg: &Config, s: &State) -> String {
    let mut out = format!("store {:?}", s.rec);
    for (i, c) in s.callers.iter().enumerate().take(cfg.callers()) {
        let phase = match c.phase {
            Phase::Run(r) => format!(
                "{:?} attempts {} amb {} lease left (own clock) {} renewal due {}",
                r.step, r.attempts, r.amb, r.ends, r.due
            ),
            p => format!("{p:?}"),
        };
        out.push_str(&format!(" | caller {i} (lease {}): {phase}", cfg.leases[i]));
    }
    for (j, p) in s.settlers.iter().enumerate().take(cfg.settlers()) {
        out.push_str(&format!(
            " | settler {j} (holder {}): {p:?}",
            settler_holder(j)
        ));
    }
    if cfg.settlers() > 0 {
        out.push_str(&format!(
            " | count {} (answers {}) | decisions {}",
            s.count, s.answers, s.decided
        ));
    }
    out.push_str(&format!(" | effects {}", s.effects));
    if s.marked {
        out.push_str(" | marked ambiguous");
    }
    if s.forced {
        out.push_str(" | operator forced");
    }
    out
}
