//! S19 for remote tools: asking a read-only tool of the same server whether an operation whose
//! outcome is unknown happened ([`RemoteVerify`]), and reading its answer as a [`Verified`]
//! ([`verdict`]). The runtime's verify machinery ([`Tool::verify`](crate::Tool::verify))
//! decides when it is asked and what each answer does.

use serde_json::{Map, Value};

use crate::{IdempotencyKey, Verified};
use rmcp::model::{CallToolRequestParams, CallToolResult};

/// How an operation of a remote tool whose outcome is unknown is verified: by calling a
/// read-only tool of the same server (`find_charge` for `create_charge`) with the call's
/// arguments, and reading one value of its answer. Given to
/// [`RemoteTool::verify`](super::RemoteTool::verify).
///
/// It is asked before anything whose outcome is unknown is sent again (S19): when an attempt's
/// answer was lost, when a repeat meets a record kept as unknown, and when a call takes over a
/// record whose holder died. Its answer:
///
/// - the value at [`applied_if`](RemoteVerify::new) is there and not empty (`true`, a non-empty
///   text, array or object, a number other than 0): **applied**. The record completes with the
///   verify tool's answer, which the caller gets (and repeats replay): the effect is not made
///   again.
/// - it is `false`, `null`, `0`, empty, or absent: **not applied**. The operation runs (again)
///   under the same key.
/// - the verify tool answered an error (`isError: true`), its answer has neither structured
///   content nor JSON text, or it failed (transport, timeout): **cannot tell**. The outcome stays
///   unknown (`Error::Ambiguous`); a later call asks again, or an operator settles it.
///
/// Answer "not applied" only where the server cannot still commit the lost request (its own
/// time-out for a request has passed): a look-up does not see a request still on the wire.
///
/// ```
/// use idemkit::mcp::{RemoteTool, RemoteVerify};
///
/// let charge = RemoteTool::keyed(["customer_id", "period"]).verify(
///     RemoteVerify::new("find_charge", "/found")
///         .arguments(["customer_id", "period"])
///         .key_argument("idempotency_key"),
/// );
/// # let _ = charge;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct RemoteVerify {
    tool: String,
    applied_if: String,
    arguments: Option<Vec<String>>,
    key_argument: Option<String>,
}

impl RemoteVerify {
    /// Verify by calling the server's tool `tool` (one that only reads), the operation applied
    /// if the value at the JSON pointer `applied_if` (RFC 6901: `"/found"`, `"/charges/0"`; `""`
    /// is the whole answer) in its answer's structured content (or, without one, its first text
    /// content read as JSON) is there and not empty. By default it is given all the call's
    /// arguments.
    pub fn new(tool: impl Into<String>, applied_if: impl Into<String>) -> Self {
        RemoteVerify {
            tool: tool.into(),
            applied_if: applied_if.into(),
            arguments: None,
            key_argument: None,
        }
    }

    /// Only these of the call's arguments (top-level names) are given to the verify tool.
    pub fn arguments<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.arguments = Some(names.into_iter().map(Into::into).collect());
        self
    }

    /// The operation's idempotency key (the one sent in `_meta`) is also given to the verify
    /// tool, as text under this argument name: for a server that looks operations up by it.
    pub fn key_argument(mut self, name: impl Into<String>) -> Self {
        self.key_argument = Some(name.into());
        self
    }

    /// The verify tool's name.
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// What is wrong with this verification, if anything (for the tool `of`).
    pub(super) fn check(&self, of: &str) -> Result<(), String> {
        if self.tool.is_empty() {
            return Err(
                "its verify names no tool: name a read-only tool of the same server".into(),
            );
        }
        if self.tool == of {
            return Err(format!(
                "it is verified by calling itself (`{of}`): name a read-only tool of the same server that looks \
                 the operation up, e.g. `find_{of}`"
            ));
        }
        if !self.applied_if.is_empty() && !self.applied_if.starts_with('/') {
            return Err(format!(
                "its verify's `applied_if` ({:?}) is not a JSON pointer: write one that starts with `/`, e.g. \
                 \"/found\" (\"\" is the whole answer)",
                self.applied_if
            ));
        }
        Ok(())
    }

    /// The verify tool's request for the operation called with `arguments` under `key`.
    pub(super) fn request(
        &self,
        arguments: &Map<String, Value>,
        key: IdempotencyKey,
    ) -> CallToolRequestParams {
        let mut given: Map<String, Value> = match &self.arguments {
            None => arguments.clone(),
            Some(names) => names
                .iter()
                .filter_map(|n| arguments.get(n).map(|v| (n.clone(), v.clone())))
                .collect(),
        };
        if let Some(name) = &self.key_argument {
            given.insert(name.clone(), Value::String(key.to_string()));
        }
        CallToolRequestParams::new(self.tool.clone()).with_arguments(given)
    }

    /// What the verify tool's answer says of the operation (`None`: it failed, so cannot tell).
    pub(super) fn verdict(&self, answer: Option<CallToolResult>) -> Verified<CallToolResult> {
        let Some(answer) = answer else {
            return Verified::Unknown;
        };
        if answer.is_error == Some(true) {
            return Verified::Unknown;
        }
        let document = match &answer.structured_content {
            Some(value) => value.clone(),
            None => match answer.content.iter().find_map(|c| c.as_text()) {
                Some(text) => match serde_json::from_str(&text.text) {
                    Ok(value) => value,
                    Err(_) => return Verified::Unknown,
                },
                None => return Verified::Unknown,
            },
        };
        if document.pointer(&self.applied_if).is_some_and(present) {
            Verified::Applied(answer)
        } else {
            Verified::NotApplied
        }
    }
}

/// Whether a value says "there": not `false`, `null`, `0`, nor empty.
fn present(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

#[cfg(test)]
mod tests {
    use super::RemoteVerify;
    use crate::Verified;
    use rmcp::model::{CallToolResult, ContentBlock};
    use serde_json::json;

    /// Present and not empty: applied; false, null, 0, empty or absent: not applied; an error
    /// answer, no answer, or one that is not JSON: cannot tell.
    #[test]
    fn client_s19_a_verify_answer_reads_as_applied_not_applied_or_unknown() {
        let verify = RemoteVerify::new("find", "/found");
        let of = |v| verify.verdict(Some(CallToolResult::structured(v)));
        for applied in [
            json!({"found": true}),
            json!({"found": "ch_1"}),
            json!({"found": [1]}),
        ] {
            assert!(matches!(of(applied), Verified::Applied(_)));
        }
        for not in [
            json!({"found": false}),
            json!({"found": null}),
            json!({"found": 0}),
            json!({"found": ""}),
            json!({"found": {}}),
            json!({}),
        ] {
            assert_eq!(of(not), Verified::NotApplied);
        }
        let text = CallToolResult::success(vec![ContentBlock::text(r#"{"found": true}"#)]);
        assert!(matches!(verify.verdict(Some(text)), Verified::Applied(_)));
        let prose = CallToolResult::success(vec![ContentBlock::text("yes it was")]);
        assert_eq!(verify.verdict(Some(prose)), Verified::Unknown);
        let error = CallToolResult::error(vec![ContentBlock::text(r#"{"found": true}"#)]);
        assert_eq!(verify.verdict(Some(error)), Verified::Unknown);
        assert_eq!(verify.verdict(None), Verified::Unknown);
        assert!(RemoteVerify::new("find", "found").check("t").is_err());
        assert!(RemoteVerify::new("t", "/found").check("t").is_err());
        assert!(RemoteVerify::new("find", "").check("t").is_ok());
    }
}
