//! One machine-readable advice beside every answer idemkit gives a model or a client (S35): what
//! happened to the operation, whether calling again is safe with the same key and with a new
//! one, when to call again, and the operation's key.
//!
//! Every surface renders the same [`Advice`] under the member `"advice"`: MCP tool results (a
//! success's structured content, a tool error's), rig's tool output and its error's model
//! feedback, [`JsonReply::content`](crate::json::JsonReply::content) and
//! [`JsonCallError`](crate::json::JsonCallError)'s text, and the HTTP layer's problem details (an
//! extension member). It is made in one place, from how the call ended: a success by
//! [`Advice::ran`] / [`Advice::replayed`], a failure by [`Explanation`](crate::Explanation) (its
//! `advice` field, from its `reason`), so that the same situation gives the same advice on every
//! surface. The sentence a model reads first (the explanation's `text`, a problem's `detail`)
//! stays beside it; the advice is for programs (an agent's host, a proxy, a client library) and
//! for a model that reads JSON.
//!
//! # The JSON object (a contract)
//!
//! ```json
//! "advice": {
//!   "state": "unknown",
//!   "reason": "ambiguous",
//!   "sameKeySafe": true,
//!   "newKeySafe": false,
//!   "retryable": false,
//!   "retryAfterSeconds": null,
//!   "key": "32e00e40-1a53-8058-93c7-e9d1adc8ecaa"
//! }
//! ```
//!
//! | field | type | meaning |
//! | --- | --- | --- |
//! | `state` | string | what happened to the operation: `ran`, `replayed`, `not_run`, `running_elsewhere`, `unknown`, `expired` (table below) |
//! | `reason` | string or null | on a failure, the [`Explanation`](crate::Explanation)'s stable word (`key_reuse`, `in_flight`, `ambiguous`, …); `null` on a success |
//! | `sameKeySafe` | bool | calling again with the same key (the same arguments) cannot do the effect twice |
//! | `newKeySafe` | bool | a call under a new key (other key fields, a new `Idempotency-Key`) cannot repeat an effect this operation had or may have had: idemkit knows that nothing took effect under this key (a read; a failure the tool classifies as without effect). Where it is false and the call is truly a new operation, the sentence says how to give it a key of its own |
//! | `retryable` | bool | calling again with the same key can give another answer (not the same refusal, not the same replay) |
//! | `retryAfterSeconds` | integer or null | when to call again, where idemkit knows (a provider's `Retry-After`); `null`: no wait known (or `retryable` is false) |
//! | `key` | string or null | the operation's idempotency key, as idemkit records it (`idemkit show KEY`, `idemkit resolve KEY`); `null` where the call has none (a read, a call refused before its key was made) |
//!
//! Every field is always present. Fields are only ever added, never renamed or removed, and a
//! new `state` may be added: a client that meets a `state` it does not know treats it as
//! `unknown` (assume the effect may have happened; do not call under a new key).
//!
//! # The states
//!
//! | `state` | what happened | `sameKeySafe` | `newKeySafe` | `retryable` | from |
//! | --- | --- | --- | --- | --- | --- |
//! | `ran` | the tool ran in this call: its value (or its own error) is the answer; or done earlier, its result not returnable | yes | no (a read, or a failure without effect: yes) | no (a failure the tool calls transient: yes) | a success; `failed`, `failed_transient`, `unreplayable`, `result_not_json`, `no_runtime` |
//! | `replayed` | done by an earlier call; its recorded result, nothing done again | yes | no | no | a replay |
//! | `not_run` | idemkit refused before any attempt of it: nothing was done by this call | yes | no (`key_reuse`: an earlier call did take effect under this key, and only the caller knows whether this call is that operation again) | `store_unavailable`: yes | `key_reuse`, `store_unavailable`, `store_unreadable`, `refused`, `invalid_arguments`, `settings`, `no_tenant`, `no_operation`, `not_configured`, `duplicate_tool`, `unknown_tool`; the HTTP layer's `key_missing`, `key_malformed`, `too_large`, `body_unreadable` |
//! | `running_elsewhere` | the same operation is running in another call | yes | no | yes (later: it gets that call's outcome) | `in_flight` |
//! | `unknown` | an attempt may or may not have taken effect | yes (it is not sent again unless the provider deduplicates by the key) | no | no (`failed_ambiguous`: yes) | `ambiguous`, `lease_lost`, `failed_ambiguous` |
//! | `expired` | done, but past its record's ttl: only a tombstone is kept, not its result | yes (answered from the tombstone, never run again) | no | no | `expired` (S33) |
//!
//! A `#[read_only]` tool's answers are `ran` with both `sameKeySafe` and `newKeySafe` true and
//! `key` null: a read has no key and changes nothing.
//!
//! ```
//! use idem_runtime::advice::{Advice, State};
//!
//! let told = Advice::for_reason("in_flight", true, Some("32e00e40-1a53-8058-93c7-e9d1adc8ecaa".into()));
//! assert_eq!(told.state, State::RunningElsewhere);
//! assert!(told.same_key_safe && !told.new_key_safe && told.retryable);
//! let json = serde_json::to_value(&told).unwrap();
//! assert_eq!(json["state"], "running_elsewhere");
//! assert_eq!(json["sameKeySafe"], true);
//! ```

use serde::{Deserialize, Serialize};

/// The member name every surface puts the advice under.
pub const MEMBER: &str = "advice";

/// What happened to the operation (the `state` field). See the [module docs](self) for the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum State {
    /// The tool ran in this call (its value or its own error is the answer), or was done earlier
    /// and its result cannot be returned.
    Ran,
    /// Done by an earlier call: this is its recorded result; nothing was done again.
    Replayed,
    /// Refused before any attempt: nothing was done by this call.
    NotRun,
    /// The same operation is running in another call; calling again later gets its outcome.
    RunningElsewhere,
    /// An attempt may or may not have taken effect; a verification or an operator settles it.
    Unknown,
    /// Done, but past its record's ttl: its result is no longer kept, and it is never run again
    /// under this key because time passed (S33's tombstone).
    Expired,
}

impl State {
    /// The word the JSON carries (`"not_run"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            State::Ran => "ran",
            State::Replayed => "replayed",
            State::NotRun => "not_run",
            State::RunningElsewhere => "running_elsewhere",
            State::Unknown => "unknown",
            State::Expired => "expired",
        }
    }
}

/// The machine-readable advice beside an answer: see the [module docs](self) for its JSON form
/// and the table of states.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Advice {
    /// What happened to the operation.
    pub state: State,
    /// On a failure, the [`Explanation`](crate::Explanation)'s reason word; `None` on a success.
    pub reason: Option<String>,
    /// Calling again with the same key cannot do the effect twice.
    pub same_key_safe: bool,
    /// A call under a new key cannot repeat an effect this operation had or may have had.
    pub new_key_safe: bool,
    /// Calling again with the same key can give another answer.
    pub retryable: bool,
    /// When to call again, in whole seconds, where idemkit knows.
    pub retry_after_seconds: Option<u64>,
    /// The operation's idempotency key (the record's, as `idemkit show` takes it).
    pub key: Option<String>,
}

impl Advice {
    fn new(state: State, same_key_safe: bool, new_key_safe: bool, retryable: bool) -> Self {
        Advice {
            state,
            reason: None,
            same_key_safe,
            new_key_safe,
            retryable,
            retry_after_seconds: None,
            key: None,
        }
    }

    /// A side effect's success in this call (`key`: its idempotency key).
    pub fn ran(key: Option<String>) -> Self {
        Advice::new(State::Ran, true, false, false).with_key(key)
    }

    /// A side effect's outcome replayed from an earlier call.
    pub fn replayed(key: Option<String>) -> Self {
        Advice::new(State::Replayed, true, false, false).with_key(key)
    }

    /// A read's success: it has no key and changes nothing.
    pub fn read() -> Self {
        Advice::new(State::Ran, true, true, false)
    }

    /// A repeat of an operation past its record's ttl, answered from its tombstone (S33).
    pub fn expired(key: Option<String>) -> Self {
        Advice::for_reason("expired", false, key)
    }

    /// The advice of a failure whose [`Explanation`](crate::Explanation) has `reason` and
    /// `retryable`, of a side effect whose key is `key` (the table in the [module docs](self)).
    /// A reason this table does not know reads as `unknown`, the safe assumption.
    pub fn for_reason(reason: &str, retryable: bool, key: Option<String>) -> Self {
        let (state, new_key_safe) = match reason {
            "key_reuse" | "store_unavailable" | "store_unreadable" | "refused"
            | "invalid_arguments" | "settings" | "no_tenant" | "no_operation"
            | "not_configured" | "duplicate_tool" | "unknown_tool" | "key_missing"
            | "key_malformed" | "too_large" | "body_unreadable" => (State::NotRun, false),
            "in_flight" => (State::RunningElsewhere, false),
            "failed" | "failed_transient" => (State::Ran, true),
            "unreplayable" | "result_not_json" | "no_runtime" => (State::Ran, false),
            "expired" => (State::Expired, false),
            // "ambiguous", "lease_lost", "failed_ambiguous", and any reason not known here.
            _ => (State::Unknown, false),
        };
        Advice {
            reason: Some(reason.to_owned()),
            ..Advice::new(state, true, new_key_safe, retryable)
        }
        .with_key(key)
    }

    /// The advice of a read's failure: it changed nothing, so calling again is safe either way.
    pub fn read_failed(reason: &str, retryable: bool) -> Self {
        Advice {
            reason: Some(reason.to_owned()),
            ..Advice::new(State::Ran, true, true, retryable)
        }
    }

    /// The same advice with the operation's key.
    pub fn with_key(mut self, key: Option<String>) -> Self {
        self.key = key;
        self
    }

    /// The same advice with when to call again (rounded up to whole seconds).
    pub fn retry_after(mut self, after: Option<std::time::Duration>) -> Self {
        self.retry_after_seconds = after.map(|d| d.as_secs() + u64::from(d.subsec_nanos() > 0));
        self
    }

    /// The advice as JSON (the value of the `"advice"` member).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// S35: the JSON field names are a contract; a rename fails here.
    #[test]
    fn s35_advice_json_fields_are_stable() {
        let advice = Advice::for_reason("in_flight", true, Some("k".into()))
            .retry_after(Some(std::time::Duration::from_millis(1500)));
        assert_eq!(
            advice.to_json(),
            serde_json::json!({
                "state": "running_elsewhere",
                "reason": "in_flight",
                "sameKeySafe": true,
                "newKeySafe": false,
                "retryable": true,
                "retryAfterSeconds": 2,
                "key": "k",
            })
        );
        let back: Advice = serde_json::from_value(advice.to_json()).unwrap();
        assert_eq!(back, advice);
        for state in [
            State::Ran,
            State::Replayed,
            State::NotRun,
            State::RunningElsewhere,
            State::Unknown,
            State::Expired,
        ] {
            assert_eq!(serde_json::to_value(state).unwrap(), state.as_str());
        }
    }

    /// S35: a reason the table does not know is read as an unknown outcome, never as safe.
    #[test]
    fn s35_an_unknown_reason_is_advised_as_an_unknown_outcome() {
        let advice = Advice::for_reason("something_new", false, None);
        assert_eq!(advice.state, State::Unknown);
        assert!(!advice.new_key_safe);
    }
}
