//! The executor: [`Tool`], its settings and entry points. The protocol itself (claim →
//! attempts → complete, keep as ambiguous or release; the read-only loop) is in `core`, compiled
//! once; what each tool instantiates is the small typed loop of `typed`.
//!
//! This is what `#[side_effect]` and `#[read_only]` expand to, and what a program without the
//! macros calls through [`Tool`].
//!
//! **One entry path (S26).** Every surface enters the executor through [`SideEffectCall`]: the
//! attributes' expansion writes its loop over one (`#[side_effect]` on a function or method, the
//! rmcp and rig modes, which wrap that expansion, and `json` tools, which call it, so
//! `JsonTools` and `JsonToolsServer` too); [`Tool::side_effect`], [`Tool::run_keyed`] and
//! [`Tool::verify`] run one loop over one (`drive::drive`), which the HTTP layer's run uses
//! too. What a call runs under is set there and nowhere else: the claim (`core::claim`) reads
//! the tenant and makes the span; `Drop for Call` (`core::dropped`) is the drop guard; the
//! step futures [`Attempt`] and [`VerifyStep`] make the call's key current while they poll a
//! step, and `scope::current::made_under` while a [`Tool`] closure makes one (the settler, which asks
//! verify functions outside any call, makes and polls its steps under the record's key through
//! `scope::current::under`). The tenant, the operation
//! (an `OperationId` key field, looked up before the key) and the scoped runtime are
//! task-locals (`crate::scope`) that the surfaces put in force around a call (`as_tenant`, `operation_scope`,
//! `Idem::scope`, MCP's `Tenanted` and `Operations`); the one surface that moves a call to a
//! task of its own, the HTTP layer, carries all three with it through one `TaskScope`.

mod core;
mod drive;
mod repeats;
mod typed;
mod verified;

pub use self::core::{Next, ReadNext};
pub use self::typed::{Attempt, ReadCall, SideEffectCall, VerifyStep};
pub use self::verified::Verified;

use std::future::Future;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::Error;
use crate::failure::Classify;
use crate::fingerprint::Fingerprint;
use crate::idem::Idem;
use crate::key::{IdempotencyKey, KeyField};
use crate::retry::RetryPolicy;

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
    in_flight_wait: Option<Duration>,
    max_outcome: Option<usize>,
    tenant_required: bool,
    /// S20: whether an attempt whose outcome is unknown may be sent again (`None`: yes).
    resend: Option<bool>,
    /// S19: the call's loop answers verification steps.
    verifies: bool,
    /// S28: the arguments its verify takes (JSON), kept with the record for the settler.
    arguments: Option<&'a [u8]>,
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
            in_flight_wait: None,
            max_outcome: None,
            tenant_required: false,
            resend: None,
            verifies: false,
            arguments: None,
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
        self.in_flight_wait = Some(wait);
        self
    }

    /// Outcomes longer than this many bytes (as JSON) are not stored to be replayed: the caller
    /// still gets its result, and repeats are told the operation ran (S16). Default: the
    /// runtime's ([`IdemBuilder::max_outcome_bytes`](crate::IdemBuilder::max_outcome_bytes)).
    pub const fn max_outcome_bytes(mut self, bytes: usize) -> Self {
        self.max_outcome = Some(bytes);
        self
    }

    /// This tool never runs without a tenant ([`as_tenant`](crate::as_tenant) or the runtime's
    /// [`IdemBuilder::tenant`](crate::IdemBuilder::tenant)): a call without one fails closed with
    /// [`Error::NoTenant`], its body not run.
    pub const fn tenant_required(mut self) -> Self {
        self.tenant_required = true;
        self
    }

    /// Whether an attempt whose outcome is unknown (it failed [`Failure::Ambiguous`], or an
    /// earlier call's attempt was cut off: cancelled, panicked, lost its lease, its process died)
    /// may be sent again with the same key (S20). Say `true` only when the provider deduplicates
    /// by the key the attempt is given (Stripe's `Idempotency-Key`, a unique constraint on the
    /// key in your own database); say `false` for an e-mail, an SMS, a webhook, an insert without
    /// such a constraint. Otherwise the call ends with [`Error::Ambiguous`] and the record is
    /// kept: no later call of the key runs the attempt until a verification
    /// ([`Tool::verify`]) or an operator (`idemkit resolve`) settles it.
    ///
    /// Default for a `Tool`: `true`, since every attempt is handed the key. The attributes
    /// default to whether the function passes the key on: it takes the `&IdempotencyKey`, or its
    /// body sends it with `.send_idempotent()` or reads it with `current_key()`.
    ///
    /// [`Failure::Ambiguous`]: crate::Failure::Ambiguous
    pub const fn resend(mut self, yes: bool) -> Self {
        self.resend = Some(yes);
        self
    }

    /// Says that the call's loop answers verification steps (what `verify = path` expands to).
    /// Not a stable API: use [`Tool::verify`].
    #[doc(hidden)]
    pub const fn with_verify(mut self) -> Self {
        self.verifies = true;
        self
    }

    /// Keeps the call's arguments (what its `verify` takes, as JSON) with its record, so that a
    /// settler asks that verify without the caller (S28): what `verify = path` expands to where
    /// the tool's arguments serialize. Not a stable API.
    #[doc(hidden)]
    pub const fn keep_arguments(mut self, arguments: Option<&'a [u8]>) -> Self {
        self.arguments = arguments;
        self
    }

    /// Asks `verify` whether the effect happened before anything whose outcome is unknown is
    /// sent again (S19): see [`Verified`] for what each answer does.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
    /// use idem_runtime::{Classify, Failure, Idem, MemoryStore, Tool, Verified};
    ///
    /// #[derive(Debug)]
    /// struct SendError;
    /// impl Classify for SendError {
    ///     fn classify(&self) -> Failure { Failure::Ambiguous } // the reply was lost
    /// }
    /// impl From<idem_runtime::Error> for SendError {
    ///     fn from(_: idem_runtime::Error) -> Self { SendError }
    /// }
    ///
    /// let idem = Idem::new(MemoryStore::new());
    /// let sent = AtomicU32::new(0); // the SMS gateway, which does not deduplicate
    /// let result: Result<String, SendError> = Tool::new("send_sms")
    ///     .idem(&idem)
    ///     .resend(false)
    ///     .verify(|key| {
    ///         let found = sent.load(SeqCst) > 0; // "did message {key} go out?"
    ///         async move { Ok(if found { Verified::Applied(format!("sms {key}")) } else { Verified::NotApplied }) }
    ///     })
    ///     .side_effect(&[("order", &7u32)], &(), |_key| {
    ///         sent.fetch_add(1, SeqCst);
    ///         async { Err(SendError) } // sent, but the reply was lost
    ///     })
    ///     .await;
    /// assert!(result.unwrap().starts_with("sms "));
    /// assert_eq!(sent.load(SeqCst), 1);
    /// # });
    /// ```
    pub fn verify<V>(self, verify: V) -> Verifying<'a, V> {
        Verifying::new(self.with_verify(), verify)
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
            None => Idem::current_or_why().map_err(|reason| Error::NotConfigured {
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
        self.run_prepared(key, Fingerprint::of(args), attempt)
    }

    /// Runs a side effect whose key and fingerprint are already made: claims the key, runs
    /// `attempt` with retries by [`Classify`], and completes or releases the record. See the
    /// README for the behaviours S1–S17.
    pub fn run_keyed<T, E, F, Fut>(
        self,
        key: IdempotencyKey,
        fingerprint: Fingerprint,
        attempt: F,
    ) -> impl Future<Output = Result<T, E>> + use<'a, T, E, F, Fut>
    where
        T: Serialize + DeserializeOwned,
        E: Classify + From<Error>,
        F: FnMut(IdempotencyKey) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        self.run_prepared(key, Ok(fingerprint), attempt)
    }

    /// [`Tool::run_keyed`] with the arguments' fingerprint still to be checked: arguments that
    /// did not serialize refuse the call with [`Error::Arguments`]. (The macros expand to the
    /// same loop, written out in place.)
    fn run_prepared<T, E, F, Fut>(
        self,
        key: IdempotencyKey,
        fingerprint: Result<Fingerprint, serde_json::Error>,
        attempt: F,
    ) -> impl Future<Output = Result<T, E>> + use<'a, T, E, F, Fut>
    where
        T: Serialize + DeserializeOwned,
        E: Classify + From<Error>,
        F: FnMut(IdempotencyKey) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let call = SideEffectCall::new(self, key, fingerprint);
        drive::drive(call, attempt, drive::unverified::<T, E>)
    }

    /// Runs a read-only tool: retries by [`Classify`], no key, no store. Works without any
    /// runtime installed (the default retry policy then applies).
    pub fn read_only<T, E, F, Fut>(
        self,
        attempt: F,
    ) -> impl Future<Output = Result<T, E>> + use<'a, T, E, F, Fut>
    where
        E: Classify,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let mut call = ReadCall::new(self);
        let mut attempt = attempt;
        async move {
            while call.attempt().await.is_some() {
                call.ended(attempt().await);
            }
            call.end()
        }
    }
}

/// A [`Tool`] with a verify function ([`Tool::verify`]): its calls ask `verify` before anything
/// whose outcome is unknown is sent again (S19).
#[must_use]
#[derive(Debug, Clone, Copy)]
pub struct Verifying<'a, V> {
    tool: Tool<'a>,
    verify: V,
}

impl<'a, V> Verifying<'a, V> {
    fn new(tool: Tool<'a>, verify: V) -> Self {
        Verifying { tool, verify }
    }

    /// [`Tool::side_effect`], with this verify function: it is given the call's key.
    pub fn side_effect<T, E, A, F, Fut, VFut>(
        self,
        key_fields: &[KeyField<'_>],
        args: &A,
        attempt: F,
    ) -> impl Future<Output = Result<T, E>> + use<'a, T, E, A, F, Fut, V, VFut>
    where
        A: Serialize + ?Sized,
        T: Serialize + DeserializeOwned,
        E: Classify + From<Error>,
        F: FnMut(IdempotencyKey) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        V: FnMut(IdempotencyKey) -> VFut,
        VFut: Future<Output = Result<Verified<T>, E>>,
    {
        let key = IdempotencyKey::derive(self.tool.name(), key_fields);
        self.run_prepared(key, Fingerprint::of(args), attempt)
    }

    /// [`Tool::run_keyed`], with this verify function: it is given the call's key.
    pub fn run_keyed<T, E, F, Fut, VFut>(
        self,
        key: IdempotencyKey,
        fingerprint: Fingerprint,
        attempt: F,
    ) -> impl Future<Output = Result<T, E>> + use<'a, T, E, F, Fut, V, VFut>
    where
        T: Serialize + DeserializeOwned,
        E: Classify + From<Error>,
        F: FnMut(IdempotencyKey) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        V: FnMut(IdempotencyKey) -> VFut,
        VFut: Future<Output = Result<Verified<T>, E>>,
    {
        self.run_prepared(key, Ok(fingerprint), attempt)
    }

    fn run_prepared<T, E, F, Fut, VFut>(
        self,
        key: IdempotencyKey,
        fingerprint: Result<Fingerprint, serde_json::Error>,
        attempt: F,
    ) -> impl Future<Output = Result<T, E>> + use<'a, T, E, F, Fut, V, VFut>
    where
        T: Serialize + DeserializeOwned,
        E: Classify + From<Error>,
        F: FnMut(IdempotencyKey) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        V: FnMut(IdempotencyKey) -> VFut,
        VFut: Future<Output = Result<Verified<T>, E>>,
    {
        drive::drive(
            SideEffectCall::new(self.tool, key, fingerprint),
            attempt,
            self.verify,
        )
    }
}
