//! `idemkit settle`: the records kept as ambiguous, counted for an operator's cron.

use idem_runtime::store::{RecordFilter, StateKind};

use crate::Cli;
use crate::target::{Names, Target};

/// `idemkit settle`: the records kept as ambiguous (of `tool`, under `tenant`), reported as a
/// settler without verify functions would report them; nothing is changed (this binary has not
/// the user's tools: the host's settler task verifies, S28). Returns the exit
/// status of `SettleReport::exit_code`.
pub(crate) async fn settle(
    cli: &Cli,
    target: &Target,
    tool: Option<&str>,
    tenant: Option<&str>,
    dry_run: bool,
) -> u8 {
    use idem_runtime::{SettleReport, Settled};

    let names = Names {
        pg_schema: cli.pg_schema.clone(),
        pg_table: cli.pg_table.clone(),
        redis_prefix: cli.redis_prefix.clone(),
        tombstones: None,
    };
    let at = target.describe();
    let store = match target.open(&names, true).await {
        Ok(store) => store,
        Err(e) => {
            eprintln!("idemkit settle: cannot open the store {at}: {e}");
            return 1;
        }
    };
    let mut filter = RecordFilter::new().state(StateKind::Ambiguous);
    if let Some(tool) = tool {
        filter = filter.tool(tool);
    }
    if let Some(tenant) = tenant {
        filter = filter.tenant(tenant);
    }
    let records = match store.list(&filter).await {
        Ok(records) => records,
        Err(e) => {
            eprintln!("idemkit settle: the store {at} failed: {e}");
            return 1;
        }
    };
    let mut report = SettleReport::default();
    report.dry_run = dry_run;
    // S28: the records whose calls kept their arguments, which the host's settler hands to the
    // tool's own verify.
    let with_arguments = records.iter().filter(|r| r.arguments.is_some()).count();
    for record in records {
        // S34: every one still waits for a decision; the oldest is reported.
        report.left_unknown(&record);
        report
            .records
            .push((record.key, record.tool, Settled::NoVerify));
    }
    if !report.records.is_empty() {
        let mut tools: Vec<&str> = report.records.iter().map(|(_, t, _)| t.as_str()).collect();
        tools.sort_unstable();
        tools.dedup();
        eprintln!(
            "idemkit settle: this command reports only: it cannot call your program's code, so it \
             changes nothing. The host's settler task verifies: `Settler::new(store)` beside the agents \
             (or your program's own `settle` subcommand, `Settler::run_cli`) finds each \
             `#[side_effect(verify = …)]` tool's verify by its name and asks it with the arguments its \
             call kept ({with_arguments} of these {} record(s) keep them; tools: {}); a record without \
             them needs a verify given to the settler by hand, or an operator. {} (`idemkit list \
             --state ambiguous` shows each with its command)",
            report.records.len(),
            tools.join(", "),
            idem_runtime::sentences::how_to_settle("KEY")
        );
    }
    print!("{}", report.summary());
    report.exit_code()
}
