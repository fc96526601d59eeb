//! S28: settling records kept as ambiguous without waiting for a caller.
//!
//! A call whose outcome is unknown, of a tool that cannot re-send safely, leaves its record kept
//! as ambiguous (S20): no later call of that key runs the body until something settles it. A
//! [`Settler`] settles it by asking the tool's verify function, found by the tool's name among
//! the ones the host gave it:
//!
//! - [`Verified::Applied`]`(v)`: the record completes with `v` (later calls replay it);
//! - [`Verified::NotApplied`]: the record is released (the next call runs the operation);
//! - [`Verified::Unknown`] (or an error, or no answer in time): the record stays ambiguous and
//!   the answer is counted with it; past the host's bound ([`Settler::operator_after`],
//!   [`Settler::operator_after_unknowns`]) it is reported as needing an operator.
//!
//! Each decision is kept with the record as an operator's `idemkit resolve` is (S24), and shown
//! by `idemkit show`; the count of Unknown answers is kept in the record's note.
//!
//! The settler takes a record over as a caller does: it claims the key with the record's
//! fingerprint under a lease token of its own, asks verify while it holds the lease, and writes
//! its decision only while the record is still held under that token ([`Records::settle`]). A
//! caller of the same key meanwhile waits for it as for any holder (S7), and a caller that holds
//! the key makes the settler pass it by: the body and verify never run twice at once.
//!
//! A record keeps a fingerprint of its call's arguments, not the arguments, so a settler's
//! verify function is given the key (and runs under the record's tenant): it looks the
//! operation up by the key it was sent with, as [`Tool::verify`](crate::Tool::verify)'s does.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use std::sync::Arc;
//! use std::time::Duration;
//! use idem_runtime::{IdempotencyKey, MemoryStore, Settler, Verified};
//!
//! async fn was_sent(key: IdempotencyKey) -> Result<Verified<String>, std::io::Error> {
//!     let _ = key; // ask the provider's log for the message sent with this key
//!     Ok(Verified::NotApplied)
//! }
//!
//! let store = Arc::new(MemoryStore::new());
//! let settler = Settler::new(store)
//!     .verify("send_email", was_sent)
//!     .operator_after(Duration::from_secs(3600));
//! let report = settler.run_once(&Default::default()).await?;
//! assert_eq!(report.exit_code(), 0); // nothing kept as ambiguous here
//! // Beside the agents: `let task = settler.spawn(Duration::from_secs(60));` … `task.stop().await;`
//! # Ok::<_, idem_runtime::StoreError>(()) }).unwrap();
//! ```

mod cli;
mod report;
mod task;

pub use self::cli::parse_args;
pub use self::report::{Pass, SettleReport, Settled};
pub use self::task::SettlerHandle;

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::error::StoreError;
use crate::exec::Verified;
use crate::key::IdempotencyKey;
use crate::store::{
    Claim, ClaimRequest, Decision, ExistingState, LeaseToken, Record, RecordFilter, RecordState,
    Records, StateKind, Store, Written,
};

/// How the note of every decision a [`Settler`] keeps begins ([`Resolution::note`]): what
/// `idemkit show` reads to say the settler, not an operator, decided.
///
/// [`Resolution::note`]: crate::store::Resolution::note
pub const SETTLER_NOTE_PREFIX: &str = "idemkit settler: ";

/// A store a [`Settler`] can work on: its claim state machine and its operator reads.
pub trait SettleStore: Store + Records {}

impl<S: Store + Records + ?Sized> SettleStore for S {}

type Answer = Result<Verified<Vec<u8>>, String>;
type VerifyFn =
    dyn Fn(IdempotencyKey) -> Pin<Box<dyn Future<Output = Answer> + Send>> + Send + Sync;

/// Settles records kept as ambiguous by asking their tools' verify functions (S28): one pass
/// ([`Settler::run_once`], [`Settler::run_cli`]), or a task beside the host's agents
/// ([`Settler::spawn`]). See the [module docs](self).
#[derive(Clone)]
pub struct Settler {
    store: Arc<dyn SettleStore>,
    verifiers: BTreeMap<String, Arc<VerifyFn>>,
    lease: Duration,
    operator_after: Option<Duration>,
    operator_after_unknowns: Option<u32>,
    limit: usize,
}

impl fmt::Debug for Settler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settler")
            .field("tools", &self.verifiers.keys().collect::<Vec<_>>())
            .field("lease", &self.lease)
            .field("operator_after", &self.operator_after)
            .field("operator_after_unknowns", &self.operator_after_unknowns)
            .field("limit", &self.limit)
            .finish_non_exhaustive()
    }
}

/// Unknown answers kept in a record's note: how many, and since when (unix ms).
const UNKNOWNS_MARK: &str = "\n[idemkit settle: verify answered unknown ";

/// The note as the call wrote it, and the Unknown answers counted with it (count, since).
fn unknowns_of(note: &str) -> (&str, Option<(u32, u64)>) {
    let Some((original, tail)) = note.rsplit_once(UNKNOWNS_MARK) else {
        return (note, None);
    };
    // "<n> time(s) since unix ms <ms>]"
    let mut words = tail.split_whitespace();
    let n = words.next().and_then(|w| w.parse().ok());
    let since = tail
        .rsplit_once("unix ms ")
        .and_then(|(_, ms)| ms.trim_end_matches(']').parse().ok());
    match (n, since) {
        (Some(n), Some(since)) => (original, Some((n, since))),
        _ => (note, None),
    }
}

fn with_unknowns(original: &str, n: u32, since_ms: u64) -> String {
    format!("{original}{UNKNOWNS_MARK}{n} time(s) since unix ms {since_ms}]")
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Settler {
    /// A settler of `store`'s records, with no verify functions yet ([`Settler::verify`]), a
    /// lease of 30 s, reporting a record as needing an operator after an hour of Unknown
    /// answers.
    pub fn new<S: SettleStore>(store: Arc<S>) -> Self {
        Settler {
            store,
            verifiers: BTreeMap::new(),
            lease: Duration::from_secs(30),
            operator_after: Some(Duration::from_secs(3600)),
            operator_after_unknowns: None,
            limit: 1000,
        }
    }

    /// `tool`'s verify function (by the tool's name, its `name = "…"`): given the key of a
    /// record kept as ambiguous, it says whether the effect happened, as the tool's own verify
    /// does (S19). Its `Applied` answer is stored as the call's outcome (JSON), which later calls
    /// replay as the tool's `T`.
    pub fn verify<T, E, F, Fut>(mut self, tool: impl Into<String>, verify: F) -> Self
    where
        T: Serialize,
        E: fmt::Display,
        F: Fn(IdempotencyKey) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Verified<T>, E>> + Send + 'static,
    {
        let verify = Arc::new(verify);
        let boxed: Arc<VerifyFn> = Arc::new(move |key| {
            let fut = verify(key);
            Box::pin(async move {
                match fut.await {
                    Ok(Verified::Applied(t)) => serde_json::to_vec(&t)
                        .map(Verified::Applied)
                        .map_err(|e| format!("its Applied answer does not serialize as JSON: {e}")),
                    Ok(Verified::NotApplied) => Ok(Verified::NotApplied),
                    Ok(Verified::Unknown) => Ok(Verified::Unknown),
                    Err(e) => Err(format!("verify failed: {e}")),
                }
            })
        });
        self.verifiers.insert(tool.into(), boxed);
        self
    }

    /// How long the settler holds a record while verify runs (default 30 s): a caller of the
    /// key meanwhile waits, as for any holder. Verify is given half of it to answer, else its
    /// answer counts as Unknown.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease.max(Duration::from_millis(2));
        self
    }

    /// A record whose verify has answered Unknown for this long (since its first Unknown answer,
    /// by the record's time of making) is reported as needing an operator (default one hour);
    /// `None`: never by age.
    pub fn operator_after(mut self, age: impl Into<Option<Duration>>) -> Self {
        self.operator_after = age.into();
        self
    }

    /// A record whose verify has answered Unknown this many times is reported as needing an
    /// operator (default: by age only).
    pub fn operator_after_unknowns(mut self, answers: impl Into<Option<u32>>) -> Self {
        self.operator_after_unknowns = answers.into();
        self
    }

    /// At most this many records per pass (default 1000), newest first.
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = limit.max(1);
        self
    }

    /// The tools the settler has verify functions for.
    pub fn tools(&self) -> impl Iterator<Item = &str> {
        self.verifiers.keys().map(String::as_str)
    }

    /// One pass over the records kept as ambiguous that `pass` selects.
    pub async fn run_once(&self, pass: &Pass) -> Result<SettleReport, StoreError> {
        self.run_once_with(pass, |_, _, _| {}).await
    }

    /// [`Settler::run_once`], calling `progress(done, of, record)` after each record.
    pub async fn run_once_with(
        &self,
        pass: &Pass,
        mut progress: impl FnMut(usize, usize, &(IdempotencyKey, String, Settled)),
    ) -> Result<SettleReport, StoreError> {
        let mut filter = RecordFilter::new()
            .state(StateKind::Ambiguous)
            .limit(self.limit);
        filter.tool = pass.tool.clone();
        filter.tenant = pass.tenant.clone();
        let records = self.store.list(&filter).await?;
        let mut report = SettleReport {
            records: Vec::with_capacity(records.len()),
            dry_run: pass.dry_run,
        };
        let of = records.len();
        for record in records {
            let settled = self.settle_record(&record, pass.dry_run).await;
            crate::meters::settled(&record.tool, settled.as_str());
            match &settled {
                Settled::Unknown {
                    needs_operator: true,
                    answers,
                    ..
                } => tracing::warn!(
                    key = %record.key, tool = %record.tool, answers,
                    "idemkit settle: a record kept as ambiguous needs an operator (its verify answered unknown past the bound): `idemkit resolve`"
                ),
                Settled::Failed(why) => tracing::warn!(
                    key = %record.key, tool = %record.tool, why = %why,
                    "idemkit settle: the store failed"
                ),
                other => tracing::debug!(
                    key = %record.key, tool = %record.tool, settled = other.as_str(),
                    "idemkit settle"
                ),
            }
            report.records.push((record.key, record.tool, settled));
            progress(
                report.records.len(),
                of,
                report.records.last().expect("pushed"),
            );
        }
        if !report.records.is_empty() {
            tracing::info!(
                records = report.records.len(),
                applied = report.count("applied"),
                not_applied = report.count("not_applied"),
                unknown = report.count("unknown"),
                needs_operator = report.needing_operator(),
                dry_run = report.dry_run,
                "idemkit settle: a pass over records kept as ambiguous"
            );
        }
        Ok(report)
    }

    async fn settle_record(&self, record: &Record, dry_run: bool) -> Settled {
        let RecordState::Ambiguous { note } = &record.state else {
            return Settled::Gone;
        };
        let Some(verify) = self.verifiers.get(&record.tool) else {
            return Settled::NoVerify;
        };
        if dry_run {
            return Settled::WouldVerify;
        }
        let listed = tokio::time::Instant::now();
        // Taken over as a caller would: the record's fingerprint, a lease of the settler's own.
        let token = LeaseToken::new();
        let ttl = record.expires_in.max(self.lease);
        let tenant: Option<Arc<str>> = record.tenant.as_deref().map(Arc::from);
        let req = ClaimRequest::new(
            record.key,
            &record.tool,
            record.fingerprint,
            token,
            self.lease,
            ttl,
        )
        .with_tenant(tenant.clone());
        match self.store.claim(&req).await {
            Err(e) => return Settled::Failed(e.to_string()),
            Ok(Claim::Acquired { takeover: Some(_) }) => {}
            Ok(Claim::Acquired { takeover: None }) => {
                // It was settled or expired since it was listed: this claim made a new record.
                return match self.store.release(record.key, token).await {
                    Ok(_) => Settled::Gone,
                    Err(e) => Settled::Failed(format!(
                        "{e}; the settler's own claim of {} may stand until its lease ({:?}) ends",
                        record.key, self.lease
                    )),
                };
            }
            Ok(Claim::Existing(existing)) => {
                return match existing.state {
                    ExistingState::Running { .. } => Settled::Busy,
                    _ => Settled::Gone,
                };
            }
        }
        // S26: asked with the record's key current, as a call's verification is.
        let asked = crate::exec::current::under(record.key, || verify(record.key));
        let asked = async {
            match tenant {
                Some(t) => crate::idem::as_tenant(t, asked).await,
                None => asked.await,
            }
        };
        let answer = match tokio::time::timeout(self.lease / 2, asked).await {
            Ok(answer) => answer,
            Err(_) => Err(format!("verify did not answer within {:?}", self.lease / 2)),
        };
        crate::meters::verified(
            &record.tool,
            match &answer {
                Ok(Verified::Applied(_)) => "applied",
                Ok(Verified::NotApplied) => "not_applied",
                Ok(Verified::Unknown) => "unknown",
                Err(_) => "error",
            },
        );
        let keep = ttl.saturating_sub(listed.elapsed());
        let written = match &answer {
            Ok(Verified::Applied(outcome)) => {
                self.store
                    .settle(
                        &record.key,
                        token,
                        Decision::Applied,
                        Some(outcome),
                        Some("idemkit settler: the tool's verify found the effect happened"),
                        keep,
                    )
                    .await
            }
            Ok(Verified::NotApplied) => {
                self.store
                    .settle(
                        &record.key,
                        token,
                        Decision::NotApplied,
                        None,
                        Some("idemkit settler: the tool's verify found the effect did not happen"),
                        keep,
                    )
                    .await
            }
            Ok(Verified::Unknown) | Err(_) => {
                let (original, counted) = unknowns_of(note);
                let (n, since) = counted.unwrap_or((0, unix_ms(record.created)));
                let answers = n.saturating_add(1);
                let kept = with_unknowns(original, answers, since);
                let written = self
                    .store
                    .mark_ambiguous(record.key, token, &kept, keep.max(Duration::from_millis(1)))
                    .await;
                let age = Duration::from_millis(unix_ms(SystemTime::now()).saturating_sub(since));
                let needs_operator = self.operator_after_unknowns.is_some_and(|b| answers >= b)
                    || self.operator_after.is_some_and(|b| age >= b);
                return match written {
                    Ok(Written::Applied) => Settled::Unknown {
                        answers,
                        needs_operator,
                        why: answer.err(),
                    },
                    Ok(Written::Fenced) => Settled::Fenced,
                    Err(e) => Settled::Failed(format!(
                        "{e}; {} stays the settler's until its lease ({:?}) ends, then is taken over as \
                         ambiguous by the next call",
                        record.key, self.lease
                    )),
                };
            }
        };
        match written {
            Ok(Written::Applied) if matches!(answer, Ok(Verified::Applied(_))) => Settled::Applied,
            Ok(Written::Applied) => Settled::NotApplied,
            Ok(Written::Fenced) => Settled::Fenced,
            Err(e) => Settled::Failed(format!(
                "{e}; {} stays the settler's until its lease ({:?}) ends, then is taken over as ambiguous by \
                 the next call",
                record.key, self.lease
            )),
        }
    }
}
