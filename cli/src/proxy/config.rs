//! The proxy's configuration file (TOML): the store, how long an attempt waits for the upstream,
//! and per tool its key fields or that it only reads, whether a lost answer may be sent again,
//! how long records are kept. Each tool becomes an [`idemkit::mcp::RemoteTool`].
//!
//! TOML, not JSON: an operator's file wants comments (why a tool is keyed on these fields, why it
//! may or may not be re-sent), and the `toml` crate is already in the workspace's lock file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use idemkit::mcp::{RemoteTool, RemoteVerify};
use serde::Deserialize;

use crate::show::parse_age;

/// The file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    /// sqlite:PATH, a path, postgres://…, redis://… (a relative SQLite path is relative to the
    /// configuration file's folder).
    store: Option<String>,
    /// How long one attempt waits for the upstream's answer (default 60s).
    timeout: Option<String>,
    /// How often the proxy's settler looks for unknown outcomes of verified tools (default 60s).
    settle_every: Option<String>,
    #[serde(default)]
    tools: BTreeMap<String, ToolFile>,
}

/// One `[tools.NAME]` table as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolFile {
    key: Option<Vec<String>>,
    #[serde(default)]
    read_only: bool,
    resend: Option<bool>,
    ttl: Option<String>,
    lease: Option<String>,
    in_flight_wait: Option<String>,
    max_attempts: Option<u32>,
    key_name: Option<String>,
    verify: Option<VerifyFile>,
}

/// One `[tools.NAME.verify]` table as written: the read-only upstream tool asked whether an
/// operation whose outcome is unknown happened (S19).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct VerifyFile {
    /// The read-only tool of the same upstream.
    tool: String,
    /// Which of the call's arguments it is given (default: all).
    arguments: Option<Vec<String>>,
    /// The operation's key is also given, under this argument name.
    key_argument: Option<String>,
    /// JSON pointer into its answer: present and not empty = applied.
    applied_if: String,
}

/// What the proxy does with one tool.
#[derive(Debug, Clone)]
pub struct ToolConfig {
    /// The key fields (empty for a read).
    pub key: Vec<String>,
    pub read_only: bool,
    /// The client's configuration of the tool.
    pub remote: RemoteTool,
}

/// The proxy's configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The store named in the file (a relative SQLite path made relative to the file's folder).
    pub store: Option<String>,
    pub timeout: Duration,
    /// How often the settler passes over the unknown outcomes of tools with a verify (S31).
    pub settle_every: Duration,
    pub tools: BTreeMap<String, ToolConfig>,
}

/// Reads and checks the configuration file at `path`.
pub fn read(path: &Path) -> Result<Config, String> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        format!(
            "cannot read the proxy's configuration {}: {e}",
            path.display()
        )
    })?;
    let folder = path.parent().unwrap_or(Path::new(""));
    parse(&text, folder).map_err(|e| format!("{}: {e}", path.display()))
}

/// Parses a configuration; relative SQLite paths are made relative to `folder`.
pub fn parse(text: &str, folder: &Path) -> Result<Config, String> {
    let file: File = toml::from_str(text).map_err(|e| e.to_string())?;
    let timeout = age(file.timeout.as_deref(), "timeout")?.unwrap_or(Duration::from_secs(60));
    let settle_every =
        age(file.settle_every.as_deref(), "settle_every")?.unwrap_or(Duration::from_secs(60));
    if settle_every.is_zero() {
        return Err(
            "`settle_every = \"0s\"`: write how often the settler passes, e.g. \"60s\"".to_owned(),
        );
    }
    let store = file.store.map(|s| relative_to(&s, folder));
    let mut tools = BTreeMap::new();
    for (name, t) in file.tools {
        let tool = tool(&name, t).map_err(|e| format!("[tools.{name}]: {e}"))?;
        tools.insert(name, tool);
    }
    Ok(Config {
        store,
        timeout,
        settle_every,
        tools,
    })
}

fn tool(name: &str, t: ToolFile) -> Result<ToolConfig, String> {
    if t.read_only && t.verify.is_some() {
        return Err(
            "`read_only = true` with `[tools.NAME.verify]`: a read has no outcome to verify; leave the verify out"
                .to_owned(),
        );
    }
    let mut remote = match (&t.key, t.read_only) {
        (Some(_), true) => {
            return Err(
                "both `key` and `read_only = true`: a tool either has a side effect (keyed on the arguments that \
                 identify one operation) or only reads; keep one"
                    .to_owned(),
            );
        }
        (None, false) => {
            return Err(format!(
                "neither `key` nor `read_only`: name the arguments that identify one operation, \
                 `key = [\"order_id\"]`, or say `read_only = true` if `{name}` only reads"
            ));
        }
        (Some(key), false) => {
            if key.is_empty() || key.iter().any(|f| f.split('.').any(str::is_empty)) {
                return Err(format!(
                    "`key = {key:?}` names no field, or an empty one: name the arguments that identify one \
                     operation, e.g. `key = [\"customer_id\", \"invoice\"]` (a field inside an object: \"order.id\")"
                ));
            }
            RemoteTool::keyed(key.iter().cloned())
        }
        (None, true) => {
            if t.resend.is_some() || t.key_name.is_some() || t.ttl.is_some() || t.lease.is_some() {
                return Err(
                    "`read_only = true` with `resend`, `key_name`, `ttl` or `lease`: a read has no key and no \
                     record; leave those out"
                        .to_owned(),
                );
            }
            RemoteTool::read_only()
        }
    };
    if let Some(resend) = t.resend {
        remote = remote.resend(resend);
    }
    if let Some(ttl) = age(t.ttl.as_deref(), "ttl")? {
        remote = remote.ttl(ttl);
    }
    if let Some(lease) = age(t.lease.as_deref(), "lease")? {
        remote = remote.lease(lease);
    }
    if let Some(wait) = age(t.in_flight_wait.as_deref(), "in_flight_wait")? {
        remote = remote.in_flight_wait(wait);
    }
    if let Some(n) = t.max_attempts {
        if n == 0 {
            return Err("`max_attempts = 0`: the first attempt counts; write 1 or more".to_owned());
        }
        remote = remote.max_attempts(n);
    }
    if let Some(key_name) = t.key_name {
        remote = remote.key_name(key_name);
    }
    if let Some(v) = t.verify {
        remote = remote.verify(verification(name, v)?);
    }
    Ok(ToolConfig {
        key: t.key.unwrap_or_default(),
        read_only: t.read_only,
        remote,
    })
}

/// `[tools.NAME.verify]` as the client's [`RemoteVerify`].
fn verification(name: &str, v: VerifyFile) -> Result<RemoteVerify, String> {
    if v.tool.is_empty() || v.tool == name {
        return Err(format!(
            "`[tools.{name}.verify]` `tool = {:?}`: name a read-only tool of the same upstream that looks the \
             operation up (e.g. `tool = \"find_{name}\"`), not the tool itself",
            v.tool
        ));
    }
    if !v.applied_if.is_empty() && !v.applied_if.starts_with('/') {
        return Err(format!(
            "`[tools.{name}.verify]` `applied_if = {:?}` is not a JSON pointer: write one that starts with `/`, \
             e.g. `applied_if = \"/found\"` (\"\" is the whole answer)",
            v.applied_if
        ));
    }
    let mut verify = RemoteVerify::new(v.tool, v.applied_if);
    if let Some(arguments) = v.arguments {
        verify = verify.arguments(arguments);
    }
    if let Some(key_argument) = v.key_argument {
        verify = verify.key_argument(key_argument);
    }
    Ok(verify)
}

fn age(text: Option<&str>, what: &str) -> Result<Option<Duration>, String> {
    text.map(|t| parse_age(t).map_err(|e| format!("`{what}`: {e}")))
        .transpose()
}

/// A store spelled in the file: a relative SQLite path is made relative to `folder`.
fn relative_to(spec: &str, folder: &Path) -> String {
    if spec.contains("://") && !spec.starts_with("sqlite:") {
        return spec.to_owned();
    }
    let (prefix, path) = match spec.strip_prefix("sqlite:") {
        Some(path) => ("sqlite:", path),
        None => ("", spec),
    };
    if path.starts_with("//") || Path::new(path).is_absolute() || path.is_empty() {
        return spec.to_owned();
    }
    let joined: PathBuf = folder.join(path);
    format!("{prefix}{}", joined.display())
}

#[cfg(test)]
mod tests {
    use super::parse;
    use std::path::Path;
    use std::time::Duration;

    #[test]
    fn proxy_config_reads_tools_and_makes_sqlite_paths_relative_to_the_file() {
        let config = parse(
            r#"
            store = "proxy.db"
            timeout = "5s"
            [tools.charge]
            key = ["customer_id", "invoice"]
            resend = false
            ttl = "7d"
            [tools.charge.verify]
            tool = "find_charge"
            arguments = ["customer_id", "invoice"]
            key_argument = "idempotency_key"
            applied_if = "/found"
            [tools.balance]
            read_only = true
            "#,
            Path::new("/etc/idemkit"),
        )
        .unwrap();
        assert_eq!(config.store.as_deref(), Some("/etc/idemkit/proxy.db"));
        assert_eq!(config.timeout, Duration::from_secs(5));
        assert_eq!(config.settle_every, Duration::from_secs(60));
        assert_eq!(config.tools["charge"].key, ["customer_id", "invoice"]);
        assert!(config.tools["balance"].read_only);
        let verify = config.tools["charge"].remote.verification().unwrap();
        assert_eq!(
            verify,
            &idemkit::mcp::RemoteVerify::new("find_charge", "/found")
                .arguments(["customer_id", "invoice"])
                .key_argument("idempotency_key")
        );
        let at = |s: &str| {
            parse(&format!("store = \"{s}\""), Path::new("/etc/idemkit"))
                .unwrap()
                .store
                .unwrap()
        };
        assert_eq!(at("sqlite:p.db"), "sqlite:/etc/idemkit/p.db");
        assert_eq!(at("/var/p.db"), "/var/p.db");
        assert_eq!(at("postgres://u@h/db"), "postgres://u@h/db");
    }

    #[test]
    fn proxy_config_refuses_what_it_cannot_do_and_says_what_to_write() {
        let refused = |text: &str| parse(text, Path::new(".")).unwrap_err();
        assert!(refused("[tools.t]\nresend = true").contains(r#"key = ["order_id"]"#));
        assert!(refused("[tools.t]\nkey = []").contains("names no field"));
        assert!(refused("[tools.t]\nkey = [\"a\"]\nread_only = true").contains("keep one"));
        assert!(refused("[tools.t]\nkey = [\"a\"]\nverify = \"get\"").contains("invalid type"));
        let verify = |table: &str| format!("[tools.t]\nkey = [\"a\"]\n[tools.t.verify]\n{table}");
        assert!(
            refused(&verify("tool = \"t\"\napplied_if = \"/found\""))
                .contains("not the tool itself")
        );
        assert!(
            refused(&verify("tool = \"get\"\napplied_if = \"found\"")).contains("JSON pointer")
        );
        assert!(refused(&verify("tool = \"get\"")).contains("applied_if"));
        assert!(
            refused(&verify("tool = \"get\"\napplied_if = \"\"\nkeys = []"))
                .contains("unknown field")
        );
        assert!(
            refused(
                "[tools.t]\nread_only = true\n[tools.t.verify]\ntool = \"g\"\napplied_if = \"\""
            )
            .contains("no outcome to verify")
        );
        assert!(refused("[tools.t]\nkey = [\"a\"]\nttl = \"7 days\"").contains("`ttl`"));
        assert!(refused("[tools.t]\nkeys = [\"a\"]").contains("unknown field"));
        assert!(refused("settle_every = \"0s\"").contains("how often"));
        assert!(refused("[tools.t]\nread_only = true\nresend = true").contains("leave those out"));
    }
}
