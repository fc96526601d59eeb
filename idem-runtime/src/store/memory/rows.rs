//! The map's records (`Rec`) read as [`Record`]s, their times on the store's clock as wall-clock
//! times.

use uuid::Uuid;

use super::clock::Tick;
use super::{Inner, Kept, MemoryStore, Rec, State};
use crate::key::IdempotencyKey;
use crate::store::record::lapsed;
use crate::store::{Record, RecordState, StateKind};

pub(super) fn kind(state: &State) -> StateKind {
    match state {
        State::Running { .. } => StateKind::Running,
        State::Completed { .. } => StateKind::Completed,
        State::Ambiguous { .. } => StateKind::Ambiguous,
    }
}

/// The kind of `rec` as operators read it at `now` (S31): a live Running record whose holder's
/// lease lapsed is an ambiguous one.
pub(super) fn shown_kind(rec: &Rec, now: Tick) -> StateKind {
    match rec.state {
        State::Running { lease_until, .. } if lease_until <= now && rec.expires_at > now => {
            StateKind::Ambiguous
        }
        _ if rec.is_tombstone(now) => StateKind::Tombstone,
        ref state => kind(state),
    }
}

impl MemoryStore {
    /// The record `rec` of `key` as operators see it, the decision kept for it included.
    pub(super) fn record(&self, inner: &Inner, key: [u8; 16], rec: &Rec, now: Tick) -> Record {
        let story = match inner.stories.is_empty() {
            true => None,
            false => inner.stories.get(&key),
        };
        Record {
            key: IdempotencyKey::from_uuid(Uuid::from_bytes(key)),
            tool: inner.names.str(rec.tool).to_owned(),
            fingerprint: rec.fingerprint,
            state: match &rec.state {
                // S31: its holder's lease lapsed (the holder died, stalled or was cut off): read
                // as the ambiguous record it may be, with the note it kept.
                State::Running { lease_until, .. }
                    if *lease_until <= now && rec.expires_at > now =>
                {
                    lapsed(
                        self.clock.wall(*lease_until),
                        story.and_then(|s| s.note.as_deref()),
                    )
                }
                State::Running { token, lease_until } => RecordState::Running {
                    token: *token,
                    lease_remaining: now.until(*lease_until),
                },
                // S33: done, past its time-to-live.
                State::Completed { .. } if rec.is_tombstone(now) => RecordState::Tombstone,
                State::Completed { outcome, .. } => RecordState::Completed {
                    outcome: outcome.to_vec(),
                },
                State::Ambiguous { note, .. } => RecordState::Ambiguous {
                    note: note.to_string(),
                },
            },
            // S34: a running or ambiguous record never expires by time.
            expires_in: match rec.expires_at {
                Tick::NEVER => std::time::Duration::MAX,
                at => now.until(at),
            },
            created: self.clock.wall(rec.created),
            updated: self.clock.wall(rec.updated),
            tenant: rec.tenant.map(|t| inner.names.str(t).to_owned()),
            resolution: Self::kept(inner, &key, now).map(|k| k.resolution.clone()),
            first_made: self.clock.wall(story.map_or(rec.created, |s| s.first_made)),
            unknowns: story.map_or(0, |s| s.unknowns),
            unknown_since: story
                .and_then(|s| s.unknown_since)
                .map(|t| self.clock.wall(t)),
            arguments: match inner.arguments.is_empty() {
                true => None,
                false => inner.arguments.get(&key).map(|a| a.to_vec()),
            },
        }
    }

    /// The decision kept for `key`, if it is still shown.
    pub(super) fn kept<'a>(inner: &'a Inner, key: &[u8; 16], now: Tick) -> Option<&'a Kept> {
        if inner.resolutions.is_empty() {
            return None;
        }
        // An applied decision stays with its completed record, a tombstone too (S33: how it
        // ended); a not-applied one is shown until `kept_until`.
        inner.resolutions.get(key).filter(|k| {
            k.kept_until > now || k.resolution.decision == crate::store::Decision::Applied
        })
    }

    /// Whether `rec` is shown to operators: live, or released by an operator's not-applied and
    /// still kept to show that decision.
    pub(super) fn shown(inner: &Inner, key: &[u8; 16], rec: &Rec, now: Tick) -> bool {
        rec.counts(now) || Self::kept(inner, key, now).is_some()
    }
}
