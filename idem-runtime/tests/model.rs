//! The protocol, checked exhaustively for small bounds (issue 32).
//!
//! - `model/protocol.rs`: the model. One key; 2 or 3 callers, each with its own lease length
//!   (3 or 6 ticks; a renewal due at a third) and, for a store that reads each claimer's clock
//!   (SQLite), its own clock offset. The store's transitions as `MemoryStore` makes them (claim
//!   with takeover of an expired or ambiguous record and its kind, renew also after the lease's
//!   end when nobody took over, complete, release, mark ambiguous, each fenced by the token) and
//!   the SQLite store's skew cap (by the holder's lease, S23, or the claimer's); the executor's
//!   decisions as `exec/core` makes them (`poll_next`, `attempt_ended`, `verified_*`, `end`,
//!   the drop guard, `Holder::poll_gate`/`poll_lease`: S12-S15, S14+, S19, S20, S22); attempts
//!   that answer ok, transient, permanent, ambiguous before or after reaching the provider (an
//!   "after-commit": the effect happened, the reply was lost); `verify` answering applied, not
//!   applied (both truthfully) or unknown (always possible); a provider that deduplicates or not;
//!   holders that stall for any length (every step is optional, time passes in any state),
//!   crash, are cancelled, panic; renewals and end writes that fail; the retry schedule's time
//!   running out; an operator's release, release --force, forget, forget --force, resolve applied
//!   and resolve not-applied (of an ambiguous record, or a running one whose lease lapsed), at
//!   any point.
//!   Every other actor that holds or decides the record (issue 52): up to 2 settlers
//!   (`settle/mod.rs`), each making passes for ever: list the record (state Ambiguous and, S31, a
//!   running record whose lease lapsed), claim it under a token and lease of its own (taking it
//!   over as a caller does; a record settled since makes a new one, released at once), ask verify
//!   (applied or not applied truthfully, unknown always possible), write the decision fenced by
//!   its token (applied completes, not applied releases, unknown keeps it ambiguous and counts
//!   the answer on the record, S32, flagged for an operator at a bound of 2 answers); each cut
//!   off (its pass dropped: the drop guard gives the record back as ambiguous at once, S30),
//!   crashed, or failed by the store at each step. Expiry and prune (a record past its ttl is
//!   absent to every transition, so they are one step, at any time once no lease is live): as
//!   main had it (S10: any record, an ambiguous one included), as S34 (issue 53) makes it
//!   (never a record that is, or counts as, ambiguous), or as S33 with it (never a completed one
//!   either: its tombstone answers; a tombstone dropped early is a broken variant). The design as issue 52 builds it, or with
//!   one part taken out (`Settle`): the settler as main had it is a broken variant.
//! - `model/check.rs`: the checker, written here rather than taken from `stateright`: the model
//!   is one `Copy` struct of small integers with time kept relative (what is left of each lease),
//!   so the state space is finite without a horizon; a breadth-first search over it is 150
//!   lines, gives shortest counterexamples, adds no dependency (and no build of one on the
//!   shared 2 cores), and checks liveness exactly (AG EF on the whole graph, faults excluded),
//!   which `stateright`'s "eventually" properties only approximate on acyclic paths.
//! - `model/traces.rs`: trace validation of real runs.
//!
//! Each check prints its state count and time: `cargo test -p idem-runtime --all-features --test
//! model -- --nocapture` (each check within about 2 minutes in a debug build on the shared 2
//! cores; the three-caller checks are most of it).
//!
//! Properties: at most one effect (S20), no two holders (S12, S22), the ambiguity mark (S14),
//! never "not run" after an attempt (S19), dropped claims end (S15, S27, and S30 for the
//! settler's), no unknown outcome out of the settle queue's sight (S31: whenever the effect
//! happened or the key is marked ambiguous, and the record is not completed or forced by an
//! operator, it is held under a lease not yet lapsed or listed by the settler), the operator
//! bound counts across takeovers (S32), each unknown decided once (S28); liveness: every caller
//! ends, and the settlers alone (no caller, no fault) reach a state where no unknown waits.
//!
//! Not covered: more than one key or fingerprint (`KeyReuse`, S3, S18), and so the settler's
//! `limit` and its order over many records; a tombstone past its own setting (S33: pruned then,
//! like an operator's forget, the next call runs anew; within it a tombstone answers a repeat as
//! a replay does, which is how the model has it: `Expiry::S33`, effects counted across time); the
//! record's first-made time and its age bound (`operator_after`): they are kept and reset with the
//! count of Unknown answers, which stands for them; the settler's verify timeout (its answer may
//! come at any time; its write is fenced) and settlers on a store that reads each claimer's clock
//! (SQLite's skew cap: the settler checks use one clock); a settler restarted after a crash
//! (another settler: two at most); a claim applied whose reply is lost or fails (the model's claim
//! is atomic); renewals and writes that take time (a renewal is applied at once, so the store's
//! lease end equals the holder's belief; in the code the store applies it later, which only
//! lengthens the store's lease); the end writes' retries stopping at the lease's end (a write may
//! come any time later, which allows more); a body that misclassifies (says transient after its
//! effect); `Unreplayable` outcomes (S16); clock offsets beyond equal clocks, which break S12 by
//! design (`assumption_sqlite_clocks_agree`); failover (measured instead:
//! `failover_{redis,postgres,sqlite}.rs`). PostgreSQL's, Redis's and SQLite's own transitions are
//! checked against this model by trace validation of real runs (`model_stores.rs`).

#[path = "model/check.rs"]
mod check;
#[path = "model/protocol.rs"]
mod protocol;
#[path = "model/traces.rs"]
mod traces;

use check::{Report, SAFETY};
use protocol::*;

/// The executor as `main` makes it, with the first poll after the claim gated too (see
/// `finding_s22_first_poll_after_a_stall_is_not_gated`): what the other checks hold for.
const GATED: Exec = Exec::CODE;

/// The executor as it was before the model's finding: an attempt's first poll after the claim
/// was not gated (main a398b93).
const UNGATED: Exec = Exec {
    gates_first_poll: false,
    ..Exec::CODE
};

/// Two callers of one key, leases of 3 and 6 ticks, every fault.
fn two_callers() -> Config {
    Config {
        leases: vec![3, 6],
        offsets: vec![0, 0],
        store: StoreKind::OneClock,
        dedup: false,
        resend: false,
        verifies: false,
        max_attempts: 2,
        faults: Faults {
            crash: true,
            drop: true,
            store_errors: true,
            schedule_gives_up: true,
        },
        operator_actions: 1,
        exec: GATED,
    }
}

/// Three callers: leases of 3, 6 and 3 ticks; crashes, cancellations and panics, but no store
/// errors, no early end of the retry schedule and no operator (each of those is checked with two
/// callers): the bound that keeps the check within seconds.
fn three_callers() -> Config {
    Config {
        leases: vec![3, 6, 3],
        offsets: vec![0, 0, 0],
        faults: Faults {
            crash: true,
            drop: true,
            store_errors: false,
            schedule_gives_up: false,
        },
        operator_actions: 0,
        ..two_callers()
    }
}

/// What a tool and its provider are: (dedup, resend, verifies).
const TOOLS: [(&str, bool, bool, bool); 4] = [
    ("provider without dedup, no verify", false, false, false),
    ("provider without dedup, verify", false, false, true),
    (
        "provider that dedups (resend), no verify",
        true,
        true,
        false,
    ),
    ("provider that dedups (resend), verify", true, true, true),
];

fn with_tool(mut cfg: Config, (_, dedup, resend, verifies): (&str, bool, bool, bool)) -> Config {
    cfg.dedup = dedup;
    cfg.resend = resend;
    cfg.verifies = verifies;
    cfg
}

fn report(name: &str, r: &Report) {
    println!(
        "{name}: {} states, {} transitions, {:.2?}",
        r.states, r.transitions, r.took
    );
}

/// Every property holds for `cfg`, liveness included.
fn holds(name: &str, cfg: &Config) -> Report {
    let r = check::check(cfg, SAFETY, true);
    report(name, &r);
    if let Some(c) = &r.counterexample {
        panic!("{name}: {}", c.render(cfg));
    }
    r
}

/// The checker finds `property` broken for `cfg`: the counterexample is printed.
fn caught(name: &str, cfg: &Config, property: Property) -> String {
    let r = check::check(cfg, &[property], false);
    report(name, &r);
    let c = r
        .counterexample
        .unwrap_or_else(|| panic!("{name}: no counterexample for {property}"));
    assert_eq!(c.property, property);
    let text = c.render(cfg);
    println!("{text}");
    text
}

// ---- The protocol holds ---------------------------------------------------------------------

/// Every property, two callers (leases 3 and 6), each kind of tool and provider, every fault and
/// one operator action anywhere.
#[test]
fn model_two_callers_every_tool_holds() {
    for tool in TOOLS {
        holds(
            &format!("2 callers, {}", tool.0),
            &with_tool(two_callers(), tool),
        );
    }
}

/// Every property, three callers (leases 3, 6, 3), each kind of tool and provider (with
/// `verify`, whether the provider deduplicates changes no reachable state once at most one
/// effect happens, so that pair is checked once).
#[test]
fn model_three_callers_every_tool_holds() {
    for tool in &TOOLS[..3] {
        let tool = *tool;
        holds(
            &format!("3 callers, {}", tool.0),
            &with_tool(three_callers(), tool),
        );
    }
}

/// S23: on a store that compares lease ends on each claimer's clock (SQLite), mixed leases hold
/// once the skew cap is the holder's own lease, while the clocks agree.
#[test]
fn model_s23_callers_clocks_cap_by_holders_lease_holds() {
    for tool in TOOLS {
        let cfg = Config {
            store: StoreKind::CallersClocks {
                cap_by_holders_lease: true,
            },
            ..with_tool(two_callers(), tool)
        };
        holds(&format!("SQLite clocks, 2 callers, {}", tool.0), &cfg);
    }
}

// ---- What the model found in the code -------------------------------------------------------

/// Finding (fixed; kept as a broken variant): the executor as main a398b93 made it did not gate an attempt's first poll after the
/// claim (`poll_next` gates only once `attempts > 0` or a renewal exists; `poll_gate` with
/// `unrenewed = false` reads no clock). A holder that stalls between its claim's reply and the
/// first poll (or whose claim reply arrives after its lease: a slow store) runs its body after
/// its lease ended and another caller took the key over: with `verify`, the other caller's
/// verification says "not applied" and it sends too. Two effects on a provider that does not
/// deduplicate.
#[test]
fn finding_s22_first_poll_after_a_stall_is_not_gated() {
    let cfg = Config {
        exec: UNGATED,
        verifies: true,
        operator_actions: 0,
        ..two_callers()
    };
    caught("main as is: S22", &cfg, Property::S22NoStepPastItsLease);
    caught("main as is: S12", &cfg, Property::S12NoTwoHolders);
    let text = caught("main as is: S20", &cfg, Property::S20AtMostOneEffect);
    assert!(text.contains("Verify(1, NotApplied)"), "{text}");
}

/// What SQLite assumes: its processes' clocks agree. A claimer whose clock is ahead by one tick
/// takes over a holder that stalled near its lease's end while that holder's own clock says its
/// lease is live (S22 cannot see it): the contract's "one machine, one clock".
#[test]
fn assumption_sqlite_clocks_agree() {
    let cfg = Config {
        store: StoreKind::CallersClocks {
            cap_by_holders_lease: true,
        },
        offsets: vec![0, 1],
        ..two_callers()
    };
    caught(
        "SQLite, clocks 1 tick apart",
        &cfg,
        Property::S12NoTwoHolders,
    );
}

// ---- Broken variants: each hole re-introduced is caught ---------------------------------------

/// Second review, #1 (S23): the SQLite store caps a lease end as clock skew by the claimer's
/// (shorter) lease: the claimer takes a live holder's key over.
#[test]
fn broken_s23_lease_capped_by_the_claimers_lease_is_caught() {
    let cfg = Config {
        leases: vec![6, 3],
        store: StoreKind::CallersClocks {
            cap_by_holders_lease: false,
        },
        ..two_callers()
    };
    caught(
        "cap by the claimer's lease",
        &cfg,
        Property::S12NoTwoHolders,
    );
}

/// Second review, #2 (S22): a holder past its lease's end polls its body on.
#[test]
fn broken_s22_stalled_holder_polls_on_is_caught() {
    let cfg = Config {
        exec: Exec {
            gates_stalled_holder: false,
            ..GATED
        },
        verifies: true,
        ..two_callers()
    };
    caught("stalled holder polls on", &cfg, Property::S12NoTwoHolders);
    caught(
        "stalled holder polls on",
        &cfg,
        Property::S20AtMostOneEffect,
    );
}

/// S22 without its last chance: a holder past its lease's end waits for a renewal that is never
/// sent, so its caller never ends (unless cancelled). The liveness check is not vacuous.
#[test]
fn broken_s22_without_the_late_renewal_hangs_is_caught() {
    let cfg = Config {
        exec: Exec {
            renews_late: false,
            ..GATED
        },
        operator_actions: 0,
        ..two_callers()
    };
    let r = check::check(&cfg, SAFETY, true);
    report("no late renewal", &r);
    let c = r.counterexample.expect("a caller that cannot end");
    assert_eq!(c.property, Property::EveryCallerEnds);
    println!("{}", c.render(&cfg));
}

/// Second review, #3 (S14+): a takeover of an ambiguous record starts with the mark off.
#[test]
fn broken_s14_ambiguity_dropped_on_takeover_is_caught() {
    let cfg = Config {
        exec: Exec {
            takeover_keeps_ambiguity: false,
            ..GATED
        },
        ..two_callers()
    };
    caught(
        "ambiguity dropped on takeover",
        &cfg,
        Property::S14AmbiguityClearedOnlyByNotAppliedOrOperator,
    );
    caught(
        "ambiguity dropped on takeover",
        &cfg,
        Property::S20AtMostOneEffect,
    );
}

/// First review (S12): no renewals (and so no lease to gate on): a body longer than its lease
/// runs beside the caller that took the key over.
#[test]
fn broken_s12_no_renewal_is_caught() {
    let cfg = Config {
        exec: Exec {
            renews: false,
            ..GATED
        },
        dedup: true,
        resend: true,
        ..two_callers()
    };
    caught("no renewal", &cfg, Property::S12NoTwoHolders);
}

/// First review (S14): an `Ambiguous` attempt followed by a `Transient` one ends in a release,
/// and the caller is told the last attempt's error as if nothing happened.
#[test]
fn broken_s14_ambiguity_not_sticky_is_caught() {
    let cfg = Config {
        exec: Exec {
            ambiguity_sticky: false,
            ..GATED
        },
        dedup: true,
        resend: true,
        ..two_callers()
    };
    caught(
        "ambiguity not sticky",
        &cfg,
        Property::S14AmbiguityClearedOnlyByNotAppliedOrOperator,
    );
    caught(
        "ambiguity not sticky",
        &cfg,
        Property::S19NeverNotRunAfterAnAttempt,
    );
}

/// First review (S15): a dropped call leaves its claim running until its lease ends.
#[test]
fn broken_s15_no_drop_guard_is_caught() {
    let cfg = Config {
        exec: Exec {
            drop_guard: false,
            ..GATED
        },
        ..two_callers()
    };
    caught("no drop guard", &cfg, Property::S15DroppedClaimEnds);
}

/// Issue 41 #1 (S27), as before the fix: a call dropped while its claim was in flight kept the
/// record as ambiguous, so a key whose body never ran was left with an unknown outcome (the
/// measured 10-48 of 120 SQLite keys).
#[test]
fn broken_s27_a_dropped_unused_claim_kept_ambiguous_is_caught() {
    let cfg = Config {
        exec: Exec {
            gives_back: false,
            ..GATED
        },
        ..two_callers()
    };
    caught(
        "dropped unused claim kept ambiguous",
        &cfg,
        Property::S27DroppedUnusedClaimLeavesTheRecordAsItWas,
    );
}

/// S27's broken variant (the reason for the seed-1856 fix): a claim given back released, not
/// restored, forgets the ambiguity its takeover took over; the next caller sends again.
#[test]
fn broken_s27_a_claim_given_back_released_without_restore_is_caught() {
    let cfg = Config {
        exec: Exec {
            restores: false,
            ..GATED
        },
        ..two_callers()
    };
    caught(
        "released without restore",
        &cfg,
        Property::S27DroppedUnusedClaimLeavesTheRecordAsItWas,
    );
    caught(
        "released without restore",
        &cfg,
        Property::S14AmbiguityClearedOnlyByNotAppliedOrOperator,
    );
    // A third caller sends again.
    let three = Config {
        exec: cfg.exec,
        ..three_callers()
    };
    caught(
        "released without restore, 3 callers",
        &three,
        Property::S20AtMostOneEffect,
    );
}

/// S20: an unknown outcome re-sent blindly to a provider that does not deduplicate (the tool
/// says `resend = true` wrongly, or before S20).
#[test]
fn broken_s20_blind_resend_without_dedup_is_caught() {
    let cfg = Config {
        resend: true,
        dedup: false,
        ..two_callers()
    };
    caught("blind re-send", &cfg, Property::S20AtMostOneEffect);
}

// ---- Every actor that holds or decides a record (issue 52) ------------------------------------

/// `cfg` with a tool that has `verify` and `settle`'s settlers and store.
fn with_settle(cfg: Config, settle: Settle) -> Config {
    Config {
        verifies: true,
        exec: Exec { settle, ..cfg.exec },
        ..cfg
    }
}

/// Issue 52's design: `settlers` settlers, expiry as S33 and S34 (issue 53) make it.
fn settle(settlers: u8) -> Settle {
    Settle {
        settlers,
        expiry: Expiry::S33,
        ..Settle::NONE
    }
}

/// One caller (lease 3), every fault, an operator action.
fn one_caller() -> Config {
    Config {
        leases: vec![3],
        offsets: vec![0],
        ..two_callers()
    }
}

/// No caller: the record an earlier call left ambiguous (`effects` effects at the provider), the
/// settlers alone, every fault, an operator action.
fn settlers_alone(settlers: u8, effects: u8) -> Config {
    with_settle(
        Config {
            leases: vec![],
            offsets: vec![],
            ..two_callers()
        },
        Settle {
            start: Some(effects),
            ..settle(settlers)
        },
    )
}

/// Every property (S28, S30-S32 among them, and the settlers reaching every unknown without a
/// caller), a settler (lease 3) making passes for ever, cut off, crashed or failed by the store at
/// each step; completed records expiring at any time (S10), the rest never (S34). One caller
/// (lease 3) with every fault and an operator action anywhere; two callers (leases 3 and 6) with
/// crashes, cancellations and panics (store errors, the retry schedule's end and the operator are
/// checked with one: the bound that keeps this within a minute).
#[test]
fn model_s30_s31_s32_callers_and_a_settler_hold() {
    holds("1 caller, 1 settler", &with_settle(one_caller(), settle(1)));
    let two = Config {
        faults: Faults {
            crash: true,
            drop: true,
            store_errors: false,
            schedule_gives_up: false,
        },
        operator_actions: 0,
        ..two_callers()
    };
    holds("2 callers, 1 settler", &with_settle(two, settle(1)));
}

/// S28/S30/S32 with two settlers at once: one caller (every fault, an operator action) and two
/// settlers; and two settlers alone on a record left ambiguous, the effect made or not.
#[test]
fn model_s28_s30_s32_two_settlers_hold() {
    holds(
        "1 caller, 2 settlers",
        &with_settle(one_caller(), settle(2)),
    );
    for effects in [0, 1] {
        holds(
            &format!("2 settlers alone, {effects} effect(s)"),
            &settlers_alone(2, effects),
        );
    }
}

/// S34: an ambiguous record (and a running one whose lease lapsed, which counts as one) never
/// expires; completed ones do (S10), at any time, and the next call runs anew (its effects
/// counted afresh). Two callers, a tool without `verify` whose unknown outcomes stay ambiguous.
#[test]
fn model_s34_ambiguous_records_never_expiring_holds() {
    let cfg = Config {
        exec: Exec {
            settle: Settle {
                expiry: Expiry::S34,
                ..Settle::NONE
            },
            ..GATED
        },
        ..two_callers()
    };
    holds("2 callers, S34 expiry", &cfg);
}

/// S33 (with S34): a completed record past its ttl is a tombstone that answers every repeat, so
/// "at most one effect" holds across time: effects are never counted afresh (short of an
/// operator's forget). Two callers, every fault, expiry at any time.
#[test]
fn model_s33_the_body_never_runs_twice_for_one_key_across_time_holds() {
    let cfg = Config {
        exec: Exec {
            settle: Settle {
                expiry: Expiry::S33,
                ..Settle::NONE
            },
            ..GATED
        },
        ..two_callers()
    };
    holds("2 callers, S33 tombstones", &cfg);
}

/// S33's broken variant: a claim treats a completed record past its ttl as absent (or a prune
/// drops its tombstone early), as every store did before issue 53: counted across time, the
/// checker finds the second effect, after an `Expire`.
#[test]
fn broken_s33_a_tombstone_treated_as_absent_is_caught() {
    let cfg = Config {
        exec: Exec {
            settle: Settle {
                expiry: Expiry::S33TombstoneDropped,
                ..Settle::NONE
            },
            ..GATED
        },
        ..two_callers()
    };
    let text = caught("S33 tombstone dropped", &cfg, Property::S20AtMostOneEffect);
    assert!(text.contains("Expire"), "{text}");
}

/// Finding (issue 53, fixed by its S34; kept as a documented finding): an ambiguous record
/// expires by its ttl as any record does (S10 as main has it), and the next call, finding no
/// record, runs the body again: a second effect. With a settler, the unknown leaves its sight
/// first.
#[test]
fn finding_s34_an_ambiguous_record_past_its_ttl_runs_the_body_twice() {
    let s10 = Settle {
        expiry: Expiry::S10,
        ..Settle::NONE
    };
    let cfg = Config {
        exec: Exec {
            settle: s10,
            ..GATED
        },
        ..two_callers()
    };
    let text = caught("S10 expiry", &cfg, Property::S20AtMostOneEffect);
    assert!(text.contains("Expire"), "{text}");
    let cfg = with_settle(one_caller(), Settle { settlers: 1, ..s10 });
    let text = caught(
        "S10 expiry, a settler",
        &cfg,
        Property::S31NoUnknownOutOfSight,
    );
    assert!(text.contains("Expire"), "{text}");
}

/// Issue 52 #1 (S30/S31): the settler as main had it (it lists state Ambiguous only, and nothing
/// gives its record back when its pass is dropped) hides the record it came to settle. Safety:
/// once its lease lapses while it holds the record (stalled, cut off or crashed: the store cannot
/// tell which) no pass lists it. Liveness: cut off, or crashed with another settler left, the
/// settlers never settle it again (only a caller coming back to the key does).
#[test]
fn broken_s30_s31_the_settler_before_issue_52_hides_the_record_is_caught() {
    let before = |settlers: u8| {
        let mut cfg = settlers_alone(settlers, 1);
        cfg.exec.settle = Settle {
            start: Some(1),
            settlers,
            ..Settle::BEFORE_ISSUE_52
        };
        cfg
    };
    let cfg = before(1);
    let text = caught(
        "settler before issue 52",
        &cfg,
        Property::S31NoUnknownOutOfSight,
    );
    assert!(text.contains("SettlerClaim(0)"), "{text}");
    // Cut off, or crashed: never settled by the settlers again.
    for (fault, settlers) in [("SettlerDrop", 1), ("SettlerCrash", 2)] {
        let mut cfg = before(settlers);
        cfg.faults = Faults {
            crash: fault == "SettlerCrash",
            drop: fault == "SettlerDrop",
            store_errors: false,
            schedule_gives_up: false,
        };
        let r = check::check(&cfg, &[], true);
        report(&format!("settler before issue 52, {fault}, liveness"), &r);
        let c = r
            .counterexample
            .expect("an unknown the settlers never reach");
        assert_eq!(c.property, Property::SettledWithoutACaller);
        let text = c.render(&cfg);
        println!("{text}");
        assert!(text.contains(fault), "{text}");
    }
}

/// Issue 52 #3 (S31): a caller whose lease lapsed after its effect (its process died, or stalls:
/// the store cannot tell) leaves its record running; a settler that lists state Ambiguous only
/// never sees it: out of sight (safety), and nothing but a caller coming back settles it
/// (liveness: the settlers' own steps reach no decision).
#[test]
fn broken_s31_a_dead_callers_record_left_unlisted_is_caught() {
    let cfg = with_settle(
        one_caller(),
        Settle {
            lists_lapsed: false,
            ..settle(1)
        },
    );
    let text = caught(
        "lapsed records unlisted",
        &cfg,
        Property::S31NoUnknownOutOfSight,
    );
    assert!(
        text.contains("effects 1") && text.contains("rem: 0"),
        "{text}"
    );
    let r = check::check(&cfg, &[], true);
    report("lapsed records unlisted, liveness", &r);
    let c = r
        .counterexample
        .expect("an unknown the settlers never reach");
    assert_eq!(c.property, Property::SettledWithoutACaller);
    println!("{}", c.render(&cfg));
}

/// S30: a settler's pass dropped without a drop guard keeps its hold until its lease lapses
/// (with S31's listing it is found again then; before issue 52 it was hidden).
#[test]
fn broken_s30_a_dropped_settler_keeping_its_hold_is_caught() {
    let mut cfg = settlers_alone(1, 1);
    cfg.exec.settle.drop_guard = false;
    caught(
        "no settler drop guard",
        &cfg,
        Property::S30DroppedSettlerHoldEnds,
    );
}

/// Issue 52 #2 (S32): a caller's takeover starts the record's count afresh (main rewrote
/// `created` and replaced the note with the caller's), and the settler counts on what it lists:
/// verify answers Unknown twice, with a caller's retry between, and the bound (2) never fires.
#[test]
fn broken_s32_a_takeover_resetting_the_count_is_caught() {
    let mut cfg = with_settle(one_caller(), settle(1));
    cfg.exec.settle.start = Some(1);
    cfg.exec.settle.takeover_keeps_count = false;
    cfg.exec.settle.counts_held = false;
    let text = caught(
        "takeover resets the count",
        &cfg,
        Property::S32OperatorBoundCountsAcrossTakeovers,
    );
    assert!(text.contains("Claim(0)"), "{text}");
}

/// S32 with two settlers: a settler that counts its Unknown answer on the count it listed
/// (main's `unknowns_of(note)` of the listed record) writes over the other settler's answer made
/// since: two answers, a count of 1, the bound (2) does not fire. A settler must count on the
/// record it holds.
#[test]
fn broken_s32_two_settlers_counting_on_their_listing_is_caught() {
    let mut cfg = settlers_alone(2, 1);
    cfg.exec.settle.counts_held = false;
    caught(
        "settlers count on their listing",
        &cfg,
        Property::S32OperatorBoundCountsAcrossTakeovers,
    );
}

/// Issue 52 #6 (S28): a claim of a key whose record another settler or an operator's resolve
/// released since it was listed reported as a takeover (PostgreSQL's `RETURNING` reading the
/// statement's snapshot): the settler verifies the new record and decides a second time.
#[test]
fn broken_s28_a_claim_reporting_a_takeover_that_did_not_happen_is_caught() {
    let mut cfg = settlers_alone(2, 0);
    cfg.exec.settle.claim_reports_truly = false;
    let text = caught(
        "claim misreports a takeover",
        &cfg,
        Property::S28EachDecisionOnce,
    );
    assert!(text.ends_with("decisions 2 | effects 0\n"), "{text}");
}

// ---- Trace validation: real runs are behaviours of the model ------------------------------------

mod real_runs {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
    use std::time::Duration;

    use idem_runtime::store::{ClaimRequest, LeaseToken};
    use idem_runtime::{
        Classify, Error, Failure, Fingerprint, Idem, IdempotencyKey, Store, Tool, Verified,
    };

    use super::traces::{Event, Recorder, validate};
    use super::*;

    #[derive(Debug)]
    struct E;
    impl Classify for E {
        fn classify(&self) -> Failure {
            Failure::Permanent
        }
    }
    impl From<Error> for E {
        fn from(_: Error) -> Self {
            E
        }
    }

    const S: fn(u64) -> Duration = Duration::from_secs;
    const FIELDS: &[idem_runtime::KeyField<'static>] = &[("order", &1u64)];

    fn tool(idem: &Idem, lease: u64) -> Tool<'_> {
        Tool::new("send_sms")
            .idem(idem)
            .lease(S(lease))
            .max_attempts(2)
            .resend(false)
            .in_flight_wait(S(60))
    }

    /// The model of these runs: leases of 3 and 6 ticks (seconds), a provider that does not
    /// deduplicate.
    fn model(verifies: bool, exec: Exec) -> Config {
        Config {
            verifies,
            operator_actions: 0,
            exec,
            ..two_callers()
        }
    }

    fn show(trace: &[Event]) -> String {
        trace
            .iter()
            .map(|e| format!("  t={}s caller {} {:?}\n", e.tick, e.caller, e.seen))
            .collect()
    }

    /// S12/S7: a holder (lease 3 s) whose body takes 5 s renews its lease; a second caller
    /// (lease 6 s) arriving at 1 s waits and replays. The recorded transitions are a behaviour of
    /// the model, as `main` makes it and with the first poll gated.
    #[tokio::test(start_paused = true)]
    async fn trace_s12_renewing_holder_and_waiter_is_a_model_behaviour() {
        let store = Arc::new(Recorder::new(None));
        let idem = Idem::new(store.clone());
        let sent = Arc::new(AtomicU32::new(0));
        let body = |caller: u8, wait: u64| {
            let (sent, store) = (sent.clone(), store.clone());
            move |_key: IdempotencyKey| {
                let (sent, store) = (sent.clone(), store.clone());
                async move {
                    tokio::time::sleep(S(wait)).await;
                    store.effect(caller);
                    Ok::<u32, E>(sent.fetch_add(1, SeqCst) + 1)
                }
            }
        };
        let a = tool(&idem, 3).side_effect(FIELDS, &(), body(0, 5));
        let b = async {
            tokio::time::sleep(S(1)).await;
            tool(&idem, 6).side_effect(FIELDS, &(), body(1, 0)).await
        };
        let (a, b) = tokio::join!(a, b);
        assert_eq!((a.unwrap(), b.unwrap(), sent.load(SeqCst)), (1, 1, 1));
        let trace = store.events();
        print!("{}", show(&trace));
        for exec in [Exec::CODE, GATED] {
            let visited = validate(&model(false, exec), &trace)
                .unwrap_or_else(|d| panic!("{d:?}\n{}", show(&trace)));
            println!("explained; {visited} (state, time) pairs searched");
        }
    }

    /// S8/S19: a holder dies after its claim (lease 3 s); a caller with `verify` takes the
    /// record over at 4 s, verifies (not applied), sends, completes.
    #[tokio::test(start_paused = true)]
    async fn trace_s19_takeover_of_a_dead_holder_is_a_model_behaviour() {
        let store = Arc::new(Recorder::new(None));
        let idem = Idem::new(store.clone());
        let key = IdempotencyKey::derive("send_sms", FIELDS);
        let req = ClaimRequest::new(
            key,
            "send_sms",
            Fingerprint::of(&()).unwrap(),
            LeaseToken::new(),
            S(3),
            S(3600),
        );
        store.claim(&req).await.unwrap();
        tokio::time::advance(S(4)).await;
        let sent = Arc::new(AtomicU32::new(0));
        let (s1, s2, log) = (sent.clone(), sent.clone(), store.clone());
        let result = tool(&idem, 6)
            .verify(move |_key| {
                let applied = s1.load(SeqCst) > 0;
                async move {
                    Ok::<_, E>(if applied {
                        Verified::Applied(0)
                    } else {
                        Verified::NotApplied
                    })
                }
            })
            .side_effect(FIELDS, &(), move |_key| {
                let s2 = s2.clone();
                log.effect(1);
                async move { Ok::<u32, E>(s2.fetch_add(1, SeqCst) + 1) }
            })
            .await;
        assert_eq!((result.unwrap(), sent.load(SeqCst)), (1, 1));
        let trace = store.events();
        print!("{}", show(&trace));
        for exec in [Exec::CODE, GATED] {
            validate(&model(true, exec), &trace)
                .unwrap_or_else(|d| panic!("{d:?}\n{}", show(&trace)));
        }
    }

    /// The model's finding, on the real executor: a holder (lease 3 s) whose claim's reply
    /// arrives at 4 s (a slow store, or a stall right after the claim), while a caller with
    /// `verify` took the record over at 3.5 s, found nothing sent, and sent. On main a398b93 the
    /// late holder polled its body at once, without reading its clock: two messages. Now it
    /// renews late, is refused, and ends `LeaseLost`: one message. Trace validation: the real
    /// run's trace is a behaviour of the model of the code (`Exec::CODE`), and not of a model that
    /// drifted from it (no late renewals): the divergence it catches is the late holder's renewal.
    #[tokio::test(start_paused = true)]
    async fn trace_finding_s22_first_poll_real_run_is_the_gated_models_and_not_a_drifted_ones() {
        let (trace, sent, a, b) = late_claim_reply().await;
        print!("{}", show(&trace));
        println!("results {a:?} {b:?}");
        assert_eq!(sent, 1, "{}", show(&trace));
        validate(&model(true, Exec::CODE), &trace)
            .unwrap_or_else(|d| panic!("{d:?}\n{}", show(&trace)));
        // A model that drifted from the code (here: one whose stalled holders never renew late)
        // does not explain the run: the validation stops at the late holder's renewal.
        let drifted = Exec {
            renews_late: false,
            ..Exec::CODE
        };
        let d = validate(&model(true, drifted), &trace)
            .expect_err("a model without late renewals explains the real run");
        println!(
            "diverges from the drifted model at event {} ({:?}), after {} model states explained the trace before it",
            d.at, d.event, d.candidates
        );
        assert_eq!(d.event.caller, 0, "{d:?}");
    }

    /// Caller 0 (lease 3 s, `verify`) whose claim's reply comes at 4 s; caller 1 (lease 6 s,
    /// `verify`) from 3.5 s; both send at once. The trace, the messages sent, both results.
    async fn late_claim_reply() -> (Vec<Event>, u32, Result<u32, E>, Result<u32, E>) {
        let store = Arc::new(Recorder::new(Some(S(4))));
        let idem = Idem::new(store.clone());
        let sent = Arc::new(AtomicU32::new(0));
        let verify = |sent: Arc<AtomicU32>| {
            move |_key: IdempotencyKey| {
                let applied = sent.load(SeqCst) > 0;
                async move {
                    Ok::<_, E>(if applied {
                        Verified::Applied(0)
                    } else {
                        Verified::NotApplied
                    })
                }
            }
        };
        let body = |caller: u8| {
            let (sent, store) = (sent.clone(), store.clone());
            move |_key: IdempotencyKey| {
                let sent = sent.clone();
                store.effect(caller);
                async move { Ok::<u32, E>(sent.fetch_add(1, SeqCst) + 1) }
            }
        };
        let a = tool(&idem, 3)
            .verify(verify(sent.clone()))
            .side_effect(FIELDS, &(), body(0));
        let b = async {
            tokio::time::sleep(Duration::from_millis(3500)).await;
            tool(&idem, 6)
                .verify(verify(sent.clone()))
                .side_effect(FIELDS, &(), body(1))
                .await
        };
        let (a, b) = tokio::join!(a, b);
        (store.events(), sent.load(SeqCst), a, b)
    }

    /// S22 (the model's finding), on the real executor: a holder whose claim's reply comes after
    /// its lease ended sends nothing once another caller took the key over. Fails on main
    /// a398b93 (2 messages: the first poll after the claim reads no clock); passes with the
    /// first poll gated (`poll_next` gating whether or not `attempts > 0`, `Call::poll_gate`
    /// passing `unrenewed = true`), which was checked by hand.
    #[tokio::test(start_paused = true)]
    async fn s22_a_claim_reply_after_the_lease_does_not_send_twice() {
        let (trace, sent, a, b) = late_claim_reply().await;
        assert_eq!(sent, 1, "{}", show(&trace));
        assert!(matches!(a, Err(E)), "{a:?}");
        assert_eq!(b.unwrap(), 1);
    }
}
