//! How a remote call fails ([`CallError`]), and each transport and protocol failure's class for
//! the retry policy and the record (`classify_sent`, `classify_unsent`).

use std::error::Error as StdError;
use std::fmt;

use crate::{Classify, Error, Failure, IdempotencyKey};
use rmcp::ServiceError;
use rmcp::model::{CallToolResult, ErrorCode};

/// Why a call through [`IdempotentClient`](super::IdempotentClient) did not end with the remote
/// tool's answer.
#[derive(Debug)]
#[non_exhaustive]
pub enum CallError {
    /// idemkit's own: refused before anything was sent (not configured, a key field missing,
    /// [`Error::KeyReuse`], [`Error::InFlight`], the store down), or the outcome is unknown and
    /// is not sent again blindly ([`Error::Ambiguous`], [`Error::LeaseLost`]). Its text says
    /// what happened and what to do.
    Idem(Error),
    /// The call's arguments cannot be keyed (a key field missing, or not text, an integer or a
    /// bool): refused before anything was claimed or sent. The caller's (the model's) to correct.
    InvalidArguments {
        /// The tool called.
        tool: String,
        /// What is wrong, and what to send instead.
        message: String,
    },
    /// The upstream failed and the retries ran out: the transport (never sent: `Transient`; sent
    /// and its answer lost, where the tool may re-send: `Ambiguous`) or the protocol (a JSON-RPC
    /// error: `Permanent` when the server refused the request as such, `Ambiguous` otherwise).
    Upstream {
        /// The tool called.
        tool: String,
        /// The key it was called with (`None` for a read).
        key: Option<IdempotencyKey>,
        /// The failure's class, as the retry policy and the record took it.
        failure: Failure,
        /// What rmcp said.
        source: ServiceError,
    },
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Idem(e) => e.fmt(f),
            CallError::InvalidArguments { tool, message } => write!(
                f,
                "idemkit: {}: {message}",
                crate::told::sentences::was_not_run(&format!("remote tool `{tool}`"))
            ),
            CallError::Upstream {
                tool,
                key,
                failure,
                source,
            } => {
                write!(f, "idemkit: remote tool `{tool}`")?;
                if let Some(key) = key {
                    write!(f, " with key {key}")?;
                }
                let what = match failure {
                    Failure::Transient | Failure::RetryAfter(_) => {
                        "failed before its request was sent; calling again later is safe"
                    }
                    Failure::Ambiguous => {
                        "failed after its request was sent, and may or may not have taken effect; it was sent \
                         again under the same key, which its server deduplicates"
                    }
                    Failure::Permanent => "was refused by its server; calling again will not help",
                };
                write!(f, " {what} ({source})")
            }
        }
    }
}

impl StdError for CallError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            CallError::Idem(e) => Some(e),
            CallError::InvalidArguments { .. } => None,
            CallError::Upstream { source, .. } => Some(source),
        }
    }
}

impl From<Error> for CallError {
    fn from(e: Error) -> Self {
        CallError::Idem(e)
    }
}

impl Classify for CallError {
    fn classify(&self) -> Failure {
        match self {
            CallError::Idem(e) => e.classify(),
            CallError::InvalidArguments { .. } => Failure::Permanent,
            CallError::Upstream { failure, .. } => *failure,
        }
    }
}

/// How one attempt ended, for the executor: the tool's answer `isError: true` is its own kind.
#[derive(Debug)]
pub(super) enum Attempt {
    Idem(Error),
    Upstream(Failure, ServiceError),
    /// The tool answered, and its answer is an error (`isError: true`): `Permanent`. The server
    /// says the call failed; it is not recorded (the record is released), so a corrected call,
    /// or the same one later, is sent, not refused as key reuse nor answered with the error
    /// forever. A server that acted and then answered an error has broken MCP's contract; one
    /// that cannot tell (idemkit's own servers say `"reason": "ambiguous"`) keeps its own
    /// record, and refuses a repeat itself.
    ToolError(CallToolResult),
}

impl From<Error> for Attempt {
    fn from(e: Error) -> Self {
        Attempt::Idem(e)
    }
}

impl Classify for Attempt {
    fn classify(&self) -> Failure {
        match self {
            Attempt::Idem(e) => e.classify(),
            Attempt::Upstream(failure, _) => *failure,
            Attempt::ToolError(_) => Failure::Permanent,
        }
    }
}

/// The class of a failure before the request reached the transport (rmcp's
/// `send_request_with_option` failed): it provably never left. `TransportClosed` there is
/// `Transient` (the connection is gone; a new one may take it); anything else rmcp refused to
/// send is `Permanent`.
pub(super) fn classify_unsent(e: &ServiceError) -> Failure {
    match e {
        ServiceError::TransportClosed => Failure::Transient,
        _ => Failure::Permanent,
    }
}

/// The class of a failure after the request was handed to the transport.
///
/// - A JSON-RPC error the server answers for a request it refused as such (parse error, invalid
///   request, unknown method, invalid parameters: the tool did not run): `Permanent`. Any other
///   (an internal error, a server's own code): `Ambiguous`, since the tool may have acted first.
/// - A connection refused (an `io::Error` of kind `ConnectionRefused` in the error's chain: no
///   byte reached the server): `Transient`.
/// - Everything else (a timeout, the connection closed, an answer rmcp did not expect, a
///   cancellation, a send that failed part-way): `Ambiguous`, since the request may have
///   reached the server and acted.
pub(super) fn classify_sent(e: &ServiceError) -> Failure {
    match e {
        ServiceError::McpError(data)
            if [
                ErrorCode::PARSE_ERROR,
                ErrorCode::INVALID_REQUEST,
                ErrorCode::METHOD_NOT_FOUND,
                ErrorCode::INVALID_PARAMS,
            ]
            .contains(&data.code) =>
        {
            Failure::Permanent
        }
        ServiceError::TransportSend(_) if connection_refused(e) => Failure::Transient,
        _ => Failure::Ambiguous,
    }
}

fn connection_refused(e: &(dyn StdError + 'static)) -> bool {
    let mut at: Option<&(dyn StdError + 'static)> = Some(e);
    while let Some(e) = at {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return true;
        }
        at = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::{classify_sent, classify_unsent};
    use crate::Failure;
    use rmcp::ServiceError;
    use rmcp::model::ErrorData;
    use std::time::Duration;

    /// Never sent: `Transient`; sent and the answer lost: `Ambiguous`; the server refused the
    /// request as such: `Permanent`.
    #[test]
    fn client_failures_are_classified_by_whether_the_request_left() {
        assert_eq!(
            classify_unsent(&ServiceError::TransportClosed),
            Failure::Transient
        );
        assert_eq!(
            classify_sent(&ServiceError::TransportClosed),
            Failure::Ambiguous
        );
        let timeout = ServiceError::Timeout {
            timeout: Duration::from_secs(1),
        };
        assert_eq!(classify_sent(&timeout), Failure::Ambiguous);
        let invalid = ServiceError::McpError(ErrorData::invalid_params("no such argument", None));
        assert_eq!(classify_sent(&invalid), Failure::Permanent);
        let internal = ServiceError::McpError(ErrorData::internal_error("boom", None));
        assert_eq!(classify_sent(&internal), Failure::Ambiguous);
        assert_eq!(
            classify_sent(&ServiceError::UnexpectedResponse),
            Failure::Ambiguous
        );
    }
}
