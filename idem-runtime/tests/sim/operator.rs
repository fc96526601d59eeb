//! The operator: repairs records with `idemkit`'s operations ([`Records`]) at random moments,
//! whatever the agents are doing. A repair that removes a record (a release, a forget, a
//! `not-applied` resolve) may let an operation take effect again: the checks count such effects
//! as "operator forced", not as failures. A resolve is decided truthfully, from the provider's
//! own record of the key (what an operator on call looks up), as of the moment it is made.

use std::sync::Arc;
use std::time::Duration;

use idem_runtime::Records;
use idem_runtime::store::{Decision, Forgot, Record, RecordState, Released, Resolved};

use super::agent::key_of;
use super::{OperatorKind, Protocol, World, now_or_never};

/// What the world notes when an un-forced forget removed a record under a live lease: never,
/// with stores that keep S24 (they answer `LeaseLive`).
pub const UNFORCED_FORGET_OF_LIVE_RECORD: &str =
    "operator's un-forced forget removed a live holder's record";

/// How long a resolved record is kept (what `idemkit resolve` would use: a day).
const RESOLVED_TTL: Duration = Duration::from_secs(24 * 3600);

/// Runs the world's operator repairs, each at its moment.
pub async fn run(world: Arc<World>) {
    let mut actions = world.cfg.operator.clone();
    actions.sort_by_key(|a| a.at);
    for action in actions {
        if let Some(wait) = action.at.checked_sub(world.now()) {
            tokio::time::sleep(wait).await;
        }
        let key = key_of(&world, action.op);
        let store = &*world.shared_store;
        let (what, removed) = match action.kind {
            OperatorKind::Release { force } => match store.release_key(&key, force).await {
                Ok(Released::Released) if force => {
                    ("operator released a running record (forced)", true)
                }
                Ok(Released::Released) => ("operator released a dead holder's record", true),
                Ok(Released::LeaseLive { .. }) => (
                    "operator's release refused: the holder's lease is live",
                    false,
                ),
                Ok(_) => ("operator's release found no running record", false),
                Err(e) => panic!("the memory store failed an operator's release: {e}"),
            },
            OperatorKind::Forget { force } => {
                // Whether a holder's lease is live now (the memory store answers at once, so
                // nothing runs between this look and the forget).
                let live = matches!(
                    now_or_never(store.get(&key)),
                    Some(Ok(Some(Record {
                        state: RecordState::Running { lease_remaining, .. },
                        ..
                    }))) if !lease_remaining.is_zero()
                );
                // `unforced-forget-of-live-record`: the old stores' forget, which removed the
                // record whatever its lease (issue 30 #6).
                let sent_force =
                    force || world.cfg.protocol == Protocol::UnforcedForgetOfLiveRecord;
                match store.forget(&key, sent_force).await {
                    Ok(Forgot::Forgotten) if force => ("operator forgot a record (forced)", true),
                    // The operator did not force it: what follows is no operator's doing but
                    // the store's, so it excuses nothing (S24: refused under a live lease).
                    Ok(Forgot::Forgotten) if live => (UNFORCED_FORGET_OF_LIVE_RECORD, false),
                    Ok(Forgot::Forgotten) => ("operator forgot a record", true),
                    Ok(Forgot::LeaseLive { .. }) => (
                        "operator's forget refused: the holder's lease is live",
                        false,
                    ),
                    Ok(_) => ("operator's forget found no record", false),
                    Err(e) => panic!("the memory store failed an operator's forget: {e}"),
                }
            }
            OperatorKind::Resolve => {
                let receipt = world.provider_receipt(key.as_ref());
                if world.cfg.ops[action.op].not_replayable() && receipt.is_some() {
                    // Its outcome would not replay: the operator leaves it to the tool's owner.
                    world.fault(usize::MAX, "operator left a record it cannot resolve");
                    continue;
                }
                let outcome = receipt
                    .as_ref()
                    .map(|r| serde_json::to_vec(r).expect("a receipt serializes"));
                let decision = match outcome {
                    Some(_) => Decision::Applied,
                    None => Decision::NotApplied,
                };
                let note = Some("looked up at the provider (simulation)");
                match store
                    .resolve(&key, decision, outcome.as_deref(), note, RESOLVED_TTL)
                    .await
                {
                    Ok(Resolved::Resolved) if decision == Decision::Applied => (
                        "operator resolved a record: applied (with the provider's receipt)",
                        false,
                    ),
                    Ok(Resolved::Resolved) => ("operator resolved a record: not applied", true),
                    Ok(Resolved::LeaseLive { .. }) => (
                        "operator's resolve refused: the holder's lease is live",
                        false,
                    ),
                    Ok(_) => (
                        "operator's resolve found nothing to settle (none, or completed)",
                        false,
                    ),
                    Err(e) => panic!("the memory store failed an operator's resolve: {e}"),
                }
            }
        };
        world.fault(usize::MAX, what);
        if removed {
            world.removed_by_operator(action.op, what);
        }
    }
}
