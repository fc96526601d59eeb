//! The tool, key and span of one call: what every log line and `CallInfo` names.

use super::*;

/// The tool, key and span of one call: what every log line and [`CallInfo`] names.
pub(super) struct CallTrace<'a> {
    pub(super) tool: Cow<'a, str>,
    pub(super) key: IdempotencyKey,
    pub(super) span: tracing::Span,
}

impl CallTrace<'_> {
    /// The same, owning the tool's name (for a write that may outlive the caller).
    pub(super) fn into_owned(self) -> CallTrace<'static> {
        CallTrace {
            tool: Cow::Owned(self.tool.into_owned()),
            key: self.key,
            span: self.span,
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
        self.finish(0, CallOutcome::Refused);
        err
    }

    #[inline]
    pub(super) fn finish(&self, attempts: u32, outcome: CallOutcome) {
        let replayed = outcome == CallOutcome::Replayed;
        self.span.record("attempts", attempts);
        self.span.record("replayed", replayed);
        self.span.record("outcome", outcome.as_str());
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
        });
    }

    pub(super) fn finish_read(&self, attempts: u32, outcome: CallOutcome) {
        self.span.record("attempts", attempts);
        self.span.record("outcome", outcome.as_str());
        report(|| CallInfo {
            tool: self.tool.to_string(),
            key: None,
            attempts,
            replayed: false,
            outcome,
        });
    }
}
