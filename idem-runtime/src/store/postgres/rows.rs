//! Rows decoded into records (and the units they are stored in).

use std::time::Duration;

use tokio_postgres::Row;
use uuid::Uuid;

use crate::error::StoreError;
use crate::fingerprint::Fingerprint;
use crate::key::IdempotencyKey;
use crate::store::record::lapsed;
use crate::store::{
    Decision, Existing, ExistingState, LeaseToken, Record, RecordState, Resolution,
};

pub(super) fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

pub(super) fn fingerprint_of(bytes: &[u8]) -> Result<Fingerprint, StoreError> {
    <[u8; 32]>::try_from(bytes).map(Fingerprint).map_err(|_| {
        StoreError::corrupt(format!(
            "a row's fingerprint has {} bytes, not 32; the row was not written by idemkit: delete it",
            bytes.len()
        ))
    })
}

/// Reads `fingerprint, state, outcome, lease_remaining_us, expired, updated, resolved`.
pub(super) fn existing_of(row: &Row) -> Result<Existing, StoreError> {
    let fingerprint = fingerprint_of(row.try_get(0).map_err(corrupt_row)?)?;
    let state: &str = row.try_get(1).map_err(corrupt_row)?;
    let outcome: Option<Vec<u8>> = row.try_get(2).map_err(corrupt_row)?;
    let lease_us: i64 = row.try_get(3).map_err(corrupt_row)?;
    let state = match (state, outcome) {
        ("running", _) => ExistingState::Running {
            lease_remaining: Duration::from_micros(lease_us.max(0) as u64),
        },
        // S33: done, past its time-to-live.
        ("completed", _) if row.try_get::<_, bool>(4).map_err(corrupt_row)? => {
            ExistingState::Tombstone {
                done: row
                    .try_get::<_, std::time::SystemTime>(5)
                    .map_err(corrupt_row)?
                    .max(std::time::UNIX_EPOCH),
                resolved: row.try_get(6).map_err(corrupt_row)?,
            }
        }
        ("completed", Some(outcome)) => ExistingState::Completed {
            outcome: outcome.into(),
        },
        ("ambiguous", _) => ExistingState::Ambiguous,
        (state, _) => return Err(bad_state(state)),
    };
    Ok(Existing { fingerprint, state })
}

/// Reads `RECORD_COLUMNS`: `tool, fingerprint, state, token, outcome, note,
/// lease_remaining_us, expires_in_us, created, updated, tenant, key, resolution, resolved_at,
/// resolution_note, lease_until, first_made, unknowns, unknown_since, arguments`, as operators and the
/// settler read it (S31: a live running row whose holder's lease lapsed is an ambiguous one,
/// with the note it kept).
pub(super) fn record_of(row: &Row) -> Result<Record, StoreError> {
    let tool: String = row.try_get(0).map_err(corrupt_row)?;
    let fingerprint = fingerprint_of(row.try_get(1).map_err(corrupt_row)?)?;
    let state: &str = row.try_get(2).map_err(corrupt_row)?;
    let token: Uuid = row.try_get(3).map_err(corrupt_row)?;
    let outcome: Option<Vec<u8>> = row.try_get(4).map_err(corrupt_row)?;
    let note: Option<String> = row.try_get(5).map_err(corrupt_row)?;
    let lease_us: i64 = row.try_get(6).map_err(corrupt_row)?;
    let expires_us: i64 = row.try_get(7).map_err(corrupt_row)?;
    let created: std::time::SystemTime = row.try_get(8).map_err(corrupt_row)?;
    let updated: std::time::SystemTime = row.try_get(9).map_err(corrupt_row)?;
    let tenant: Option<String> = row.try_get(10).map_err(corrupt_row)?;
    let key: Uuid = row.try_get(11).map_err(corrupt_row)?;
    let decision: Option<&str> = row.try_get(12).map_err(corrupt_row)?;
    let resolved_at: Option<std::time::SystemTime> = row.try_get(13).map_err(corrupt_row)?;
    let resolution_note: Option<String> = row.try_get(14).map_err(corrupt_row)?;
    // S34: a running or ambiguous row with no decision never expires by time (one written
    // before with an expiry too).
    let undecided = decision.is_none();
    let resolution = match decision {
        None => None,
        Some(word) => Some(Resolution::new(
            match Decision::from_stored(word.as_bytes()) {
                // S33: on a completed row, a tombstone an operator forgot.
                Some(Decision::NotApplied) if state == "completed" => Decision::Forgotten,
                Some(Decision::Forgotten) | None => return Err(bad_state(word)),
                Some(decision) => decision,
            },
            resolved_at
                .unwrap_or(std::time::UNIX_EPOCH)
                .max(std::time::UNIX_EPOCH),
            resolution_note,
        )),
    };
    let lease_until: std::time::SystemTime = row.try_get(15).map_err(corrupt_row)?;
    let first_made: Option<std::time::SystemTime> = row.try_get(16).map_err(corrupt_row)?;
    let unknowns: i32 = row.try_get(17).map_err(corrupt_row)?;
    let unknown_since: Option<std::time::SystemTime> = row.try_get(18).map_err(corrupt_row)?;
    // S28: NULL for a tool without `verify`, and in a row written before schema 7.
    let arguments: Option<Vec<u8>> = row.try_get(19).map_err(corrupt_row)?;
    let state = match (state, outcome) {
        ("running", _) if lease_us <= 0 && (expires_us > 0 || undecided) => {
            lapsed(lease_until.max(std::time::UNIX_EPOCH), note.as_deref())
        }
        ("running", _) => RecordState::Running {
            token: LeaseToken(token),
            lease_remaining: Duration::from_micros(lease_us.max(0) as u64),
        },
        // S33: done, past its time-to-live.
        ("completed", _) if expires_us <= 0 => RecordState::Tombstone,
        ("completed", Some(outcome)) => RecordState::Completed { outcome },
        ("ambiguous", _) => RecordState::Ambiguous {
            note: note.unwrap_or_default(),
        },
        (state, _) => return Err(bad_state(state)),
    };
    let never = undecided
        && !matches!(
            state,
            RecordState::Completed { .. } | RecordState::Tombstone
        );
    Ok(Record {
        key: IdempotencyKey::from_uuid(key),
        tool,
        fingerprint,
        state,
        expires_in: match never {
            true => Duration::MAX,
            false => Duration::from_micros(expires_us.max(0) as u64),
        },
        // Before the epoch: written before schema 2 (its default), unknown.
        created: created.max(std::time::UNIX_EPOCH),
        updated: updated.max(std::time::UNIX_EPOCH),
        tenant,
        resolution,
        // S32: NULL in a row written before schema 6: its `created`.
        first_made: first_made.unwrap_or(created).max(std::time::UNIX_EPOCH),
        unknowns: u32::try_from(unknowns).unwrap_or(0),
        unknown_since,
        arguments,
    })
}

pub(super) fn bad_state(state: &str) -> StoreError {
    StoreError::corrupt(format!(
        "a row is in state `{state}` without what that state needs (a completed row needs an outcome); \
         the row was not written by idemkit: delete it"
    ))
}

pub(super) fn corrupt_row(e: tokio_postgres::Error) -> StoreError {
    StoreError::corrupt(
        "a row does not have the columns idemkit wrote; was the table altered by hand?",
    )
    .with_source(e)
}
