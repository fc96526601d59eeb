//! The protocol as a finite transition system: one key, 2-3 callers, the store's transitions as
//! `MemoryStore` (and the SQLite store's lease cap) makes them, the executor's decisions as
//! `exec/core` makes them, the provider, an operator, and the faults. Every step is optional
//! (a caller, its body, its renewals may stall for any length), so a property that holds here
//! holds whatever the timing.
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

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct State {
    pub rec: Rec,
    pub callers: [Caller; MAX_CALLERS],
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
        State {
            rec: Rec::Absent,
            callers,
            effects: 0,
            marked: false,
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
}

impl fmt::Display for Property {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// The properties a transition breaks, as a set (bit `Property as u8`).
pub type Broken = u8;

/// The successors of `s`, each with the properties its transition breaks.
pub fn next(cfg: &Config, s: &State, out: &mut Vec<(Action, State, Broken)>) {
    out.clear();
    let mut push = |a: Action, t: State| {
        let broken = check(cfg, s, a, &t);
        out.push((a, t, broken));
    };
    if let Some(t) = tick(cfg, s) {
        push(Action::Tick, t);
    }
    for i in 0..cfg.callers() {
        caller_steps(cfg, s, i, &mut push);
    }
    if s.ops_left > 0 {
        operator_steps(cfg, s, &mut push);
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
            write(&mut t, i, w);
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
            write(&mut t, i, w);
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

fn write(t: &mut State, i: usize, w: Write) {
    let held = matches!(t.rec, Rec::Running { holder, .. } if holder as usize == i);
    if !held {
        return;
    }
    if let (Write::Restore, Rec::Running { prior, .. }) = (w, t.rec) {
        if prior == Prior::Unknown {
            t.marked = true;
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
        push(Action::Operator(op), t);
    };
    let _ = cfg;
    match s.rec {
        Rec::Absent => {}
        Rec::Running { .. } => {
            if live {
                act(Op::ReleaseForce, Rec::Absent, true);
                act(Op::ForgetForce, Rec::Absent, true);
            } else {
                act(Op::Release, Rec::Absent, false);
                act(Op::Forget, Rec::Absent, false);
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
    // A holder's release applied while the key is marked ambiguous.
    if s.marked && matches!(s.rec, Rec::Running { .. }) && t.rec == Rec::Absent {
        let by_holder = !matches!(a, Action::Operator(_));
        if by_holder {
            brk(Property::S14AmbiguityClearedOnlyByNotAppliedOrOperator);
        }
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
    out.push_str(&format!(" | effects {}", s.effects));
    if s.marked {
        out.push_str(" | marked ambiguous");
    }
    if s.forced {
        out.push_str(" | operator forced");
    }
    out
}
