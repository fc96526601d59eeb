//! The statements, each one state transition (see the state machine in [`crate::store`]).
//!
//! `:now` is the caller's clock in unix milliseconds; `:lease_until` and `:expires_at` are
//! `:now` plus the lease and the time-to-live, computed (saturating) by the caller.

/// `application_id` of an idemkit file ("idkt"): a file with another one is not ours.
pub const APPLICATION_ID: i64 = 0x6964_6b74;

/// The schema this build writes; `MIGRATIONS[v]` brings version `v` to `v + 1`.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Migrations, in order; each runs in the transaction that also sets `user_version`. Never
/// edit a released one: add the next.
pub const MIGRATIONS: &[&str] = &[
    // v0 → v1: the records and the operation ids.
    "CREATE TABLE records (
        key         TEXT    NOT NULL PRIMARY KEY,                        -- the idempotency key (UUID text)
        tool        TEXT    NOT NULL,                                    -- for operators
        fingerprint BLOB    NOT NULL CHECK (length(fingerprint) = 32),   -- SHA-256 of the other arguments
        state       TEXT    NOT NULL CHECK (state IN ('running', 'completed', 'ambiguous')),
        token       BLOB    CHECK (length(token) = 16),                  -- the lease holder, while running
        lease_until INTEGER,                                             -- unix ms; past it, a retry takes over
        outcome     BLOB,                                                -- the outcome (JSON), once completed
        note        TEXT,                                                -- why it is ambiguous
        expires_at  INTEGER NOT NULL,                                    -- unix ms; past it, the record is absent
        CHECK ((state = 'running') = (token IS NOT NULL AND lease_until IS NOT NULL)),
        CHECK ((state = 'completed') = (outcome IS NOT NULL))
    ) STRICT;
    CREATE INDEX records_by_expiry ON records (expires_at);
    CREATE TABLE operations (
        name TEXT NOT NULL PRIMARY KEY,
        id   BLOB NOT NULL CHECK (length(id) = 16)                      -- a UUID v4, minted once
    ) STRICT;",
    // v1 → v2: when each record was made and last changed, for operators (unix ms; 0 for a
    // record written before: unknown), and an index for listing newest first.
    "ALTER TABLE records ADD COLUMN created INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE records ADD COLUMN updated INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX records_by_created ON records (created);",
    // v2 → v3: the scope (tenant) a record was made under, for operators (NULL: none, or a
    // record written before).
    "ALTER TABLE records ADD COLUMN tenant TEXT;",
];

/// absent (no row at all) → running: the usual claim, one statement. Returns the token only when
/// it inserted the record; on any row of the key (live or expired) it does nothing, and the claim
/// reads that row and runs [`CLAIM`].
pub const INSERT_NEW: &str = "
    INSERT INTO records (key, tool, fingerprint, state, token, lease_until, expires_at, created, updated, tenant)
    VALUES (:key, :tool, :fingerprint, 'running', :token, :lease_until, :expires_at, :now, :now, :tenant)
    ON CONFLICT (key) DO NOTHING
    RETURNING token";

/// absent | expired → running (a new record);
/// running with the lease expired | ambiguous, same fingerprint → running (takeover).
/// Returns the token only when the caller took the record.
pub const CLAIM: &str = "
    INSERT INTO records (key, tool, fingerprint, state, token, lease_until, expires_at, created, updated, tenant)
    VALUES (:key, :tool, :fingerprint, 'running', :token, :lease_until, :expires_at, :now, :now, :tenant)
    ON CONFLICT (key) DO UPDATE SET
        tool = excluded.tool, fingerprint = excluded.fingerprint, state = 'running',
        token = excluded.token, lease_until = excluded.lease_until,
        outcome = NULL, note = NULL, expires_at = excluded.expires_at,
        created = excluded.created, updated = excluded.updated, tenant = excluded.tenant
    WHERE records.expires_at <= :now
       OR (records.fingerprint = excluded.fingerprint
           AND (records.state = 'ambiguous'
                OR (records.state = 'running' AND records.lease_until <= :now)))
    RETURNING token";

/// The live record a claim did not take (read in the claim's transaction).
pub const LIVE: &str = "
    SELECT tool, fingerprint, state, token, lease_until, outcome, note, expires_at, created, updated, tenant
    FROM records WHERE key = :key AND expires_at > :now";

/// running, held by :token, not expired → completed.
pub const COMPLETE: &str = "
    UPDATE records SET state = 'completed', outcome = :outcome, token = NULL, lease_until = NULL,
                       expires_at = :expires_at, updated = :now
    WHERE key = :key AND state = 'running' AND token = :token AND expires_at > :now";

/// running, held by :token, not expired → ambiguous (the next same-fingerprint claim takes it).
pub const MARK_AMBIGUOUS: &str = "
    UPDATE records SET state = 'ambiguous', note = :note, token = NULL, lease_until = NULL,
                       expires_at = :expires_at, updated = :now
    WHERE key = :key AND state = 'running' AND token = :token AND expires_at > :now";

/// running, its lease ending further ahead than :cap (now + a lease: written by a clock
/// ahead of this one) → running, the lease ending at :cap.
pub const CAP_LEASE: &str = "
    UPDATE records SET lease_until = :cap
    WHERE key = :key AND state = 'running' AND lease_until > :cap";

/// running, held by :token, not expired → running, the lease ending at :lease_until; the
/// expiry moved to the lease end if that is later.
pub const RENEW: &str = "
    UPDATE records SET lease_until = :lease_until, expires_at = max(expires_at, :lease_until),
                       updated = :now
    WHERE key = :key AND state = 'running' AND token = :token AND expires_at > :now";

/// running, held by :token, not expired → absent (it did not happen: a later call may run).
pub const RELEASE: &str = "
    DELETE FROM records
    WHERE key = :key AND state = 'running' AND token = :token AND expires_at > :now";

/// expired → absent, at most :limit rows, oldest first.
pub const PRUNE: &str = "
    DELETE FROM records WHERE key IN (
        SELECT key FROM records WHERE expires_at <= :now ORDER BY expires_at LIMIT :limit)";

/// absent → :id; present → unchanged. Returns the stored id either way.
pub const OPERATION_ID: &str = "
    INSERT INTO operations (name, id) VALUES (:name, :id)
    ON CONFLICT (name) DO UPDATE SET name = excluded.name
    RETURNING id";
