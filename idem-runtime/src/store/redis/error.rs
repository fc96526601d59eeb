//! Redis's failures as the store's: what each means, and whether the connection was lost.

use redis::RedisError;

use crate::error::{StoreError, StoreErrorKind};

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
