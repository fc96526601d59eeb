//! `idemkit`: see and mend idemkit's records in any store, and derive a tool's key offline.
//!
//! Exit status: 0 done, 1 the operation failed or was refused (the message says why and what
//! to do), 2 a usage error. Messages go to stderr; what was asked for to stdout.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use idem_runtime::sentences::{self, EFFECT_UNKNOWN};
use idem_runtime::store::{
    Decision, Forgot, RecordFilter, RecordState, Released, Resolved, StateKind,
};
use idem_runtime::{IdempotencyKey, OperationId};

mod key;
mod proxy;
mod resolve;
mod settle;
mod shape;
mod show;
mod target;

use target::{Names, Target};

#[derive(Parser)]
#[command(
    name = "idemkit",
    version,
    about = "See and mend idemkit's records (what ran, what replays, what is stuck), and derive keys",
    after_help = "The store: --store or IDEMKIT_STORE (sqlite:PATH, a path, postgres://…, redis://…); \
                  without either, the agent's default SQLite file ($IDEMKIT_DB, else .idemkit/idemkit.db here)."
)]
struct Cli {
    /// The store: sqlite:PATH, a path, postgres://… or redis://… (default: the default SQLite file).
    #[arg(long, env = "IDEMKIT_STORE", global = true, value_name = "STORE")]
    store: Option<String>,
    /// PostgreSQL: the schema of the store's tables (default: the search path).
    #[arg(long, global = true, value_name = "SCHEMA")]
    pg_schema: Option<String>,
    /// PostgreSQL: the records table's name (default: idemkit).
    #[arg(long, global = true, value_name = "TABLE")]
    pg_table: Option<String>,
    /// Redis: the prefix of the store's keys (default: idemkit:).
    #[arg(long, global = true, value_name = "PREFIX")]
    redis_prefix: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
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
    /// settles them itself (`idemkit::Settler`, as a task beside its agents or as its own
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
    /// (`idemkit::tools_manifest()`). `idemkit key --operation NAME` prints an operation's id.
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
        /// `idemkit::tools_manifest()` wrote): an unknown, missing or misplaced field, or a value
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
fn for_tenant(tenant: Option<&str>) -> String {
    tenant
        .map(|t| format!(" for tenant `{t}`"))
        .unwrap_or_default()
}

fn parse_key(s: &str) -> Result<IdempotencyKey, String> {
    s.parse()
        .map_err(|_| format!("`{s}` is not a key (a UUID such as 32e00e40-1a53-8058-93c7-e9d1adc8ecaa); `idemkit key` derives one"))
}

fn parse_decision(s: &str) -> Result<Decision, String> {
    s.parse()
}

fn parse_state(s: &str) -> Result<StateKind, String> {
    s.parse()
        .map_err(|e: idem_runtime::store::UnknownState| e.to_string())
}

/// What went wrong: said on stderr, with the exit status it gives.
struct Failed(String);

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Key {
        tool: Some(tool),
        fields,
        tenant,
        check,
        operation: None,
    } = &cli.command
    {
        if let Some(path) = check {
            let manifest = match std::fs::read_to_string(path) {
                Ok(text) => text,
                Err(e) => {
                    eprintln!("idemkit: cannot read the manifest {}: {e}", path.display());
                    return ExitCode::from(2);
                }
            };
            match key::check(&manifest, tool, fields) {
                Ok(wrong) if wrong.is_empty() => {}
                Ok(wrong) => {
                    for why in wrong {
                        eprintln!("idemkit: {why} (by {})", path.display());
                    }
                    return ExitCode::from(2);
                }
                Err(why) => {
                    eprintln!("idemkit: {} ({})", why, path.display());
                    return ExitCode::from(2);
                }
            }
        }
        if !fields
            .iter()
            .any(|(_, v)| matches!(v, key::Value::Operation(_)))
        {
            println!("{}", key::derive(tool, fields, tenant.as_deref()));
            return ExitCode::SUCCESS;
        }
    }
    if let Command::Proxy(args) = &cli.command {
        // The store's other settings (a prune's) are not the proxy's: their defaults.
        #[allow(clippy::needless_update)]
        let names = Names {
            pg_schema: cli.pg_schema.clone(),
            pg_table: cli.pg_table.clone(),
            redis_prefix: cli.redis_prefix.clone(),
            ..Names::default()
        };
        return ExitCode::from(proxy::main(args, cli.store.as_deref(), &names));
    }
    if let Err(why) = resolve::check_usage(&cli.command) {
        eprintln!("idemkit: {why}");
        return ExitCode::from(2);
    }
    let target = match Target::choose(cli.store.as_deref()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("idemkit: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    if let Command::Settle {
        tool,
        tenant,
        dry_run,
    } = &cli.command
    {
        return ExitCode::from(runtime.block_on(settle::settle(
            &cli,
            &target,
            tool.as_deref(),
            tenant.as_deref(),
            *dry_run,
        )));
    }
    match runtime.block_on(run(&cli, &target)) {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(Failed(why)) => {
            eprintln!("idemkit: {why}");
            ExitCode::FAILURE
        }
    }
}

/// Runs a store command; returns what to print.
async fn run(cli: &Cli, target: &Target) -> Result<String, Failed> {
    let names = Names {
        pg_schema: cli.pg_schema.clone(),
        pg_table: cli.pg_table.clone(),
        redis_prefix: cli.redis_prefix.clone(),
        tombstones: match &cli.command {
            Command::Prune { tombstones, .. } => *tombstones,
            _ => None,
        },
    };
    let read_only = matches!(
        cli.command,
        Command::List { .. } | Command::Show { .. } | Command::Counts { .. } | Command::Key { .. }
    );
    let at = target.describe();
    let store = target
        .open(&names, read_only)
        .await
        .map_err(|e| Failed(format!("cannot open the store {at}: {e}")))?;
    let failed = |e: idem_runtime::StoreError| Failed(format!("the store {at} failed: {e}"));
    match &cli.command {
        Command::Key {
            operation: Some(name),
            tenant,
            ..
        } => match store
            .operation(&OperationId::stored_name(name, tenant.as_deref()))
            .await
            .map_err(failed)?
        {
            Some(id) => Ok(format!("{id}\n")),
            None => Err(Failed(format!(
                "no operation is named `{name}`{} in {at}: an id is minted by the first `idem.operation(\"{name}\")` \
                 (or a call under `operation_scope(\"{name}\", …)`){}; nothing was minted here",
                for_tenant(tenant.as_deref()),
                tenant
                    .as_deref()
                    .map(|t| format!(" under `as_tenant(\"{t}\", …)`"))
                    .unwrap_or_default()
            ))),
        },
        Command::Key {
            tool: Some(tool),
            fields,
            tenant,
            ..
        } => {
            let mut resolved = Vec::with_capacity(fields.len());
            for (field, value) in fields {
                let value = match value {
                    key::Value::Operation(name) => {
                        let stored = OperationId::stored_name(name, tenant.as_deref());
                        match store.operation(&stored).await.map_err(failed)? {
                            Some(id) => key::Value::Uuid(id),
                            None => {
                                return Err(Failed(format!(
                                    "no operation is named `{name}`{} in {at} (for {field}=op:{name}); nothing was minted",
                                    for_tenant(tenant.as_deref())
                                )));
                            }
                        }
                    }
                    other => other.clone(),
                };
                resolved.push((field.clone(), value));
            }
            Ok(format!(
                "{}\n",
                key::derive(tool, &resolved, tenant.as_deref())
            ))
        }
        Command::Key { .. } => Err(Failed(
            "`idemkit key` needs a tool or --operation".to_owned(),
        )),
        Command::List {
            tool,
            state,
            older_than,
            newer_than,
            tenant,
            limit,
            json,
        } => {
            let mut filter = RecordFilter::new().limit(*limit);
            filter.tenant = tenant.clone();
            filter.tool = tool.clone();
            filter.state = *state;
            filter.older_than = *older_than;
            filter.newer_than = *newer_than;
            let records = store.list(&filter).await.map_err(failed)?;
            if *json {
                let all: Vec<_> = records.iter().map(show::record_json).collect();
                return Ok(serde_json::to_string_pretty(&all).expect("JSON prints") + "\n");
            }
            let mut out = show::records_table(&records);
            if records.len() == *limit && std::io::stdout().is_terminal() {
                out += &format!("(the first {limit}; --limit shows more)\n");
            }
            if *state == Some(StateKind::Ambiguous) {
                out += &show::settle_hint(&records);
            }
            Ok(out)
        }
        Command::Show { key, json } => match store.get(key).await.map_err(failed)? {
            Some(r) if *json => Ok(serde_json::to_string_pretty(&show::record_json(&r))
                .expect("JSON prints")
                + "\n"),
            Some(r) => Ok(show::record_text(&r)),
            None => Err(Failed(format!(
                "no live record has the key {key} in {at} (never made, released, forgotten or expired); \
                 check the key with `idemkit key`, and the store with --store"
            ))),
        },
        Command::Release { key, force } => {
            // S31: a running record whose holder's lease lapsed reads as ambiguous (its body may
            // have started): released, the next call would run the operation blind, where a
            // takeover verifies it or keeps it unknown. Settled as an ambiguous one is, unless
            // the operator says the holder is known to have done nothing (`--force`).
            if !*force
                && let Some(record) = store.get(key).await.map_err(failed)?
                && let RecordState::Ambiguous { note } = &record.state
            {
                return Err(Failed(format!(
                    "{key} is ambiguous: {note}. {}. `--force` releases a record whose holder's lease \
                     lapsed anyway: only if you know its holder did nothing, since the next call then runs \
                     the operation again",
                    sentences::how_to_settle(key)
                )));
            }
            match store.release_key(key, *force).await.map_err(failed)? {
                Released::Released => Ok(format!(
                    "released {key}: the next call with this key runs the operation again (with the same key)\n"
                )),
                Released::LeaseLive { remaining } => Err(Failed(format!(
                    "refused: the lease on {key} is live for another {}, so its holder may still be running the \
                 operation. Wait for the lease to run out: the record then reads as ambiguous, and `idemkit resolve` \
                 or the settler settles it. `--force` releases it now, but only \
                 do that if you know the holder is dead: if it is alive, the next call runs the effect a second \
                 time alongside it, and the holder's outcome is refused when it finishes",
                    show::span(remaining)
                ))),
                Released::NotRunning(StateKind::Ambiguous) => Err(Failed(format!(
                    "{key} is ambiguous, not running: its call ran, and {EFFECT_UNKNOWN}. {}",
                    sentences::how_to_settle(key)
                ))),
                Released::NotRunning(state) => Err(Failed(format!(
                    "{key} is {state}, not running: nothing to release. `idemkit forget {key}` removes it, so that the \
                 next call runs the operation again"
                ))),
                Released::NotFound => Err(Failed(format!(
                    "no live record has the key {key} in {at}: nothing to release"
                ))),
                other => Err(Failed(format!("{key}: {other:?}"))),
            }
        }
        Command::Forget { key, force, note } => match store
            .forget_noted(key, *force, note.as_deref())
            .await
            .map_err(failed)?
        {
            Forgot::Forgotten => {
                if *force {
                    eprintln!(
                        "idemkit: warning: forced: if a holder was still running {key}, it may still act (the \
                         effect may happen) and its outcome will be refused; the next call runs the operation \
                         again, perhaps alongside it"
                    );
                }
                Ok(format!(
                    "forgot {key}: the next call with this key runs the operation again, whether or not it ran before\n"
                ))
            }
            Forgot::LeaseLive { remaining } => Err(Failed(format!(
                "refused: the lease on {key} is live for another {}, so its holder may still be running the \
                 operation; forgetting it now lets the next call run the effect a second time alongside it. Wait \
                 for the lease to run out, then forget it. `idemkit forget --force {key}` forgets it now: only \
                 if you know the holder is dead, since a live one may still act",
                show::span(remaining)
            ))),
            Forgot::NotFound => Err(Failed(format!(
                "no live record has the key {key} in {at}: nothing to forget"
            ))),
            other => Err(Failed(format!("{key}: {other:?}"))),
        },
        Command::Resolve {
            key,
            decision,
            outcome,
            note,
            ttl,
            unchecked,
        } => {
            if let (Decision::Applied, Some(outcome)) = (decision, outcome) {
                shape::check_outcome(store.as_ref(), key, outcome, *unchecked).await?;
            }
            let answer = store
                .resolve(
                    key,
                    *decision,
                    outcome.as_deref().map(str::as_bytes),
                    note.as_deref(),
                    *ttl,
                )
                .await
                .map_err(failed)?;
            match answer {
                Resolved::Resolved if *decision == Decision::Applied => Ok(format!(
                    "resolved {key} as applied: it is completed with the outcome you gave, which later calls with \
                     this key replay for {} without running the operation; the decision is kept with it \
                     (`idemkit show {key}`)\n",
                    show::span(*ttl)
                )),
                Resolved::Resolved => Ok(format!(
                    "resolved {key} as not applied: the record is released, so the next call with this key runs the \
                     operation (with the same key); the decision is kept for {} (`idemkit show {key}`)\n",
                    show::span(*ttl)
                )),
                Resolved::LeaseLive { remaining } => Err(Failed(format!(
                    "refused: {key} is running and its holder's lease is live for another {}: the holder may still \
                     finish the operation, and its outcome would then be the record's. Nothing was changed; wait \
                     for the lease to run out (`idemkit show {key}`), then resolve it if it is still unsettled",
                    show::span(remaining)
                ))),
                Resolved::Completed => Err(Failed(format!(
                    "refused: {key} is completed, so its outcome is known (`idemkit show {key}`): nothing to resolve, \
                     nothing was changed. `idemkit forget {key}` removes it if it must run again"
                ))),
                Resolved::NotFound => Err(Failed(format!(
                    "no live record has the key {key} in {at}: nothing to resolve (it expired, was forgotten, or a \
                     not-applied decision released it already: `idemkit show {key}` prints a kept decision)"
                ))),
                other => Err(Failed(format!("{key}: {other:?}"))),
            }
        }
        Command::Prune { limit, .. } => {
            let n = store.prune(*limit).await.map_err(failed)?;
            Ok(format!(
                "pruned {n} expired record(s); tombstones (S33) are kept until their setting passes\n"
            ))
        }
        Command::Settle { .. } => unreachable!("`idemkit settle` is run by `settle`, before `run`"),
        Command::Proxy(_) => unreachable!("`idemkit proxy` is run by `proxy::main`, before `run`"),
        Command::Counts { json } => {
            let counts = store.counts().await.map_err(failed)?;
            if *json {
                return Ok(serde_json::to_string_pretty(&show::counts_json(&counts))
                    .expect("JSON prints")
                    + "\n");
            }
            Ok(show::counts_table(&counts))
        }
    }
}
