//! `idemkit`: see and mend idemkit's records in any store, and derive a tool's key offline.
//!
//! Exit status: 0 done, 1 the operation failed or was refused (the message says why and what
//! to do), 2 a usage error. Messages go to stderr; what was asked for to stdout.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use idem_runtime::OperationId;
use idem_runtime::sentences::{self, EFFECT_UNKNOWN};
use idem_runtime::store::{
    Decision, Forgot, RecordFilter, RecordState, Released, Resolved, StateKind,
};

mod args;
mod key;
mod proxy;
mod resolve;
mod settle;
mod shape;
mod show;
mod target;

use args::{Cli, Command, for_tenant};
use target::{Names, Target};

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
