//! The runtime handle: which store, which defaults; installed once per process or scoped to a task.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

#[cfg(doc)]
use crate::error::Error;
use crate::retry::RetryPolicy;
use crate::store::{OperationIds, Store};
use crate::wake::Wakes;

/// A runtime: the store that records outcomes and the defaults every tool starts from.
///
/// Cheap to clone (one `Arc`). Install one per process at start-up with [`Idem::install`], or
/// run a future under one with [`Idem::scope`] (tests do this, so each test has its own store).
///
/// ```
/// use idem_runtime::{Idem, MemoryStore, RetryPolicy};
/// use std::time::Duration;
///
/// let idem = Idem::builder()
///     .store(MemoryStore::new())
///     .retry(RetryPolicy::default().with_max_attempts(5))
///     .lease(Duration::from_secs(60))
///     .build()?;
/// # let _ = idem;
/// # Ok::<(), idem_runtime::BuildError>(())
/// ```
#[derive(Clone)]
pub struct Idem {
    inner: Arc<Settings>,
}

/// What an [`Idem`] holds.
pub(crate) struct Settings {
    pub(crate) store: Arc<dyn Store>,
    /// The same store, as the name → id map of [`Idem::operation`].
    pub(crate) operation_ids: Arc<dyn OperationIds>,
    pub(crate) retry: RetryPolicy,
    pub(crate) lease: Duration,
    pub(crate) ttl: Duration,
    pub(crate) in_flight_wait: Duration,
    pub(crate) max_outcome: usize,
    pub(crate) tenant: Option<Arc<str>>,
    pub(crate) store_timeout: Duration,
    /// This runtime's waiters, woken by its holders' ends (shared by its clones only).
    pub(crate) wakes: Wakes,
}

impl std::fmt::Debug for Idem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Idem")
            .field("retry", &self.inner.retry)
            .field("lease", &self.inner.lease)
            .field("ttl", &self.inner.ttl)
            .field("in_flight_wait", &self.inner.in_flight_wait)
            .finish_non_exhaustive()
    }
}

pub(crate) static INSTALLED: OnceLock<Idem> = OnceLock::new();

/// The runtime used when none is installed or scoped, made on first use.
pub(crate) static DEFAULT: OnceLock<Result<Idem, String>> = OnceLock::new();

/// How the default runtime is made: the SQLite store at its default path, when built in.
#[cfg(feature = "sqlite")]
pub(crate) const BUILT_IN_DEFAULT: Option<fn() -> Result<Idem, String>> =
    Some(sqlite_default_runtime);

/// The runtime used when none is installed or scoped: a [`SqliteStore`](crate::SqliteStore) at
/// [`default_path`](crate::store::sqlite::default_path), opened by the first call that needs it
/// (on the store's own thread), so a failure to open it is that call's
/// [`Error::Store`], naming the file, and the next call tries again.
#[cfg(feature = "sqlite")]
fn sqlite_default_runtime() -> Result<Idem, String> {
    let path = crate::store::sqlite::default_path().map_err(|e| e.to_string())?;
    // Once per process, and once only: through `tracing` where a subscriber takes it, else on
    // stderr, where a user sees it without one. Records that decide whether a payment runs again
    // must not live somewhere nobody knows of.
    if tracing::enabled!(tracing::Level::INFO) {
        tracing::info!(
            path = %path.display(),
            "no runtime installed; recording outcomes in {} (relative to the working directory; set {} to move \
             it, and keep `.idemkit/` out of version control)",
            path.display(),
            crate::store::sqlite::DEFAULT_PATH_ENV
        );
    } else {
        eprintln!(
            "idemkit: no runtime installed; recording outcomes in {} (relative to the working directory; set {} \
             to move it, and keep `.idemkit/` out of version control)",
            path.display(),
            crate::store::sqlite::DEFAULT_PATH_ENV
        );
    }
    Ok(Idem::new(crate::SqliteStore::builder(path).open_lazily()))
}

#[cfg(not(feature = "sqlite"))]
pub(crate) const BUILT_IN_DEFAULT: Option<fn() -> Result<Idem, String>> = None;

/// Returned by [`Idem::install`] when a runtime is already installed.
#[derive(Debug, thiserror::Error)]
#[error(
    "idemkit: a runtime is already installed in this process; install once at start-up, or use `Idem::scope` for a task"
)]
pub struct AlreadyInstalled;

impl Idem {
    /// A runtime over `store`, with the default settings.
    pub fn new(store: impl Store + OperationIds) -> Self {
        Self::builder()
            .store(store)
            .build()
            .expect("idemkit: the default settings are consistent")
    }

    /// Starts a runtime's settings.
    pub fn builder() -> IdemBuilder {
        IdemBuilder::default()
    }

    /// Makes this the runtime of every call in the process that has no scoped one.
    pub fn install(self) -> Result<(), AlreadyInstalled> {
        INSTALLED.set(self).map_err(|_| AlreadyInstalled)
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    /// The default retry policy of side-effect and read-only tools.
    pub fn retry_policy(&self) -> RetryPolicy {
        self.inner.retry
    }

    pub(crate) fn settings(&self) -> &Settings {
        &self.inner
    }
}

/// Settings of an [`Idem`]; [`IdemBuilder::build`] makes it.
#[must_use]
#[derive(Default)]
pub struct IdemBuilder {
    store: Option<(Arc<dyn Store>, Arc<dyn OperationIds>)>,
    retry: Option<RetryPolicy>,
    lease: Option<Duration>,
    ttl: Option<Duration>,
    in_flight_wait: Option<Duration>,
    max_outcome: Option<usize>,
    tenant: Option<Arc<str>>,
    store_timeout: Option<Duration>,
}

impl IdemBuilder {
    /// Where claims, outcomes and operation ids are kept (required).
    pub fn store(self, store: impl Store + OperationIds) -> Self {
        self.shared_store(Arc::new(store))
    }

    /// Like [`IdemBuilder::store`], for a store already shared.
    pub fn shared_store<S: Store + OperationIds>(mut self, store: Arc<S>) -> Self {
        self.store = Some((store.clone(), store));
        self
    }

    /// The retry policy tools start from (default: [`RetryPolicy::default`]).
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = Some(policy);
        self
    }

    /// How long a claim holds before another call may take the operation over (default 10 s).
    /// While a body runs its holder renews the lease every third of it (S12), so the lease need
    /// not cover the slowest run: it bounds how long a crashed holder blocks its key, and must
    /// be well above a store round trip.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// How long a completed record's outcome is kept and replayed (default 24 h). Past it the
    /// record is a tombstone (S33): a repeat gets [`Error::Expired`] ("done on DATE; its result
    /// is no longer kept"), never a run, until the store's tombstone setting passes too. At
    /// least the lease. A running or ambiguous record never expires by time (S34): it is kept
    /// until it completes or a decision settles it.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// How long a call waits for another call of the same key to finish before it returns
    /// [`Error::InFlight`] (default 30 s).
    pub fn in_flight_wait(mut self, wait: Duration) -> Self {
        self.in_flight_wait = Some(wait);
        self
    }

    /// Outcomes longer than this many bytes (as JSON) are not stored to be replayed (default
    /// 1 MiB): the caller still gets its result, the record says the operation ran and its
    /// outcome was too large to replay, and repeats get [`Error::Unreplayable`]. A tool's own
    /// bound: [`Tool::max_outcome_bytes`](crate::Tool::max_outcome_bytes).
    pub fn max_outcome_bytes(mut self, bytes: usize) -> Self {
        self.max_outcome = Some(bytes);
        self
    }

    /// Makes every call of this runtime on behalf of `tenant`, unless a task says otherwise with
    /// [`as_tenant`](crate::as_tenant) (S18): for a process that serves one account.
    pub fn tenant(mut self, tenant: impl Into<Arc<str>>) -> Self {
        self.tenant = Some(tenant.into());
        self
    }

    /// How long one store operation may take before it counts as a store failure (default 10 s).
    pub fn store_timeout(mut self, timeout: Duration) -> Self {
        self.store_timeout = Some(timeout);
        self
    }

    /// The runtime, or why these settings cannot make one: no store, or a ttl shorter than the
    /// lease (a running record would expire before its lease).
    pub fn build(self) -> Result<Idem, BuildError> {
        let (store, operation_ids) = self.store.ok_or(BuildError::NoStore)?;
        let lease = self.lease.unwrap_or(Duration::from_secs(10));
        let ttl = self.ttl.unwrap_or(Duration::from_secs(24 * 60 * 60));
        if ttl < lease {
            return Err(BuildError::TtlShorterThanLease { ttl, lease });
        }
        Ok(Idem {
            inner: Arc::new(Settings {
                store,
                operation_ids,
                retry: self.retry.unwrap_or_default(),
                lease,
                ttl,
                in_flight_wait: self.in_flight_wait.unwrap_or(Duration::from_secs(30)),
                max_outcome: self.max_outcome.unwrap_or(1 << 20),
                tenant: self.tenant,
                store_timeout: self.store_timeout.unwrap_or(Duration::from_secs(10)),
                wakes: Wakes::default(),
            }),
        })
    }
}

/// Why [`IdemBuilder::build`] made no runtime.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// No store was given.
    #[error(
        "idemkit: `Idem::builder()` needs `.store(...)` before `.build()`: there is no sensible default for where \
         money-moving records live"
    )]
    NoStore,
    /// The ttl is shorter than the lease.
    #[error(
        "idemkit: the ttl ({ttl:?}) is shorter than the lease ({lease:?}): a running record would expire before its \
         lease; make the ttl at least the lease"
    )]
    TtlShorterThanLease {
        /// The ttl asked for.
        ttl: Duration,
        /// The lease asked for (or the default).
        lease: Duration,
    },
}
