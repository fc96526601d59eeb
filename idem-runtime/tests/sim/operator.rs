//! The operator: repairs records with `idemkit`'s operations ([`Records`]) at random moments,
//! whatever the agents are doing. A repair that removes a record may let an operation take
//! effect again: the checks count such effects as "operator forced", not as failures.

use std::sync::Arc;

use idem_runtime::Records;
use idem_runtime::store::Released;

use super::agent::key_of;
use super::{OperatorKind, World};

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
            OperatorKind::Forget => match store.forget(&key).await {
                Ok(true) => ("operator forgot a record", true),
                Ok(false) => ("operator's forget found no record", false),
                Err(e) => panic!("the memory store failed an operator's forget: {e}"),
            },
        };
        world.fault(usize::MAX, what);
        if removed {
            world.removed_by_operator(action.op, what);
        }
    }
}
