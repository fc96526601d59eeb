//! Rows decoded into records (and the units they are stored in: unix milliseconds), refusing
//! anything this build did not write.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::types::ValueRef;
use uuid::Uuid;

use crate::error::StoreError;
use crate::fingerprint::Fingerprint;
use crate::key::IdempotencyKey;
use crate::store::record::lapsed;
use crate::store::{Decision, LeaseToken, Record, RecordState, Resolution};

pub(super) fn now_ms() -> i64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

pub(super) fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Unix milliseconds as a time (0, or anything before: the epoch, "unknown").
pub(super) fn wall_time(unix_ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(u64::try_from(unix_ms).unwrap_or(0))
}

pub(super) fn remaining(until: i64, now: i64) -> Duration {
    Duration::from_millis(u64::try_from(until.saturating_sub(now)).unwrap_or(0))
}

/// Reads a row of [`sql::LIVE`](super::sql::LIVE), refusing anything this build did not write.
pub(super) fn decode(
    row: &rusqlite::Row<'_>,
    key: &IdempotencyKey,
    path: &Path,
) -> Result<Record, StoreError> {
    let bad = |column: &str, what: &str| corrupt(path, key, column, what);
    let col = |i: usize| row.get_ref(i).map_err(|e| bad("?", &e.to_string()));
    let text = |i: usize, name: &str| match col(i)? {
        ValueRef::Text(t) => std::str::from_utf8(t)
            .map(str::to_owned)
            .map_err(|_| bad(name, "is not UTF-8")),
        other => Err(bad(name, &format!("is {:?}, not text", other.data_type()))),
    };
    let blob = |i: usize, name: &str, len: Option<usize>| match col(i)? {
        ValueRef::Blob(b) if len.is_none_or(|n| b.len() == n) => Ok(b.to_vec()),
        ValueRef::Blob(b) => Err(bad(
            name,
            &format!("is {} bytes, not {}", b.len(), len.unwrap_or(0)),
        )),
        other => Err(bad(
            name,
            &format!("is {:?}, not a blob", other.data_type()),
        )),
    };
    let int = |i: usize, name: &str| match col(i)? {
        ValueRef::Integer(n) => Ok(n),
        other => Err(bad(
            name,
            &format!("is {:?}, not an integer", other.data_type()),
        )),
    };
    let now = now_ms();
    let tool = text(0, "tool")?;
    let fingerprint = Fingerprint(
        blob(1, "fingerprint", Some(32))?
            .try_into()
            .expect("length checked"),
    );
    let state = match text(2, "state")?.as_str() {
        "running" => {
            let token = Uuid::from_slice(&blob(3, "token", Some(16))?).expect("length checked");
            RecordState::Running {
                token: LeaseToken(token),
                lease_remaining: remaining(int(4, "lease_until")?, now),
            }
        }
        // S33: past its expiry, a tombstone (its outcome dropped by a prune, or not yet).
        "completed" if int(7, "expires_at")? <= now => RecordState::Tombstone,
        "completed" => RecordState::Completed {
            outcome: blob(5, "outcome", None)?,
        },
        "ambiguous" => RecordState::Ambiguous {
            note: match col(6)? {
                ValueRef::Null => String::new(),
                _ => text(6, "note")?,
            },
        },
        other => {
            return Err(bad(
                "state",
                &format!("is `{other}`, not running, completed or ambiguous"),
            ));
        }
    };
    // S34: a running or ambiguous record with no decision never expires by time (one written
    // before with an expiry too).
    let done = matches!(
        state,
        RecordState::Completed { .. } | RecordState::Tombstone
    );
    let never = !done && matches!(col(11)?, ValueRef::Null);
    Ok(Record {
        key: *key,
        tool,
        fingerprint,
        state,
        expires_in: match never {
            true => std::time::Duration::MAX,
            false => remaining(int(7, "expires_at")?, now),
        },
        created: wall_time(int(8, "created")?),
        updated: wall_time(int(9, "updated")?),
        tenant: match col(10)? {
            ValueRef::Null => None,
            _ => Some(text(10, "tenant")?),
        },
        resolution: match col(11)? {
            ValueRef::Null => None,
            _ => Some(Resolution::new(
                {
                    let word = text(11, "resolution")?;
                    match Decision::from_stored(word.as_bytes()) {
                        // S33: on a completed row, a tombstone an operator forgot.
                        Some(Decision::NotApplied) if done => Decision::Forgotten,
                        Some(Decision::Forgotten) | None => {
                            return Err(bad(
                                "resolution",
                                &format!("is `{word}`, not applied or not_applied"),
                            ));
                        }
                        Some(decision) => decision,
                    }
                },
                match col(12)? {
                    ValueRef::Null => UNIX_EPOCH,
                    _ => wall_time(int(12, "resolved_at")?),
                },
                match col(13)? {
                    ValueRef::Null => None,
                    _ => Some(text(13, "resolution_note")?),
                },
            )),
        },
        // S32: NULL in a record written before schema 6: its `created`.
        first_made: match col(15)? {
            ValueRef::Null => wall_time(int(8, "created")?),
            _ => wall_time(int(15, "first_made")?),
        },
        unknowns: u32::try_from(int(16, "unknowns")?).unwrap_or(0),
        unknown_since: match col(17)? {
            ValueRef::Null => None,
            _ => Some(wall_time(int(17, "unknown_since")?)),
        },
        // S28: NULL for a tool without `verify`, and in a record written before schema 7.
        arguments: match col(18)? {
            ValueRef::Null => None,
            _ => Some(blob(18, "arguments", None)?),
        },
    })
}

/// [`decode`], as operators and the settler read it (S31): a live running record whose
/// holder's lease lapsed is an ambiguous one, with the note it kept from the ambiguous record
/// it was taken over from.
pub(super) fn decode_shown(
    row: &rusqlite::Row<'_>,
    key: &IdempotencyKey,
    path: &Path,
) -> Result<Record, StoreError> {
    let mut record = decode(row, key, path)?;
    if let RecordState::Running {
        lease_remaining, ..
    } = record.state
        && lease_remaining.is_zero()
        && !record.expires_in.is_zero()
    {
        let lease_until: i64 = row
            .get(4)
            .map_err(|e| corrupt(path, key, "lease_until", &e.to_string()))?;
        let note: Option<String> = row
            .get(6)
            .map_err(|e| corrupt(path, key, "note", &e.to_string()))?;
        record.state = lapsed(wall_time(lease_until), note.as_deref());
    }
    Ok(record)
}

pub(super) fn corrupt(path: &Path, key: &IdempotencyKey, column: &str, what: &str) -> StoreError {
    StoreError::corrupt(format!(
        "the record of key {key} in {} is corrupt: its `{column}` {what}; delete that row \
         (`DELETE FROM records WHERE key = '{key}'`, which forgets whether the operation ran) or restore the file \
         from a backup",
        path.display()
    ))
}
