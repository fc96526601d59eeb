//! The executor protocol: claim → attempts → complete or release. Also the read-only loop.
//!
//! This is what `#[side_effect]` and `#[read_only]` expand to, and what a program without the
//! macros calls through [`Tool`] or [`run_side_effect`].

use std::future::Future;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::time::Instant;
use tracing::Instrument;
use tracing::field::Empty;

use crate::error::{Error, StoreError};
use crate::fingerprint::Fingerprint;
use crate::idem::{Idem, Settings};
use crate::key::{IdempotencyKey, KeyField};
use crate::observe::{CallInfo, CallOutcome, report};
use crate::retry::{Classify, Failure, RetryPolicy, Schedule};
use crate::store::{Claim, ClaimRequest, Existing, ExistingState, LeaseToken, Written};

/// One tool's name and settings: the entry point of the executor.
///
/// Every setting left unset comes from the runtime in force ([`Idem::current`]), or from the one
/// given with [`Tool::idem`].
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use idem_runtime::{Classify, Failure, Idem, MemoryStore, Tool};
///
/// #[derive(Debug)]
/// enum PayError { Declined, Idem(idem_runtime::Error) }
/// impl Classify for PayError {
///     fn classify(&self) -> Failure { Failure::Permanent }
/// }
/// impl From<idem_runtime::Error> for PayError {
///     fn from(e: idem_runtime::Error) -> Self { PayError::Idem(e) }
/// }
///
/// let idem = Idem::new(MemoryStore::new());
/// let (customer_id, purpose, period, amount_cents) = ("cus_1", "subscription", "2026-11", 4200u64);
/// let receipt: Result<String, PayError> = Tool::new("charge")
///     .idem(&idem)
///     .max_attempts(3)
///     .side_effect(
///         &[("customer_id", &customer_id), ("purpose", &purpose), ("period", &period)],
///         &serde_json::json!({ "amount_cents": amount_cents }),
///         |key| async move {
///             // provider.charge(key.as_str(), customer_id, amount_cents).await
///             Ok(format!("charged {amount_cents} with key {key}"))
///         },
///     )
///     .await;
/// assert_eq!(receipt.unwrap(), "charged 4200 with key 32e00e40-1a53-8058-93c7-e9d1adc8ecaa");
/// # });
/// ```
#[must_use]
#[derive(Debug, Clone, Copy)]
pub struct Tool<'a> {
    name: &'a str,
    idem: Option<&'a Idem>,
    retry: Option<RetryPolicy>,
    max_attempts: Option<u32>,
    lease: Option<Duration>,
    ttl: Option<Duration>,
    wait: Option<Duration>,
}

impl<'a> Tool<'a> {
    /// The tool called `name`. The name is part of every key it derives.
    pub const fn new(name: &'a str) -> Self {
        Tool {
            name,
            idem: None,
            retry: None,
            max_attempts: None,
            lease: None,
            ttl: None,
            wait: None,
        }
    }

    /// The tool's name.
    pub const fn name(&self) -> &'a str {
        self.name
    }

    /// Uses this runtime instead of the one in force.
    pub const fn idem(mut self, idem: &'a Idem) -> Self {
        self.idem = Some(idem);
        self
    }

    /// Replaces the runtime's retry policy for this tool.
    pub const fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = Some(policy);
        self
    }

    /// Attempts in all, the first included.
    pub const fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = Some(n);
        self
    }

    /// How long a claim holds before another call may take over.
    pub const fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// How long this tool's records are kept.
    pub const fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// How long a call waits for another call of the same key before [`Error::InFlight`].
    pub const fn in_flight_wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    fn policy(&self, base: RetryPolicy) -> RetryPolicy {
        let policy = self.retry.unwrap_or(base);
        match self.max_attempts {
            Some(n) => policy.with_max_attempts(n),
            None => policy,
        }
    }

    fn runtime(&self) -> Result<Idem, Error> {
        match self.idem {
            Some(idem) => Ok(idem.clone()),
            None => Idem::current().map_err(|reason| Error::NotConfigured {
                tool: self.name.to_owned(),
                reason,
            }),
        }
    }

    /// Runs a side effect: derives the key from `key_fields` (in the order given), fingerprints
    /// `args` (the arguments that are not key fields), and runs the protocol with
    /// [`Tool::run_keyed`]. The key is derived here, once, before any attempt.
    pub fn side_effect<T, E, A, F, Fut>(
        self,
        key_fields: &[KeyField<'_>],
        args: &A,
        attempt: F,
    ) -> impl Future<Output = Result<T, E>> + use<'a, T, E, A, F, Fut>
    where
        A: Serialize + ?Sized,
        T: Serialize + DeserializeOwned,
        E: Classify + From<Error>,
        F: FnMut(IdempotencyKey) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let key = IdempotencyKey::derive(self.name, key_fields);
        let fingerprint = Fingerprint::of(args);
        async move {
            let fingerprint = match fingerprint {
                Ok(fp) => fp,
                Err(source) => {
                    return Err(Error::Arguments {
                        tool: self.name.to_owned(),
                        source,
                    }
                    .into());
                }
            };
            self.run_keyed(key, fingerprint, attempt).await
        }
    }

    /// Runs a side effect whose key and fingerprint are already made (what the macros expand
    /// to): claims the key, runs `attempt` with retries by [`Classify`], and completes or
    /// releases the record. See the crate docs for the behaviours S1–S11.
    pub async fn run_keyed<T, E, F, Fut>(
        self,
        key: IdempotencyKey,
        fingerprint: Fingerprint,
        attempt: F,
    ) -> Result<T, E>
    where
        T: Serialize + DeserializeOwned,
        E: Classify + From<Error>,
        F: FnMut(IdempotencyKey) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let span = tracing::info_span!(
            "idemkit.side_effect",
            tool = self.name,
            key = %key,
            fingerprint = %fingerprint,
            attempts = Empty,
            replayed = Empty,
            outcome = Empty,
        );
        self.protocol(key, fingerprint, attempt, span.clone())
            .instrument(span)
            .await
    }

    async fn protocol<T, E, F, Fut>(
        self,
        key: IdempotencyKey,
        fingerprint: Fingerprint,
        mut attempt: F,
        span: tracing::Span,
    ) -> Result<T, E>
    where
        T: Serialize + DeserializeOwned,
        E: Classify + From<Error>,
        F: FnMut(IdempotencyKey) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let call = CallRecord {
            tool: self.name,
            key,
            span,
        };
        let idem = match self.runtime() {
            Ok(idem) => idem,
            Err(e) => return Err(call.refused(e).into()),
        };
        let s = idem.settings();
        let token = LeaseToken::new();
        let lease = self.lease.unwrap_or(s.lease);
        let ttl = self.ttl.unwrap_or(s.ttl);
        let req = ClaimRequest {
            key,
            tool: self.name,
            fingerprint,
            token,
            lease,
            ttl,
        };

        match claim(s, &req, self.wait.unwrap_or(s.wait)).await {
            Ok(Begin::Run) => {}
            Ok(Begin::Replay(outcome)) => {
                return match serde_json::from_slice::<T>(&outcome) {
                    Ok(value) => {
                        call.finish(0, CallOutcome::Replayed);
                        Ok(value)
                    }
                    Err(e) => Err(call.refused(call.store_error(StoreError::corrupt(format!(
                        "the stored outcome no longer deserializes as `{}` ({e}); did the tool's return type change? \
                         Delete the record, or give the changed tool a new `name`",
                        std::any::type_name::<T>()
                    ))))
                    .into()),
                };
            }
            Err(e) => return Err(call.refused(e).into()),
        }

        let schedule = self.policy(s.retry).schedule();
        let (result, attempts) = retry(
            schedule,
            || attempt(key),
            |attempt, failure, delay| {
                tracing::warn!(
                    attempt,
                    ?failure,
                    ?delay,
                    "attempt failed; retrying with the same key"
                );
            },
        )
        .await;

        match result {
            Ok(value) => {
                let recorded = match serde_json::to_vec(&value) {
                    Ok(bytes) => {
                        write(
                            s,
                            &call,
                            "complete",
                            s.store.complete(&key, token, &bytes, ttl),
                        )
                        .await
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "the outcome does not serialize; keeping the record as ambiguous");
                        let note = format!("the outcome did not serialize: {e}");
                        let _ = write(
                            s,
                            &call,
                            "mark_ambiguous",
                            s.store.mark_ambiguous(&key, token, &note, ttl),
                        )
                        .await;
                        false
                    }
                };
                call.finish(
                    attempts,
                    if recorded {
                        CallOutcome::Completed
                    } else {
                        CallOutcome::Unrecorded
                    },
                );
                Ok(value)
            }
            Err((err, failure)) => {
                if failure == Failure::Ambiguous {
                    let note =
                        format!("{attempts} attempt(s); the last failed and may have taken effect");
                    let _ = write(
                        s,
                        &call,
                        "mark_ambiguous",
                        s.store.mark_ambiguous(&key, token, &note, ttl),
                    )
                    .await;
                } else {
                    let _ = write(s, &call, "release", s.store.release(&key, token)).await;
                }
                call.finish(attempts, CallOutcome::Failed(failure));
                Err(err)
            }
        }
    }

    /// Runs a read-only tool: retries by [`Classify`], no key, no store. Works without any
    /// runtime installed (the default retry policy then applies).
    pub async fn read_only<T, E, F, Fut>(self, attempt: F) -> Result<T, E>
    where
        E: Classify,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let span = tracing::info_span!(
            "idemkit.read_only",
            tool = self.name,
            attempts = Empty,
            outcome = Empty
        );
        // A read needs no store: never open the default one just for its retry policy.
        let base = self
            .idem
            .cloned()
            .or_else(Idem::configured)
            .map_or_else(RetryPolicy::default, |idem| idem.retry_policy());
        let schedule = self.policy(base).schedule();
        let call = CallRecord {
            tool: self.name,
            key: IdempotencyKey::from_uuid(uuid::Uuid::nil()),
            span: span.clone(),
        };
        async move {
            let (result, attempts) = retry(schedule, attempt, |attempt, failure, delay| {
                tracing::debug!(attempt, ?failure, ?delay, "read failed; retrying");
            })
            .await;
            match result {
                Ok(value) => {
                    call.finish_read(attempts, CallOutcome::Completed);
                    Ok(value)
                }
                Err((err, failure)) => {
                    call.finish_read(attempts, CallOutcome::Failed(failure));
                    Err(err)
                }
            }
        }
        .instrument(span)
        .await
    }
}

/// Runs `attempt` until it succeeds or `schedule` says to stop, calling `on_retry(attempt,
/// failure, delay)` before each wait; returns the last result, a failure with what it was
/// classified as, and how many attempts ran. Shared by side effects and reads.
async fn retry<T, E, Fut>(
    mut schedule: Schedule,
    mut attempt: impl FnMut() -> Fut,
    on_retry: impl Fn(u32, Failure, Duration),
) -> (Result<T, (E, Failure)>, u32)
where
    E: Classify,
    Fut: Future<Output = Result<T, E>>,
{
    let started = Instant::now();
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let err = match attempt().await {
            Ok(value) => return (Ok(value), attempts),
            Err(err) => err,
        };
        let failure = err.classify();
        match schedule.next_delay(failure, started.elapsed()) {
            Some(delay) => {
                on_retry(attempts, failure, delay);
                tokio::time::sleep(delay).await;
            }
            None => return (Err((err, failure)), attempts),
        }
    }
}

/// The hand-written path: runs side effect `tool` with the key derived from `key_fields` and the
/// fingerprint of `args`, calling `attempt` with the key on every attempt, under the runtime in
/// force. Equivalent to `Tool::new(tool).side_effect(key_fields, args, attempt)`; use [`Tool`] to
/// set retries, lease or runtime.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use idem_runtime::{run_side_effect, Classify, Failure, Idem, MemoryStore};
///
/// #[derive(Debug)]
/// struct SendError(String);
/// impl Classify for SendError { fn classify(&self) -> Failure { Failure::Transient } }
/// impl From<idem_runtime::Error> for SendError {
///     fn from(e: idem_runtime::Error) -> Self { SendError(e.to_string()) }
/// }
///
/// let idem = Idem::new(MemoryStore::new());
/// let order_id = 1042u64;
/// let sent: Result<bool, SendError> = idem
///     .scope(run_side_effect("send_receipt", &[("order_id", &order_id)], &(), |key| async move {
///         // mailer.send(order_id, key.as_str()).await
///         Ok(true)
///     }))
///     .await;
/// assert!(sent.unwrap());
/// # });
/// ```
pub fn run_side_effect<'a, T, E, A, F, Fut>(
    tool: &'a str,
    key_fields: &[KeyField<'_>],
    args: &A,
    attempt: F,
) -> impl Future<Output = Result<T, E>> + use<'a, T, E, A, F, Fut>
where
    A: Serialize + ?Sized,
    T: Serialize + DeserializeOwned,
    E: Classify + From<Error>,
    F: FnMut(IdempotencyKey) -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    Tool::new(tool).side_effect(key_fields, args, attempt)
}

/// The tool, key and span of one call: what every log line and [`CallInfo`] names.
struct CallRecord<'a> {
    tool: &'a str,
    key: IdempotencyKey,
    span: tracing::Span,
}

impl CallRecord<'_> {
    fn store_error(&self, source: StoreError) -> Error {
        Error::Store {
            tool: self.tool.to_owned(),
            key: Some(self.key),
            source,
        }
    }

    fn refused(&self, err: Error) -> Error {
        tracing::warn!(error = %err, "not run");
        self.finish(0, CallOutcome::Refused);
        err
    }

    fn finish(&self, attempts: u32, outcome: CallOutcome) {
        let replayed = outcome == CallOutcome::Replayed;
        self.span.record("attempts", attempts);
        self.span.record("replayed", replayed);
        self.span.record("outcome", outcome.as_str());
        tracing::info!(
            attempts,
            replayed,
            outcome = outcome.as_str(),
            "side effect finished"
        );
        report(|| CallInfo {
            tool: self.tool.to_owned(),
            key: Some(self.key),
            attempts,
            replayed,
            outcome,
        });
    }

    fn finish_read(&self, attempts: u32, outcome: CallOutcome) {
        self.span.record("attempts", attempts);
        self.span.record("outcome", outcome.as_str());
        report(|| CallInfo {
            tool: self.tool.to_owned(),
            key: None,
            attempts,
            replayed: false,
            outcome,
        });
    }
}

enum Begin {
    Run,
    Replay(Vec<u8>),
}

/// Claims the key, waiting (bounded) while another holder's lease is live.
async fn claim(s: &Settings, req: &ClaimRequest<'_>, wait: Duration) -> Result<Begin, Error> {
    let tool = req.tool;
    let store_error = |source| Error::Store {
        tool: tool.to_owned(),
        key: Some(req.key),
        source,
    };
    let started = Instant::now();
    let mut nap = Duration::from_millis(10);
    loop {
        let existing = match timed(s, s.store.claim(req)).await.map_err(store_error)? {
            Claim::Acquired => return Ok(Begin::Run),
            Claim::Existing(existing) => existing,
        };
        let Existing { fingerprint, state } = existing;
        if fingerprint != req.fingerprint {
            return Err(Error::KeyReuse {
                tool: tool.to_owned(),
                key: req.key,
            });
        }
        match state {
            ExistingState::Completed { outcome } => return Ok(Begin::Replay(outcome)),
            ExistingState::Running { lease_remaining } => {
                let waited = started.elapsed();
                if waited >= wait {
                    return Err(Error::InFlight {
                        tool: tool.to_owned(),
                        key: req.key,
                        waited,
                    });
                }
                // Wake at the lease's end at the latest, to take over a holder that died.
                let pause = nap
                    .min(lease_remaining + Duration::from_millis(1))
                    .min(wait - waited);
                tracing::debug!(
                    ?pause,
                    ?lease_remaining,
                    "another call holds the key; waiting for its outcome"
                );
                tokio::time::sleep(pause).await;
                nap = (nap * 2).min(Duration::from_millis(500));
            }
            ExistingState::Ambiguous => {
                return Err(store_error(StoreError::corrupt(
                    "the store reported an ambiguous record of the same arguments instead of handing it over; \
                     the store implementation breaks the claim contract",
                )));
            }
        }
    }
}

/// Runs a store operation under the runtime's store timeout. An operation that answers on its
/// first poll (an in-memory store) never needed the timer, so the timer starts only after it.
async fn timed<T>(
    s: &Settings,
    op: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    let mut op = std::pin::pin!(op);
    let first = std::future::poll_fn(|cx| std::task::Poll::Ready(op.as_mut().poll(cx))).await;
    if let std::task::Poll::Ready(result) = first {
        return result;
    }
    match tokio::time::timeout(s.store_timeout, op).await {
        Ok(result) => result,
        Err(_) => Err(StoreError::unavailable(format!(
            "the store did not answer within {:?}",
            s.store_timeout
        ))),
    }
}

/// A holder's write after the body ran; returns whether it was applied. A failure here cannot
/// undo the effect, so it is logged, not returned: the caller keeps the body's result.
async fn write(
    s: &Settings,
    call: &CallRecord<'_>,
    what: &str,
    op: impl Future<Output = Result<Written, StoreError>>,
) -> bool {
    match timed(s, op).await {
        Ok(Written::Applied) => true,
        Ok(Written::Fenced) => {
            tracing::warn!(tool = call.tool, key = %call.key, what, "lease was taken over meanwhile; the new holder's record stands");
            false
        }
        Err(e) => {
            tracing::error!(tool = call.tool, key = %call.key, what, error = %e, "store write failed after the body ran; the record stays claimed until its lease expires");
            false
        }
    }
}
