//! What a caller is told about a failed call, in words a model can act on: one answer per way a
//! call can end, shared by every surface that hands a failure back to an agent (MCP results,
//! rig's `ToolExecutionError`, [`JsonCallError`](crate::JsonCallError)).
//!
//! Its sentences that other surfaces say too (not run, the effect unknown, how to settle) are
//! [`sentences`](crate::sentences)'.
//!
//! The rule every answer keeps: "not run" is said only where idemkit refused the call before
//! any attempt of it, and once an attempt may have started (now or in an earlier call of the
//! same key) the answer says the effect may have happened, that calling again will not do it
//! twice, and what settles it.

use std::error::Error as StdError;

use crate::error::{Error, StoreErrorKind};
use crate::failure::Failure;
use crate::key::IdempotencyKey;
use crate::observe::{CallInfo, CallOutcome};
use crate::registry::ToolKind;
use crate::told::advice::Advice;
use crate::told::sentences::{EFFECT_UNKNOWN, NOT_RUN, how_to_settle};

/// What to tell a caller (a model, most often) about a call that failed: a stable reason word,
/// whether calling again with the same arguments can help, and a sentence saying what happened.
///
/// | `reason` | `retryable` | what happened |
/// | --- | --- | --- |
/// | `key_reuse` | no | not run: the key was used before with other arguments |
/// | `in_flight` | yes | not run: the same operation is running in another call |
/// | `store_unavailable` | yes | not run: the record of operations could not be reached |
/// | `store_unreadable` | no | not run: this operation's record could not be read (an earlier call may have done it) |
/// | `ambiguous` | no | outcome unknown: an attempt (of this call or an earlier one) may have taken effect |
/// | `lease_lost` | no | outcome unknown: the call lost its lease while the tool ran |
/// | `unreplayable` | no | done earlier, but its result cannot be returned |
/// | `expired` | no | done earlier and its result is no longer kept (S33: past its time-to-live): never done again under the key |
/// | `duplicate_tool` | no | not run: two tools share the name |
/// | `invalid_arguments`, `settings`, `no_tenant`, `not_configured` | no | not run: the program must be fixed |
/// | `no_operation` | no | not run: the tool is keyed on an operation the host names, and none was named |
/// | `no_runtime` | no | the tool failed: no runtime where it asked for one |
/// | `refused` | no | not run by this call (idemkit's error was not kept by the tool's error type) |
/// | `failed` | no | the tool failed, and says calling again will not help |
/// | `failed_ambiguous` | yes | the tool failed and may have taken effect; a repeat reuses the key |
/// | `failed_transient` | yes | the tool failed without taking effect |
/// | `result_not_json` | no | JSON calls only: done, but the result is no JSON |
///
/// ```
/// use idem_runtime::{Error, Explanation, IdempotencyKey};
///
/// let key = IdempotencyKey::derive("charge", &[("order", &"ord_1")]);
/// let error = Error::LeaseLost { tool: "charge".into(), key, attempts: 1, why: "taken over" };
/// let told = Explanation::of_error(&error, &["order"]);
/// assert_eq!((told.reason, told.retryable), ("lease_lost", false));
/// assert!(told.text.contains("may or may not have happened") && told.text.contains(key.as_str()));
/// assert!(!told.text.contains("Not run"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Explanation {
    /// A stable word for programs (see the table above).
    pub reason: &'static str,
    /// Whether calling again with the same arguments can help.
    pub retryable: bool,
    /// What happened, whether the effect may have happened, and what to do, for a model to read.
    pub text: String,
    /// The same answer for programs (S35): the state, whether calling again is safe with the same
    /// key and with a new one, when to retry, and the key. Every surface renders it as
    /// `"advice"` (see [`advice`](crate::advice) for the table of reasons to states).
    pub advice: Advice,
}

impl Explanation {
    fn new(reason: &'static str, retryable: bool, text: String) -> Self {
        Explanation {
            reason,
            retryable,
            text,
            advice: Advice::for_reason(reason, retryable, None),
        }
    }

    /// The explanation whose advice names the operation's key.
    fn keyed(mut self, key: Option<&IdempotencyKey>) -> Self {
        self.advice.key = key.map(|k| k.to_string());
        self
    }

    /// The explanation of a side effect's result that could not be written as JSON (JSON calls):
    /// the tool ran, and for a side effect its outcome is recorded.
    #[cfg_attr(not(feature = "json"), allow(dead_code))] // JSON calls only
    pub(crate) fn result_not_json(text: String, key: Option<&IdempotencyKey>) -> Self {
        let told = Self::new("result_not_json", false, text).keyed(key);
        match key {
            Some(_) => told,
            None => Explanation {
                advice: Advice::read_failed("result_not_json", false),
                ..told
            },
        }
    }

    /// The explanation of a call of a `kind` tool that ended with `error`, whose class is
    /// `failure` (its [`Classify`](crate::Classify)): by idemkit's own error when `error` is one
    /// or carries one in its `source()` chain, else by what the call reported (`info`, from
    /// [`observe`](crate::observe)), else by `failure`. `key_fields` name the tool's key fields.
    ///
    /// An idemkit error made by another tool that this one called inside its body (its tool is
    /// not `info.tool`), and any in a read-only tool's error, is the tool's own failure: it is
    /// explained by `failure`.
    pub fn of(
        error: &(dyn StdError + 'static),
        failure: Failure,
        kind: ToolKind,
        info: Option<&CallInfo>,
        key_fields: &[&str],
    ) -> Self {
        match idem_error(error, kind, info) {
            Some(e) => Self::of_error(e, key_fields),
            None => Self::of_failure(failure, kind, info),
        }
    }

    /// The explanation of idemkit's own error. `key_fields` name the tool's key fields.
    pub fn of_error(error: &Error, key_fields: &[&str]) -> Self {
        let fields = if key_fields.is_empty() {
            "the key fields".to_owned()
        } else {
            key_fields.join(", ")
        };
        Self::of_error_unkeyed(error, &fields).keyed(key_of(error))
    }

    fn of_error_unkeyed(error: &Error, fields: &str) -> Self {
        match error {
            Error::KeyReuse { key, .. } => Self::new(
                "key_reuse",
                false,
                format!(
                    "{NOT_RUN}: the key fields ({fields}) name an operation that an earlier call made with different \
                     arguments (idempotency key {key}). If you are retrying that call, call again with exactly its \
                     arguments to get its result; if this is a new operation, change one of {fields}."
                ),
            ),
            Error::InFlight { key, .. } => Self::new(
                "in_flight",
                true,
                format!(
                    "{NOT_RUN}: the same operation (idempotency key {key}) is still running in another call. Call \
                     again later with the same arguments: you will get its outcome, and it will not be done twice."
                ),
            ),
            Error::Store { key, source, .. } => match source.kind() {
                StoreErrorKind::Unavailable | StoreErrorKind::Other => Self::new(
                    "store_unavailable",
                    true,
                    format!(
                        "{NOT_RUN}: the record of operations could not be reached, and the tool does not act \
                         when it cannot record (it might act twice). Call again later with the same arguments."
                    ),
                ),
                StoreErrorKind::Corrupt | StoreErrorKind::Incompatible => Self::new(
                    "store_unreadable",
                    false,
                    format!(
                        "{NOT_RUN} by this call: the record of this operation{} could not be read, and an earlier \
                         call with the same arguments may already have done it. Calling again will not help until \
                         an operator repairs the record (`idemkit show KEY`); do not try to do it another way: \
                         tell the user.",
                        key.map(|k| format!(" (idempotency key {k})"))
                            .unwrap_or_default()
                    ),
                ),
            },
            Error::LeaseLost {
                key, attempts, why, ..
            } => lease_lost(key, Some((*attempts, why))),
            Error::Ambiguous {
                key, attempts: 0, ..
            } => Self::new(
                "ambiguous",
                false,
                format!(
                    "Outcome unknown: an earlier call of this operation (idempotency key {key}) may or may not have \
                     taken effect, and this call did not send it again. {}",
                    unsettled(key)
                ),
            ),
            Error::Ambiguous {
                key,
                attempts,
                last,
                ..
            } => Self::new(
                "ambiguous",
                false,
                format!(
                    "Outcome unknown: the tool was tried {attempts} time(s) under idempotency key {key}; an attempt \
                     failed in a way that may have taken effect (the last failed as {}), so {EFFECT_UNKNOWN}. {}",
                    failure_word(*last),
                    unsettled(key)
                ),
            ),
            Error::Unreplayable { key, reason, .. } => unreplayable(key, Some(reason)),
            Error::Expired {
                key,
                done,
                resolved,
                ..
            } => Self::new(
                "expired",
                false,
                format!(
                    "Already done: this operation (idempotency key {key}) was {}. It will not be done again under \
                     this key: calling again with the same arguments gets this same answer and does nothing; tell the \
                     user it was done. If the user asks for a new operation, change one of {fields} so that it gets a \
                     key of its own.",
                    crate::told::sentences::done_not_kept(*done, *resolved)
                ),
            ),
            Error::Arguments { source, .. } => Self::new(
                "invalid_arguments",
                false,
                format!(
                    "{NOT_RUN}: the tool's arguments could not be recorded ({source}); this is a fault of the tool's \
                     code, and calling again with the same arguments will not help. Tell the user."
                ),
            ),
            Error::Settings { reason, .. } => Self::new(
                "settings",
                false,
                format!(
                    "{NOT_RUN}: the tool's settings cannot be honoured ({reason}). Calling again will not help until \
                     the program is fixed; tell the user."
                ),
            ),
            Error::NoTenant { .. } => Self::new(
                "no_tenant",
                false,
                format!(
                    "{NOT_RUN}: this tool acts only on behalf of a tenant (an account), and none was set for this \
                     call. Calling again will not help until the server sets one; tell the user."
                ),
            ),
            Error::NoOperation { .. } => Self::new(
                "no_operation",
                false,
                format!(
                    "{NOT_RUN}: this tool acts once per operation of the program that runs you (a plan step, a \
                     ticket), and that program named none for this call. Calling again will not help; tell the user."
                ),
            ),
            Error::NotConfigured { reason, .. } => Self::new(
                "not_configured",
                false,
                format!(
                    "{NOT_RUN}: the tool has nowhere to record what it does ({reason}), and it does not act without \
                     a record. Calling again will not help until the program is configured; tell the user."
                ),
            ),
            // Made only outside a call (`Idem::current`): the tool's body asked, and failed with it.
            Error::NoRuntime { reason } => Self::new(
                "no_runtime",
                false,
                format!(
                    "The tool failed: it found no idemkit runtime where it asked for one ({reason}). Calling again \
                     will not help until the program is configured; tell the user."
                ),
            ),
            Error::DuplicateTool {
                tool,
                first,
                second,
            } => Self::new(
                "duplicate_tool",
                false,
                format!(
                    "{NOT_RUN}: two tools of this program are named `{tool}` ({first} and {second}), so they would \
                     share their records; idemkit refuses both until each has a name of its own. Calling again will \
                     not help; tell the user."
                ),
            ),
        }
    }

    /// The explanation of a failure whose error does not carry idemkit's own: by how the call
    /// ended (`info.outcome`: refused, lease lost, unreplayable), else by `failure`, the error's
    /// class. `kind` says whether the tool only reads (its answers promise no key).
    pub fn of_failure(failure: Failure, kind: ToolKind, info: Option<&CallInfo>) -> Self {
        let key = info.and_then(|i| i.key.as_ref());
        let told = Self::of_failure_unkeyed(failure, kind, info, key);
        let retry_after = match failure {
            Failure::RetryAfter(d) => Some(d),
            _ => None,
        };
        let advice = match kind {
            ToolKind::ReadOnly => Advice::read_failed(told.reason, told.retryable),
            _ => told.advice.with_key(key.map(|k| k.to_string())),
        };
        Explanation {
            advice: advice.retry_after(retry_after),
            ..told
        }
    }

    fn of_failure_unkeyed(
        failure: Failure,
        kind: ToolKind,
        info: Option<&CallInfo>,
        key: Option<&IdempotencyKey>,
    ) -> Self {
        if kind == ToolKind::SideEffect
            && let (Some(info), Some(key)) = (info, key)
        {
            match info.outcome {
                CallOutcome::Refused => {
                    return Self::new(
                        "refused",
                        false,
                        format!(
                            "{NOT_RUN} by this call: idemkit stopped it before the tool ran (idempotency key {key}; \
                             the error says why)."
                        ),
                    );
                }
                CallOutcome::LeaseLost => return lease_lost(key, None),
                CallOutcome::Unreplayable => return unreplayable(key, None),
                CallOutcome::Completed
                | CallOutcome::Verified
                | CallOutcome::Unrecorded
                | CallOutcome::Replayed
                | CallOutcome::Failed(_) => {}
            }
        }
        let key = key
            .map(|k| format!(" (idempotency key {k})"))
            .unwrap_or_default();
        match failure {
            failure if kind == ToolKind::ReadOnly && failure != Failure::Permanent => Self::new(
                if failure == Failure::Ambiguous {
                    "failed_ambiguous"
                } else {
                    "failed_transient"
                },
                true,
                "The tool failed after retries. It only reads, so calling again later with the same \
                 arguments is safe."
                    .to_owned(),
            ),
            Failure::Permanent => Self::new(
                "failed",
                false,
                "The tool failed, and calling again with the same arguments will not help.".to_owned(),
            ),
            Failure::Ambiguous => Self::new(
                "failed_ambiguous",
                true,
                format!(
                    "The tool failed after retries, and may or may not have taken effect. Calling again with the \
                     same arguments is safe: it reuses the same idempotency key{key}, so it is not done twice."
                ),
            ),
            Failure::Transient | Failure::RetryAfter(_) => Self::new(
                "failed_transient",
                true,
                "The tool failed after retries without taking effect. Calling again later with the same \
                 arguments is safe."
                    .to_owned(),
            ),
        }
    }
}

/// What settles an operation whose outcome is unknown, and why calling again does no harm.
fn unsettled(key: &IdempotencyKey) -> String {
    format!(
        "Calling again with the same arguments will not do it twice: it gets the recorded outcome, or is sent again \
         under the same key only where the provider deduplicates by it, or is refused until the outcome is settled \
         — by the tool's own check (`verify`) where it has one, or by an operator. {}. Do not try to do it another \
         way: tell the user that the outcome is unknown.",
        how_to_settle(key)
    )
}

fn lease_lost(key: &IdempotencyKey, detail: Option<(u32, &str)>) -> Explanation {
    let detail = match detail {
        Some((attempts, why)) => format!(" ({why}, after {attempts} attempt(s))"),
        None => String::new(),
    };
    Explanation::new(
        "lease_lost",
        false,
        format!(
            "Outcome unknown: this call lost its hold on the operation (idempotency key {key}) while the tool ran{detail} \
             and was stopped, so {EFFECT_UNKNOWN}. {}",
            unsettled(key)
        ),
    )
}

fn unreplayable(key: &IdempotencyKey, reason: Option<&str>) -> Explanation {
    let reason = reason.map(|r| format!(" ({r})")).unwrap_or_default();
    Explanation::new(
        "unreplayable",
        false,
        format!(
            "Already done: an earlier call with the same arguments took effect (idempotency key {key}), but its result \
             cannot be returned{reason}. It will not be done again under this key, so calling again gets this same \
             answer; tell the user it was done, and look its result up by the key if it is needed."
        ),
    )
}

fn failure_word(failure: Failure) -> &'static str {
    match failure {
        Failure::Permanent => "permanent",
        Failure::Transient => "transient",
        Failure::Ambiguous => "ambiguous",
        Failure::RetryAfter(_) => "rate limited",
    }
}

/// idemkit's own error, if `error` is one or carries one in its `source()` chain, and it is this
/// call's (not one a tool called inside its body made, nor any in a read-only tool's error).
fn idem_error<'a>(
    error: &'a (dyn StdError + 'static),
    kind: ToolKind,
    info: Option<&CallInfo>,
) -> Option<&'a Error> {
    if kind == ToolKind::ReadOnly {
        return None;
    }
    let mut next = Some(error);
    while let Some(err) = next {
        if let Some(found) = err.downcast_ref::<Error>() {
            return match (tool_of(found), info) {
                (Some(tool), Some(info)) if tool != info.tool => None,
                _ => Some(found),
            };
        }
        next = err.source();
    }
    None
}

/// The operation's key an error names (`None` where it has none).
fn key_of(error: &Error) -> Option<&IdempotencyKey> {
    match error {
        Error::KeyReuse { key, .. }
        | Error::InFlight { key, .. }
        | Error::LeaseLost { key, .. }
        | Error::Ambiguous { key, .. }
        | Error::Unreplayable { key, .. }
        | Error::Expired { key, .. } => Some(key),
        Error::Store { key, .. } => key.as_ref(),
        Error::Arguments { .. }
        | Error::Settings { .. }
        | Error::NoTenant { .. }
        | Error::NoOperation { .. }
        | Error::NotConfigured { .. }
        | Error::DuplicateTool { .. }
        | Error::NoRuntime { .. } => None,
    }
}

/// The tool an error names (`None` for one made outside any call).
fn tool_of(error: &Error) -> Option<&str> {
    match error {
        Error::KeyReuse { tool, .. }
        | Error::InFlight { tool, .. }
        | Error::Store { tool, .. }
        | Error::LeaseLost { tool, .. }
        | Error::Ambiguous { tool, .. }
        | Error::Unreplayable { tool, .. }
        | Error::Expired { tool, .. }
        | Error::Arguments { tool, .. }
        | Error::Settings { tool, .. }
        | Error::NoTenant { tool }
        | Error::NoOperation { tool }
        | Error::NotConfigured { tool, .. }
        | Error::DuplicateTool { tool, .. } => Some(tool),
        Error::NoRuntime { .. } => None,
    }
}

/// What a model reads of a successful call, on every surface that answers a model (MCP results,
/// rig's tool output, JSON tools): a read's `{"result": …, "advice": …}`, or a side effect's
/// `{"result": …, "replayed": bool, "idempotencyKey": "…", "advice": …}` (`side_effect`: whether
/// it was replayed, and its key; `advice` is [`Advice::ran`], [`Advice::replayed`] or
/// [`Advice::read`]). Not a stable API: the integrations' one envelope.
#[doc(hidden)]
pub fn success_envelope(
    result: serde_json::Value,
    side_effect: Option<(bool, Option<&str>)>,
) -> serde_json::Value {
    match side_effect {
        None => serde_json::json!({ "result": result, "advice": Advice::read() }),
        Some((replayed, key)) => {
            let owned = key.map(str::to_owned);
            let advice = if replayed {
                Advice::replayed(owned)
            } else {
                Advice::ran(owned)
            };
            serde_json::json!({
                "result": result,
                "replayed": replayed,
                "idempotencyKey": key,
                "advice": advice,
            })
        }
    }
}
