//! What every benchmark of this directory shares: each measured batch is kept per benchmark, and
//! a summary puts each figure beside its baseline's, with the ratio, as measured in the same run.
//!
//! The figure of a benchmark is the median over its measured batches of time per iteration (the
//! median, so a burst of load from elsewhere on the machine moves it less than the mean would).
//! Lines starting with `RESULT` are what `benches/run.sh` gathers into the README's table.
//!
//! A pair measured in interleaved rounds ([`interleave`]: the stores against their statements by
//! hand, the wrapped calls against their hand-written equivalents) is reported by its rounds
//! instead: the median of the per-round ratios, with their range, so that one run's figure is not
//! mistaken for a regression when the disk, the server or the machine swings.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

/// Per benchmark: the time per iteration of each measured batch, in nanoseconds.
static BATCHES: Mutex<BTreeMap<String, Vec<f64>>> = Mutex::new(BTreeMap::new());

/// Keeps one measured batch of `iters` iterations of `name`; returns `took` for criterion.
pub fn record(name: &str, iters: u64, took: Duration) -> Duration {
    if iters > 0 {
        let per = took.as_nanos() as f64 / iters as f64;
        BATCHES
            .lock()
            .unwrap()
            .entry(name.to_owned())
            .or_default()
            .push(per);
    }
    took
}

/// Per pair of an interleaved round (subject, baseline): each round's time ratio.
static ROUNDS: Mutex<BTreeMap<(String, String), Vec<f64>>> = Mutex::new(BTreeMap::new());

/// Keeps one interleaved round of `iters` iterations each of `subject` (took `s`) and
/// `baseline` (took `b`): both batches, and the round's ratio.
fn round(subject: &str, baseline: &str, iters: u64, s: Duration, b: Duration) {
    record(subject, iters, s);
    record(baseline, iters, b);
    if iters > 0 && !b.is_zero() {
        ROUNDS
            .lock()
            .unwrap()
            .entry((subject.to_owned(), baseline.to_owned()))
            .or_default()
            .push(s.as_secs_f64() / b.as_secs_f64());
    }
}

/// Runs a pair in interleaved rounds (the first two warm up, then `rounds` are kept with
/// [`round`]): each round runs both sides one after the other for `per_round` iterations, the
/// one first alternating, so both meet the same disk, server and machine load.
pub fn interleave(
    subject: &str,
    baseline: &str,
    rounds: usize,
    per_round: u64,
    s: &dyn Fn(u64) -> Duration,
    b: &dyn Fn(u64) -> Duration,
) {
    for i in 0..rounds + 2 {
        let (ts, tb) = if i % 2 == 0 {
            let ts = s(per_round);
            (ts, b(per_round))
        } else {
            let tb = b(per_round);
            (s(per_round), tb)
        };
        if i >= 2 {
            round(subject, baseline, per_round, ts, tb);
        }
    }
}

/// Whether criterion ran both sides of a pair (a filter may have left one out): its interleaved
/// rounds follow only then.
#[derive(Default)]
pub struct Selected(AtomicU8);

impl Selected {
    pub fn subject(&self) {
        self.0.fetch_or(1, Ordering::Relaxed);
    }
    pub fn baseline(&self) {
        self.0.fetch_or(2, Ordering::Relaxed);
    }
    pub fn all(&self) -> bool {
        self.0.load(Ordering::Relaxed) == 3
    }
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// The median time per iteration of `name`, in nanoseconds.
pub fn median_ns(name: &str) -> Option<f64> {
    median(BATCHES.lock().unwrap().get(name)?.clone())
}

/// The median, lowest and highest of the per-round ratios of a pair, and how many rounds.
fn rounds(subject: &str, baseline: &str) -> Option<(f64, f64, f64, usize)> {
    let rounds = ROUNDS.lock().unwrap();
    let v = rounds
        .get(&(subject.to_owned(), baseline.to_owned()))?
        .clone();
    let (lo, hi) = v
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), r| (lo.min(*r), hi.max(*r)));
    let n = v.len();
    Some((median(v)?, lo, hi, n))
}

/// A figure beside its baseline: `subject` should take at most `goal` times `baseline`'s time
/// (`None`: no goal, shown for information).
pub struct Pair<'a> {
    pub subject: &'a str,
    pub baseline: &'a str,
    pub goal: Option<f64>,
}

/// Human-readable duration.
pub fn fmt_ns(ns: f64) -> String {
    if ns >= 1e9 {
        format!("{:.2} s", ns / 1e9)
    } else if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.2} µs", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

/// Prints each pair: both figures, the time ratio subject/baseline, and whether the goal holds.
pub fn summary(title: &str, pairs: &[Pair<'_>]) {
    println!("\n{title} (median time per call over all measured batches; same run):");
    for p in pairs {
        let (Some(s), Some(b)) = (median_ns(p.subject), median_ns(p.baseline)) else {
            println!("  {}: not measured (filtered out?)", p.subject);
            continue;
        };
        // Interleaved rounds: the median of their ratios, and their range.
        let (ratio, range) = match rounds(p.subject, p.baseline) {
            Some((median, lo, hi, n)) => (median, format!("{lo:.2}–{hi:.2}, {n} rounds")),
            None => (s / b, String::new()),
        };
        let shown = if range.is_empty() {
            String::new()
        } else {
            format!(" ({range})")
        };
        let verdict = match p.goal {
            Some(g) if ratio <= g => format!("goal ≤ {g:.2}×: met"),
            Some(g) => format!("goal ≤ {g:.2}×: MISSED"),
            None => "no goal".to_owned(),
        };
        println!(
            "  {:<44} {:>10}   vs {:<40} {:>10}   ratio {ratio:>5.2}×{shown}   {verdict}",
            p.subject,
            fmt_ns(s),
            p.baseline,
            fmt_ns(b),
        );
        println!(
            "RESULT\t{}\t{}\t{}\t{}\t{ratio:.2}\t{}\t{range}",
            p.subject,
            fmt_ns(s),
            p.baseline,
            fmt_ns(b),
            p.goal.map_or("—".to_owned(), |g| format!("≤ {g:.2}×")),
        );
    }
}

/// Calls (or requests) per store in the per-call benchmarks: each store serves at most this many
/// and is dropped outside the timing, so a figure is the cost of a call, not of a hash table
/// grown to millions of records by criterion's batches.
pub const CHUNK: u64 = 4096;

/// Runs `iters` calls in chunks of at most [`CHUNK`], each on a fresh store that `run` makes and
/// returns; the stores are dropped after the timing. Returns the time of the calls alone.
pub fn chunked<S>(iters: u64, mut run: impl FnMut(u64) -> (Duration, S)) -> Duration {
    let mut took = Duration::ZERO;
    let mut stores = Vec::new();
    let mut done = 0;
    while done < iters {
        let n = CHUNK.min(iters - done);
        let (t, store) = run(n);
        took += t;
        stores.push(store);
        done += n;
    }
    drop(stores);
    took
}
