//! What idemkit counts, through the `metrics` facade (feature `metrics`): whatever recorder the
//! program installs receives it; with the feature off every function here is empty.
//!
//! | name | kind | labels | counts |
//! | --- | --- | --- | --- |
//! | `idemkit_calls_total` | counter | `tool`, `kind` (`side_effect`, `read_only`), `outcome` | calls, by how they ended (see [`outcome_label`]) |
//! | `idemkit_attempts_total` | counter | `tool`, `kind` | runs of tool bodies |
//! | `idemkit_kept_ambiguous_total` | counter | `tool` | calls that ran out of attempts after an ambiguous failure (the record is kept for the next call) |
//! | `idemkit_fenced_writes_total` | counter | `tool`, `write` (`complete`, `release`, `mark_ambiguous`, `renew`) | a holder's writes refused because its lease was taken over |
//! | `idemkit_renewals_total` | counter | `tool` | lease renewals applied |
//! | `idemkit_store_seconds` | histogram | `op` (`claim`, `complete`, `renew`, `release`, `mark_ambiguous`) | how long the store took to answer a transition, failures and timeouts included |

use crate::error::Error;
use crate::observe::CallOutcome;
use crate::retry::Failure;

/// The `outcome` label of a call: `completed`, `replayed`, `unrecorded`, `failed_permanent`,
/// `failed_transient`, `failed_ambiguous`, `failed_retry_after`, `lease_lost`, `unreplayable`,
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
    use metrics::counter;

    pub(crate) fn call(kind: &'static str, tool: &str, outcome: &'static str, attempts: u32) {
        let tool = tool.to_owned();
        counter!("idemkit_calls_total", "tool" => tool.clone(), "kind" => kind, "outcome" => outcome)
            .increment(1);
        if attempts > 0 {
            counter!("idemkit_attempts_total", "tool" => tool, "kind" => kind)
                .increment(u64::from(attempts));
        }
    }

    pub(crate) fn kept_ambiguous(tool: &str) {
        counter!("idemkit_kept_ambiguous_total", "tool" => tool.to_owned()).increment(1);
    }

    pub(crate) fn fenced(tool: &str, write: &'static str) {
        counter!("idemkit_fenced_writes_total", "tool" => tool.to_owned(), "write" => write)
            .increment(1);
    }

    pub(crate) fn renewed(tool: &str) {
        counter!("idemkit_renewals_total", "tool" => tool.to_owned()).increment(1);
    }

    /// Runs `f`, which asks the store for a transition and takes its answer if it came at
    /// once (`Ok`); records how long it took then (an answer still to come is timed where it is
    /// awaited).
    #[inline]
    pub(crate) fn store_now<T, P>(
        op: &'static str,
        f: impl FnOnce() -> Result<T, P>,
    ) -> Result<T, P> {
        let started = std::time::Instant::now();
        let r = f();
        if r.is_ok() {
            store_took(op, started.elapsed());
        }
        r
    }

    pub(crate) fn store_took(op: &'static str, took: std::time::Duration) {
        metrics::histogram!("idemkit_store_seconds", "op" => op).record(took.as_secs_f64());
    }

    /// A clock for a transition that may wait: read only with the feature on.
    pub(crate) fn store_clock() -> Option<std::time::Instant> {
        Some(std::time::Instant::now())
    }
}

#[cfg(not(feature = "metrics"))]
mod on {
    #[inline(always)]
    pub(crate) fn call(_kind: &'static str, _tool: &str, _outcome: &'static str, _attempts: u32) {}
    #[inline(always)]
    pub(crate) fn kept_ambiguous(_tool: &str) {}
    #[inline(always)]
    pub(crate) fn fenced(_tool: &str, _write: &'static str) {}
    #[inline(always)]
    pub(crate) fn renewed(_tool: &str) {}
    #[inline(always)]
    pub(crate) fn store_now<T, P>(
        _op: &'static str,
        f: impl FnOnce() -> Result<T, P>,
    ) -> Result<T, P> {
        f()
    }
    #[inline(always)]
    pub(crate) fn store_took(_op: &'static str, _took: std::time::Duration) {}
    #[inline(always)]
    pub(crate) fn store_clock() -> Option<std::time::Instant> {
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
