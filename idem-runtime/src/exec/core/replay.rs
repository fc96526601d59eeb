//! A stored outcome met at the claim, to be decoded by the typed call (`super::super::typed`):
//! decoded, it is the call's result; not decoded, it is told apart as S16 (sealed by this
//! executor, intact: its type does not read back what it wrote) or S9 (anything else).

use super::trace::CallTrace;
use crate::error::{Error, StoreError};
use crate::observe::CallOutcome;
use crate::store::Outcome;

/// A stored outcome to decode.
pub(crate) struct Replay<'a> {
    pub(crate) outcome: Outcome,
    pub(super) record: CallTrace<'a>,
}

impl Replay<'_> {
    /// The stored outcome decoded: the call is over.
    pub(crate) fn decoded(self) {
        let _span = self.record.span.enter();
        self.record.finish(0, CallOutcome::Replayed);
    }

    /// The stored outcome, sealed by this executor for `type_name` and intact, did not decode as
    /// it (S16): its type does not read back what it wrote. Not replayable; the operation ran.
    pub(crate) fn unreplayable(self, type_name: &str, e: serde_json::Error) -> Error {
        let record = self.record;
        let _span = record.span.enter();
        let err = Error::Unreplayable {
            tool: record.tool.to_string(),
            key: record.key,
            reason: format!(
                "the outcome serializes but does not read back as `{type_name}` ({e}); e.g. a field skipped when \
                 empty (`skip_serializing_if`) needs `#[serde(default)]`"
            ),
        };
        tracing::warn!(error = %err, "not run");
        record.finish_because(0, CallOutcome::Unreplayable, Some(&err.to_string()));
        err
    }

    /// The stored outcome did not decode as `type_name`: the call is refused (S9), saying that
    /// the operation did run.
    pub(crate) fn undecodable(self, type_name: &str, e: serde_json::Error) -> Error {
        let call = self.record;
        let _span = call.span.enter();
        call.refused(call.store_error(StoreError::corrupt(format!(
            "the operation already ran and completed under this key, but its stored outcome does not deserialize \
             as `{type_name}` ({e}), so it cannot be replayed and is not run again. Either an operator resolved it \
             with an outcome of another shape (`idemkit show KEY` says who decided; `idemkit resolve` checks an \
             outcome against the tool's own unless given `--unchecked`), or the tool's return type changed since it \
             ran (give the changed tool a new `name`). Forgetting the record (`idemkit forget KEY`) lets the next \
             call run the operation again"
        ))))
    }
}
