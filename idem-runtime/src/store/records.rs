//! Operator reads and repairs ([`Records`]): what a person on call asks of a store, apart from
//! the claim state machine that the executor drives through [`Store`](super::Store).
//!
//! Cold path: one `async_trait` method per question, each answered by the store's own clock.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::resolution::{Decision, Resolved};
use super::{LeaseToken, Record, RecordState, Written};
use crate::error::StoreError;
use crate::key::IdempotencyKey;

/// The kind of a record's state, without what it holds: for filters and counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum StateKind {
    /// A holder is running it under a live lease (a running record whose lease lapsed is
    /// read as [`StateKind::Ambiguous`], S31).
    Running,
    /// It completed; its outcome replays.
    Completed,
    /// Its outcome is unknown: it ran out of attempts after a failure that may have taken
    /// effect, or its holder's lease lapsed while it ran (S31).
    Ambiguous,
    /// Done and past its time-to-live (S33): its outcome is no longer kept, and a repeat of its
    /// key is answered "done on DATE", never run.
    Tombstone,
}

impl StateKind {
    /// Every kind, in the order of the state machine.
    pub const ALL: [StateKind; 4] = [
        StateKind::Running,
        StateKind::Completed,
        StateKind::Ambiguous,
        StateKind::Tombstone,
    ];

    /// Its lowercase word: `running`, `completed`, `ambiguous` (the words the stores write),
    /// and `tombstone` (S33: a completed record past its time-to-live, which no store writes as
    /// a state of its own).
    pub fn as_str(&self) -> &'static str {
        match self {
            StateKind::Running => "running",
            StateKind::Completed => "completed",
            StateKind::Ambiguous => "ambiguous",
            StateKind::Tombstone => "tombstone",
        }
    }
}

impl fmt::Display for StateKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A word that is not a state: says which are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownState(pub String);

impl fmt::Display for UnknownState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` is not a state; use running, completed, ambiguous or tombstone",
            self.0
        )
    }
}

impl std::error::Error for UnknownState {}

impl FromStr for StateKind {
    type Err = UnknownState;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        StateKind::ALL
            .into_iter()
            .find(|k| k.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownState(s.to_owned()))
    }
}

impl RecordState {
    /// Its kind.
    pub fn kind(&self) -> StateKind {
        match self {
            RecordState::Running { .. } => StateKind::Running,
            RecordState::Completed { .. } => StateKind::Completed,
            RecordState::Ambiguous { .. } => StateKind::Ambiguous,
            RecordState::Tombstone => StateKind::Tombstone,
        }
    }
}

/// Which live records [`Records::list`] returns: every condition set must hold.
///
/// Ages are measured by the store's clock (`now()` of PostgreSQL, `TIME` of Redis), not the
/// caller's, so an operator's machine with a skewed clock still sees the right records.
///
/// ```
/// use idem_runtime::store::{RecordFilter, StateKind};
/// use std::time::Duration;
///
/// let stuck = RecordFilter::new()
///     .tool("charge")
///     .state(StateKind::Running)
///     .older_than(Duration::from_secs(600))
///     .limit(20);
/// assert_eq!(stuck.limit, 20);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecordFilter {
    /// Only this tool's records.
    pub tool: Option<String>,
    /// Only records in this state.
    pub state: Option<StateKind>,
    /// Only records made at least this long ago.
    pub older_than: Option<Duration>,
    /// Only records made less than this long ago.
    pub newer_than: Option<Duration>,
    /// Only records made under this scope (tenant).
    pub tenant: Option<String>,
    /// At most this many (default [`RecordFilter::DEFAULT_LIMIT`]).
    pub limit: usize,
}

impl Default for RecordFilter {
    fn default() -> Self {
        RecordFilter {
            tool: None,
            state: None,
            older_than: None,
            newer_than: None,
            tenant: None,
            limit: Self::DEFAULT_LIMIT,
        }
    }
}

impl RecordFilter {
    /// How many records a list returns unless told otherwise: enough for a screen, few enough
    /// that a store with millions of records answers at once.
    pub const DEFAULT_LIMIT: usize = 100;

    /// Every live record, at most [`RecordFilter::DEFAULT_LIMIT`].
    pub fn new() -> Self {
        Self::default()
    }

    /// Only `tool`'s records.
    pub fn tool(mut self, tool: impl Into<String>) -> Self {
        self.tool = Some(tool.into());
        self
    }

    /// Only records in `state`.
    pub fn state(mut self, state: StateKind) -> Self {
        self.state = Some(state);
        self
    }

    /// Only records made at least `age` ago.
    pub fn older_than(mut self, age: Duration) -> Self {
        self.older_than = Some(age);
        self
    }

    /// Only records made less than `age` ago.
    pub fn newer_than(mut self, age: Duration) -> Self {
        self.newer_than = Some(age);
        self
    }

    /// Only records made under `tenant`.
    pub fn tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = Some(tenant.into());
        self
    }

    /// At most `limit` records.
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }

    /// Whether `record` passes, its age taken at `now` by the store's clock: for stores that
    /// filter as they scan.
    pub fn matches(&self, record: &Record, now: SystemTime) -> bool {
        let age = now.duration_since(record.created).unwrap_or_default();
        self.tool.as_deref().is_none_or(|t| record.tool == t)
            && self.state.is_none_or(|s| record.state.kind() == s)
            && self.older_than.is_none_or(|d| age >= d)
            && self.newer_than.is_none_or(|d| age < d)
            && self
                .tenant
                .as_deref()
                .is_none_or(|t| record.tenant.as_deref() == Some(t))
    }

    /// Sorts `records` newest first (ties by key) and keeps at most [`RecordFilter::limit`]: for
    /// stores that filter as they scan.
    pub fn newest_first(&self, records: &mut Vec<Record>) {
        records.sort_by(|a, b| b.created.cmp(&a.created).then(a.key.cmp(&b.key)));
        records.truncate(self.limit);
    }
}

/// What [`Records::release_key`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Released {
    /// The running record is gone: the next call with its key runs the operation again.
    Released,
    /// No live record has that key.
    NotFound,
    /// Its holder's lease is live for this much longer: nothing changed (release with `force`
    /// only when that holder is known to be dead).
    LeaseLive {
        /// Time until the lease runs out.
        remaining: Duration,
    },
    /// The record is not running: nothing changed ([`Records::forget`] removes any record).
    NotRunning(StateKind),
}

/// What [`Records::forget`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Forgot {
    /// The live record is gone: the next call with its key runs the operation again.
    Forgotten,
    /// No live record has that key (a record an operator resolved as not applied, kept only to
    /// show that decision, is removed too).
    NotFound,
    /// A holder's lease on the record is live for this much longer: nothing changed (forget
    /// with `force` only when that holder is known to be dead; if it is alive, it may still
    /// act, and the next call runs the effect alongside it).
    LeaseLive {
        /// Time until the lease runs out.
        remaining: Duration,
    },
}

/// How many live records one tool has in one state.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Count {
    /// The tool.
    pub tool: String,
    /// The state.
    pub state: StateKind,
    /// How many.
    pub records: u64,
}

impl Count {
    /// `records` live records of `tool` in `state`.
    pub fn new(tool: impl Into<String>, state: StateKind, records: u64) -> Self {
        Count {
            tool: tool.into(),
            state,
            records,
        }
    }
}

/// How long a tombstone (S33: a completed record past its time-to-live) is kept past that
/// time-to-live, unless the store is told otherwise: 400 days. At least a year, so that a
/// yearly operation (a renewal keyed by its period) repeated by a late retry, a replayed
/// plan or a restored backup a year on is still answered "done", with a month's margin;
/// and small next to what it keeps: a tombstone is the key, a fingerprint digest, the tool,
/// the tenant and its times, without the outcome: 179 bytes in the memory store, 252 in
/// SQLite, 401 in PostgreSQL, 456 in Redis (measured: benches/README.md), so an agent making
/// 10,000 operations a day keeps about 1 GB of them on SQLite. An HTTP API whose clients send
/// random keys may want far less (docs/http.md).
pub const DEFAULT_TOMBSTONES: Duration = Duration::from_secs(400 * 86_400);

/// Operator reads and repairs, implemented by every store; the `idemkit` command is built on it.
///
/// Kept apart from [`Store`](super::Store): the executor never calls these, and a repair here
/// names no lease token (the operator has none). Each method is one atomic step of the store, so
/// a repair cannot undo a claim that raced it: a release deletes only the record it judged.
#[async_trait::async_trait]
pub trait Records: Send + Sync {
    /// The live record of `key`, if any.
    ///
    /// A Running record whose holder's lease has lapsed (its holder died, stalled or was cut
    /// off; its body may have started) is returned as [`RecordState::Ambiguous`] (S31), with
    /// the note of the ambiguous record it was taken over from, else one that says its
    /// holder's lease lapsed: that is what the settler and `idemkit settle` look for.
    /// [`Records::list`] (its [`StateKind`] filter included) and [`Records::counts`] read it
    /// the same way. Every store of this crate does; a store that does not leaves such records
    /// to the next caller of their key.
    async fn get(&self, key: &IdempotencyKey) -> Result<Option<Record>, StoreError>;

    /// Live records that pass `filter`, newest first (by [`Record::created`], ties by key), at
    /// most `filter.limit`; a lapsed holder's record counts as ambiguous (see
    /// [`Records::get`]).
    async fn list(&self, filter: &RecordFilter) -> Result<Vec<Record>, StoreError>;

    /// Running → absent, so the next call runs the operation again (with the same key). Refused
    /// ([`Released::LeaseLive`]) while the holder's lease is live, unless `force`: forcing while
    /// the holder is alive lets a second call run the effect alongside it, and fences the first
    /// holder's outcome out.
    async fn release_key(&self, key: &IdempotencyKey, force: bool) -> Result<Released, StoreError>;

    /// Any state → absent: the next call runs the operation again, whether or not it happened.
    /// Refused ([`Forgot::LeaseLive`]) while a holder's lease on a running record is live,
    /// unless `force`: forcing while the holder is alive lets a second call run the effect
    /// alongside it (S24).
    async fn forget(&self, key: &IdempotencyKey, force: bool) -> Result<Forgot, StoreError>;

    /// [`Records::forget`], with the operator's `note` (who, why, the ticket) kept with the
    /// decision when the record is a tombstone (S33: [`Decision::Forgotten`]); the note of any
    /// other record forgotten is not kept (nothing of it is). What `idemkit forget --note`
    /// calls. The default forgets without a note, and refuses one (kind
    /// [`Other`](crate::StoreErrorKind::Other), nothing changed): a store written before S33's
    /// forgotten tombstones keeps none.
    async fn forget_noted(
        &self,
        key: &IdempotencyKey,
        force: bool,
        note: Option<&str>,
    ) -> Result<Forgot, StoreError> {
        match note {
            None => self.forget(key, force).await,
            Some(_) => Err(StoreError::new(
                crate::StoreErrorKind::Other,
                "this store keeps no note with a forgotten record; forget it without --note; nothing was \
                 changed",
            )),
        }
    }

    /// An operator settles a record kept as ambiguous (S24), in one atomic step of the store.
    ///
    /// Allowed on an Ambiguous record, and on a Running one whose holder's lease has run out;
    /// refused ([`Resolved::LeaseLive`]) while the lease is live, and on a Completed record
    /// ([`Resolved::Completed`]). [`Decision::Applied`] needs `outcome` (the JSON a call of the
    /// tool returns): the record becomes Completed with it, kept for `ttl`, and later calls
    /// replay it byte for byte. [`Decision::NotApplied`] takes no outcome: the record is
    /// released (a claim finds its key absent and runs the operation). Either way the holder
    /// that lost the record is fenced, and the decision, its time by the store's clock and
    /// `note` are kept with the record ([`Record::resolution`](super::Record::resolution)),
    /// readable by [`Records::get`] for `ttl` (after not-applied, until a new claim of the key
    /// replaces the record, whichever is first). The same decision sent again (same outcome and
    /// note; its reply was lost) while it stands answers [`Resolved::Resolved`] again, changing
    /// nothing.
    ///
    /// An `Err` of kind [`Other`](crate::StoreErrorKind::Other) says the arguments do not fit
    /// the decision (applied without an outcome, not-applied with one); nothing changed.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use std::time::Duration;
    /// use idem_runtime::store::{Decision, Resolved};
    /// use idem_runtime::{IdempotencyKey, MemoryStore, Records};
    ///
    /// let store = MemoryStore::new();
    /// let key = IdempotencyKey::derive("send_email", &[("message", &"m-1")]);
    /// let day = Duration::from_secs(86_400);
    /// let answer = store
    ///     .resolve(&key, Decision::Applied, Some(br#"{"sent":true}"#), Some("seen in the outbox"), day)
    ///     .await?;
    /// assert_eq!(answer, Resolved::NotFound); // no record of that key here
    /// # Ok::<_, idem_runtime::StoreError>(()) }).unwrap();
    /// ```
    async fn resolve(
        &self,
        key: &IdempotencyKey,
        decision: Decision,
        outcome: Option<&[u8]>,
        note: Option<&str>,
        ttl: Duration,
    ) -> Result<Resolved, StoreError>;

    /// A settler's decision (S28) on a record it took over under `token` ([`Store::claim`] of a
    /// record kept as ambiguous), made from the tool's verify function: as [`Records::resolve`]
    /// (applied: Completed with `outcome` for `ttl`; not applied: released; the decision, its
    /// time and `note` kept with the record, shown by [`Records::get`]), but in one atomic step
    /// only while the record is Running under `token` and live. Otherwise nothing changes and
    /// the answer is [`Written::Fenced`]: a caller took the record over when the settler's lease
    /// ran out, and the settler's answer is no longer the record's to give.
    ///
    /// The default refuses (kind [`Other`](crate::StoreErrorKind::Other)): a store written
    /// before S28 cannot be settled by a settler, only by an operator's `resolve`.
    ///
    /// [`Store::claim`]: super::Store::claim
    /// [`Written::Fenced`]: super::Written::Fenced
    async fn settle(
        &self,
        key: &IdempotencyKey,
        token: LeaseToken,
        decision: Decision,
        outcome: Option<&[u8]>,
        note: Option<&str>,
        ttl: Duration,
    ) -> Result<Written, StoreError> {
        let _ = (key, token, decision, outcome, note, ttl);
        Err(StoreError::new(
            crate::StoreErrorKind::Other,
            "this store cannot keep a settler's decision under its lease (`Records::settle`); settle its \
             records kept as ambiguous with `idemkit resolve`",
        ))
    }

    /// Deletes up to `limit` records that no longer count (never a live one); returns how many.
    /// A completed record past its time-to-live is a tombstone (S33), kept (its outcome dropped
    /// where the store can) until the store's tombstone setting has passed too
    /// ([`DEFAULT_TOMBSTONES`] unless set): pruning never removes one before that.
    async fn prune(&self, limit: usize) -> Result<usize, StoreError>;

    /// Live records by tool and state (only the pairs that have any), sorted by tool then state.
    async fn counts(&self) -> Result<Vec<Count>, StoreError>;

    /// The id the operation called `name` was given ([`Idem::operation`](crate::Idem::operation)),
    /// if it has one; never mints one. What `idemkit key TOOL FIELD=op:NAME` reads.
    async fn operation(&self, name: &str) -> Result<Option<uuid::Uuid>, StoreError> {
        let _ = name;
        Err(StoreError::new(
            crate::StoreErrorKind::Other,
            "this store does not look operation names up",
        ))
    }
}

#[async_trait::async_trait]
impl<R: Records + ?Sized> Records for Arc<R> {
    async fn get(&self, key: &IdempotencyKey) -> Result<Option<Record>, StoreError> {
        (**self).get(key).await
    }
    async fn list(&self, filter: &RecordFilter) -> Result<Vec<Record>, StoreError> {
        (**self).list(filter).await
    }
    async fn release_key(&self, key: &IdempotencyKey, force: bool) -> Result<Released, StoreError> {
        (**self).release_key(key, force).await
    }
    async fn forget(&self, key: &IdempotencyKey, force: bool) -> Result<Forgot, StoreError> {
        (**self).forget(key, force).await
    }
    async fn forget_noted(
        &self,
        key: &IdempotencyKey,
        force: bool,
        note: Option<&str>,
    ) -> Result<Forgot, StoreError> {
        (**self).forget_noted(key, force, note).await
    }
    async fn resolve(
        &self,
        key: &IdempotencyKey,
        decision: Decision,
        outcome: Option<&[u8]>,
        note: Option<&str>,
        ttl: Duration,
    ) -> Result<Resolved, StoreError> {
        (**self).resolve(key, decision, outcome, note, ttl).await
    }
    async fn settle(
        &self,
        key: &IdempotencyKey,
        token: LeaseToken,
        decision: Decision,
        outcome: Option<&[u8]>,
        note: Option<&str>,
        ttl: Duration,
    ) -> Result<Written, StoreError> {
        (**self)
            .settle(key, token, decision, outcome, note, ttl)
            .await
    }
    async fn prune(&self, limit: usize) -> Result<usize, StoreError> {
        (**self).prune(limit).await
    }
    async fn counts(&self) -> Result<Vec<Count>, StoreError> {
        (**self).counts().await
    }
    async fn operation(&self, name: &str) -> Result<Option<uuid::Uuid>, StoreError> {
        (**self).operation(name).await
    }
}

/// Counts `records` by tool and state, sorted: for stores that count as they scan.
pub fn count_records<'a>(records: impl IntoIterator<Item = (&'a str, StateKind)>) -> Vec<Count> {
    let mut counts = std::collections::BTreeMap::<(String, StateKind), u64>::new();
    for (tool, state) in records {
        *counts.entry((tool.to_owned(), state)).or_default() += 1;
    }
    counts
        .into_iter()
        .map(|((tool, state), records)| Count::new(tool, state, records))
        .collect()
}
