//! What a pass looks at (`Pass`) and what it did (`Settled`, `SettleReport`): the summary an
//! operator reads and the exit status a cron reads.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::key::IdempotencyKey;
use crate::store::Record;

/// Which records one pass looks at (all kept as ambiguous), and whether it changes anything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Pass {
    /// Only this tool's records.
    pub tool: Option<String>,
    /// Only records made under this scope (tenant).
    pub tenant: Option<String>,
    /// Say what would be asked, claim nothing, change nothing.
    pub dry_run: bool,
}

impl Pass {
    /// Every record kept as ambiguous.
    pub fn new() -> Self {
        Self::default()
    }
    /// Only `tool`'s records.
    pub fn tool(mut self, tool: impl Into<String>) -> Self {
        self.tool = Some(tool.into());
        self
    }
    /// Only records made under `tenant`.
    pub fn tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = Some(tenant.into());
        self
    }
    /// Changes nothing: says what would be asked.
    pub fn dry_run(mut self, dry_run: bool) -> Self {
        self.dry_run = dry_run;
        self
    }
}

/// What a pass did with one record.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Settled {
    /// Verify found the effect happened: the record completed with its answer.
    Applied,
    /// Verify found it did not: the record was released.
    NotApplied,
    /// Verify could not tell (or failed, or did not answer in time): the record stays
    /// ambiguous; `answers` Unknown answers so far; past the host's bound `needs_operator`.
    Unknown {
        /// Unknown answers counted with the record, this one included.
        answers: u32,
        /// Past the host's bound: reported as needing an operator (`idemkit resolve`).
        needs_operator: bool,
        /// Why verify could not tell, when it said (an error, a time-out).
        why: Option<String>,
    },
    /// The settler has no verify function for its tool: left for `idemkit resolve`.
    NoVerify,
    /// A dry run: verify would be asked.
    WouldVerify,
    /// A caller holds the key now (its lease is live): left to it.
    Busy,
    /// Settled or gone before the settler got to it: nothing to do.
    Gone,
    /// The settler's lease was taken over before it wrote its decision: nothing written.
    Fenced,
    /// The store failed: nothing known was changed.
    Failed(String),
}

impl Settled {
    /// Its word in the summary, metrics (`outcome` label) and logs.
    pub fn as_str(&self) -> &'static str {
        match self {
            Settled::Applied => "applied",
            Settled::NotApplied => "not_applied",
            Settled::Unknown {
                needs_operator: true,
                ..
            } => "needs_operator",
            Settled::Unknown { .. } => "unknown",
            Settled::NoVerify => "no_verify",
            Settled::WouldVerify => "would_verify",
            Settled::Busy => "busy",
            Settled::Gone => "gone",
            Settled::Fenced => "fenced",
            Settled::Failed(_) => "error",
        }
    }
}

/// What one pass did: each record it looked at, and the counts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SettleReport {
    /// Each record looked at: its key, tool, and what was done.
    pub records: Vec<(IdempotencyKey, String, Settled)>,
    /// Whether it was a dry run.
    pub dry_run: bool,
    /// S34: of the records the pass left with their outcome unknown (still unknown, needing an
    /// operator, without a verify function, a dry run's, or failed), the one that has waited
    /// longest: its key and when its operation was first made ([`Record::first_made`]). An
    /// ambiguous record never expires by time, so this is how long an answer has been missing;
    /// `None` when the pass left none. See [`SettleReport::oldest_unknown_age`].
    pub oldest_unknown: Option<(IdempotencyKey, SystemTime)>,
}

impl SettleReport {
    /// Notes `record` as left with its outcome unknown by the pass (see
    /// [`SettleReport::oldest_unknown`]): kept if it has waited longest so far. A record whose
    /// times the store does not know is not counted.
    pub fn left_unknown(&mut self, record: &Record) {
        let since = [record.first_made, record.created, record.updated]
            .into_iter()
            .chain(record.unknown_since)
            .find(|t| *t != UNIX_EPOCH);
        if let Some(since) = since
            && self.oldest_unknown.is_none_or(|(_, oldest)| since < oldest)
        {
            self.oldest_unknown = Some((record.key, since));
        }
    }

    /// How long the record of [`SettleReport::oldest_unknown`] has waited for a decision, by
    /// this machine's clock (what `idemkit settle` prints and the gauge
    /// `idemkit_oldest_unknown_seconds` reports).
    pub fn oldest_unknown_age(&self) -> Option<Duration> {
        self.oldest_unknown
            .map(|(_, since)| SystemTime::now().duration_since(since).unwrap_or_default())
    }

    /// How many records ended so (compared by [`Settled::as_str`]).
    pub fn count(&self, word: &str) -> usize {
        self.records
            .iter()
            .filter(|(_, _, s)| s.as_str() == word)
            .count()
    }

    /// Records that need an operator: past the bound, or of a tool without verify here.
    pub fn needing_operator(&self) -> usize {
        self.count("needs_operator") + self.count("no_verify")
    }

    /// The exit status an operator's cron reads:
    ///
    /// | status | means |
    /// | --- | --- |
    /// | 0 | every record looked at was settled (or was busy or gone), or there was none |
    /// | 1 | the store failed for some record (see the summary) |
    /// | 3 | some records stay ambiguous, verify could not tell yet: a later pass asks again (also a dry run's records) |
    /// | 4 | some records need an operator (`idemkit resolve`): past the bound, or no verify function |
    ///
    /// The highest applies when several do (1 before 4 before 3).
    pub fn exit_code(&self) -> u8 {
        if self.count("error") > 0 {
            1
        } else if self.needing_operator() > 0 {
            4
        } else if self.count("unknown") + self.count("fenced") + self.count("would_verify") > 0 {
            3
        } else {
            0
        }
    }

    /// The summary, a few lines for a person (what `run_cli` prints).
    pub fn summary(&self) -> String {
        let mut out = String::new();
        let n = self.records.len();
        if self.dry_run {
            let _ = writeln!(
                out,
                "dry run: {n} record(s) kept as ambiguous; verify would be asked for {}, {} have no verify \
                 function here (left for `idemkit resolve`); nothing was changed",
                self.count("would_verify"),
                self.count("no_verify")
            );
            self.write_oldest(&mut out);
            return out;
        }
        // What it changed first (issue 51 #7): a pass that only looked is not said to have settled.
        let _ = writeln!(
            out,
            "changed {} of {n} record(s) kept as ambiguous: {} applied (completed), {} not applied (released); \
             left as they were: {} still unknown, {} need an operator past the bound, {} without a verify \
             function (left for `idemkit resolve`)",
            self.count("applied") + self.count("not_applied"),
            self.count("applied"),
            self.count("not_applied"),
            self.count("unknown"),
            self.count("needs_operator"),
            self.count("no_verify"),
        );
        let passed = self.count("busy") + self.count("gone") + self.count("fenced");
        if passed > 0 {
            let _ = writeln!(
                out,
                "{passed} passed by: {} held by a caller now, {} settled or gone meanwhile, {} taken over by a \
                 caller before the decision was written",
                self.count("busy"),
                self.count("gone"),
                self.count("fenced")
            );
        }
        for (key, tool, s) in &self.records {
            match s {
                Settled::Unknown {
                    needs_operator: true,
                    answers,
                    ..
                } => {
                    let _ = writeln!(
                        out,
                        "needs an operator: {key} ({tool}), verify answered unknown {answers} time(s) \
                         (`idemkit show {key}`). {}",
                        crate::told::sentences::how_to_settle(key)
                    );
                }
                Settled::Failed(why) => {
                    let _ = writeln!(out, "failed: {key} ({tool}): {why}");
                }
                _ => {}
            }
        }
        if self.count("no_verify") > 0 {
            let tools: std::collections::BTreeSet<&str> = self
                .records
                .iter()
                .filter(|(_, _, s)| *s == Settled::NoVerify)
                .map(|(_, t, _)| t.as_str())
                .collect();
            let tools: Vec<&str> = tools.into_iter().collect();
            let _ = writeln!(
                out,
                "without a verify function here: {} (`idemkit list --state ambiguous` lists them; settle each \
                 with `idemkit resolve`, or give the settler their verify functions)",
                tools.join(", ")
            );
        }
        self.write_oldest(&mut out);
        out
    }

    /// S34: the line on the oldest record left unknown, which waits for a decision however long
    /// that takes (it never expires by time).
    fn write_oldest(&self, out: &mut String) {
        if let (Some((key, since)), Some(age)) = (self.oldest_unknown, self.oldest_unknown_age()) {
            let _ = writeln!(
                out,
                "the oldest unknown outcome has waited {} for a decision: {key}, first made {} (an ambiguous \
                 record never expires; it waits for verify or `idemkit resolve`)",
                crate::told::sentences::span(age),
                crate::told::sentences::utc(since)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{SettleReport, Settled};
    use crate::key::IdempotencyKey;

    /// Issue 51 #7: a pass that changed nothing says so; it is not "settled 1 record(s)".
    #[test]
    fn finding7_the_summary_counts_what_the_pass_changed() {
        let key = |n: u32| IdempotencyKey::derive("charge", &[("order", &n)]);
        let mut report = SettleReport::default();
        report
            .records
            .push((key(1), "charge".to_owned(), Settled::NoVerify));
        let summary = report.summary();
        assert!(
            summary.starts_with("changed 0 of 1 record(s) kept as ambiguous"),
            "{summary}"
        );
        assert!(!summary.contains("settled 1"), "{summary}");
        report
            .records
            .push((key(2), "charge".to_owned(), Settled::Applied));
        report
            .records
            .push((key(3), "charge".to_owned(), Settled::NotApplied));
        let summary = report.summary();
        assert!(
            summary.starts_with("changed 2 of 3 record(s) kept as ambiguous: 1 applied (completed), 1 not applied (released)"),
            "{summary}"
        );
    }
}
