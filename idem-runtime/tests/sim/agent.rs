//! An agent host: runs its plan of charges through idemkit, retries an operation until it has
//! its outcome, and is crashed and restarted by its supervisor.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use idem_runtime::{
    CallOutcome, Error, Failure, Idem, IdempotencyKey, RetryPolicy, Tool, Verified,
};
use tokio::time::Sleep;

use super::net::{self, PayError};
use super::store::SimStore;
use super::{AttemptEnd, CALL, Mode, Protocol, Receipt, World};

/// A task of `host`: not polled while the host is stalled (SIGSTOP, a paused VM). Its timers
/// still run out meanwhile; it is polled again when the stall ends, and finds them all due.
pub struct Stallable<F> {
    world: Arc<World>,
    host: usize,
    inner: Pin<Box<F>>,
    resume: Option<Pin<Box<Sleep>>>,
}

impl<F> Stallable<F> {
    pub fn new(world: Arc<World>, host: usize, inner: F) -> Self {
        Stallable {
            world,
            host,
            inner: Box::pin(inner),
            resume: None,
        }
    }
}

impl<F: Future> Future for Stallable<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        while let Some(until) = this.world.stall_end(this.host) {
            let deadline = this.world.instant(until);
            let resume = this
                .resume
                .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
            if resume.deadline() != deadline {
                resume.as_mut().reset(deadline);
            }
            if resume.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
        this.resume = None;
        this.inner.as_mut().poll(cx)
    }
}

/// A body run's future: notes each poll (what a stalled holder's body did, and when).
struct Polled<'w, F> {
    world: &'w World,
    id: usize,
    inner: Pin<Box<F>>,
}

impl<F: Future> Future for Polled<'_, F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.world.attempt_polled(self.id);
        self.inner.as_mut().poll(cx)
    }
}

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
        let mut task = tokio::spawn(Stallable::new(
            world.clone(),
            host,
            run_plan(world.clone(), host, store.clone()),
        ));
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
                // on the wire still travel; its leases stay in the store until they expire
                // (nothing it would still write reaches the store).
                store.kill();
                task.abort();
                let _ = task.await;
                world.fault(host, "host crash mid-plan");
                world.host_crashed(host);
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
pub fn key_of(world: &World, op: usize) -> IdempotencyKey {
    let spec = &world.cfg.ops[op];
    IdempotencyKey::derive(
        "charge",
        &[("customer_id", &spec.customer), ("period", &spec.period)],
    )
}

/// How a call came back to its agent.
#[derive(Debug)]
enum Returned {
    Result(Result<Receipt, PayError>),
    /// The agent dropped the call's future (and will call again later).
    Cancelled,
    /// The call's body panicked (its task's JoinError); the agent calls again later.
    Panicked,
}

/// Aborts the call's task if the agent is dropped (its host crashed) while awaiting it.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One incarnation of the host: runs the plan from its start (a replay after a crash).
async fn run_plan(world: Arc<World>, host: usize, store: Arc<SimStore>) {
    let idem = Idem::builder()
        .shared_store(store)
        .lease(world.cfg.leases[host])
        .in_flight_wait(world.cfg.in_flight_wait)
        .retry(RetryPolicy::default().with_max_attempts(world.cfg.max_attempts))
        .build()
        .expect("the world's settings are consistent");
    for &op in &world.cfg.plans[host] {
        let mut round = 0;
        loop {
            round += 1;
            let (call_id, returned) = call_in_task(&world, &idem, host, op).await;
            // Kept ambiguous, the provider having declined the last attempt: an earlier one may
            // have taken effect, and calling again can only be declined again.
            let declined_after_unknown = matches!(
                returned,
                Returned::Result(Err(PayError::Idem(Error::Ambiguous {
                    last: Failure::Permanent,
                    ..
                })))
            );
            let answer = match returned {
                Returned::Result(result) => {
                    if let Err(e) = &result {
                        saw_error(&world, host, e);
                    }
                    if world.cfg.protocol == Protocol::AmbiguityNotSticky {
                        non_sticky(&world, call_id, result)
                    } else {
                        result.map_err(|e| error_kind(&e))
                    }
                }
                Returned::Cancelled => Err("cancelled by its caller".to_owned()),
                Returned::Panicked => {
                    world.saw(host, "caller saw its body panic");
                    Err("its body panicked".to_owned())
                }
            };
            // Without a verify function, an unknown outcome is final until an operator settles
            // it: the honest answer is "kept ambiguous", and calling again changes nothing.
            let settled_by_operator_only = world.cfg.mode == Mode::NoDedup { verify: false }
                && world.cfg.protocol != Protocol::BlindResend;
            let done = answer.is_ok()
                || matches!(&answer, Err(e) if e == "declined" || e == "unreplayable")
                || matches!(&answer, Err(e) if e == "kept ambiguous" && settled_by_operator_only)
                || (declined_after_unknown && matches!(&answer, Err(e) if e == "kept ambiguous"))
                || round >= MAX_ROUNDS;
            world.log(host, || {
                format!("op {op} round {round} (call {call_id}): {answer:?}")
            });
            world.record_result(host, op, call_id, answer, done);
            if done {
                break;
            }
            tokio::time::sleep(world.delay(200..=3_000)).await;
        }
    }
}

fn saw_error(world: &World, host: usize, e: &PayError) {
    let PayError::Idem(e) = e else { return };
    match e {
        Error::InFlight { .. } => world.saw(host, "caller got InFlight"),
        Error::Store { .. } => world.saw(host, "caller got a store error"),
        Error::LeaseLost { .. } => world.saw(host, "caller got LeaseLost"),
        Error::Ambiguous { .. } => world.saw(
            host,
            "caller got Ambiguous (an earlier attempt was ambiguous)",
        ),
        Error::Unreplayable { .. } => world.saw(host, "caller got Unreplayable"),
        _ => {}
    }
}

/// `ambiguity-not-sticky`: what an executor that forgets ambiguity returns: the last attempt's
/// own error instead of `Error::Ambiguous`.
fn non_sticky(
    world: &World,
    call: usize,
    result: Result<Receipt, PayError>,
) -> Result<Receipt, String> {
    match result {
        Err(PayError::Idem(e @ Error::Ambiguous { .. })) => {
            let kind = match world.last_error(call) {
                Some("503") | Some("429") => "attempts exhausted".to_owned(),
                Some("timeout") => "ambiguous (last attempt timed out)".to_owned(),
                _ => error_kind(&PayError::Idem(e)),
            };
            Err(kind)
        }
        other => other.map_err(|e| error_kind(&e)),
    }
}

/// What a caller was told, if it is one of the clear answers a caller can act on; anything
/// else (a key reused, a corrupt record, a receipt for another operation) is a failure.
fn error_kind(e: &PayError) -> String {
    use idem_runtime::StoreErrorKind;
    match e {
        PayError::Declined => "declined".to_owned(),
        // The last attempt's own error: may have happened.
        PayError::Timeout => "ambiguous (last attempt timed out)".to_owned(),
        // Transient: says the call had no effect.
        PayError::Unavailable | PayError::RateLimited(_) => "attempts exhausted".to_owned(),
        PayError::Idem(Error::InFlight { .. }) => "in flight".to_owned(),
        // S13: the holder lost its lease (taken over, or its renewals failed): outcome unknown.
        PayError::Idem(Error::LeaseLost { .. }) => "lease lost".to_owned(),
        // S14: an attempt may have taken effect, a later one failed otherwise: kept ambiguous.
        PayError::Idem(Error::Ambiguous { .. }) => "kept ambiguous".to_owned(),
        // S16: it ran and took effect; its outcome cannot be replayed, and it is not re-run.
        PayError::Idem(Error::Unreplayable { .. }) => "unreplayable".to_owned(),
        PayError::Idem(Error::Store { source, .. })
            if source.kind() == StoreErrorKind::Unavailable =>
        {
            "store unavailable".to_owned()
        }
        other => format!("UNCLEAR: {other:?}"),
    }
}

/// Installs (once) a panic hook that keeps the simulated bodies' panics quiet.
pub fn quiet_simulated_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let simulated = info
                .payload()
                .downcast_ref::<String>()
                .is_some_and(|m| m.starts_with("simulated panic"));
            if !simulated {
                previous(info);
            }
        }));
    });
}

/// One call, in a task of its own (a panicking body fails its task, not the agent), which the
/// agent may drop at a random point.
async fn call_in_task(
    world: &Arc<World>,
    idem: &Idem,
    host: usize,
    op: usize,
) -> (usize, Returned) {
    let id = world.new_call(host, op);
    let cancel_after = world
        .fault_chance(world.cfg.p_cancel)
        .then(|| world.delay(0..=3_000));
    let task = {
        let world = world.clone();
        let idem = idem.clone();
        let stalls = world.clone();
        tokio::spawn(Stallable::new(
            stalls,
            host,
            CALL.scope(id, async move {
                let mut fut = Box::pin(observed(
                    &world,
                    host,
                    id,
                    call(&world, &idem, host, op, id),
                ));
                let Some(after) = cancel_after else {
                    return Some(fut.await);
                };
                tokio::select! {
                    biased;
                    result = &mut fut => Some(result),
                    _ = tokio::time::sleep(after) => {
                        world.call_dropped(id);
                        world.fault(host, "caller dropped its call (cancelled)");
                        let at = world.where_dropped(id);
                        if at == "call dropped holding the key, before its first attempt" {
                            // Its claim may have taken over a record whose outcome is unknown;
                            // dropped before the claim's answer, the runtime cannot tell.
                            world.uncertain(op);
                        }
                        world.saw(host, at);
                        drop(fut);
                        world.probe_after_drop(id);
                        None
                    }
                }
            }),
        ))
    };
    let _abort = AbortOnDrop(task.abort_handle());
    let returned = match task.await {
        Ok(Some(result)) => Returned::Result(result),
        Ok(None) => Returned::Cancelled,
        Err(e) if e.is_panic() => Returned::Panicked,
        // Aborted: only by a crash of this host, whose agent is being dropped too.
        Err(_) => Returned::Cancelled,
    };
    (id, returned)
}

/// Runs a call under `idem_runtime::observe`, noting what the world needs of its `CallInfo`.
async fn observed(
    world: &World,
    host: usize,
    call: usize,
    fut: impl Future<Output = Result<Receipt, PayError>>,
) -> Result<Receipt, PayError> {
    let (result, info) = idem_runtime::observe(fut).await;
    if let Some(info) = info {
        if info.verified {
            world.saw(host, "caller got the outcome verify found (verified)");
        }
        if info.outcome == CallOutcome::Unrecorded {
            world.unrecorded(call);
        }
    }
    if matches!(result, Err(PayError::Idem(Error::LeaseLost { .. }))) {
        world.uncertain(world.op_of_call(call));
    }
    result
}

/// The tool's verify function (S19): asks the provider, by the key, whether the charge was
/// made. The lookup travels like a request: a partition makes it fail (counted as `Unknown`).
async fn verify(
    world: Arc<World>,
    host: usize,
    call: usize,
    key: IdempotencyKey,
) -> Result<Verified<Receipt>, PayError> {
    if world.cfg.protocol == Protocol::VerifyIgnoredAtTakeover && world.attempts_of(call) == 0 {
        // The broken executor: at the claim, nothing is asked; it goes on as if not applied.
        world.log(host, || {
            "(broken) verify not asked at the takeover".to_owned()
        });
        return Ok(Verified::NotApplied);
    }
    tokio::time::sleep(world.delay(1..=40)).await;
    if world.partitioned(host) {
        world.fault(host, "verify lookup cut off by a partition (error)");
        return Err(PayError::Timeout);
    }
    let key = key.to_string();
    let answer = world.verify_lookup(host, call, &key);
    tokio::time::sleep(world.delay(1..=40)).await;
    Ok(answer)
}

/// Marks the end of a body run when it returns, or when it is dropped or unwinds.
struct BodyRun<'w> {
    world: &'w World,
    id: usize,
    how: AttemptEnd,
}

impl Drop for BodyRun<'_> {
    fn drop(&mut self) {
        self.world.attempt_ends(self.id, self.how);
    }
}

/// One attempt of `call`: the body idemkit runs, seen by the world.
async fn body(
    world: Arc<World>,
    host: usize,
    op: usize,
    call: usize,
    key: IdempotencyKey,
    sent_key: String,
) -> Result<Receipt, PayError> {
    let id = world.attempt_begins(call, key.to_string());
    let run = Polled {
        world: &world,
        id,
        inner: Box::pin(body_run(world.clone(), host, op, call, id, sent_key)),
    };
    run.await
}

async fn body_run(
    world: Arc<World>,
    host: usize,
    op: usize,
    call: usize,
    id: usize,
    sent_key: String,
) -> Result<Receipt, PayError> {
    let mut run = BodyRun {
        world: &world,
        id,
        how: AttemptEnd::Dropped,
    };
    // The body prepares its request before sending it (an await: where a stall can hit it).
    if world.fault_chance(world.cfg.p_stall) {
        world.stall(host, "host stalled while its body waited before sending");
    }
    tokio::time::sleep(world.delay(1..=30)).await;
    let panic_at = world
        .fault_chance(world.cfg.p_panic)
        .then(|| world.rng(|r| r.bool()));
    if panic_at == Some(false) {
        world.fault(host, "body panicked before sending");
        world.call_dropped(call);
        world.probe_after_drop(call);
        panic!("simulated panic before sending (call {call})");
    }
    let result = net::charge(world.clone(), host, sent_key, op, run.id).await;
    if panic_at == Some(true) {
        world.fault(host, "body panicked with the answer in hand");
        world.call_dropped(call);
        world.probe_after_drop(call);
        panic!("simulated panic with the answer in hand (call {call})");
    }
    if matches!(
        result,
        Err(PayError::Unavailable | PayError::RateLimited(_))
    ) && world.fault_chance(world.cfg.p_stall * 4.0)
    {
        // The executor waits before the next attempt: the host stalls in that wait.
        world.stall(host, "host stalled while waiting between attempts");
    }
    run.how = match &result {
        Ok(_) => AttemptEnd::Ok,
        Err(PayError::Timeout) => AttemptEnd::Failed("timeout"),
        Err(PayError::Unavailable) => AttemptEnd::Failed("503"),
        Err(PayError::RateLimited(_)) => AttemptEnd::Failed("429"),
        Err(PayError::Declined) => AttemptEnd::Failed("declined"),
        Err(_) => AttemptEnd::Failed("other"),
    };
    drop(run);
    result
}

/// One call of the charge tool, the way `protocol` makes it.
async fn call(
    world: &Arc<World>,
    idem: &Idem,
    host: usize,
    op: usize,
    call: usize,
) -> Result<Receipt, PayError> {
    let spec = &world.cfg.ops[op];
    let args = serde_json::json!({ "amount_cents": spec.amount_cents });
    let tool = Tool::new("charge").idem(idem);
    let tool = match world.cfg.mode {
        Mode::Dedup => tool,
        // S20: the provider cannot deduplicate; the broken protocol re-sends all the same.
        Mode::NoDedup { .. } => tool.resend(world.cfg.protocol == Protocol::BlindResend),
    };
    if world.cfg.verifies() && world.cfg.protocol != Protocol::BlindResend {
        return tool
            .verify(|key| verify(world.clone(), host, call, key))
            .side_effect(
                &[("customer_id", &spec.customer), ("period", &spec.period)],
                &args,
                |key| body(world.clone(), host, op, call, key, key.to_string()),
            )
            .await;
    }
    match world.cfg.protocol {
        Protocol::KeyPerAttempt => {
            tool.side_effect(
                &[("customer_id", &spec.customer), ("period", &spec.period)],
                &args,
                |key| {
                    // The bug: a key minted inside the retry loop.
                    let fresh = world.rng(|r| r.u64(..));
                    let sent = IdempotencyKey::derive("charge", &[("nonce", &fresh)]);
                    body(world.clone(), host, op, call, key, sent.to_string())
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
                |key| body(world.clone(), host, op, call, key, key.to_string()),
            )
            .await
        }
        _ => {
            tool.side_effect(
                &[("customer_id", &spec.customer), ("period", &spec.period)],
                &args,
                |key| body(world.clone(), host, op, call, key, key.to_string()),
            )
            .await
        }
    }
}
