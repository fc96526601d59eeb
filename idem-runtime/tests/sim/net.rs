//! The simulated network between an agent host and the provider, and the provider itself.
//!
//! A request travels on its own task: once sent it may still arrive after the caller gave up, or
//! after the caller's host crashed, exactly like a packet already on the wire.

use std::sync::Arc;
use std::time::Duration;

use idem_runtime::{Classify, Failure};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::{Receipt, World};

/// What a charge can fail with, as the agent sees it.
#[derive(Debug)]
pub enum PayError {
    /// No answer within the client's timeout: the charge may or may not have happened.
    Timeout,
    /// 503 before commit.
    Unavailable,
    /// 429 with Retry-After.
    RateLimited(Duration),
    /// The card was declined.
    Declined,
    /// The key was used for another operation (a bug of the caller).
    KeyConflict,
    /// idemkit refused the call.
    Idem(idem_runtime::Error),
}

impl Classify for PayError {
    fn classify(&self) -> Failure {
        match self {
            PayError::Timeout => Failure::Ambiguous,
            PayError::Unavailable => Failure::Transient,
            PayError::RateLimited(after) => Failure::RetryAfter(*after),
            PayError::Declined | PayError::KeyConflict | PayError::Idem(_) => Failure::Permanent,
        }
    }
}

impl From<idem_runtime::Error> for PayError {
    fn from(e: idem_runtime::Error) -> Self {
        PayError::Idem(e)
    }
}

/// Which way a message goes, for counting what was lost.
#[derive(Debug, Clone, Copy)]
enum Leg {
    Request,
    Response { committed: bool },
}

/// One attempt (body run `attempt`): sends `POST /charges` with `key` for `op` from `host` and
/// waits for the answer at most the client's timeout (longer for an operation whose provider
/// body is slow: the client waits for it).
pub async fn charge(
    world: Arc<World>,
    host: usize,
    key: String,
    op: usize,
    attempt: usize,
) -> Result<Receipt, PayError> {
    let mut timeout = world.cfg.client_timeout;
    if world.cfg.ops[op].slow_body {
        timeout += world.cfg.leases[host] * 3;
    }
    let deadline = Instant::now() + timeout;
    let (tx, rx) = oneshot::channel();
    world.log(host, || {
        format!("send charge op {op} key {key} (attempt {attempt})")
    });
    tokio::spawn(deliver(world.clone(), host, key, op, attempt, tx));
    match tokio::time::timeout_at(deadline, rx).await {
        Ok(Ok(answer)) => answer,
        // Lost on the way (the sender was dropped) or too slow: the client only sees silence.
        Ok(Err(_)) | Err(_) => {
            tokio::time::sleep_until(deadline).await;
            world.saw(host, "client timeout (ambiguous attempt)");
            Err(PayError::Timeout)
        }
    }
}

/// The life of one request and its response.
async fn deliver(
    world: Arc<World>,
    host: usize,
    key: String,
    op: usize,
    attempt: usize,
    tx: oneshot::Sender<Result<Receipt, PayError>>,
) {
    if !transmit(&world, host, Leg::Request).await {
        return;
    }
    let (answer, lose_response) = provider(&world, host, &key, op, attempt).await;
    if lose_response {
        world.fault(host, "response lost after commit");
        return;
    }
    let committed = answer.is_ok() || world.provider_has(&key);
    if !transmit(&world, host, Leg::Response { committed }).await {
        return;
    }
    let _ = tx.send(answer);
}

/// Carries one message: whether it arrives (after its delay).
async fn transmit(world: &World, host: usize, leg: Leg) -> bool {
    if world.partitioned(host) {
        world.fault(host, "message dropped by a partition");
        return false;
    }
    let p_loss = match leg {
        Leg::Request => world.cfg.p_request_loss,
        Leg::Response { .. } => world.cfg.p_response_loss,
    };
    if world.fault_chance(p_loss) {
        world.fault(
            host,
            match leg {
                Leg::Request => "request lost",
                Leg::Response { committed: true } => "response lost after commit",
                Leg::Response { committed: false } => "response lost before commit",
            },
        );
        return false;
    }
    let delay = if world.fault_chance(world.cfg.p_slow_message) {
        world.fault(host, "message delayed 0.5-6 s");
        world.delay(500..=6_000)
    } else {
        world.delay(1..=40)
    };
    tokio::time::sleep(delay).await;
    if world.partitioned(host) {
        world.fault(host, "message dropped by a partition");
        return false;
    }
    true
}

/// The provider: like Stripe, one charge per `Idempotency-Key`, and the same receipt for every
/// repeat of it (or, in a world whose provider does not deduplicate, a charge per request).
/// Returns the answer, and whether its response is to be lost (the scripted sequence).
async fn provider(
    world: &World,
    host: usize,
    key: &str,
    op: usize,
    attempt: usize,
) -> (Result<Receipt, PayError>, bool) {
    world.reached_provider(attempt);
    match world.scripted(op) {
        Some(true) => {
            tokio::time::sleep(world.delay(1..=20)).await;
            return (world.provider_commit(host, key, op, attempt), true);
        }
        Some(false) => {
            world.fault(host, "provider 503 before commit");
            return (Err(PayError::Unavailable), false);
        }
        None => {}
    }
    if world.fault_chance(world.cfg.p_unavailable) {
        world.fault(host, "provider 503 before commit");
        return (Err(PayError::Unavailable), false);
    }
    if world.fault_chance(world.cfg.p_rate_limited) {
        world.fault(host, "provider 429 Retry-After");
        return (Err(PayError::RateLimited(world.delay(100..=1_500))), false);
    }
    let work = if world.cfg.ops[op].slow_body && world.faulty() {
        world.fault(host, "provider body slower than the lease");
        world.cfg.leases[host].mul_f64(world.rng(|r| 1.3 + r.f64() * 1.2))
    } else if world.fault_chance(world.cfg.p_slow_provider) {
        world.fault(host, "provider slow (1-6 s)");
        world.delay(1_000..=6_000)
    } else {
        world.delay(1..=20)
    };
    tokio::time::sleep(work).await;
    (world.provider_commit(host, key, op, attempt), false)
}
