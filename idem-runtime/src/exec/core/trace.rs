//! The tool, key and span of one call: what every log line and `CallInfo` names.

use std::borrow::Cow;

use super::fresh;
use crate::error::{Error, StoreError};
use crate::failure::Failure;
use crate::key::IdempotencyKey;
use crate::meters;
use crate::observe::{CallInfo, CallOutcome, report};

/// The tool, key and span of one call: what every log line and [`CallInfo`] names.
pub(super) struct CallTrace<'a> {
    pub(super) tool: Cow<'a, str>,
    pub(super) key: IdempotencyKey,
    pub(super) span: tracing::Span,
    /// Whether a metrics recorder was in force when the call began: asked once per call, so a
    /// program without one pays one look-up, not one per count or timing.
    pub(super) metered: bool,
    /// The tool's verify function found the effect applied: the result is what it found (S19).
    pub(super) verified: bool,
    /// The other arguments and the tenant, in a word ([`fresh::slot`]): what tells a retry
    /// with a new key from another operation.
    pub(super) args: u64,
}

impl CallTrace<'_> {
    /// The same, owning the tool's name (for a write that may outlive the caller).
    pub(super) fn into_owned(self) -> CallTrace<'static> {
        CallTrace {
            tool: Cow::Owned(self.tool.into_owned()),
            key: self.key,
            span: self.span,
            metered: self.metered,
            verified: self.verified,
            args: self.args,
        }
    }

    pub(super) fn store_error(&self, source: StoreError) -> Error {
        Error::Store {
            tool: self.tool.to_string(),
            key: Some(self.key),
            source,
        }
    }

    pub(super) fn refused(&self, err: Error) -> Error {
        tracing::warn!(error = %err, "not run");
        self.finish_as(0, CallOutcome::Refused, Some(&err), None);
        err
    }

    /// The call ended without succeeding, after something ran under its claim: a call alike
    /// with a new key soon after is a retry with a fresh key ([`fresh`]).
    pub(super) fn unsucceeded(&self) {
        fresh::ended_unsucceeded(&self.tool, self.args, self.key);
    }

    #[inline]
    pub(super) fn finish(&self, attempts: u32, outcome: CallOutcome) {
        self.finish_as(attempts, outcome, None, None);
    }

    /// [`CallTrace::finish`], with why the call failed, if it did (the note kept with the
    /// record), for its span's status.
    pub(super) fn finish_because(&self, attempts: u32, outcome: CallOutcome, why: Option<&str>) {
        self.finish_as(attempts, outcome, None, why);
    }

    /// [`CallTrace::finish`], with the error that refused the call (for its metrics label and
    /// its span's status), or why it failed.
    #[inline]
    fn finish_as(
        &self,
        attempts: u32,
        outcome: CallOutcome,
        refusal: Option<&Error>,
        why: Option<&str>,
    ) {
        // S19: an unknown outcome that the verify function found applied, now recorded.
        let outcome = match outcome {
            CallOutcome::Completed if self.verified => CallOutcome::Verified,
            outcome => outcome,
        };
        meters::call(
            self.metered,
            "side_effect",
            &self.tool,
            meters::outcome_label(outcome, refusal),
            attempts,
        );
        if outcome == CallOutcome::Failed(Failure::Ambiguous) {
            meters::kept_ambiguous(self.metered, &self.tool);
        }
        let replayed = outcome == CallOutcome::Replayed;
        if self.verified {
            self.span.record("verified", true);
        }
        self.span.record("attempts", attempts);
        self.span.record("replayed", replayed);
        self.span.record("outcome", outcome.as_str());
        failed_status(&self.span, outcome, attempts, refusal, why);
        tracing::info!(
            attempts,
            replayed,
            outcome = outcome.as_str(),
            "side effect finished"
        );
        report(|| CallInfo {
            tool: self.tool.to_string(),
            key: Some(self.key),
            attempts,
            replayed,
            outcome,
            verified: self.verified,
        });
    }
}

/// The end of a read: its metrics, its span's fields, and the enclosing `observe`. Of the read's
/// own parts, not a [`CallTrace`] (a read has no key, and making and dropping one was ~20 of a
/// read's ~370 instructions).
pub(super) fn finish_read(
    tool: &str,
    span: &tracing::Span,
    metered: bool,
    attempts: u32,
    outcome: CallOutcome,
) {
    meters::call(
        metered,
        "read_only",
        tool,
        meters::outcome_label(outcome, None),
        attempts,
    );
    span.record("attempts", attempts);
    span.record("outcome", outcome.as_str());
    failed_status(span, outcome, attempts, None, None);
    report(|| CallInfo {
        tool: tool.to_owned(),
        key: None,
        attempts,
        replayed: false,
        outcome,
        verified: false,
    });
}

/// The span fields OpenTelemetry's bridge (`tracing-opentelemetry`) reads as the span's status,
/// declared (empty) on every call's span and recorded only when the call failed.
pub(super) const STATUS_CODE: &str = "otel.status_code";
/// See [`STATUS_CODE`]: the status's description.
pub(super) const STATUS_DESCRIPTION: &str = "otel.status_description";

/// A call that failed, was refused or ended with its outcome unknown marks its span with status
/// Error and why (issue 51 #6): an errors-only view of the traces shows it. A call that ran,
/// replayed or was verified leaves the status unset, as OpenTelemetry asks of instrumentation.
fn failed_status(
    span: &tracing::Span,
    outcome: CallOutcome,
    attempts: u32,
    refusal: Option<&Error>,
    why: Option<&str>,
) {
    let failed = matches!(
        outcome,
        CallOutcome::Failed(_)
            | CallOutcome::Refused
            | CallOutcome::LeaseLost
            | CallOutcome::Unreplayable
    );
    if !failed || span.is_disabled() {
        return;
    }
    let description = match (refusal, why, outcome) {
        (Some(err), _, _) => err.to_string(),
        (None, Some(why), _) => why.to_owned(),
        (None, None, CallOutcome::Failed(failure)) => {
            format!("{attempts} attempt(s); the last failed: {failure}")
        }
        (None, None, CallOutcome::Unreplayable) => {
            "the operation ran, but its outcome cannot be replayed".to_owned()
        }
        (None, None, other) => other.as_str().to_owned(),
    };
    span.record(STATUS_CODE, "ERROR");
    span.record(STATUS_DESCRIPTION, description.as_str());
}
