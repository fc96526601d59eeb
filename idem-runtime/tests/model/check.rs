//! An explicit-state checker: breadth-first over every reachable state (so a counterexample is a
//! shortest one), the safety properties checked on every transition, then liveness on the whole
//! graph: from every reachable state, a state where all callers have ended must be reachable
//! (without faults), and, with a settler, one where no unknown outcome waits must be reachable
//! by the settlers' steps and time alone.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::protocol::{Action, Config, Property, State, is_fault, is_settlers_step, next, show};

/// Every safety property.
pub const SAFETY: &[Property] = &[
    Property::S20AtMostOneEffect,
    Property::S12NoTwoHolders,
    Property::S22NoStepPastItsLease,
    Property::S14AmbiguityClearedOnlyByNotAppliedOrOperator,
    Property::S19NeverNotRunAfterAnAttempt,
    Property::S15DroppedClaimEnds,
    Property::S27DroppedUnusedClaimLeavesTheRecordAsItWas,
    Property::S30DroppedSettlerHoldEnds,
    Property::S31NoUnknownOutOfSight,
    Property::S32OperatorBoundCountsAcrossTakeovers,
    Property::S28EachDecisionOnce,
];

/// What a check found.
pub struct Report {
    pub states: usize,
    pub transitions: usize,
    pub took: Duration,
    /// The first property broken, with the shortest path to it.
    pub counterexample: Option<Counterexample>,
}

pub struct Counterexample {
    pub property: Property,
    /// The initial state, then each action and the state it led to.
    pub path: Vec<(Option<Action>, State)>,
}

impl Counterexample {
    pub fn render(&self, cfg: &Config) -> String {
        let mut out = format!(
            "{} broken after {} steps:\n",
            self.property,
            self.path.len() - 1
        );
        for (a, s) in &self.path {
            match a {
                None => out.push_str(&format!("  start: {}\n", show(cfg, s))),
                Some(a) => out.push_str(&format!("  {a:?}\n      -> {}\n", show(cfg, s))),
            }
        }
        out
    }
}

/// Checks `cfg` exhaustively for the safety properties `safety`; `liveness`: also that every
/// caller can always end and, with a settler, that the settlers can always settle what waits.
pub fn check(cfg: &Config, safety: &[Property], liveness: bool) -> Report {
    let wanted: u16 = safety.iter().fold(0, |m, &p| m | 1 << p as u16);
    let settles = liveness && cfg.settlers() > 0;
    let started = Instant::now();
    let init = State::initial(cfg);
    let mut index: HashMap<State, u32> = HashMap::new();
    let mut states: Vec<State> = vec![init];
    // How each state was first reached: (parent, action).
    let mut parent: Vec<(u32, Option<Action>)> = vec![(0, None)];
    index.insert(init, 0);
    // Forward edges, in CSR form, for liveness.
    let mut offsets: Vec<u32> = Vec::new();
    let mut targets: Vec<u32> = Vec::new();
    // The settlers' steps only, likewise.
    let mut s_offsets: Vec<u32> = Vec::new();
    let mut s_targets: Vec<u32> = Vec::new();
    let mut transitions = 0usize;
    let mut succ = Vec::new();
    let mut at = 0usize;
    while at < states.len() {
        let s = states[at];
        next(cfg, &s, &mut succ);
        offsets.push(targets.len() as u32);
        s_offsets.push(s_targets.len() as u32);
        for &(a, t, broken) in &succ {
            transitions += 1;
            let id = match index.get(&t) {
                Some(&id) => id,
                None => {
                    let id = states.len() as u32;
                    states.push(t);
                    parent.push((at as u32, Some(a)));
                    index.insert(t, id);
                    id
                }
            };
            if broken & wanted != 0 {
                let property = *safety
                    .iter()
                    .find(|&&p| broken & (1 << p as u16) != 0)
                    .expect("a wanted property");
                let mut path = vec![(Some(a), t)];
                path.extend(trail(&states, &parent, at as u32));
                path.reverse();
                return Report {
                    states: states.len(),
                    transitions,
                    took: started.elapsed(),
                    counterexample: Some(Counterexample { property, path }),
                };
            }
            if liveness && id as usize != at && !is_fault(a) {
                targets.push(id);
            }
            if settles && id as usize != at && is_settlers_step(a) {
                s_targets.push(id);
            }
        }
        at += 1;
    }
    offsets.push(targets.len() as u32);
    s_offsets.push(s_targets.len() as u32);
    drop(index);
    let mut counterexample = None;
    let mut stuck = |property: Property, id: u32| {
        let mut path = trail(&states, &parent, id);
        path.reverse();
        counterexample = Some(Counterexample { property, path });
    };
    if liveness && let Some(id) = cannot_reach(&states, &offsets, &targets, State::all_ended) {
        stuck(Property::EveryCallerEnds, id);
    } else if settles
        && let Some(id) = cannot_reach(
            &states,
            &s_offsets,
            &s_targets,
            State::settled_or_no_settler,
        )
    {
        stuck(Property::SettledWithoutACaller, id);
    }
    Report {
        states: states.len(),
        transitions,
        took: started.elapsed(),
        counterexample,
    }
}

/// The path back from `id` to the initial state, newest first, each state with the action
/// that led to it.
fn trail(
    states: &[State],
    parent: &[(u32, Option<Action>)],
    mut id: u32,
) -> Vec<(Option<Action>, State)> {
    let mut path = Vec::new();
    loop {
        let (p, a) = parent[id as usize];
        path.push((a, states[id as usize]));
        if a.is_none() {
            return path;
        }
        id = p;
    }
}

/// A reachable state from which no state that is `goal` is reachable, if any (backward
/// reachability from the goal states over the reversed graph).
fn cannot_reach(
    states: &[State],
    offsets: &[u32],
    targets: &[u32],
    goal: impl Fn(&State) -> bool,
) -> Option<u32> {
    let n = states.len();
    let mut indeg = vec![0u32; n + 1];
    for &t in targets {
        indeg[t as usize + 1] += 1;
    }
    for i in 0..n {
        indeg[i + 1] += indeg[i];
    }
    let mut fill = indeg.clone();
    let mut rev = vec![0u32; targets.len()];
    for s in 0..n {
        for &t in &targets[offsets[s] as usize..offsets[s + 1] as usize] {
            rev[fill[t as usize] as usize] = s as u32;
            fill[t as usize] += 1;
        }
    }
    let mut can = vec![false; n];
    let mut queue: Vec<u32> = Vec::new();
    for (i, s) in states.iter().enumerate() {
        if goal(s) {
            can[i] = true;
            queue.push(i as u32);
        }
    }
    while let Some(t) = queue.pop() {
        for &s in &rev[indeg[t as usize] as usize..indeg[t as usize + 1] as usize] {
            if !can[s as usize] {
                can[s as usize] = true;
                queue.push(s);
            }
        }
    }
    can.iter().position(|c| !c).map(|i| i as u32)
}
