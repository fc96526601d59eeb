//! Why a tool call failed, in words a model can act on: shared by the integrations that hand a
//! failure back to an agent (MCP results, rig's `ToolExecutionError`).

use std::error::Error as StdError;

use idem_runtime::{Classify, Error, Failure, ToolKind};

/// A failure's reason (a stable word: `key_reuse`, `in_flight`, `store_unavailable`, `refused`,
/// `failed`, `failed_ambiguous`, `failed_transient`) and a sentence saying what happened and
/// whether calling again with the same arguments helps. `refused`: idemkit did not run the body.
/// A read-only tool has no key and changes nothing, so its sentences promise neither.
pub(crate) fn explain<E>(
    e: &E,
    kind: ToolKind,
    refused: bool,
    key_fields: &[&str],
) -> (&'static str, String)
where
    E: StdError + Classify + 'static,
{
    let fields = key_fields.join(", ");
    match idem_error(e) {
        Some(Error::KeyReuse { key, .. }) => (
            "key_reuse",
            format!(
                "Not run: the key fields ({fields}) name an operation that an earlier call made with different \
                 arguments (idempotency key {key}). If you are retrying that call, call again with exactly its \
                 arguments to get its result; if this is a new operation, change one of {fields}."
            ),
        ),
        Some(Error::InFlight { key, .. }) => (
            "in_flight",
            format!(
                "Not run: the same operation (idempotency key {key}) is still running in another call. Call again \
                 later with the same arguments: you will get its outcome, and it will not be done twice."
            ),
        ),
        Some(Error::Store { .. }) => (
            "store_unavailable",
            "Not run: the record of operations could not be reached, and the tool does not act when it cannot \
             record (it might act twice). Call again later with the same arguments."
                .to_owned(),
        ),
        Some(_) => (
            "refused",
            "Not run: idemkit refused the call (see the error).".to_owned(),
        ),
        None if refused => (
            "refused",
            "Not run: idemkit refused the call (see the error).".to_owned(),
        ),
        None => match e.classify() {
            failure if kind == ToolKind::ReadOnly && failure != Failure::Permanent => (
                if failure == Failure::Ambiguous {
                    "failed_ambiguous"
                } else {
                    "failed_transient"
                },
                "The tool failed after retries. It only reads, so calling again later with the same \
                 arguments is safe."
                    .to_owned(),
            ),
            Failure::Permanent => (
                "failed",
                "The tool failed, and calling again with the same arguments will not help.".to_owned(),
            ),
            Failure::Ambiguous => (
                "failed_ambiguous",
                "The tool failed after retries, and may or may not have taken effect. Calling again with the \
                 same arguments is safe: it reuses the same idempotency key, so it is not done twice."
                    .to_owned(),
            ),
            Failure::Transient | Failure::RetryAfter(_) => (
                "failed_transient",
                "The tool failed after retries without taking effect. Calling again later with the same \
                 arguments is safe."
                    .to_owned(),
            ),
        },
    }
}

/// idemkit's own error, if `e` is one or carries one in its `source()` chain.
pub(crate) fn idem_error<'a>(e: &'a (dyn StdError + 'static)) -> Option<&'a Error> {
    let mut next = Some(e);
    while let Some(err) = next {
        if let Some(found) = err.downcast_ref::<Error>() {
            return Some(found);
        }
        next = err.source();
    }
    None
}
