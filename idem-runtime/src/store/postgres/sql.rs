//! The statements, each one state transition, for a table named by the store's settings.

use crate::error::{StoreError, StoreErrorKind};

/// The PostgreSQL types of each statement's parameters, in order (for unnamed statements).
pub(super) mod types {
    use tokio_postgres::types::Type;

    pub(in super::super) const CLAIM: &[Type] = &[
        Type::UUID,
        Type::TEXT,
        Type::BYTEA,
        Type::UUID,
        Type::INT8,
        Type::INT8,
        Type::TEXT,
        Type::BYTEA,
    ];
    pub(in super::super) const KEY: &[Type] = &[Type::UUID];
    pub(in super::super) const COMPLETE: &[Type] =
        &[Type::UUID, Type::UUID, Type::BYTEA, Type::INT8];
    pub(in super::super) const RENEW: &[Type] = &[Type::UUID, Type::UUID, Type::INT8];
    pub(in super::super) const RELEASE: &[Type] = &[Type::UUID, Type::UUID];
    pub(in super::super) const MARK_AMBIGUOUS: &[Type] =
        &[Type::UUID, Type::UUID, Type::TEXT, Type::INT8];
    pub(in super::super) const PRUNE: &[Type] = &[Type::INT8, Type::INT8];
    pub(in super::super) const OPERATION_ID: &[Type] = &[Type::TEXT, Type::UUID];
    pub(in super::super) const OPERATION_NAME: &[Type] = &[Type::TEXT];
    pub(in super::super) const LIST: &[Type] = &[
        Type::TEXT,
        Type::TEXT,
        Type::INT8,
        Type::INT8,
        Type::INT8,
        Type::TEXT,
    ];
    pub(in super::super) const RELEASE_KEY: &[Type] = &[Type::UUID, Type::BOOL];
    pub(in super::super) const FORGET: &[Type] = &[Type::UUID, Type::BOOL, Type::INT8, Type::TEXT];
    pub(in super::super) const RESOLVE: &[Type] = &[
        Type::UUID,
        Type::TEXT,
        Type::BYTEA,
        Type::TEXT,
        Type::INT8,
        Type::UUID,
    ];
    pub(in super::super) const NONE: &[Type] = &[];
}

/// The columns a record is read with (see `record_of`), in order.
pub(super) const RECORD_COLUMNS: &str = "tool, fingerprint, state, token, outcome, note,
    GREATEST(EXTRACT(EPOCH FROM lease_until - now()) * 1000000, 0)::int8,
    GREATEST(EXTRACT(EPOCH FROM expires_at - now()) * 1000000, 0)::int8,
    created, updated, tenant, key, resolution, resolved_at, resolution_note,
    lease_until, first_made, unknowns, unknown_since, arguments";

/// S34, S33: whether a row is live: before its expiry; running or ambiguous with no decision on
/// it, which never expires by time (an unknown outcome waits for a decision however long that
/// takes; a running row whose holder's lease lapsed reads as one, S31); or completed (by its
/// body, or resolved or settled as applied), which past its expiry is a tombstone, never absent
/// until pruned past the tombstone setting or forgotten. A row written before with an expiry on
/// such a record reads the same: its expiry is ignored. Not live: a row released by a
/// not-applied decision (the operation did not happen).
/// A tombstone an operator forgot (S33: completed, with `resolution = 'not_applied'`, a pair
/// nothing else writes, because the column's CHECK allows no third word) is not live: the next
/// call runs it again.
pub(super) const LIVE: &str = "(expires_at > now() OR state = 'completed' AND resolution IS DISTINCT FROM 'not_applied' OR (state IN ('running', 'ambiguous') AND resolution IS NULL))";

/// S34: the row is not [`LIVE`]: past its expiry, and released by a decision.
pub(super) const EXPIRED: &str = "NOT (expires_at > now() OR state = 'completed' AND resolution IS DISTINCT FROM 'not_applied' OR (state IN ('running', 'ambiguous') AND resolution IS NULL))";

/// [`EXPIRED`] of the row a claim's upsert found (`r`).
const R_EXPIRED: &str = "NOT (r.expires_at > now() OR r.state = 'completed' AND r.resolution IS DISTINCT FROM 'not_applied' OR (r.state IN ('running', 'ambiguous') AND r.resolution IS NULL))";

/// The state operators read a row in (S31): a running row whose holder's lease lapsed is an
/// ambiguous one; (S33) a completed row past its expiry is a tombstone.
pub(super) const SHOWN_STATE: &str =
    "(CASE WHEN state = 'running' AND lease_until <= now() THEN 'ambiguous'
       WHEN state = 'completed' AND expires_at <= now() THEN 'tombstone' ELSE state END)";

/// The statements, with the table names filled in once.
#[derive(Clone)]
pub(super) struct Sql {
    /// The schema, quoted and as named.
    pub(super) schema: Option<(String, String)>,
    pub(super) table: String,
    pub(super) records: String,
    pub(super) operations: String,
    pub(super) version: String,
    pub(super) claim: String,
    pub(super) existing: String,
    pub(super) complete: String,
    pub(super) renew: String,
    pub(super) release: String,
    pub(super) mark_ambiguous: String,
    pub(super) mark_unknown: String,
    pub(super) restore_taken: String,
    pub(super) restore_unknown: String,
    pub(super) restore_new: String,
    pub(super) get: String,
    pub(super) tombstone: String,
    pub(super) prune: String,
    pub(super) operation_id: String,
}

impl Sql {
    pub(super) fn new(schema: Option<&str>, table: &str) -> Result<Self, StoreError> {
        let table = identifier(table)?;
        let schema = schema.map(identifier).transpose()?.map(|s| (quote(&s), s));
        // The derived names (`<table>_operations`) fit: the checked name has at most 40 bytes.
        let qualify = |name: &str| match &schema {
            Some((s, _)) => format!("{s}.{}", quote(name)),
            None => quote(name),
        };
        let t = qualify(&table);
        let us = "* interval '1 microsecond'";
        Ok(Sql {
            records: t.clone(),
            operations: qualify(&format!("{table}_operations")),
            version: qualify(&format!("{table}_schema")),
            // absent → running; expired → running (a new record); same fingerprint and
            // (lease over, or ambiguous, or already ours: a retried claim) → running (take over).
            // Anything else is left alone and returns no row. The row returned says what was
            // taken over: NULL for a new record, else the kind (for our own, claimed again,
            // what that claim took over). A live row taken over is kept in the `prior_`
            // columns (S27: a claim given back unused brings it back); our own keeps its own. The
            // kind is read from the new row's `prior_state`, which the update set from the row
            // as it was when the update applied (`r`, the row locked, after any transaction the
            // claim waited on); a subquery would read the statement's snapshot, from before such
            // a wait: a row released meanwhile would be reported as taken over (issue 52).
            claim: format!(
                "INSERT INTO {t} AS r (key, tool, fingerprint, state, token, lease_until, expires_at,
                                       created, updated, tenant, first_made, arguments)
                 VALUES ($1, $2, $3, 'running', $4, now() + $5::int8 {us}, now() + $6::int8 {us},
                         now(), now(), $7::text, now(), $8::bytea)
                 ON CONFLICT (key) DO UPDATE
                    SET tool = EXCLUDED.tool, fingerprint = EXCLUDED.fingerprint, state = 'running',
                        token = EXCLUDED.token, lease_until = EXCLUDED.lease_until,
                        expires_at = EXCLUDED.expires_at, outcome = NULL,
                        note = CASE WHEN {R_EXPIRED} THEN NULL ELSE r.note END,
                        first_made = CASE WHEN {R_EXPIRED} THEN EXCLUDED.first_made
                                          ELSE COALESCE(r.first_made, r.created) END,
                        unknowns = CASE WHEN {R_EXPIRED} THEN 0 ELSE r.unknowns END,
                        unknown_since = CASE WHEN {R_EXPIRED} THEN NULL ELSE r.unknown_since END,
                        arguments = CASE WHEN {R_EXPIRED} THEN EXCLUDED.arguments
                                         ELSE COALESCE(EXCLUDED.arguments, r.arguments) END,
                        created = EXCLUDED.created, updated = EXCLUDED.updated,
                        tenant = EXCLUDED.tenant, resolution = NULL, resolved_at = NULL,
                        resolution_note = NULL, kept_until = NULL,
                        prior_state = CASE WHEN {R_EXPIRED} THEN NULL
                                         WHEN r.state = 'running' AND r.token = EXCLUDED.token THEN r.prior_state
                                         ELSE r.state END,
                        prior_token = CASE WHEN {R_EXPIRED} THEN NULL
                                         WHEN r.state = 'running' AND r.token = EXCLUDED.token THEN r.prior_token
                                         ELSE r.token END,
                        prior_lease_until = CASE WHEN {R_EXPIRED} THEN NULL
                                         WHEN r.state = 'running' AND r.token = EXCLUDED.token THEN r.prior_lease_until
                                         ELSE r.lease_until END,
                        prior_note = CASE WHEN {R_EXPIRED} THEN NULL
                                         WHEN r.state = 'running' AND r.token = EXCLUDED.token THEN r.prior_note
                                         ELSE r.note END,
                        prior_expires_at = CASE WHEN {R_EXPIRED} THEN NULL
                                         WHEN r.state = 'running' AND r.token = EXCLUDED.token THEN r.prior_expires_at
                                         ELSE r.expires_at END,
                        prior_created = CASE WHEN {R_EXPIRED} THEN NULL
                                         WHEN r.state = 'running' AND r.token = EXCLUDED.token THEN r.prior_created
                                         ELSE r.created END,
                        prior_updated = CASE WHEN {R_EXPIRED} THEN NULL
                                         WHEN r.state = 'running' AND r.token = EXCLUDED.token THEN r.prior_updated
                                         ELSE r.updated END,
                        prior_tenant = CASE WHEN {R_EXPIRED} THEN NULL
                                         WHEN r.state = 'running' AND r.token = EXCLUDED.token THEN r.prior_tenant
                                         ELSE r.tenant END
                  WHERE {R_EXPIRED}
                     OR (r.fingerprint = EXCLUDED.fingerprint
                         AND (r.state = 'ambiguous'
                              OR (r.state = 'running'
                                  AND (r.lease_until <= now() OR r.token = EXCLUDED.token))))
                 RETURNING CASE WHEN r.prior_state IS NULL THEN NULL
                                WHEN r.prior_state = 'ambiguous' THEN 'ambiguous'
                                ELSE 'expired_holder' END"
            ),
            // The live record a claim did not take (none: it went away meanwhile).
            existing: format!(
                "SELECT fingerprint, state, outcome,
                        GREATEST(EXTRACT(EPOCH FROM lease_until - now()) * 1000000, 0)::int8,
                        expires_at <= now(), updated, resolution IS NOT NULL
                   FROM {t} WHERE key = $1 AND {LIVE}"
            ),
            // running (our token) → completed, kept for ttl; completed by us already → the same
            // (a retry of this statement after a lost reply).
            complete: format!(
                "UPDATE {t} SET state = 'completed', outcome = $3, note = NULL,
                                expires_at = now() + $4::int8 {us}, updated = now()
                  WHERE key = $1 AND token = $2 AND {LIVE}
                    AND state IN ('running', 'completed')"
            ),
            // running (our token) → running, the lease ending $3 µs from now; the expiry moved
            // to the lease end if that is later.
            renew: format!(
                "UPDATE {t} SET lease_until = now() + $3::int8 {us},
                                expires_at = GREATEST(expires_at, now() + $3::int8 {us}),
                                updated = now()
                  WHERE key = $1 AND token = $2 AND {LIVE} AND state = 'running'"
            ),
            // running (our token) → absent.
            release: format!(
                "DELETE FROM {t}
                  WHERE key = $1 AND token = $2 AND {LIVE} AND state = 'running'"
            ),
            // running (our token) → ambiguous, kept for ttl; ambiguous by us already → the same.
            mark_ambiguous: format!(
                "UPDATE {t} SET state = 'ambiguous', note = $3, outcome = NULL,
                                expires_at = now() + $4::int8 {us}, updated = now(),
                                prior_state = NULL
                  WHERE key = $1 AND token = $2 AND {LIVE}
                    AND state IN ('running', 'ambiguous')"
            ),
            // The same after an Unknown answer of verify, counted (S32) when the row was
            // running (not when the mark is sent again).
            mark_unknown: format!(
                "UPDATE {t} SET state = 'ambiguous', note = $3, outcome = NULL,
                                expires_at = now() + $4::int8 {us}, updated = now(),
                                prior_state = NULL,
                                unknowns = unknowns + CASE WHEN state = 'running' THEN 1 ELSE 0 END,
                                unknown_since = CASE WHEN state = 'running'
                                                     THEN COALESCE(unknown_since, now())
                                                     ELSE unknown_since END
                  WHERE key = $1 AND token = $2 AND {LIVE}
                    AND state IN ('running', 'ambiguous')"
            ),
            // S27, a claim given back unused: running (our token), a takeover → the row it took
            // over, as it was (an expired holder's running one, under its token and lease end;
            // or an ambiguous one). A holder's row brought back has `prior_state` 'unknown' (its own
            // prior is not kept), so that its own claim given back keeps it ambiguous
            // (`restore_unknown`). With `restore_unknown` and `restore_new`, one of the three applies.
            restore_taken: format!(
                "UPDATE {t} SET state = prior_state, token = prior_token,
                                lease_until = prior_lease_until, note = prior_note,
                                expires_at = prior_expires_at, created = prior_created,
                                updated = prior_updated, tenant = prior_tenant,
                                prior_state = CASE WHEN prior_state = 'running' THEN 'unknown' END,
                                prior_token = NULL, prior_lease_until = NULL, prior_note = NULL, prior_expires_at = NULL, prior_created = NULL, prior_updated = NULL, prior_tenant = NULL
                  WHERE key = $1 AND token = $2 AND {LIVE} AND state = 'running'
                    AND prior_state IN ('running', 'ambiguous')"
            ),
            // S27, a claim given back whose prior is not known: running (our token) → ambiguous
            // with $3, kept for $4 µs (the safe side).
            restore_unknown: format!(
                "UPDATE {t} SET state = 'ambiguous', note = $3, outcome = NULL,
                                expires_at = now() + $4::int8 {us}, updated = now(),
                                prior_state = NULL
                  WHERE key = $1 AND token = $2 AND {LIVE} AND state = 'running'
                    AND prior_state = 'unknown'"
            ),
            // S27: running (our token), a new record → absent.
            restore_new: format!(
                "DELETE FROM {t}
                  WHERE key = $1 AND token = $2 AND {LIVE} AND state = 'running'
                    AND prior_state IS NULL"
            ),
            // The record, for operators: the live one, or one released by an operator's
            // not-applied and kept to show that decision.
            get: format!(
                "SELECT {RECORD_COLUMNS}
                   FROM {t} WHERE key = $1 AND ({LIVE} OR kept_until > now())"
            ),
            // S33: a completed record past its expiry keeps no outcome and no arguments (a
            // tombstone; the empty bytea stands for "no longer kept": a stored outcome is JSON,
            // never empty), one batch of $1, until the tombstone setting ($2, microseconds) has
            // passed too (then `prune` deletes it). Rows another pruner holds are skipped.
            // `key = ANY(ARRAY(…))`, not `key IN (…)`: with `IN` the planner, counting on a
            // batch of 1,000, joined it to a sequential scan of the whole table, once a batch.
            // The batch is found through the `…_outcome_kept` index (schema 8).
            tombstone: format!(
                "UPDATE {t} SET outcome = ''::bytea, arguments = NULL WHERE key = ANY(ARRAY(
                     SELECT key FROM {t}
                      WHERE state = 'completed' AND expires_at <= now() AND length(outcome) > 0
                        AND expires_at > now() - $2::int8 {us}
                      LIMIT $1 FOR UPDATE SKIP LOCKED))"
            ),
            // expired → absent, one batch; rows another pruner holds are skipped, not waited for;
            // a row released by an operator is kept until its `kept_until`; a tombstone goes once
            // the tombstone setting ($2, microseconds) has passed too. Disjoint from
            // `tombstone`'s rows.
            prune: format!(
                "DELETE FROM {t} WHERE key = ANY(ARRAY(
                     SELECT key FROM {t}
                      WHERE ({EXPIRED} OR (state = 'completed' AND expires_at <= now() - $2::int8 {us}))
                        AND (kept_until IS NULL OR kept_until <= now())
                      LIMIT $1 FOR UPDATE SKIP LOCKED))"
            ),
            // absent → `fresh`; present → unchanged. Returns the stored id either way (the no-op
            // update makes RETURNING see a row a concurrent caller just inserted).
            operation_id: format!(
                "INSERT INTO {ops} (name, id) VALUES ($1, $2)
                 ON CONFLICT (name) DO UPDATE SET name = EXCLUDED.name
                 RETURNING id",
                ops = qualify(&format!("{table}_operations"))
            ),
            schema,
            table,
        })
    }
}

/// Checks a table or schema name: letters, digits and `_`, not starting with a digit, at most 40
/// characters (so the derived names fit PostgreSQL's 63).
fn identifier(name: &str) -> Result<String, StoreError> {
    let ok = !name.is_empty()
        && name.len() <= 40
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(name.to_owned())
    } else {
        Err(StoreError::new(
            StoreErrorKind::Other,
            format!(
                "`{name}` is not a usable table or schema name; use letters, digits and `_` (at most 40, not starting with a digit)"
            ),
        ))
    }
}

pub(super) fn quote(ident: &str) -> String {
    format!("\"{ident}\"")
}
