//! Redis replies decoded into records (and the units they are stored in).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::Value;

use crate::error::StoreError;
use crate::fingerprint::Fingerprint;
use crate::key::IdempotencyKey;
use crate::store::record::lapsed;
use crate::store::{
    Decision, Existing, ExistingState, LeaseToken, Record, RecordState, Resolution,
};

pub(super) fn ms(d: Duration) -> String {
    // At least 1 ms: Redis counts in milliseconds, and a zero lease would be no lease.
    d.as_millis().max(1).to_string()
}

pub(super) fn fields<const N: usize>(items: Vec<Value>) -> Result<[Value; N], StoreError> {
    let n = items.len();
    items
        .try_into()
        .map_err(|_| StoreError::corrupt(format!("a script returned {n} fields, not {N}")))
}

pub(super) fn bytes(v: Value) -> Result<Vec<u8>, StoreError> {
    match v {
        Value::BulkString(b) => Ok(b),
        Value::SimpleString(s) => Ok(s.into_bytes()),
        Value::Nil => Ok(Vec::new()),
        other => Err(unexpected(&other)),
    }
}

pub(super) fn int(v: Value) -> Result<i64, StoreError> {
    match v {
        Value::Int(n) => Ok(n),
        other => Err(unexpected(&other)),
    }
}

pub(super) fn fingerprint_of(hex: &[u8]) -> Result<Fingerprint, StoreError> {
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = [0u8; 32];
    if hex.len() != 64 {
        return Err(corrupt_field("fingerprint"));
    }
    for (i, pair) in hex.chunks(2).enumerate() {
        match (digit(pair[0]), digit(pair[1])) {
            (Some(h), Some(l)) => out[i] = h << 4 | l,
            _ => return Err(corrupt_field("fingerprint")),
        }
    }
    Ok(Fingerprint(out))
}

pub(super) fn corrupt_field(field: &str) -> StoreError {
    StoreError::corrupt(format!(
        "a record's `{field}` is not what idemkit writes; was the hash edited by hand? Delete the key"
    ))
}

pub(super) fn bad_state(state: &[u8]) -> StoreError {
    StoreError::corrupt(format!(
        "a record is in state `{}`, which idemkit never writes; delete the key",
        String::from_utf8_lossy(state)
    ))
}

pub(super) fn unexpected(v: &Value) -> StoreError {
    StoreError::corrupt(format!(
        "a script returned {v:?}, which this build of idemkit does not expect; are all workers on the same version?"
    ))
}

/// Unix milliseconds as the hash holds them ('' in a record written before they were kept:
/// the epoch, "unknown").
fn wall_time(field: &[u8]) -> SystemTime {
    let ms = std::str::from_utf8(field)
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(0);
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// Reads the `claim` script's answer about an existing record: `fingerprint, state,
/// lease_left, outcome`.
pub(super) fn existing_of(items: Vec<Value>) -> Result<Existing, StoreError> {
    let [fp, state, lease_left, outcome, tomb, updated, resolved] = fields::<7>(items)?;
    let fingerprint = fingerprint_of(&bytes(fp)?)?;
    let state = match bytes(state)?.as_slice() {
        // S33: done, past its time-to-live.
        b"completed" if bytes(tomb)? == b"1" => ExistingState::Tombstone {
            done: wall_time(&bytes(updated)?),
            resolved: bytes(resolved)? == b"1",
        },
        b"running" => ExistingState::Running {
            lease_remaining: Duration::from_millis(int(lease_left)?.max(0) as u64),
        },
        b"completed" => ExistingState::Completed {
            outcome: bytes(outcome)?.into(),
        },
        b"ambiguous" => ExistingState::Ambiguous,
        other => return Err(bad_state(other)),
    };
    Ok(Existing { fingerprint, state })
}

/// Reads the `get` script's reply: the record's 20 fields, the server's time among them, as
/// operators and the settler read it (S31: a live running record whose holder's lease lapsed
/// is an ambiguous one, with the note it kept).
pub(super) fn record_of(
    key: IdempotencyKey,
    items: Vec<Value>,
) -> Result<(Record, SystemTime), StoreError> {
    let [
        tool,
        fp,
        state,
        token,
        lease_left,
        expires_in,
        outcome,
        note,
        created,
        updated,
        now,
        tenant,
        decision,
        resolved_at,
        resolution_note,
        lease_until,
        first_made,
        unknowns,
        unknown_since,
        arguments,
    ] = fields::<20>(items)?;
    let tool = String::from_utf8(bytes(tool)?).map_err(|_| corrupt_field("tool"))?;
    let lease_left = int(lease_left)?;
    let expires_in = int(expires_in)?;
    let created = wall_time(&bytes(created)?);
    let decision = bytes(decision)?;
    // S34: a running or ambiguous record with no decision never expires by time (one written
    // before with an expiry too).
    let undecided = decision.is_empty();
    let state = match bytes(state)?.as_slice() {
        b"running" if lease_left <= 0 && (expires_in > 0 || undecided) => {
            let note = bytes(note)?;
            lapsed(
                wall_time(&bytes(lease_until)?),
                Some(String::from_utf8_lossy(&note).as_ref()),
            )
        }
        b"running" => RecordState::Running {
            token: LeaseToken(
                std::str::from_utf8(&bytes(token)?)
                    .ok()
                    .and_then(|t| t.parse().ok())
                    .ok_or_else(|| corrupt_field("token"))?,
            ),
            lease_remaining: Duration::from_millis(lease_left.max(0) as u64),
        },
        // S33: done, past its time-to-live.
        b"completed" if expires_in <= 0 => RecordState::Tombstone,
        b"completed" => RecordState::Completed {
            outcome: bytes(outcome)?,
        },
        b"ambiguous" => RecordState::Ambiguous {
            note: String::from_utf8_lossy(&bytes(note)?).into_owned(),
        },
        other => return Err(bad_state(other)),
    };
    let first_made = bytes(first_made)?;
    let unknown_since = bytes(unknown_since)?;
    let never = undecided
        && !matches!(
            state,
            RecordState::Completed { .. } | RecordState::Tombstone
        );
    let record = Record {
        key,
        tool,
        fingerprint: fingerprint_of(&bytes(fp)?)?,
        state,
        expires_in: match never {
            true => Duration::MAX,
            false => Duration::from_millis(expires_in.max(0) as u64),
        },
        created,
        // S32: '' in a record written before it was kept: its `created`.
        first_made: match first_made.is_empty() {
            true => created,
            false => wall_time(&first_made),
        },
        unknowns: std::str::from_utf8(&bytes(unknowns)?)
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0),
        unknown_since: (!unknown_since.is_empty()).then(|| wall_time(&unknown_since)),
        // S28: '' for a tool without `verify`, and in a record written before it was kept.
        arguments: Some(bytes(arguments)?).filter(|a| !a.is_empty()),
        updated: wall_time(&bytes(updated)?),
        tenant: Some(bytes(tenant)?)
            .filter(|t| !t.is_empty())
            .map(|t| String::from_utf8(t).map_err(|_| corrupt_field("tenant")))
            .transpose()?,
        resolution: match decision.as_slice() {
            b"" => None,
            word => Some(Resolution::new(
                Decision::from_stored(word).ok_or_else(|| corrupt_field("res"))?,
                wall_time(&bytes(resolved_at)?),
                match resolution_note {
                    Value::Array(note) => match <[Value; 1]>::try_from(note) {
                        Ok([note]) => Some(
                            String::from_utf8(bytes(note)?)
                                .map_err(|_| corrupt_field("res_note"))?,
                        ),
                        Err(_) => None,
                    },
                    other => return Err(unexpected(&other)),
                },
            )),
        },
    };
    let now = UNIX_EPOCH + Duration::from_millis(int(now)?.max(0) as u64);
    Ok((record, now))
}
