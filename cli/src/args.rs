//! The command line: the subcommands, their arguments and their value parsers (clap).

use clap::{Parser, Subcommand};
use idem_runtime::IdempotencyKey;
use idem_runtime::store::{Decision, RecordFilter, StateKind};

use std::time::Duration;

use crate::{key, proxy, show};

#[derive(Parser)]
#[command(
    name = "idemkit",
    version,
    about = "See and mend idemkit's records (what ran, what replays, what is stuck), and derive keys",
    after_help = "The store: --store or IDEMKIT_STORE (sqlite:PATH, a path, postgres://…, redis://…); \
                  without either, the agent's default SQLite file ($IDEMKIT_DB, else .idemkit/idemkit.db here)."
)]
pub(crate) struct Cli {
    /// The store: sqlite:PATH, a path, postgres://… or redis://… (default: the default SQLite file).
    #[arg(long, env = "IDEMKIT_STORE", global = true, value_name = "STORE")]
    pub(crate) store: Option<String>,
    /// PostgreSQL: the schema of the store's tables (default: the search path).
    #[arg(long, global = true, value_name = "SCHEMA")]
    pub(crate) pg_schema: Option<String>,
    /// PostgreSQL: the records table's name (default: idemkit).
    #[arg(long, global = true, value_name = "TABLE")]
    pub(crate) pg_table: Option<String>,
    /// Redis: the prefix of the store's keys (default: idemkit:).
    #[arg(long, global = true, value_name = "PREFIX")]
    pub(crate) redis_prefix: Option<String>,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Live records, newest first: a table, or JSON with --json.
    ///
    /// `list --state ambiguous` is the queue of records waiting for an operator's decision (a
    /// call that may have acted, whose outcome nobody knows): it says how to settle each with
    /// `idemkit resolve`.
    List {
        /// Only this tool's records.
        #[arg(long)]
        tool: Option<String>,
        /// Only records in this state: running, completed, ambiguous or tombstone.
        #[arg(long, value_parser = parse_state)]
        state: Option<StateKind>,
        /// Only records made at least this long ago (500ms, 30s, 10m, 2h, 7d).
        #[arg(long, value_parser = show::parse_age, value_name = "AGE")]
        older_than: Option<Duration>,
        /// Only records made less than this long ago.
        #[arg(long, value_parser = show::parse_age, value_name = "AGE")]
        newer_than: Option<Duration>,
        /// Only records made under this scope (tenant).
        #[arg(long)]
        tenant: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = RecordFilter::DEFAULT_LIMIT)]
        limit: usize,
        /// JSON, one array, instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// One record: tool, state, fingerprint, lease, times, an operator's decision (also for a
    /// record that `resolve … not-applied` released), and its outcome as pretty JSON.
    Show {
        /// The record's key (a UUID; `idemkit key` derives it).
        #[arg(value_parser = parse_key)]
        key: IdempotencyKey,
        /// JSON instead of lines.
        #[arg(long)]
        json: bool,
    },
    /// Frees a running record so the next call runs again; refused while its lease is live, and
    /// once it has lapsed (the record then reads as ambiguous: `resolve` it) unless `--force`.
    Release {
        #[arg(value_parser = parse_key)]
        key: IdempotencyKey,
        /// Release even though the lease is live, or lapsed with its body maybe started: only when
        /// its holder is known to be dead (or to have done nothing).
        #[arg(long)]
        force: bool,
    },
    /// Removes a record in any state: the next call runs the operation again.
    ///
    /// Refused while a holder's lease on the record is live (it may still be running the
    /// operation) unless --force.
    Forget {
        #[arg(value_parser = parse_key)]
        key: IdempotencyKey,
        /// Forget even though a holder's lease is live: only when that holder is known to be
        /// dead. If it is alive it may still act, and the next call runs the effect alongside.
        #[arg(long)]
        force: bool,
        /// A note kept with the decision when the record is a tombstone (who, why, the
        /// ticket), shown by `idemkit show` with when it was forgotten.
        #[arg(long)]
        note: Option<String>,
    },
    /// Settles a record kept as ambiguous (a call that may have acted): say whether its effect
    /// happened.
    ///
    /// `idemkit resolve KEY applied --outcome JSON [--note TEXT]`: it happened; the record
    /// completes with JSON (what a call of the tool returns), which later calls with this key
    /// replay without running the operation.
    ///
    /// `idemkit resolve KEY not-applied [--note TEXT]`: it did not happen; the record is
    /// released, and the next call with this key runs the operation (with the same key).
    ///
    /// Also for a running record whose holder's lease has run out (a crashed holder); refused
    /// while the lease is live, and for a completed record. The decision, its time and the note
    /// are kept with the record: `idemkit show KEY` prints them, also after not-applied.
    Resolve {
        /// The record's key (`idemkit list --state ambiguous` lists those waiting).
        #[arg(value_parser = parse_key)]
        key: IdempotencyKey,
        /// applied (the effect happened) or not-applied (it did not).
        #[arg(value_parser = parse_decision, value_name = "applied|not-applied")]
        decision: Decision,
        /// For applied: the outcome later calls replay, as the JSON a call of the tool returns
        /// (checked to be JSON before anything is written).
        #[arg(long, value_name = "JSON")]
        outcome: Option<String>,
        /// Who decided and why (what the provider said, a ticket); kept with the record.
        #[arg(long, value_name = "TEXT")]
        note: Option<String>,
        /// Writes an applied outcome even though its shape differs from the outcomes the tool
        /// stored itself (checked by default: a field they all have that it lacks, another
        /// kind of value). Only when the tool's return type changed since those were stored.
        #[arg(long)]
        unchecked: bool,
        /// How long the decision is kept, and for applied how long the outcome replays: the
        /// tool's time-to-live (idemkit's default is 24 hours).
        #[arg(long, value_parser = show::parse_age, default_value = "1d", value_name = "AGE")]
        ttl: Duration,
    },
    /// Deletes expired records (live ones are never touched).
    Prune {
        /// At most this many.
        #[arg(long, default_value_t = 100_000)]
        limit: usize,
        /// How long a tombstone (S33: a completed record past its ttl, which answers a late
        /// repeat "done on DATE" and is never run again) is kept past its ttl before this prune
        /// removes it: give the agent's own setting (its store's `tombstones(…)`) if it is not
        /// the default, 400d (500ms, 30s, 10m, 2h, 7d).
        #[arg(long, value_parser = show::parse_age, value_name = "AGE")]
        tombstones: Option<Duration>,
    },
    /// Records kept as ambiguous, counted for an operator's cron: `idemkit settle [--dry-run]
    /// [--tool NAME] [--tenant NAME]`.
    ///
    /// Settling asks each tool's verify function, which is code of your program: the program
    /// settles them itself (`idemkit::settle::Settler`, as a task beside its agents or as its own
    /// `settle` subcommand through `Settler::run_cli`, same options and exit codes). This
    /// command, which has no verify functions, changes nothing: it lists what waits and exits
    /// 0 when nothing does, 4 when records wait for a verify function or an operator
    /// (`idemkit resolve`), 1 when the store fails.
    Settle {
        /// Only this tool's records.
        #[arg(long, value_name = "NAME")]
        tool: Option<String>,
        /// Only records made under this scope (tenant).
        #[arg(long, value_name = "NAME")]
        tenant: Option<String>,
        /// Accepted for the same command line as the program's own `settle`; nothing is
        /// changed either way.
        #[arg(long)]
        dry_run: bool,
    },
    /// Live records by tool and state.
    Counts {
        /// JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Serves an upstream MCP server's tools on stdio with their calls made safe to repeat:
    /// `idemkit proxy --config proxy.toml -- UPSTREAM_CMD ARGS…`.
    ///
    /// The proxy spawns the upstream command (an MCP server over stdio; or reaches one at
    /// --upstream-url), serves its client on stdio (or over HTTP: --listen), lists its tools to its
    /// own client unchanged but for the hints it makes true, and sends each `tools/call` through
    /// idemkit: keyed on the fields the configuration names per tool, recorded in the store
    /// (--store or IDEMKIT_STORE, else the file's `store`, else the default SQLite file),
    /// replayed on a repeat,
    /// never sent again blindly when an answer was lost. It survives its own restart: the
    /// records are in the store. Logs go to stderr; stdout is the protocol.
    Proxy(proxy::Args),
    /// Prints the key a tool with this name and these key fields has (offline, no store, unless
    /// a field is an operation's name: op:NAME).
    ///
    /// A value is text unless prefixed with its kind: int:42, bool:true, bytes:00ff (hex),
    /// uuid:…, op:plan-42/step-3 (the id the operation of that name has in the store: an
    /// `OperationId` field), text:… (for text that contains a colon). Fields in the order the
    /// tool lists them; `--check tools.json` checks them against the application's manifest
    /// (`idemkit::registry::tools_manifest()`). `idemkit key --operation NAME` prints an operation's id.
    Key {
        /// The tool's name (its `name = "…"`, else the function's name).
        #[arg(required_unless_present = "operation")]
        tool: Option<String>,
        /// Key fields, FIELD=VALUE, in the tool's order.
        #[arg(value_parser = key::parse_field, value_name = "FIELD=VALUE")]
        fields: Vec<(String, key::Value)>,
        /// The key under this tenant (`IdempotencyKey::for_tenant`), as scoped calls have it.
        #[arg(long)]
        tenant: Option<String>,
        /// Checks the fields against the tool manifest in this file (what
        /// `idemkit::registry::tools_manifest()` wrote): an unknown, missing or misplaced field, or a value
        /// of another kind, is refused (exit 2) instead of printing another tool's key.
        #[arg(long, value_name = "MANIFEST")]
        check: Option<std::path::PathBuf>,
        /// Prints the id of the operation of this name in the store (`idem.operation(NAME)`):
        /// the value of an `OperationId` key field; with --tenant, that tenant's (operation ids
        /// are scoped to tenants as keys are). Nothing is minted.
        #[arg(long, value_name = "NAME", conflicts_with_all = ["tool", "fields"])]
        operation: Option<String>,
    },
}

/// " for tenant `T`" when a tenant is named, for messages about an operation's id.
pub(crate) fn for_tenant(tenant: Option<&str>) -> String {
    tenant
        .map(|t| format!(" for tenant `{t}`"))
        .unwrap_or_default()
}

pub(crate) fn parse_key(s: &str) -> Result<IdempotencyKey, String> {
    s.parse()
        .map_err(|_| format!("`{s}` is not a key (a UUID such as 32e00e40-1a53-8058-93c7-e9d1adc8ecaa); `idemkit key` derives one"))
}

pub(crate) fn parse_decision(s: &str) -> Result<Decision, String> {
    s.parse()
}

pub(crate) fn parse_state(s: &str) -> Result<StateKind, String> {
    s.parse()
        .map_err(|e: idem_runtime::store::UnknownState| e.to_string())
}
