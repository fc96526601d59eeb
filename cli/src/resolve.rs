//! `idemkit resolve`'s usage: whether an outcome fits its decision, asked of the stores' own
//! check before a store is opened, and the one wording of its refusal for the command line.

use idem_runtime::IdempotencyKey;
use idem_runtime::sentences;
use idem_runtime::store::{Decision, check_resolution};

use crate::Command;

/// Refuses what no store needs to be asked about: a resolve whose outcome does not fit its
/// decision, or is not JSON. Whether it fits is the stores' own check
/// ([`check_resolution`](idem_runtime::store::check_resolution)), asked here before a store is
/// opened; [`misfit`] words its refusal for the command line.
pub(crate) fn check_usage(command: &Command) -> Result<(), String> {
    let Command::Resolve {
        key,
        decision,
        outcome,
        ..
    } = command
    else {
        return Ok(());
    };
    if check_resolution(*decision, outcome.as_deref().map(str::as_bytes)).is_err() {
        return Err(misfit(key, *decision));
    }
    let Some(json) = outcome else {
        return Ok(());
    };
    serde_json::from_str::<serde_json::Value>(json)
        .map(drop)
        .map_err(|e| {
            format!(
                "--outcome is not JSON ({e}); give the JSON a call of the tool returns, quoted for the \
                 shell, e.g. --outcome '{{\"charge_id\": \"ch_1\"}}'. Nothing was written"
            )
        })
}

/// Why resolving `key` as `decision` was refused by the stores' check (`check_resolution`):
/// applied needs an outcome, not applied takes none.
fn misfit(key: &IdempotencyKey, decision: Decision) -> String {
    match decision {
        Decision::Applied => format!(
            "resolving {key} as applied needs its outcome, the JSON a call of the tool returns, which later \
             calls replay: `idemkit resolve {key} applied --outcome '{{\"…\": …}}'`. If the effect did not \
             happen, `{}`",
            sentences::resolve_not_applied(key)
        ),
        _ => format!(
            "a record resolved as not applied takes no --outcome (the next call runs the operation); \
             leave it out, or resolve {key} as applied"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn resolve(decision: Decision, outcome: Option<&str>) -> Command {
        Command::Resolve {
            key: IdempotencyKey::derive("charge", &[("order", &1u64)]),
            decision,
            outcome: outcome.map(str::to_owned),
            note: None,
            unchecked: false,
            ttl: Duration::from_secs(60),
        }
    }

    /// Issue 44: the command refuses a resolve whose outcome does not fit its decision exactly
    /// where the stores' own check does (one decides), and says what to run instead.
    #[test]
    fn issue44_resolve_usage_is_refused_where_the_stores_check_refuses_it() {
        for decision in [Decision::Applied, Decision::NotApplied] {
            for outcome in [None, Some("{\"charge_id\": \"ch_1\"}")] {
                let stores = check_resolution(decision, outcome.map(str::as_bytes));
                let usage = check_usage(&resolve(decision, outcome));
                assert_eq!(usage.is_err(), stores.is_err(), "{decision:?} {outcome:?}");
            }
        }
        let applied = check_usage(&resolve(Decision::Applied, None)).unwrap_err();
        assert!(applied.contains("needs its outcome") && applied.contains("not-applied"));
        let not_applied = check_usage(&resolve(Decision::NotApplied, Some("{}"))).unwrap_err();
        assert!(not_applied.contains("takes no --outcome"), "{not_applied}");
        let not_json = check_usage(&resolve(Decision::Applied, Some("{charge"))).unwrap_err();
        assert!(not_json.contains("not JSON"), "{not_json}");
    }
}
