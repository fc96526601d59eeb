//! A record as operators read it: [`Record`] and where it stands, [`RecordState`].

use std::time::{Duration, SystemTime};

use super::LeaseToken;
use super::resolution::{Decision, Resolution};
use crate::fingerprint::Fingerprint;
use crate::key::IdempotencyKey;

/// A record as an operator sees it (see [`Records`](super::Records)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Record {
    /// Its key.
    pub key: IdempotencyKey,
    /// The tool that made it.
    pub tool: String,
    /// The fingerprint it was made with.
    pub fingerprint: Fingerprint,
    /// Where it stands.
    pub state: RecordState,
    /// Time until it expires. [`Duration::MAX`] for a running or ambiguous record with no
    /// decision on it: it never expires by time (S34), only a completion or a decision ends it.
    pub expires_in: Duration,
    /// When it was made (its first claim, or the takeover that restarted it), by the store's
    /// clock: SQLite's the machine's, PostgreSQL's `now()`, Redis's `TIME`, the memory store's
    /// tokio's. [`SystemTime::UNIX_EPOCH`] when the store does not know: a record written before
    /// stores kept this (schema version 1). When the operation was first made is
    /// [`Record::first_made`].
    pub created: SystemTime,
    /// When it last changed (a claim, a renewal, completion, marked ambiguous), by the same
    /// clock; [`SystemTime::UNIX_EPOCH`] when unknown, as for `created`.
    pub updated: SystemTime,
    /// The scope (tenant) it was made under, if any (`None` also for a record written before
    /// stores kept it: schema version 2).
    pub tenant: Option<String>,
    /// What an operator decided about it ([`Records::resolve`](super::Records::resolve), S24), if anything.
    ///
    /// [`Decision::Applied`]: the record is Completed with the operator's outcome.
    /// [`Decision::NotApplied`]: the record no longer counts (a claim finds its key absent and
    /// runs the operation); [`Records::get`](super::Records::get) still returns it as it stood when resolved, with
    /// [`Record::expires_in`] zero and this resolution, until the time-to-live given to
    /// `resolve` passes or a new claim of the key replaces it ([`Record::is_live`] tells them
    /// apart). [`Decision::Forgotten`] (S33): an operator forgot this tombstone; it no longer
    /// counts either, and is returned as a tombstone with this resolution until the store's
    /// tombstone setting has passed since. `None` also for a record written before stores kept
    /// decisions.
    pub resolution: Option<Resolution>,
    /// When its operation was first made (S32): its first claim, by the store's clock, kept
    /// through every takeover (a caller's or the settler's), where [`Record::created`] moves to
    /// the takeover. For a record written before stores kept it, its `created`;
    /// [`SystemTime::UNIX_EPOCH`] when that is unknown too.
    pub first_made: SystemTime,
    /// How many Unknown answers a verify function (a caller's, S19, or the settler's, S28) has
    /// given about it (S32), counted across takeovers; 0 for a record written before stores kept
    /// it.
    pub unknowns: u32,
    /// When the first of those Unknown answers came, by the store's clock; `None` before any.
    pub unknown_since: Option<SystemTime>,
    /// The call's arguments as its tool's `verify` takes them (JSON), kept so that a settler asks
    /// that verify without the caller (S28): only for a tool with `verify` whose arguments
    /// serialize; `None` for any other record, and for one written before stores kept them.
    pub arguments: Option<Vec<u8>>,
}

impl Record {
    /// A record, made and changed at an unknown time (set [`Record::created`] and
    /// [`Record::updated`] where the store knows them): for stores written outside this crate.
    pub fn new(
        key: IdempotencyKey,
        tool: impl Into<String>,
        fingerprint: Fingerprint,
        state: RecordState,
        expires_in: Duration,
    ) -> Self {
        Record {
            key,
            tool: tool.into(),
            fingerprint,
            state,
            expires_in,
            created: SystemTime::UNIX_EPOCH,
            updated: SystemTime::UNIX_EPOCH,
            tenant: None,
            resolution: None,
            first_made: SystemTime::UNIX_EPOCH,
            unknowns: 0,
            unknown_since: None,
            arguments: None,
        }
    }

    /// The same, with the call's `arguments` kept (see [`Record::arguments`]).
    pub fn with_arguments(mut self, arguments: Option<Vec<u8>>) -> Self {
        self.arguments = arguments;
        self
    }

    /// The same, with an operator's `resolution`.
    pub fn with_resolution(mut self, resolution: Option<Resolution>) -> Self {
        self.resolution = resolution;
        self
    }

    /// Whether it still counts: `false` only for a record an operator resolved as not applied
    /// (see [`Record::resolution`]), which [`Records::get`](super::Records::get) returns for a while though a claim
    /// finds its key absent.
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use idem_runtime::store::{Decision, Record, RecordState, Resolution};
    /// use idem_runtime::{Fingerprint, IdempotencyKey};
    ///
    /// let key = IdempotencyKey::derive("charge", &[("order", &1)]);
    /// let ambiguous = RecordState::Ambiguous { note: "timed out".into() };
    /// let record = Record::new(key, "charge", Fingerprint::of(&1).unwrap(), ambiguous, Duration::ZERO)
    ///     .with_resolution(Some(Resolution::new(Decision::NotApplied, SystemTime::now(), None)));
    /// assert!(!record.is_live());
    /// ```
    pub fn is_live(&self) -> bool {
        !matches!(
            self.resolution,
            Some(Resolution {
                decision: Decision::NotApplied | Decision::Forgotten,
                ..
            })
        )
    }

    /// The same, made under `tenant`.
    pub fn with_tenant(mut self, tenant: Option<String>) -> Self {
        self.tenant = tenant;
        self
    }

    /// The same, made at `created` and last changed at `updated` (and first made at `created`
    /// too, unless [`Record::with_history`] says otherwise).
    pub fn with_times(mut self, created: SystemTime, updated: SystemTime) -> Self {
        if self.first_made == self.created {
            self.first_made = created;
        }
        self.created = created;
        self.updated = updated;
        self
    }

    /// The same, its operation first made at `first_made`, with `unknowns` Unknown answers of
    /// verify since `unknown_since` (S32).
    pub fn with_history(
        mut self,
        first_made: SystemTime,
        unknowns: u32,
        unknown_since: Option<SystemTime>,
    ) -> Self {
        self.first_made = first_made;
        self.unknowns = unknowns;
        self.unknown_since = unknown_since;
        self
    }
}

/// S31, S30: what a Running record whose holder's lease lapsed at `lease_end` reads as for
/// operators and the settler: an ambiguous one (its holder died, stalled or was cut off; its
/// body may have started), with the note kept from the ambiguous record it was taken over from
/// (`kept`), else a note that says so.
pub(crate) fn lapsed(lease_end: SystemTime, kept: Option<&str>) -> RecordState {
    RecordState::Ambiguous {
        note: match kept {
            Some(note) if !note.is_empty() => note.to_owned(),
            _ => crate::sentences::lease_lapsed(lease_end),
        },
    }
}

/// Where a record stands, as an operator sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordState {
    /// A holder is running it under a live lease (operators read a running record whose lease
    /// lapsed as [`RecordState::Ambiguous`], S31).
    Running {
        /// The holder's token.
        token: LeaseToken,
        /// Time until its lease expires (zero when it already has).
        lease_remaining: Duration,
    },
    /// Completed with this serialized outcome.
    Completed {
        /// The outcome (JSON).
        outcome: Vec<u8>,
    },
    /// Its outcome is unknown: it ran out of attempts after a failure that may have taken
    /// effect, or its holder's lease lapsed while it ran (S31).
    Ambiguous {
        /// The last error, as the executor wrote it (for a lapsed holder's record, the note of
        /// the ambiguous record it was taken over from, or one saying the lease lapsed).
        note: String,
    },
    /// S33: done (completed, or resolved or settled as applied: [`Record::resolution`] says
    /// which) and past its time-to-live: the outcome is no longer kept or answered, and a repeat
    /// of its key gets "done on DATE; its result is no longer kept", never a run. When it was
    /// done is [`Record::updated`]; [`Record::expires_in`] is zero (its time-to-live passed).
    /// It is kept until the store's tombstone setting has passed too, or an operator forgets
    /// it.
    Tombstone,
}
