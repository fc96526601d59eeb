//! What idemkit counts, through the `metrics` facade (feature `metrics`): whatever recorder the
//! program installs receives it; with the feature off every function here is empty, and with
//! it on but no recorder installed each costs a check (no keys made, no clock read).
//!
//! | name | kind | labels | counts |
//! | --- | --- | --- | --- |
//! | `idemkit_calls_total` | counter | `tool`, `kind` (`side_effect`, `read_only`), `outcome` | calls, by how they ended (see [`outcome_label`]) |
//! | `idemkit_attempts_total` | counter | `tool`, `kind` | runs of tool bodies |
//! | `idemkit_kept_ambiguous_total` | counter | `tool` | calls that ran out of attempts after an ambiguous failure (the record is kept for the next call) |
//! | `idemkit_takeovers_total` | counter | `tool`, `from` (`expired_holder`, `ambiguous`) | claims that took over a live record of the same operation: a holder's lease had ended (it died or stalled), or the record was kept as ambiguous |
//! | `idemkit_fenced_writes_total` | counter | `tool`, `write` (`complete`, `release`, `mark_ambiguous`, `renew`) | a holder's writes refused because its lease was taken over |
//! | `idemkit_renewals_total` | counter | `tool` | lease renewals applied |
//! | `idemkit_verifications_total` | counter | `tool`, `answer` (`applied`, `not_applied`, `unknown`, `error`) | answers of tools' verify functions (S19) |
//! | `idemkit_fresh_key_retries_total` | counter | `tool` | calls that look like a retry with a key made anew: a new record claimed with the same other arguments as a call of the tool in this process that ended without succeeding less than 10 minutes before, under another key |
//! | `idemkit_settled_total` | counter | `tool`, `outcome` (`applied`, `not_applied`, `unknown`, `needs_operator`, `no_verify`, `busy`, `gone`, `fenced`, `error`, `would_verify`) | records kept as ambiguous that a settler looked at (S28), by what it did |
//! | `idemkit_oldest_unknown_seconds` | gauge | | set by each settle pass (S34): how long the oldest record it left with its outcome unknown (kept as ambiguous, which never expires by time) has waited since its operation was first made; 0 when it left none |
//! | `idemkit_store_seconds` | histogram | `op` (`claim`, `complete`, `renew`, `release`, `mark_ambiguous`) | how long the store took to answer a transition, failures and timeouts included |

use crate::error::Error;
use crate::failure::Failure;
use crate::observe::CallOutcome;

/// The `outcome` label of a call: `completed`, `replayed`, `unrecorded`, `failed_permanent`,
/// `failed_transient`, `failed_ambiguous`, `failed_retry_after`, `lease_lost`, `unreplayable`,
/// `verified` (an unknown outcome that the tool's verify function found applied),
/// or for a call that was not run: `key_reuse`, `in_flight`, `store_error` (the store failed or
/// its data is corrupt), `refused` (anything else: settings, arguments, no tenant).
pub fn outcome_label(outcome: CallOutcome, refusal: Option<&Error>) -> &'static str {
    match (outcome, refusal) {
        (CallOutcome::Refused, Some(Error::KeyReuse { .. })) => "key_reuse",
        (CallOutcome::Refused, Some(Error::InFlight { .. })) => "in_flight",
        (CallOutcome::Refused, Some(Error::Store { .. })) => "store_error",
        (CallOutcome::Failed(Failure::RetryAfter(_)), _) => "failed_retry_after",
        (other, _) => other.as_str(),
    }
}

#[cfg(feature = "metrics")]
mod on {
    use metrics::{Key, Label, Level, Metadata, NoopRecorder, Recorder};
    use tokio::time::Instant;

    use crate::store::Takeover;

    /// What `counter!` and `histogram!` would pass from this module.
    static METADATA: Metadata<'static> =
        Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

    /// Runs `f` with the recorder in force (this thread's local one, else the global one), unless
    /// that is `metrics`' no-op recorder, which is in force when none is installed: a program
    /// without a recorder then pays for this check, not for making keys (an allocation for the
    /// labels, a hash) and reading clocks. The recorder is looked up at each use, as the
    /// `metrics` macros do, so local recorders (`metrics::with_local_recorder`) work.
    #[inline]
    fn with_recorder(f: impl FnOnce(&dyn Recorder)) {
        metrics::with_recorder(|r| {
            if !is_noop(r) {
                f(r)
            }
        })
    }

    /// Whether a recorder is in force (see [`with_recorder`]). A call asks once, when it begins
    /// (`CallTrace::metered`), and then counts and times only if so: without a recorder a call
    /// pays this one look-up, no clock read and no key made. (A recorder installed while a call
    /// runs is seen from the next call on.)
    #[inline]
    pub(crate) fn recording() -> bool {
        metrics::with_recorder(|r| !is_noop(r))
    }

    /// Whether `r` is a [`NoopRecorder`] (`metrics` 0.24 does not say whether a recorder is
    /// installed; it hands out its own no-op one), told by its vtable. Comparing vtables may
    /// miss: a type's vtable can be copied into several codegen units, as unoptimised builds
    /// do (the no-op recorder is then asked, and does nothing: correct, only slower); optimised
    /// builds share one (the `calls` bench measures it). It cannot mistake a recorder that
    /// records: a vtable shared by two types has the same size (zero) and the same methods,
    /// which all return no-op handles.
    #[inline]
    fn is_noop(r: &dyn Recorder) -> bool {
        let r: *const dyn Recorder = r;
        let noop: *const dyn Recorder = &NoopRecorder;
        std::ptr::eq(r, noop.with_addr(r.addr()))
    }

    fn count(r: &dyn Recorder, name: &'static str, labels: Vec<Label>, n: u64) {
        r.register_counter(&Key::from_parts(name, labels), &METADATA)
            .increment(n);
    }

    /// `metered`: whether a recorder was in force when the call began ([`recording`]).
    pub(crate) fn call(
        metered: bool,
        kind: &'static str,
        tool: &str,
        outcome: &'static str,
        attempts: u32,
    ) {
        if !metered {
            return;
        }
        with_recorder(|r| {
            let tool = Label::new("tool", tool.to_owned());
            let kind = Label::from_static_parts("kind", kind);
            let outcome = Label::from_static_parts("outcome", outcome);
            if attempts > 0 {
                let labels = vec![tool.clone(), kind.clone()];
                count(r, "idemkit_attempts_total", labels, u64::from(attempts));
            }
            count(r, "idemkit_calls_total", vec![tool, kind, outcome], 1);
        })
    }

    pub(crate) fn kept_ambiguous(metered: bool, tool: &str) {
        if !metered {
            return;
        }
        with_recorder(|r| {
            let labels = vec![Label::new("tool", tool.to_owned())];
            count(r, "idemkit_kept_ambiguous_total", labels, 1);
        })
    }

    pub(crate) fn took_over(tool: &str, from: Takeover) {
        with_recorder(|r| {
            let labels = vec![
                Label::new("tool", tool.to_owned()),
                Label::from_static_parts("from", from.as_str()),
            ];
            count(r, "idemkit_takeovers_total", labels, 1);
        })
    }

    pub(crate) fn fenced(tool: &str, write: &'static str) {
        with_recorder(|r| {
            let labels = vec![
                Label::new("tool", tool.to_owned()),
                Label::from_static_parts("write", write),
            ];
            count(r, "idemkit_fenced_writes_total", labels, 1);
        })
    }

    pub(crate) fn renewed(tool: &str) {
        with_recorder(|r| {
            let labels = vec![Label::new("tool", tool.to_owned())];
            count(r, "idemkit_renewals_total", labels, 1);
        })
    }

    /// S19: `idemkit_verifications_total{tool, answer}`, answer one of `applied`,
    /// `not_applied`, `unknown`, `error`.
    pub(crate) fn verified(tool: &str, answer: &'static str) {
        with_recorder(|r| {
            let labels = vec![
                Label::new("tool", tool.to_owned()),
                Label::from_static_parts("answer", answer),
            ];
            count(r, "idemkit_verifications_total", labels, 1);
        })
    }

    /// `idemkit_fresh_key_retries_total{tool}`: a retry loop that makes a new key each turn
    /// (issue 51 #3).
    pub(crate) fn fresh_key_retry(tool: &str) {
        with_recorder(|r| {
            let labels = vec![Label::new("tool", tool.to_owned())];
            count(r, "idemkit_fresh_key_retries_total", labels, 1);
        })
    }

    /// S28: `idemkit_settled_total{tool, outcome}` (see [`Settled::as_str`](crate::Settled::as_str)).
    pub(crate) fn settled(tool: &str, outcome: &'static str) {
        with_recorder(|r| {
            let labels = vec![
                Label::new("tool", tool.to_owned()),
                Label::from_static_parts("outcome", outcome),
            ];
            count(r, "idemkit_settled_total", labels, 1);
        })
    }

    /// S34: `idemkit_oldest_unknown_seconds`, set by each settle pass (0: none left unknown).
    pub(crate) fn oldest_unknown(age: Option<std::time::Duration>) {
        with_recorder(|r| {
            static KEY: Key = Key::from_static_name("idemkit_oldest_unknown_seconds");
            r.register_gauge(&KEY, &METADATA)
                .set(age.map_or(0.0, |a| a.as_secs_f64()));
        })
    }

    /// Runs `f`, which asks the store for a transition sent at `sent` (a clock the caller read
    /// anyway) and takes its answer if it came at once (`Ok`); records how long it took then
    /// (an answer still to come is timed where it is awaited).
    #[inline]
    pub(crate) fn store_since<T, P>(
        metered: bool,
        op: &'static str,
        sent: Instant,
        f: impl FnOnce() -> Result<T, P>,
    ) -> Result<T, P> {
        let r = f();
        if metered && r.is_ok() {
            with_recorder(|rec| sample(rec, op, sent.elapsed()));
        }
        r
    }

    /// [`store_since`], reading the clock before `f` only for a call that is `metered`.
    #[inline]
    pub(crate) fn store_now<T, P>(
        metered: bool,
        op: &'static str,
        f: impl FnOnce() -> Result<T, P>,
    ) -> Result<T, P> {
        let started = metered.then(Instant::now);
        let r = f();
        if let (Some(started), true) = (started, r.is_ok()) {
            store_took(op, started.elapsed());
        }
        r
    }

    pub(crate) fn store_took(op: &'static str, took: std::time::Duration) {
        with_recorder(|r| sample(r, op, took))
    }

    fn sample(r: &dyn Recorder, op: &'static str, took: std::time::Duration) {
        r.register_histogram(store_key(op), &METADATA)
            .record(took.as_secs_f64());
    }

    /// A clock for a transition: read only while a recorder is in force.
    #[inline]
    pub(crate) fn store_clock() -> Option<Instant> {
        recording().then(Instant::now)
    }

    /// The key of `idemkit_store_seconds` for `op`, made once (no allocation, no hash per sample).
    fn store_key(op: &'static str) -> &'static Key {
        macro_rules! keys {
            ($($op:literal),*) => {
                match op {
                    $($op => {
                        static LABELS: [Label; 1] = [Label::from_static_parts("op", $op)];
                        static KEY: Key = Key::from_static_parts("idemkit_store_seconds", &LABELS);
                        &KEY
                    })*
                    _ => {
                        static LABELS: [Label; 1] = [Label::from_static_parts("op", "other")];
                        static KEY: Key = Key::from_static_parts("idemkit_store_seconds", &LABELS);
                        &KEY
                    }
                }
            };
        }
        keys!("claim", "complete", "renew", "release", "mark_ambiguous")
    }
}

#[cfg(not(feature = "metrics"))]
mod on {
    use tokio::time::Instant;

    use crate::store::Takeover;

    #[inline(always)]
    pub(crate) fn recording() -> bool {
        false
    }
    #[inline(always)]
    pub(crate) fn call(
        _metered: bool,
        _kind: &'static str,
        _tool: &str,
        _outcome: &'static str,
        _attempts: u32,
    ) {
    }
    #[inline(always)]
    pub(crate) fn kept_ambiguous(_metered: bool, _tool: &str) {}
    #[inline(always)]
    pub(crate) fn took_over(_tool: &str, _from: Takeover) {}
    #[inline(always)]
    pub(crate) fn fenced(_tool: &str, _write: &'static str) {}
    #[inline(always)]
    pub(crate) fn renewed(_tool: &str) {}
    #[inline(always)]
    pub(crate) fn verified(_tool: &str, _answer: &'static str) {}
    #[inline(always)]
    pub(crate) fn fresh_key_retry(_tool: &str) {}
    #[inline(always)]
    pub(crate) fn settled(_tool: &str, _outcome: &'static str) {}
    #[inline(always)]
    pub(crate) fn oldest_unknown(_age: Option<std::time::Duration>) {}
    #[inline(always)]
    pub(crate) fn store_since<T, P>(
        _metered: bool,
        _op: &'static str,
        _sent: Instant,
        f: impl FnOnce() -> Result<T, P>,
    ) -> Result<T, P> {
        f()
    }
    #[inline(always)]
    pub(crate) fn store_now<T, P>(
        _metered: bool,
        _op: &'static str,
        f: impl FnOnce() -> Result<T, P>,
    ) -> Result<T, P> {
        f()
    }
    #[inline(always)]
    pub(crate) fn store_took(_op: &'static str, _took: std::time::Duration) {}
    #[inline(always)]
    pub(crate) fn store_clock() -> Option<Instant> {
        None
    }
}

pub(crate) use on::*;

/// The `write` label of a holder's write named `what` by the executor.
pub(crate) fn write_label(what: &str) -> &'static str {
    match what {
        "complete" => "complete",
        "release" => "release",
        "mark_ambiguous" => "mark_ambiguous",
        "renew" => "renew",
        _ => "other",
    }
}

#[cfg(all(test, feature = "metrics"))]
mod tests {
    use super::on::recording;

    /// A recorder in force is always seen (also a local one, as tests install them), so nothing
    /// it should count is skipped.
    #[test]
    fn a_recorder_in_force_is_always_seen() {
        let recorder = metrics_util::debugging::DebuggingRecorder::new();
        assert!(metrics::with_local_recorder(&recorder, recording));
    }

    /// Without a recorder, the fast path is taken: nothing made, no clock read. Only in
    /// optimised builds (`cargo test --release`), where `metrics`' no-op recorder and this
    /// crate's share their vtable; unoptimised builds may keep a copy per codegen unit, and
    /// then ask the no-op recorder, which does nothing (see `is_noop`).
    #[cfg(not(debug_assertions))]
    #[test]
    fn without_a_recorder_nothing_is_recorded_or_timed() {
        assert!(!recording(), "no recorder is installed in these tests");
    }
}

#[cfg(test)]
mod documented {
    use std::collections::BTreeSet;

    /// The metric names this module's code records (its string literals `"idemkit_…"`, outside
    /// comments and this test).
    fn registered() -> BTreeSet<String> {
        let source = include_str!("meters.rs");
        let mut names = BTreeSet::new();
        for line in source.lines().take_while(|l| *l != "mod documented {") {
            let code = line.split("//").next().unwrap_or("");
            let mut rest = code;
            while let Some(at) = rest.find("\"idemkit_") {
                let name = &rest[at + 1..];
                let end = name.find('"').expect("a closed string literal");
                names.insert(name[..end].to_owned());
                rest = &name[end + 1..];
            }
        }
        names
    }

    /// The first column of each row of the metrics table in `text` that names a metric.
    fn table(text: &str) -> BTreeSet<String> {
        text.lines()
            .map(|l| l.trim_start_matches("//!").trim())
            .filter_map(|l| l.strip_prefix("| `idemkit_"))
            .map(|l| format!("idemkit_{}", &l[..l.find('`').expect("a closed name")]))
            .collect()
    }

    /// Issue 51 #6: the metrics table of docs/operating.md, and this module's own, list exactly
    /// the metrics the code records: a metric added without its row, or a row left for a metric
    /// no longer recorded, fails here.
    #[test]
    fn finding6_the_docs_metrics_tables_list_exactly_the_metrics_recorded() {
        let registered = registered();
        assert!(
            registered.contains("idemkit_calls_total") && registered.len() >= 9,
            "{registered:?}"
        );
        let operating =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/operating.md"))
                .expect("docs/operating.md");
        assert_eq!(table(&operating), registered, "docs/operating.md");
        assert_eq!(
            table(include_str!("meters.rs")),
            registered,
            "the table of meters.rs's docs"
        );
    }
}
