//! What the developer says of one remote tool ([`RemoteTool`]), and how that and the server's
//! annotations from `tools/list` choose what a call of it does ([`plan`]).

use std::time::Duration;

use crate::{Error, RetryPolicy, Tool};
use rmcp::model::ToolAnnotations;

use super::verify::RemoteVerify;

/// How calls of one tool of a remote MCP server are made safe to repeat: its key fields, or that
/// it only reads; whether an attempt whose answer was lost may be sent again; the executor's
/// settings. Given to [`IdempotentClient::tool`](super::IdempotentClient::tool).
///
/// A setting left unset comes from the server's annotations (`readOnlyHint`, `idempotentHint`)
/// where the client can read them, then from the runtime. A tool with neither a configuration
/// nor `readOnlyHint: true` is refused, never called unprotected.
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct RemoteTool {
    /// `Some(fields)`: keyed on them; `None` with `read_only`: a read; neither: hints only.
    key_fields: Option<Vec<String>>,
    read_only: bool,
    resend: Option<bool>,
    key_name: Option<String>,
    lease: Option<Duration>,
    ttl: Option<Duration>,
    in_flight_wait: Option<Duration>,
    max_attempts: Option<u32>,
    retry: Option<RetryPolicy>,
    verify: Option<RemoteVerify>,
}

impl RemoteTool {
    /// A tool with a side effect, keyed on these fields of its JSON arguments, in this order
    /// (encoding v1: a string is text, an integer an integer, `true`/`false` a bool). A field
    /// inside an object is named by its path, `"order.id"` (the key names it `id`). The other
    /// arguments are the call's fingerprint: the same key fields with other arguments are
    /// refused as [`Error::KeyReuse`], never sent.
    pub fn keyed<I, S>(fields: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        RemoteTool {
            key_fields: Some(fields.into_iter().map(Into::into).collect()),
            ..RemoteTool::default()
        }
    }

    /// A tool that only reads, whatever the server's hints say: called as it is, no key, no
    /// record, retried by its failures' class.
    pub fn read_only() -> Self {
        RemoteTool {
            read_only: true,
            ..RemoteTool::default()
        }
    }

    /// Whether an attempt whose answer was lost (a timeout, a dropped connection, a 502 after
    /// the request went out) may be sent again with the same key (S20). Say `true` only when the
    /// server deduplicates by the key it is sent in `_meta`
    /// ([`IDEMPOTENCY_KEY_META`](super::IDEMPOTENCY_KEY_META)) or by the key fields themselves.
    /// Default: the server's `idempotentHint`, which the key in `_meta` backs; `false` without it.
    pub fn resend(mut self, yes: bool) -> Self {
        self.resend = Some(yes);
        self
    }

    /// The name the keys and records of this tool are made under (default: the tool's name on
    /// its server). Two servers with a tool of one name, or a remote tool named as one of this
    /// program's own `#[side_effect]` tools, need names of their own (S21).
    pub fn key_name(mut self, name: impl Into<String>) -> Self {
        self.key_name = Some(name.into());
        self
    }

    /// How long a claim holds before another caller may take it over ([`Tool::lease`]).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// How long the records are kept ([`Tool::ttl`]).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// How long a call waits for another call of its key ([`Tool::in_flight_wait`]).
    pub fn in_flight_wait(mut self, wait: Duration) -> Self {
        self.in_flight_wait = Some(wait);
        self
    }

    /// Attempts in all, the first included ([`Tool::max_attempts`]).
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = Some(n);
        self
    }

    /// The retry policy of this tool ([`Tool::retry`]).
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = Some(policy);
        self
    }

    /// An operation whose outcome is unknown is verified by calling a read-only tool of the same
    /// server before anything is sent again (S19; see [`RemoteVerify`] for what each answer does).
    /// Without it, an unknown outcome of a tool that is not re-sent is kept as unknown and refused
    /// on repeats until an operator settles it (`idemkit resolve`).
    pub fn verify(mut self, verify: RemoteVerify) -> Self {
        self.verify = Some(verify);
        self
    }

    /// How an unknown outcome is verified, if it is.
    pub fn verification(&self) -> Option<&RemoteVerify> {
        self.verify.as_ref()
    }

    /// The name the records of the tool `name` are kept under.
    pub(super) fn recorded_as<'a>(&'a self, name: &'a str) -> &'a str {
        self.key_name.as_deref().unwrap_or(name)
    }

    /// The key fields named (empty for a read, or a tool configured by its hints alone).
    pub fn key_fields(&self) -> &[String] {
        self.key_fields.as_deref().unwrap_or_default()
    }

    /// Whether a call needs the server's annotations to be planned.
    pub(super) fn needs_hints(this: Option<&RemoteTool>) -> bool {
        match this {
            None => true,
            Some(t) => !t.read_only && (t.key_fields.is_none() || t.resend.is_none()),
        }
    }

    /// `tool` with this configuration's settings.
    pub(super) fn settings<'a>(&self, mut tool: Tool<'a>) -> Tool<'a> {
        if let Some(lease) = self.lease {
            tool = tool.lease(lease);
        }
        if let Some(ttl) = self.ttl {
            tool = tool.ttl(ttl);
        }
        if let Some(wait) = self.in_flight_wait {
            tool = tool.in_flight_wait(wait);
        }
        if let Some(policy) = self.retry {
            tool = tool.retry(policy);
        }
        if let Some(n) = self.max_attempts {
            tool = tool.max_attempts(n);
        }
        tool
    }
}

/// What a call of a remote tool does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Plan {
    /// Sent as it is, retried by its failures' class: no key, no record.
    Read,
    /// Keyed on `fields` under `key_name`, recorded, replayed; an attempt whose answer was lost
    /// is sent again only if `resend`.
    Keyed {
        fields: Vec<String>,
        key_name: String,
        resend: bool,
    },
}

/// The plan of a call of `tool`: the developer's configuration first, then the server's
/// annotations (`hints`: `None` when the listing has no such tool). `Err`: refused, nothing sent.
///
/// - `RemoteTool::read_only()`, or no configuration and `readOnlyHint: true`: a read.
/// - `RemoteTool::keyed(..)`: keyed; `resend` as configured, else `idempotentHint: true` (the key
///   goes to the server in `_meta`, so a server that honours it deduplicates the repeat, and one
///   that keys on the arguments does by its own promise), else `false`. `destructiveHint` changes
///   no default: whether a repeat is harmless is `idempotentHint`'s to say, and without it no
///   repeat is sent anyway.
/// - Otherwise: refused, with what to configure.
pub(super) fn plan(
    tool: &str,
    config: Option<&RemoteTool>,
    hints: Option<&ToolAnnotations>,
) -> Result<Plan, Error> {
    let read_only_hint = hints.and_then(|h| h.read_only_hint) == Some(true);
    let idempotent_hint = hints.and_then(|h| h.idempotent_hint) == Some(true);
    match config {
        Some(c) if c.read_only && c.verify.is_some() => Err(settings(
            tool,
            "`RemoteTool::read_only()` with `.verify(..)`: a read has no outcome to verify; leave the verify out"
                .to_owned(),
        )),
        Some(c) if c.read_only => Ok(Plan::Read),
        Some(RemoteTool {
            key_fields: Some(fields),
            resend,
            key_name,
            verify,
            ..
        }) => {
            if let Some(verify) = verify {
                verify.check(tool).map_err(|why| settings(tool, why))?;
            }
            if fields.is_empty() || fields.iter().any(|f| f.split('.').any(str::is_empty)) {
                return Err(settings(
                    tool,
                    format!(
                        "`RemoteTool::keyed` names no key field, or an empty one ({fields:?}): name the arguments \
                         that identify one operation, e.g. `RemoteTool::keyed([\"order_id\"])`"
                    ),
                ));
            }
            Ok(Plan::Keyed {
                fields: fields.clone(),
                key_name: key_name.clone().unwrap_or_else(|| tool.to_owned()),
                resend: resend.unwrap_or(idempotent_hint),
            })
        }
        _ if read_only_hint => Ok(Plan::Read),
        _ => Err(settings(tool, unconfigured(tool, hints.is_some()))),
    }
}

fn settings(tool: &str, reason: String) -> Error {
    Error::Settings {
        tool: tool.to_owned(),
        reason,
    }
}

/// What to configure for a tool that is neither configured nor marked read-only.
fn unconfigured(tool: &str, listed: bool) -> String {
    let why = if listed {
        "its MCP server does not mark it read-only (`readOnlyHint` is not true)"
    } else {
        "its MCP server does not list it in `tools/list`"
    };
    format!(
        "{why}, and this client has no idemkit configuration for it, so a repeat after a lost answer could act \
         twice. Name the arguments that identify one operation: \
         `IdempotentClient::tool(\"{tool}\", RemoteTool::keyed([\"order_id\"]))` (and `.resend(true)` if the server \
         deduplicates by the key it is sent in `_meta`); or, if it only reads, \
         `IdempotentClient::tool(\"{tool}\", RemoteTool::read_only())`"
    )
}

#[cfg(test)]
mod tests {
    use super::{Plan, RemoteTool, plan};
    use rmcp::model::ToolAnnotations;

    fn hints(
        read_only: Option<bool>,
        idempotent: Option<bool>,
        destructive: Option<bool>,
    ) -> ToolAnnotations {
        ToolAnnotations::from_raw(None, read_only, destructive, idempotent, None)
    }

    fn keyed(resend: bool) -> Plan {
        Plan::Keyed {
            fields: vec!["order".into()],
            key_name: "t".into(),
            resend,
        }
    }

    /// The annotations choose the defaults; the configuration overrides them; an unconfigured
    /// tool that is not read-only is refused with what to configure.
    #[test]
    fn client_hints_choose_the_defaults_and_the_configuration_overrides_them() {
        let config = RemoteTool::keyed(["order"]);
        let h = |r, i, d| Some(hints(r, i, d));
        assert_eq!(
            plan("t", None, h(Some(true), None, None).as_ref()).unwrap(),
            Plan::Read
        );
        assert_eq!(
            plan("t", Some(&config), h(Some(true), None, None).as_ref()).unwrap(),
            keyed(false)
        );
        assert_eq!(
            plan(
                "t",
                Some(&config),
                h(Some(false), Some(true), None).as_ref()
            )
            .unwrap(),
            keyed(true)
        );
        assert_eq!(
            plan(
                "t",
                Some(&config),
                h(Some(false), Some(true), Some(true)).as_ref()
            )
            .unwrap(),
            keyed(true)
        );
        assert_eq!(plan("t", Some(&config), None).unwrap(), keyed(false));
        let no = config.clone().resend(false);
        assert_eq!(
            plan("t", Some(&no), h(None, Some(true), None).as_ref()).unwrap(),
            keyed(false)
        );
        let yes = config.resend(true);
        assert_eq!(plan("t", Some(&yes), None).unwrap(), keyed(true));
        let read = RemoteTool::read_only();
        assert_eq!(
            plan("t", Some(&read), h(Some(false), None, None).as_ref()).unwrap(),
            Plan::Read
        );
        for hint in [h(Some(false), Some(true), None), h(None, None, None), None] {
            let refused = plan("send_email", None, hint.as_ref())
                .unwrap_err()
                .to_string();
            assert!(
                refused.contains("RemoteTool::keyed")
                    && refused.contains("RemoteTool::read_only()"),
                "{refused}"
            );
            assert!(
                refused.contains("tool `send_email` was not run"),
                "{refused}"
            );
        }
        assert!(plan("t", Some(&RemoteTool::keyed(Vec::<String>::new())), None).is_err());
        assert!(plan("t", Some(&RemoteTool::keyed(["a."])), None).is_err());
    }
}
