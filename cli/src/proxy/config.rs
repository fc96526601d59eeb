//! The proxy's configuration file (TOML): the store, how long an attempt waits for the upstream,
//! and per tool its key fields or that it only reads, whether a lost answer may be sent again,
//! how long records are kept. Each tool becomes an [`idemkit::mcp::RemoteTool`].
//!
//! TOML, not JSON: an operator's file wants comments (why a tool is keyed on these fields, why it
//! may or may not be re-sent), and the `toml` crate is already in the workspace's lock file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use idemkit::mcp::RemoteTool;
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
    verify: Option<String>,
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
    let store = file.store.map(|s| relative_to(&s, folder));
    let mut tools = BTreeMap::new();
    for (name, t) in file.tools {
        let tool = tool(&name, t).map_err(|e| format!("[tools.{name}]: {e}"))?;
        tools.insert(name, tool);
    }
    Ok(Config {
        store,
        timeout,
        tools,
    })
}

fn tool(name: &str, t: ToolFile) -> Result<ToolConfig, String> {
    if t.verify.is_some() {
        return Err(
            "`verify` (asking a read-only upstream tool whether an unknown outcome happened) is not supported by \
             this proxy yet: leave it out. An unknown outcome is kept as ambiguous and refused on repeats; \
             settle it with `idemkit list --state ambiguous` and `idemkit resolve`"
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
    Ok(ToolConfig {
        key: t.key.unwrap_or_default(),
        read_only: t.read_only,
        remote,
    })
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
            [tools.balance]
            read_only = true
            "#,
            Path::new("/etc/idemkit"),
        )
        .unwrap();
        assert_eq!(config.store.as_deref(), Some("/etc/idemkit/proxy.db"));
        assert_eq!(config.timeout, Duration::from_secs(5));
        assert_eq!(config.tools["charge"].key, ["customer_id", "invoice"]);
        assert!(config.tools["balance"].read_only);
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
        assert!(refused("[tools.t]\nkey = [\"a\"]\nverify = \"get\"").contains("not supported"));
        assert!(refused("[tools.t]\nkey = [\"a\"]\nttl = \"7 days\"").contains("`ttl`"));
        assert!(refused("[tools.t]\nkeys = [\"a\"]").contains("unknown field"));
        assert!(refused("[tools.t]\nread_only = true\nresend = true").contains("leave those out"));
    }
}
