//! Redis replies decoded into records, Redis errors said as store errors.

use std::time::Duration;

use redis::{RedisError, Value};

use crate::error::{StoreError, StoreErrorKind};
use crate::fingerprint::Fingerprint;

pub(super) fn connection_lost(e: &RedisError) -> bool {
    e.is_connection_dropped() || e.is_io_error() || e.is_unrecoverable_error()
}

pub(super) fn redis_error(e: RedisError, what: &str) -> StoreError {
    let kind = if connection_lost(&e) || e.is_timeout() || e.is_connection_refusal() {
        StoreErrorKind::Unavailable
    } else {
        StoreErrorKind::Other
    };
    let said = e.to_string();
    let hint = if e.code() == Some("NOPERM")
        || said.contains("no permissions")
        || said.contains("can't access at least one of the keys")
    {
        "the Redis user lacks a permission: give it the ACL in the RedisStore docs (its commands, and the keys ~<prefix>*)"
    } else {
        "check that the server is up and that this user may run scripts (EVALSHA)"
    };
    StoreError::new(kind, format!("Redis failed while {what}: {e}; {hint}")).with_source(e)
}

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

/// Escapes the glob characters of `SCAN MATCH`, so a prefix matches only itself.
pub(super) fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}
