//! S28: settling records kept as ambiguous without waiting for a caller.
//!
//! A call whose outcome is unknown, of a tool that cannot re-send safely, leaves its record kept
//! as ambiguous (S20): no later call of that key runs the body until something settles it. A
//! [`Settler`] settles it by asking the tool's verify function, found by the tool's name: a tool
//! written with `#[side_effect(verify = path)]` registers its verify (the registry its attribute
//! fills, [`ToolInfo::settle_verify`](crate::ToolInfo::settle_verify)), and its calls keep their
//! arguments with their records, so the settler asks the tool's own verify with them and the
//! host lists nothing by hand. A verify given by hand ([`Settler::verify`], given the key)
//! overrides it, and serves a tool not written with the attribute, or a record kept before its
//! arguments were (one without [`Record::arguments`]):
//!
//! - [`Verified::Applied`]`(v)`: the record completes with `v` (later calls replay it);
//! - [`Verified::NotApplied`]: the record is released (the next call runs the operation);
//! - [`Verified::Unknown`] (or an error, or no answer in time): the record stays ambiguous and
//!   the answer is counted with it; past the host's bound ([`Settler::operator_after`],
//!   [`Settler::operator_after_unknowns`]) it is reported as needing an operator.
//!
//! Each decision is kept with the record as an operator's `idemkit resolve` is (S24), and shown
//! by `idemkit show`; the Unknown answers are counted with the record (S32,
//! [`Record::unknowns`](crate::store::Record::unknowns)), by callers' verifications too, and
//! kept through every takeover.
//!
//! A record a holder left Running with its lease lapsed (its process died, stalled or was cut
//! off mid-way; its body may have started) reads as an ambiguous one for operators and for the
//! settler (S31), so a pass settles it as it does an ambiguous record, without waiting for a
//! caller; that holds for the settler's own hold too (S30): a pass dropped mid-verify gives its
//! claim back at once, and one whose process died leaves the record ambiguous and listed again
//! as soon as its lease lapses.
//!
//! The settler takes a record over as a caller does: it claims the key with the record's
//! fingerprint under a lease token of its own, asks verify while it holds the lease, and writes
//! its decision only while the record is still held under that token ([`Records::settle`]). A
//! caller of the same key meanwhile waits for it as for any holder (S7), and a caller that holds
//! the key makes the settler pass it by: the body and verify never run twice at once.
//!
//! Either way the verify runs under the record's key and tenant, as a caller's verification
//! does. A tool's own verify is given the arguments its call kept (JSON, as its parameters
//! serialize: a field its type skips with `#[serde(skip)]` comes back as its `Default`); a verify
//! given by hand is given the key only, and looks the operation up by the key it was sent with,
//! as [`Tool::verify`](crate::Tool::verify)'s does.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use std::sync::Arc;
//! use std::time::Duration;
//! use idem_runtime::{IdempotencyKey, MemoryStore, Settler, Verified};
//!
//! // A tool built with `Tool` (not the attribute) has no registered verify: give it by hand.
//! async fn was_sent(key: IdempotencyKey) -> Result<Verified<String>, std::io::Error> {
//!     let _ = key; // ask the provider's log for the message sent with this key
//!     Ok(Verified::NotApplied)
//! }
//!
//! let store = Arc::new(MemoryStore::new());
//! let settler = Settler::new(store) // every `#[side_effect(verify = …)]` tool's own, by name
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
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::error::StoreError;
use crate::exec::Verified;
use crate::key::IdempotencyKey;
use crate::registry::{StoredVerify, stored_verifies};
use crate::store::{
    Claim, ClaimRequest, Decision, ExistingState, LeaseToken, Record, RecordFilter, RecordState,
    Records, StateKind, Store, Written,
};

/// How the note of every decision a [`Settler`] keeps begins ([`Resolution::note`]): what
/// `idemkit show` reads to say the settler, not an operator, decided.
///
/// [`Resolution::note`]: crate::store::Resolution::note
pub const SETTLER_NOTE_PREFIX: &str = "idemkit settler: ";

/// How long a settler's decision is kept (the executor's default time-to-live): an ambiguous
/// record has no time-to-live of its own to keep it for (S34).
const DECIDED_TTL: Duration = Duration::from_secs(24 * 60 * 60);

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
    /// Given by hand ([`Settler::verify`]): asked with the key; they override the registered.
    verifiers: BTreeMap<String, Arc<VerifyFn>>,
    /// The tools' own, registered by their attributes: asked with the arguments a call kept.
    registered: BTreeMap<&'static str, StoredVerify>,
    lease: Duration,
    operator_after: Option<Duration>,
    operator_after_unknowns: Option<u32>,
    limit: usize,
}

impl fmt::Debug for Settler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settler")
            .field("tools", &self.tools().collect::<Vec<_>>())
            .field("lease", &self.lease)
            .field("operator_after", &self.operator_after)
            .field("operator_after_unknowns", &self.operator_after_unknowns)
            .field("limit", &self.limit)
            .finish_non_exhaustive()
    }
}

/// How a record's verify is asked.
enum Asker {
    /// Given by hand: with the key.
    ByKey(Arc<VerifyFn>),
    /// The tool's own, registered: with the arguments its call kept.
    Stored(StoredVerify, Vec<u8>),
}

impl Asker {
    fn ask(&self, key: IdempotencyKey) -> Pin<Box<dyn Future<Output = Answer> + Send>> {
        match self {
            Asker::ByKey(verify) => verify(key),
            Asker::Stored(verify, arguments) => verify(arguments, key),
        }
    }
}

/// S30: gives the settler's claim back if its pass is dropped (a timeout around
/// [`Settler::run_once`], a shutdown) before its decision was written: the record becomes at once
/// what it was before the claim ([`Store::restore`]), instead of waiting for the settler's lease
/// to lapse. Guarded by the settler's token like every holder's write: a decision written
/// meanwhile fences it out.
struct GiveBack {
    store: Arc<dyn SettleStore>,
    key: IdempotencyKey,
    token: LeaseToken,
    note: String,
    ttl: Duration,
    armed: bool,
}

impl Drop for GiveBack {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // Without a runtime (its shutdown), the settler's lease lapses instead, and the record
        // then reads as it did before the claim (S31).
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (store, key, token) = (self.store.clone(), self.key, self.token);
        let (note, ttl) = (std::mem::take(&mut self.note), self.ttl);
        runtime.spawn(async move {
            match store.restore(key, token, &note, ttl).await {
                Ok(written) => tracing::debug!(
                    %key, ?written,
                    "idemkit settle: a pass was dropped mid-verify; its claim was given back"
                ),
                Err(e) => tracing::warn!(
                    %key, error = %e,
                    "idemkit settle: a pass was dropped mid-verify and its claim could not be given back; \
                     the record reads as before once the settler's lease lapses"
                ),
            }
        });
    }
}

impl Settler {
    /// A settler of `store`'s records that asks every `#[side_effect(verify = …)]` tool's own
    /// verify, found by the tool's name in the registry the attributes fill (S28; a name two
    /// tools share has none, S21), with a lease of 30 s, reporting a record as needing an
    /// operator after an hour of Unknown answers. [`Settler::verify`] adds or overrides one.
    pub fn new<S: SettleStore>(store: Arc<S>) -> Self {
        Settler {
            store,
            verifiers: BTreeMap::new(),
            registered: stored_verifies(),
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
    ///
    /// Not needed for a tool written with `#[side_effect(verify = path)]`: [`Settler::new`]
    /// finds that one by name. Given, it overrides it: for a tool built with [`Tool`](crate::Tool)
    /// or by hand, one whose arguments do not serialize, or records kept before their calls kept
    /// their arguments.
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

    /// A record whose verify has answered Unknown, and whose operation was first made at least
    /// this long ago ([`Record::first_made`], kept through takeovers), is reported as needing an
    /// operator (default one hour); `None`: never by age.
    pub fn operator_after(mut self, age: impl Into<Option<Duration>>) -> Self {
        self.operator_after = age.into();
        self
    }

    /// A record whose verify has answered Unknown this many times ([`Record::unknowns`]: the
    /// settler's answers and callers' alike, across takeovers) is reported as needing an
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

    /// The tools the settler has verify functions for: given by hand, and registered.
    pub fn tools(&self) -> impl Iterator<Item = &str> {
        let mut tools: Vec<&str> = self.verifiers.keys().map(String::as_str).collect();
        tools.extend(self.registered.keys().copied());
        tools.sort_unstable();
        tools.dedup();
        tools.into_iter()
    }

    /// How the settler asks about `record`: its verify given by hand (with the key), else its
    /// tool's own with the arguments its call kept; `None`: left for an operator.
    fn asker(&self, record: &Record) -> Option<Asker> {
        if let Some(verify) = self.verifiers.get(&record.tool) {
            return Some(Asker::ByKey(verify.clone()));
        }
        let verify = self.registered.get(record.tool.as_str())?;
        let arguments = record.arguments.clone()?;
        Some(Asker::Stored(verify.clone(), arguments))
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
            oldest_unknown: None,
        };
        let of = records.len();
        for record in records {
            let settled = self.settle_record(&record, pass.dry_run).await;
            crate::meters::settled(&record.tool, settled.as_str());
            // S34: still waiting for a decision after this pass.
            if matches!(
                settled,
                Settled::Unknown { .. }
                    | Settled::NoVerify
                    | Settled::WouldVerify
                    | Settled::Failed(_)
            ) {
                report.left_unknown(&record);
            }
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
                oldest_unknown_seconds = report.oldest_unknown_age().map(|a| a.as_secs()),
                "idemkit settle: a pass over records kept as ambiguous"
            );
        }
        // S34: how long the oldest unknown outcome has waited (0: none left).
        crate::meters::oldest_unknown(report.oldest_unknown_age());
        Ok(report)
    }

    async fn settle_record(&self, record: &Record, dry_run: bool) -> Settled {
        let RecordState::Ambiguous { note } = &record.state else {
            return Settled::Gone;
        };
        let Some(asker) = self.asker(record) else {
            return Settled::NoVerify;
        };
        if dry_run {
            return Settled::WouldVerify;
        }
        let listed = tokio::time::Instant::now();
        // Taken over as a caller would: the record's fingerprint, a lease of the settler's own.
        let token = LeaseToken::new();
        // How long its decision is kept: an ambiguous record never expires by time (S34), so
        // its own `expires_in` says nothing of that; the executor's default time-to-live.
        let ttl = match record.expires_in {
            Duration::MAX => DECIDED_TTL,
            left => left.max(self.lease),
        };
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
            // An ambiguous record, or a holder's whose lease lapsed (S31): settled alike.
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
        // S30: dropped before its decision is written, the claim is given back at once.
        let mut give_back = GiveBack {
            store: self.store.clone(),
            key: record.key,
            token,
            note: note.clone(),
            ttl,
            armed: true,
        };
        // S26: asked with the record's key current, as a call's verification is.
        let asked = crate::scope::current::under(record.key, || asker.ask(record.key));
        let asked = async {
            match tenant {
                Some(t) => crate::scope::as_tenant(t, asked).await,
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
                // S32: counted with the record, which keeps the note it was listed with.
                let written = self
                    .store
                    .mark_unknown(record.key, token, note, keep.max(Duration::from_millis(1)))
                    .await;
                // Written (or fenced): nothing to give back. A store that failed is asked to
                // give the claim back instead, as for a dropped pass.
                give_back.armed = written.is_err();
                // The count as the store keeps it (a caller's answers between the listing and
                // this claim included).
                let counted = match &written {
                    Ok(Written::Applied) => self
                        .store
                        .get(&record.key)
                        .await
                        .ok()
                        .flatten()
                        .map_or(0, |r| r.unknowns),
                    _ => 0,
                };
                let answers = counted.max(record.unknowns.saturating_add(1));
                let age = SystemTime::now()
                    .duration_since(record.first_made)
                    .unwrap_or_default();
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
                        "{e}; {} stays the settler's until its lease ({:?}) ends, then reads as ambiguous \
                         again",
                        record.key, self.lease
                    )),
                };
            }
        };
        give_back.armed = written.is_err();
        match written {
            Ok(Written::Applied) if matches!(answer, Ok(Verified::Applied(_))) => Settled::Applied,
            Ok(Written::Applied) => Settled::NotApplied,
            Ok(Written::Fenced) => Settled::Fenced,
            Err(e) => Settled::Failed(format!(
                "{e}; {} stays the settler's until its lease ({:?}) ends, then reads as ambiguous again",
                record.key, self.lease
            )),
        }
    }
}
