//! An agent host: runs its plan of charges through idemkit, retries an operation until it has
//! its outcome, and is crashed and restarted by its supervisor.

use std::sync::Arc;

use idem_runtime::{Error, Idem, IdempotencyKey, RetryPolicy, Tool};

use super::net::{self, PayError};
use super::store::SimStore;
use super::{Protocol, Receipt, World};

/// How many times an agent calls one operation before it gives up on it (a liveness failure:
/// after the world heals every operation must finish well within this).
const MAX_ROUNDS: u32 = 100;

/// Runs `host`'s plan, restarting it after each scheduled crash, until one incarnation finishes.
pub async fn supervise(world: Arc<World>, host: usize) {
    let mut crashes = world.cfg.crashes[host].clone().into_iter();
    loop {
        let store = Arc::new(SimStore::new(
            world.clone(),
            host,
            world.shared_store.clone(),
        ));
        let mut task = tokio::spawn(run_plan(world.clone(), host, store.clone()));
        let crash_at = loop {
            match crashes.next() {
                Some(at) if at <= world.now() => continue,
                other => break other,
            }
        };
        let Some(at) = crash_at else {
            task.await.expect("the agent panicked");
            return;
        };
        match tokio::time::timeout(at - world.now(), &mut task).await {
            Ok(done) => {
                done.expect("the agent panicked");
                return;
            }
            Err(_) => {
                // The host dies: its futures are dropped wherever they are; messages already
                // on the wire still travel; its leases stay in the store until they expire.
                task.abort();
                let _ = task.await;
                world.fault(host, "host crash mid-plan");
                let keys: Vec<IdempotencyKey> = world.cfg.plans[host]
                    .iter()
                    .map(|&op| key_of(&world, op))
                    .collect();
                if store.holds_a_live_lease(&keys).await {
                    world.fault(host, "host crash while holding a lease");
                }
                tokio::time::sleep(world.delay(0..=3_000)).await;
                world.log(host, || "restarts and replays its plan".to_owned());
            }
        }
    }
}

/// The key the correct protocol derives for `op`.
fn key_of(world: &World, op: usize) -> IdempotencyKey {
    let spec = &world.cfg.ops[op];
    IdempotencyKey::derive(
        "charge",
        &[("customer_id", &spec.customer), ("period", &spec.period)],
    )
}

/// One incarnation of the host: runs the plan from its start (a replay after a crash).
async fn run_plan(world: Arc<World>, host: usize, store: Arc<SimStore>) {
    let idem = Idem::builder()
        .shared_store(store)
        .lease(world.cfg.lease)
        .in_flight_wait(world.cfg.in_flight_wait)
        .retry(RetryPolicy::default().with_max_attempts(world.cfg.max_attempts))
        .build()
        .expect("the world's settings are consistent");
    for &op in &world.cfg.plans[host] {
        let mut round = 0;
        loop {
            round += 1;
            let result = call(&world, &idem, host, op).await;
            let done = matches!(result, Ok(_) | Err(PayError::Declined)) || round >= MAX_ROUNDS;
            match &result {
                Err(PayError::Idem(Error::InFlight { .. })) => {
                    world.saw(host, "caller got InFlight")
                }
                Err(PayError::Idem(Error::Store { .. })) => {
                    world.saw(host, "caller got a store error")
                }
                _ => {}
            }
            world.log(host, || format!("op {op} round {round}: {result:?}"));
            world.record_result(host, op, result.map_err(|e| error_kind(&e)), done);
            if done {
                break;
            }
            tokio::time::sleep(world.delay(200..=3_000)).await;
        }
    }
}

/// What a caller was told, if it is one of the clear answers a caller can act on; anything
/// else (a key reused, a corrupt record, a receipt for another operation) is a failure.
fn error_kind(e: &PayError) -> String {
    use idem_runtime::StoreErrorKind;
    match e {
        PayError::Declined => "declined".to_owned(),
        PayError::Timeout | PayError::Unavailable | PayError::RateLimited(_) => {
            "attempts exhausted".to_owned()
        }
        PayError::Idem(Error::InFlight { .. }) => "in flight".to_owned(),
        // S13: the holder lost its lease (taken over, or its renewals failed): outcome unknown.
        PayError::Idem(Error::LeaseLost { .. }) => "lease lost".to_owned(),
        // S14: an attempt may have taken effect, a later one failed otherwise: kept ambiguous.
        PayError::Idem(Error::Ambiguous { .. }) => "kept ambiguous".to_owned(),
        PayError::Idem(Error::Store { source, .. })
            if source.kind() == StoreErrorKind::Unavailable =>
        {
            "store unavailable".to_owned()
        }
        other => format!("UNCLEAR: {other:?}"),
    }
}

/// One call of the charge tool, the way `protocol` makes it.
async fn call(
    world: &Arc<World>,
    idem: &Idem,
    host: usize,
    op: usize,
) -> Result<Receipt, PayError> {
    let spec = &world.cfg.ops[op];
    let args = serde_json::json!({ "amount_cents": spec.amount_cents });
    let tool = Tool::new("charge").idem(idem);
    match world.cfg.protocol {
        Protocol::Correct | Protocol::NoTakeover => {
            tool.side_effect(
                &[("customer_id", &spec.customer), ("period", &spec.period)],
                &args,
                |key| net::charge(world.clone(), host, key.to_string(), op),
            )
            .await
        }
        Protocol::KeyPerAttempt => {
            tool.side_effect(
                &[("customer_id", &spec.customer), ("period", &spec.period)],
                &args,
                |_key| {
                    // The bug: a key minted inside the retry loop.
                    let fresh = world.rng(|r| r.u64(..));
                    let key = IdempotencyKey::derive("charge", &[("nonce", &fresh)]);
                    net::charge(world.clone(), host, key.to_string(), op)
                },
            )
            .await
        }
        Protocol::KeyPerCall => {
            // The bug: a key minted per call, so a re-run of the operation gets another one.
            let nonce = world.rng(|r| r.u64(..));
            tool.side_effect(
                &[
                    ("customer_id", &spec.customer),
                    ("period", &spec.period),
                    ("nonce", &nonce),
                ],
                &args,
                |key| net::charge(world.clone(), host, key.to_string(), op),
            )
            .await
        }
    }
}
