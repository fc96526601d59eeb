//! The statements, each one state transition (see the state machine in [`crate::store`]).
//!
//! `:now` is the caller's clock in unix milliseconds; `:lease_until` and `:expires_at` are
//! `:now` plus the lease and the time-to-live, computed (saturating) by the caller.

/// `application_id` of an idemkit file ("idkt"): a file with another one is not ours.
pub(super) const APPLICATION_ID: i64 = 0x6964_6b74;

/// The schema this build writes; `MIGRATIONS[v]` brings version `v` to `v + 1`.
pub(super) const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Migrations, in order; each runs in the transaction that also sets `user_version`. Never
/// edit a released one: add the next.
pub(super) const MIGRATIONS: &[&str] = &[
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
    // v3 → v4 (S23, S24, issue 30 #8):
    // - `lease_ms`: the holder's own lease length, by which a claimer caps a lease end that lies
    //   further ahead as clock skew (NULL in a record written before: capped by the claimer's
    //   lease, as before).
    // - `token` is now also kept with a completed or ambiguous record (the holder that wrote it,
    //   so that its write sent again is applied again; NULL in one written before, or resolved).
    // - An operator's decision (`idemkit resolve`): `resolution` ('applied', 'not_applied'),
    //   `resolved_at` (unix ms), `resolution_note`; `kept_until` (unix ms): a record released
    //   by not-applied is expired at once (absent for every operation) and kept until then to
    //   show that decision. A completed row with 'not_applied' is a tombstone an operator
    //   forgot (S33: `Decision::Forgotten`; the CHECK allows no other word), kept likewise.
    "ALTER TABLE records ADD COLUMN lease_ms INTEGER;
    ALTER TABLE records ADD COLUMN resolution TEXT CHECK (resolution IN ('applied', 'not_applied'));
    ALTER TABLE records ADD COLUMN resolved_at INTEGER;
    ALTER TABLE records ADD COLUMN resolution_note TEXT;
    ALTER TABLE records ADD COLUMN kept_until INTEGER;",
    // v4 → v5 (S27): what a takeover replaced, kept while the record runs under the claim that
    // took it over, so that a claim given back unused (its call cancelled before anything ran)
    // brings it back: `prior_state` ('running': an expired holder's, 'ambiguous'; 'unknown': a
    // holder's record brought back, whose own prior is not kept; NULL: the
    // claim made a new record, or one written before) and that record's own columns.
    "ALTER TABLE records ADD COLUMN prior_state TEXT CHECK (prior_state IN ('running', 'ambiguous', 'unknown'));
    ALTER TABLE records ADD COLUMN prior_token BLOB CHECK (length(prior_token) = 16);
    ALTER TABLE records ADD COLUMN prior_lease_until INTEGER;
    ALTER TABLE records ADD COLUMN prior_lease_ms INTEGER;
    ALTER TABLE records ADD COLUMN prior_note TEXT;
    ALTER TABLE records ADD COLUMN prior_expires_at INTEGER;
    ALTER TABLE records ADD COLUMN prior_created INTEGER;
    ALTER TABLE records ADD COLUMN prior_updated INTEGER;
    ALTER TABLE records ADD COLUMN prior_tenant TEXT;",
    // v5 → v6 (S32): what a record keeps through every takeover: `first_made` (unix ms, when its
    // operation was first claimed; NULL in a record written before: its `created`), and the
    // Unknown answers of verify about it, `unknowns` and `unknown_since` (unix ms of the first).
    // A takeover also keeps the `note` of the record it took over (S31: a lapsed holder's record
    // reads with it).
    "ALTER TABLE records ADD COLUMN first_made INTEGER;
    ALTER TABLE records ADD COLUMN unknowns INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE records ADD COLUMN unknown_since INTEGER;",
    // v6 → v7 (S28): the arguments a call of a tool with `verify` keeps with its record (JSON),
    // so a settler asks that verify without the caller; NULL for any other tool's record, and in
    // a record written before (the settler then settles it as before: a verify listed by hand,
    // or left for an operator).
    "ALTER TABLE records ADD COLUMN arguments BLOB;",
];

/// S34, S33: whether the row (`$t` its qualifier, `""` or `"records."`) is live at `:now`:
/// before its expiry; running or ambiguous with no decision on it, which never expires by time
/// (an unknown outcome waits for a decision however long that takes; a running record whose
/// holder's lease lapsed reads as one, S31); or completed (by its body, or resolved or settled
/// as applied), which past its expiry is a tombstone: the operation was done, and is never run
/// again because time passed; only pruning past the tombstone setting, or an operator, removes
/// it. A row written before with an expiry on such a record reads the same: its expiry is
/// ignored. What is not live is a record released by a not-applied decision (S24, S28): the
/// operation did not happen, and the next call runs it; and a tombstone an operator forgot
/// (S33, kept as `state = 'completed'` with `resolution = 'not_applied'`, a pair nothing else
/// writes, because the column's CHECK allows no third word): the next call runs it again.
macro_rules! live {
    ($t:literal) => {
        concat!(
            "(",
            $t,
            "expires_at > :now OR ",
            $t,
            "state = 'completed' AND ",
            $t,
            "resolution IS NOT 'not_applied' OR (",
            $t,
            "state IN ('running', 'ambiguous') AND ",
            $t,
            "resolution IS NULL))"
        )
    };
}
pub(super) use live;

/// S34: the row is not live ([`live`]): past its expiry, and completed or decided.
macro_rules! expired {
    ($t:literal) => {
        concat!("NOT ", live!($t))
    };
}

/// absent (no row at all) → running: the usual claim, one statement. Returns the token only when
/// it inserted the record; on any row of the key (live or expired) it does nothing, and the claim
/// reads that row and runs [`CLAIM`].
pub(super) const INSERT_NEW: &str = "
    INSERT INTO records (key, tool, fingerprint, state, token, lease_until, lease_ms, expires_at, created, updated, tenant, first_made, arguments)
    VALUES (:key, :tool, :fingerprint, 'running', :token, :lease_until, :lease_ms, :expires_at, :now, :now, :tenant, :now, :arguments)
    ON CONFLICT (key) DO NOTHING
    RETURNING token";

/// absent | expired → running (a new record);
/// running with the lease expired | ambiguous, same fingerprint → running (takeover);
/// running under :token already (this claim sent again, its answer lost) → the same.
/// Returns the token only when the caller took the record. An operator's decision on the row
/// it replaces is dropped (it was that record's). A live row it takes over is kept in the
/// `prior_` columns (S27, see [`RESTORE_TAKEN`]); an expired one is not. A takeover keeps when
/// the operation was first made, its Unknown answers (S32) and its note (S31); a new record
/// starts them afresh.
pub(super) const CLAIM: &str = concat!(
    "
    INSERT INTO records (key, tool, fingerprint, state, token, lease_until, lease_ms, expires_at, created, updated, tenant, first_made, arguments)
    VALUES (:key, :tool, :fingerprint, 'running', :token, :lease_until, :lease_ms, :expires_at, :now, :now, :tenant, :now, :arguments)
    ON CONFLICT (key) DO UPDATE SET
        tool = excluded.tool, fingerprint = excluded.fingerprint, state = 'running',
        token = excluded.token, lease_until = excluded.lease_until, lease_ms = excluded.lease_ms,
        outcome = NULL, expires_at = excluded.expires_at,
        note = CASE WHEN ",
    expired!("records."),
    " THEN NULL ELSE records.note END,
        first_made = CASE WHEN ",
    expired!("records."),
    " THEN excluded.first_made
                          ELSE coalesce(records.first_made, records.created) END,
        unknowns = CASE WHEN ",
    expired!("records."),
    " THEN 0 ELSE records.unknowns END,
        unknown_since = CASE WHEN ",
    expired!("records."),
    " THEN NULL ELSE records.unknown_since END,
        arguments = CASE WHEN ",
    expired!("records."),
    " THEN excluded.arguments ELSE coalesce(excluded.arguments, records.arguments) END,
        created = excluded.created, updated = excluded.updated, tenant = excluded.tenant,
        resolution = NULL, resolved_at = NULL, resolution_note = NULL, kept_until = NULL,
        prior_state = CASE WHEN ",
    expired!("records."),
    " THEN NULL
                         WHEN records.state = 'running' AND records.token = excluded.token THEN records.prior_state
                         ELSE records.state END,
        prior_token = CASE WHEN ",
    expired!("records."),
    " THEN NULL
                         WHEN records.state = 'running' AND records.token = excluded.token THEN records.prior_token
                         ELSE records.token END,
        prior_lease_until = CASE WHEN ",
    expired!("records."),
    " THEN NULL
                         WHEN records.state = 'running' AND records.token = excluded.token THEN records.prior_lease_until
                         ELSE records.lease_until END,
        prior_lease_ms = CASE WHEN ",
    expired!("records."),
    " THEN NULL
                         WHEN records.state = 'running' AND records.token = excluded.token THEN records.prior_lease_ms
                         ELSE records.lease_ms END,
        prior_note = CASE WHEN ",
    expired!("records."),
    " THEN NULL
                         WHEN records.state = 'running' AND records.token = excluded.token THEN records.prior_note
                         ELSE records.note END,
        prior_expires_at = CASE WHEN ",
    expired!("records."),
    " THEN NULL
                         WHEN records.state = 'running' AND records.token = excluded.token THEN records.prior_expires_at
                         ELSE records.expires_at END,
        prior_created = CASE WHEN ",
    expired!("records."),
    " THEN NULL
                         WHEN records.state = 'running' AND records.token = excluded.token THEN records.prior_created
                         ELSE records.created END,
        prior_updated = CASE WHEN ",
    expired!("records."),
    " THEN NULL
                         WHEN records.state = 'running' AND records.token = excluded.token THEN records.prior_updated
                         ELSE records.updated END,
        prior_tenant = CASE WHEN ",
    expired!("records."),
    " THEN NULL
                         WHEN records.state = 'running' AND records.token = excluded.token THEN records.prior_tenant
                         ELSE records.tenant END
    WHERE ",
    expired!("records."),
    "
       OR (records.fingerprint = excluded.fingerprint
           AND (records.state = 'ambiguous'
                OR (records.state = 'running'
                    AND (records.lease_until <= :now OR records.token = excluded.token))))
    RETURNING token"
);

/// The columns a record is read with (see `decode`), in order.
macro_rules! record_columns {
    () => {
        "tool, fingerprint, state, token, lease_until, outcome, note, expires_at, created, updated, tenant,
         resolution, resolved_at, resolution_note, lease_ms, first_made, unknowns, unknown_since, arguments"
    };
}
pub(super) use record_columns;

/// The live record a claim did not take (read in the claim's transaction), and what it took
/// over itself (for a claim sent again under its own token).
pub(super) const LIVE: &str = concat!(
    "SELECT ",
    record_columns!(),
    ", prior_state FROM records WHERE key = :key AND ",
    live!("")
);

/// The record an operator asks for: the live one, or one released by an operator's
/// not-applied and kept to show that decision.
pub(super) const SHOWN: &str = concat!(
    "SELECT ",
    record_columns!(),
    " FROM records WHERE key = :key AND (",
    live!(""),
    " OR kept_until > :now)"
);

/// running, held by :token, not expired → completed; completed by :token already → the same
/// (its completion sent again after a lost reply). The token stays, to recognise that.
pub(super) const COMPLETE: &str = concat!(
    "
    UPDATE records SET state = 'completed', outcome = :outcome, lease_until = NULL,
                       expires_at = :expires_at, updated = :now, prior_state = NULL
    WHERE key = :key AND state IN ('running', 'completed') AND token = :token AND ",
    live!("")
);

/// running, held by :token, not expired → ambiguous (the next same-fingerprint claim takes it);
/// ambiguous by :token already → the same (sent again after a lost reply).
pub(super) const MARK_AMBIGUOUS: &str = concat!(
    "
    UPDATE records SET state = 'ambiguous', note = :note, lease_until = NULL,
                       expires_at = :expires_at, updated = :now, prior_state = NULL
    WHERE key = :key AND state IN ('running', 'ambiguous') AND token = :token AND ",
    live!("")
);

/// [`MARK_AMBIGUOUS`] after an Unknown answer of verify, counting it (S32) when the record was
/// running (not when the mark is sent again).
pub(super) const MARK_UNKNOWN: &str = concat!(
    "
    UPDATE records SET state = 'ambiguous', note = :note, lease_until = NULL,
                       expires_at = :expires_at, updated = :now, prior_state = NULL,
                       unknowns = unknowns + (state = 'running'),
                       unknown_since = CASE WHEN state = 'running' THEN coalesce(unknown_since, :now)
                                            ELSE unknown_since END
    WHERE key = :key AND state IN ('running', 'ambiguous') AND token = :token AND ",
    live!("")
);

/// An operator's applied (S24): ambiguous | running (lease over) → completed with :outcome, kept
/// until :expires_at; the token cleared, so the holder that lost it is fenced. The caller
/// checked the state in the same transaction.
pub(super) const RESOLVE_APPLIED: &str = "
    UPDATE records SET state = 'completed', outcome = :outcome, token = NULL, lease_until = NULL,
                       note = NULL, expires_at = :expires_at, updated = :now,
                       resolution = 'applied', resolved_at = :now, resolution_note = :note,
                       kept_until = NULL
    WHERE key = :key";

/// An operator's not-applied (S24): ambiguous | running (lease over) → expired now (absent for
/// every operation, its holder fenced), kept until :kept_until to show the decision.
pub(super) const RESOLVE_NOT_APPLIED: &str = "
    UPDATE records SET expires_at = :now, updated = :now,
                       resolution = 'not_applied', resolved_at = :now, resolution_note = :note,
                       kept_until = :kept_until
    WHERE key = :key";

/// running, its lease ending further ahead than :cap (now + the holder's lease: written by a
/// clock ahead of this one) → running, the lease ending at :cap.
pub(super) const CAP_LEASE: &str = "
    UPDATE records SET lease_until = :cap
    WHERE key = :key AND state = 'running' AND lease_until > :cap";

/// running, held by :token, not expired → running, the lease ending at :lease_until (the
/// holder's lease, :lease_ms, kept); the expiry moved to the lease end if that is later.
pub(super) const RENEW: &str = concat!(
    "
    UPDATE records SET lease_until = :lease_until, lease_ms = :lease_ms,
                       expires_at = max(expires_at, :lease_until), updated = :now
    WHERE key = :key AND state = 'running' AND token = :token AND ",
    live!("")
);

/// running, held by :token, not expired → absent (it did not happen: a later call may run).
pub(super) const RELEASE: &str = concat!(
    "
    DELETE FROM records
    WHERE key = :key AND state = 'running' AND token = :token AND ",
    live!("")
);

/// S27, a claim given back unused: running, held by :token, not expired, a takeover → the
/// record it took over (an expired holder's running one, under that holder's token and lease
/// end; or an ambiguous one), as it was. What that holder's own claim took over is not kept
/// (one level is): a holder's record brought back has `prior_state` 'unknown', so that its own
/// claim given back later keeps it ambiguous ([`RESTORE_UNKNOWN`]) rather than release what may
/// have been an unknown outcome. With [`RESTORE_UNKNOWN`] and [`RESTORE_NEW`] (the other cases),
/// one of the three applies.
pub(super) const RESTORE_TAKEN: &str = concat!(
    "
    UPDATE records SET state = prior_state, token = prior_token, lease_until = prior_lease_until,
                       lease_ms = prior_lease_ms, note = prior_note, expires_at = prior_expires_at,
                       created = prior_created, updated = prior_updated, tenant = prior_tenant,
                       prior_state = CASE WHEN prior_state = 'running' THEN 'unknown' END,
                       prior_token = NULL, prior_lease_until = NULL,
                       prior_lease_ms = NULL, prior_note = NULL, prior_expires_at = NULL,
                       prior_created = NULL, prior_updated = NULL, prior_tenant = NULL
    WHERE key = :key AND state = 'running' AND token = :token AND ",
    live!(""),
    "
      AND prior_state IN ('running', 'ambiguous')"
);

/// S27, a claim given back unused whose prior is not known (see [`RESTORE_TAKEN`]): running,
/// held by :token, not expired → ambiguous with :note (the safe side: an unknown outcome may
/// have been there).
pub(super) const RESTORE_UNKNOWN: &str = concat!(
    "
    UPDATE records SET state = 'ambiguous', note = :note, lease_until = NULL,
                       expires_at = :expires_at, updated = :now, prior_state = NULL
    WHERE key = :key AND state = 'running' AND token = :token AND ",
    live!(""),
    "
      AND prior_state = 'unknown'"
);

/// S27, a claim given back unused: running, held by :token, not expired, a new record → absent.
pub(super) const RESTORE_NEW: &str = concat!(
    "
    DELETE FROM records
    WHERE key = :key AND state = 'running' AND token = :token AND ",
    live!(""),
    "
      AND prior_state IS NULL"
);

/// expired (not [`live`], written so that the expiry index serves it) → absent, at most
/// :limit rows, oldest first (a record released by an operator is kept until its `kept_until`;
/// a running or ambiguous one with no decision never goes, S34); and a tombstone (completed,
/// past its expiry) whose tombstone setting has passed too (`:tombstones_before`: now less the
/// setting), S33.
pub(super) const PRUNE: &str = "
    DELETE FROM records WHERE key IN (
        SELECT key FROM records
        WHERE expires_at <= :now
          AND NOT (state IN ('running', 'ambiguous') AND resolution IS NULL)
          AND (state <> 'completed' OR resolution IS 'not_applied' OR expires_at <= :tombstones_before)
          AND (kept_until IS NULL OR kept_until <= :now)
        ORDER BY expires_at LIMIT :limit)";

/// S33: a completed record past its expiry keeps no outcome (a tombstone: key, fingerprint,
/// tool, tenant, how it ended and when) and no arguments (S28: they serve verify only), at most
/// :limit rows. The empty blob stands for "no longer kept": a stored outcome is never empty (it
/// is JSON).
pub(super) const DROP_OUTCOMES: &str = "
    UPDATE records SET outcome = x'', arguments = NULL WHERE key IN (
        SELECT key FROM records
        WHERE expires_at <= :now AND state = 'completed' AND length(outcome) > 0
        ORDER BY expires_at LIMIT :limit)";

/// absent → :id; present → unchanged. Returns the stored id either way.
pub(super) const OPERATION_ID: &str = "
    INSERT INTO operations (name, id) VALUES (:name, :id)
    ON CONFLICT (name) DO UPDATE SET name = excluded.name
    RETURNING id";
