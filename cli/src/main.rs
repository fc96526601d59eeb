//! `idemkit`: see and mend idemkit's records in any store, and derive a tool's key offline.
//!
//! Exit status: 0 done, 1 the operation failed or was refused (the message says why and what
//! to do), 2 a usage error. Messages go to stderr; what was asked for to stdout.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use idem_runtime::IdempotencyKey;
use idem_runtime::store::{RecordFilter, Released, StateKind};

mod key;
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
    List {
        /// Only this tool's records.
        #[arg(long)]
        tool: Option<String>,
        /// Only records in this state: running, completed or ambiguous.
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
    /// One record: tool, state, fingerprint, lease, times, and its outcome as pretty JSON.
    Show {
        /// The record's key (a UUID; `idemkit key` derives it).
        #[arg(value_parser = parse_key)]
        key: IdempotencyKey,
        /// JSON instead of lines.
        #[arg(long)]
        json: bool,
    },
    /// Frees a running record so the next call runs again; refused while its lease is live.
    Release {
        #[arg(value_parser = parse_key)]
        key: IdempotencyKey,
        /// Release even though the lease is live: only when its holder is known to be dead.
        #[arg(long)]
        force: bool,
    },
    /// Removes a record in any state: the next call runs the operation again.
    Forget {
        #[arg(value_parser = parse_key)]
        key: IdempotencyKey,
    },
    /// Deletes expired records (live ones are never touched).
    Prune {
        /// At most this many.
        #[arg(long, default_value_t = 100_000)]
        limit: usize,
    },
    /// Live records by tool and state.
    Counts {
        /// JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Prints the key a tool with this name and these key fields has (offline, no store).
    ///
    /// A value is text unless prefixed with its kind: int:42, bool:true, bytes:00ff (hex),
    /// uuid:…, text:… (for text that contains a colon). Fields in the order the tool lists them.
    Key {
        /// The tool's name (its `name = "…"`, else the function's name).
        tool: String,
        /// Key fields, FIELD=VALUE, in the tool's order.
        #[arg(value_parser = key::parse_field, value_name = "FIELD=VALUE")]
        fields: Vec<(String, key::Value)>,
        /// The key under this tenant (`IdempotencyKey::for_tenant`), as scoped calls have it.
        #[arg(long)]
        tenant: Option<String>,
    },
}

fn parse_key(s: &str) -> Result<IdempotencyKey, String> {
    s.parse()
        .map_err(|_| format!("`{s}` is not a key (a UUID such as 32e00e40-1a53-8058-93c7-e9d1adc8ecaa); `idemkit key` derives one"))
}

fn parse_state(s: &str) -> Result<StateKind, String> {
    s.parse()
        .map_err(|e: idem_runtime::store::records::UnknownState| e.to_string())
}

/// What went wrong: said on stderr, with the exit status it gives.
struct Failed(String);

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Key {
        tool,
        fields,
        tenant,
    } = &cli.command
    {
        println!("{}", key::derive(tool, fields, tenant.as_deref()));
        return ExitCode::SUCCESS;
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
    };
    let read_only = matches!(
        cli.command,
        Command::List { .. } | Command::Show { .. } | Command::Counts { .. }
    );
    let at = target.describe();
    let store = target
        .open(&names, read_only)
        .await
        .map_err(|e| Failed(format!("cannot open the store {at}: {e}")))?;
    let failed = |e: idem_runtime::StoreError| Failed(format!("the store {at} failed: {e}"));
    match &cli.command {
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
            match store.release_key(key, *force).await.map_err(failed)? {
                Released::Released => Ok(format!(
                    "released {key}: the next call with this key runs the operation again (with the same key)\n"
                )),
                Released::LeaseLive { remaining } => Err(Failed(format!(
                    "refused: the lease on {key} is live for another {}, so its holder may still be running the \
                 operation. Wait for the lease to run out, then release it. `--force` releases it now, but only \
                 do that if you know the holder is dead: if it is alive, the next call runs the effect a second \
                 time alongside it, and the holder's outcome is refused when it finishes",
                    show::span(remaining)
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
        Command::Forget { key } => {
            if store.forget(key).await.map_err(failed)? {
                Ok(format!(
                    "forgot {key}: the next call with this key runs the operation again, whether or not it ran before\n"
                ))
            } else {
                Err(Failed(format!(
                    "no live record has the key {key} in {at}: nothing to forget"
                )))
            }
        }
        Command::Prune { limit } => {
            let n = store.prune(*limit).await.map_err(failed)?;
            Ok(format!("pruned {n} expired record(s)\n"))
        }
        Command::Counts { json } => {
            let counts = store.counts().await.map_err(failed)?;
            if *json {
                return Ok(serde_json::to_string_pretty(&show::counts_json(&counts))
                    .expect("JSON prints")
                    + "\n");
            }
            Ok(show::counts_table(&counts))
        }
        Command::Key { .. } => unreachable!("answered without a store"),
    }
}
