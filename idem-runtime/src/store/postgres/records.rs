//! The PostgreSQL store's operator reads and repairs ([`Records`]): each one statement, by the
//! server's clock.

use std::time::Duration;

use tokio_postgres::types::ToSql;
use uuid::Uuid;

use super::rows::{bad_state, corrupt_row, micros, record_of};
use super::sql::{EXPIRED, LIVE, RECORD_COLUMNS, SHOWN_STATE, types};
use super::{PRUNE_BATCH, PostgresStore, SCHEMA_VERSION};
use crate::error::{StoreError, StoreErrorKind};
use crate::key::IdempotencyKey;
use crate::store::resolution::check_resolution;
use crate::store::{Count, Forgot, RecordFilter, Records, Released, Resolved, StateKind};
use crate::store::{Decision, LeaseToken, Record, Written};

const US: &str = "* interval '1 microsecond'";

impl PostgresStore {
    /// The live record of `key` (for `Store::get` and `Records::get`).
    pub(super) async fn live_record(
        &self,
        key: &IdempotencyKey,
    ) -> Result<Option<Record>, StoreError> {
        let key = key.as_uuid();
        let row = self
            .run("get", |c| async move {
                self.row(&c, &self.sql.get, types::KEY, &[&key]).await
            })
            .await?;
        row.map(|row| record_of(&row)).transpose()
    }

    /// Turns every completed record past its ttl into a tombstone (S33), then deletes up to
    /// `limit` expired records, each in batches (for `Store::prune` and `Records::prune`);
    /// answers how many it deleted.
    pub(super) async fn prune_now(&self, limit: usize) -> Result<usize, StoreError> {
        let tombstones = i64::try_from(self.tombstones.as_micros()).unwrap_or(i64::MAX);
        // First every completed record past its ttl becomes a tombstone (its outcome dropped),
        // batch by batch, as the other stores do in one pass; then up to `limit` records are
        // deleted. Two loops, not one: a batch of each per turn ran the `DELETE`'s search (no
        // index narrows it) once per 1,000 tombstones, over the whole table.
        loop {
            let dropped = self
                .run("prune", |c| async move {
                    let batch = PRUNE_BATCH;
                    self.changed(
                        &c,
                        &self.sql.tombstone,
                        types::PRUNE,
                        &[&batch, &tombstones],
                    )
                    .await
                })
                .await?;
            if dropped < PRUNE_BATCH.unsigned_abs() {
                break;
            }
        }
        let mut deleted = 0usize;
        while deleted < limit {
            // `limit` may be past `i64::MAX` (`usize::MAX`: "all"), which `as` would make negative.
            let batch = PRUNE_BATCH.min(i64::try_from(limit - deleted).unwrap_or(i64::MAX));
            let gone = self
                .run("prune", |c| async move {
                    self.changed(&c, &self.sql.prune, types::PRUNE, &[&batch, &tombstones])
                        .await
                })
                .await?;
            deleted += usize::try_from(gone).unwrap_or(usize::MAX);
            if gone < batch.unsigned_abs() {
                break;
            }
        }
        Ok(deleted)
    }

    /// Checks that the tables exist at this build's schema version, changing nothing (for a
    /// read-only store).
    pub(super) async fn check_schema(&self) -> Result<(), StoreError> {
        let query = format!("SELECT version FROM {}", self.sql.version);
        let found = self
            .run("reading the schema version", |c| {
                let query = query.clone();
                // Unnamed: run once, and safe behind any pooler.
                async move { c.query_typed_opt(&query, &[]).await }
            })
            .await;
        let version: Option<i32> = match found {
            Ok(row) => row.map(|r| r.get(0)),
            Err(e) if e.kind() == StoreErrorKind::Incompatible => None,
            Err(e) => return Err(e),
        };
        match version {
            Some(SCHEMA_VERSION) => Ok(()),
            found => Err(StoreError::new(
                StoreErrorKind::Incompatible,
                format!(
                    "the table {} {}, and was not changed (opened read-only); this build reads version \
                     {SCHEMA_VERSION}: check the schema and table names, or let an agent of this version \
                     connect once to create or migrate it",
                    self.sql.records,
                    match found {
                        None => "does not exist (no schema version found)".to_owned(),
                        Some(v) => format!("is at schema version {v}"),
                    }
                ),
            )),
        }
    }
}

#[async_trait::async_trait]
impl Records for PostgresStore {
    async fn operation(&self, name: &str) -> Result<Option<Uuid>, StoreError> {
        let query = format!("SELECT id FROM {} WHERE name = $1", self.sql.operations);
        let query = &query;
        let row = self
            .run("reading an operation id", |c| async move {
                self.row(&c, query, types::OPERATION_NAME, &[&name]).await
            })
            .await?;
        Ok(row.map(|r| r.get::<_, Uuid>(0)))
    }

    async fn get(&self, key: &IdempotencyKey) -> Result<Option<Record>, StoreError> {
        self.live_record(key).await
    }

    async fn list(&self, filter: &RecordFilter) -> Result<Vec<Record>, StoreError> {
        let t = &self.sql.records;
        let query = format!(
            "SELECT {RECORD_COLUMNS}
               FROM {t}
              WHERE {LIVE}
                AND ($1::text IS NULL OR tool = $1)
                AND ($6::text IS NULL OR tenant = $6)
                AND ($2::text IS NULL OR {SHOWN_STATE} = $2)
                AND ($3::int8 IS NULL OR created <= now() - $3::int8 {US})
                AND ($4::int8 IS NULL OR created > now() - $4::int8 {US})
              ORDER BY created DESC, key
              LIMIT $5"
        );
        let tool = filter.tool.as_deref();
        let state = filter.state.map(|s| s.as_str());
        let older = filter.older_than.map(micros);
        let newer = filter.newer_than.map(micros);
        let limit = i64::try_from(filter.limit).unwrap_or(i64::MAX);
        let tenant = filter.tenant.as_deref();
        let query = &query;
        let rows = self
            .run("listing records", |c| async move {
                let params: [&(dyn ToSql + Sync); 6] =
                    [&tool, &state, &older, &newer, &limit, &tenant];
                self.rows(&c, query, types::LIST, &params).await
            })
            .await?;
        rows.iter().map(record_of).collect()
    }

    async fn release_key(&self, key: &IdempotencyKey, force: bool) -> Result<Released, StoreError> {
        let t = &self.sql.records;
        // One statement: the row judged is locked, and deleted only if it is the one judged.
        let query = format!(
            "WITH r AS (
                 SELECT state, lease_until,
                        GREATEST(EXTRACT(EPOCH FROM lease_until - now()) * 1000000, 0)::int8 AS lease_us
                   FROM {t} WHERE key = $1 AND {LIVE} FOR UPDATE),
             d AS (
                 DELETE FROM {t} USING r
                  WHERE {t}.key = $1 AND r.state = 'running' AND ($2 OR r.lease_until <= now())
                 RETURNING 1)
             SELECT r.state, r.lease_us, EXISTS (SELECT 1 FROM d) FROM r"
        );
        let key = key.as_uuid();
        let query = &query;
        let row = self
            .run("releasing a record", |c| async move {
                self.row(&c, query, types::RELEASE_KEY, &[&key, &force])
                    .await
            })
            .await?;
        let Some(row) = row else {
            return Ok(Released::NotFound);
        };
        let state: &str = row.try_get(0).map_err(corrupt_row)?;
        let lease_us: i64 = row.try_get(1).map_err(corrupt_row)?;
        let deleted: bool = row.try_get(2).map_err(corrupt_row)?;
        let kind: StateKind = state.parse().map_err(|_| bad_state(state))?;
        Ok(match (kind, deleted) {
            (_, true) => Released::Released,
            (StateKind::Running, false) => Released::LeaseLive {
                remaining: Duration::from_micros(lease_us.max(0) as u64),
            },
            (other, false) => Released::NotRunning(other),
        })
    }

    async fn forget(&self, key: &IdempotencyKey, force: bool) -> Result<Forgot, StoreError> {
        self.forget_noted(key, force, None).await
    }

    async fn forget_noted(
        &self,
        key: &IdempotencyKey,
        force: bool,
        note: Option<&str>,
    ) -> Result<Forgot, StoreError> {
        let t = &self.sql.records;
        // One statement: the row judged is locked, and deleted only if it may be; a live
        // tombstone (S33) is kept instead as forgotten (`not_applied` on a completed row), no
        // longer live, shown until the tombstone setting ($3, microseconds) has passed.
        let query = format!(
            "WITH r AS (
                 SELECT {LIVE} AS live,
                        state = 'running' AND lease_until > now() AS held,
                        state = 'completed' AND expires_at <= now() AS tomb,
                        GREATEST(EXTRACT(EPOCH FROM lease_until - now()) * 1000000, 0)::int8 AS lease_us
                   FROM {t} WHERE key = $1 FOR UPDATE),
             u AS (
                 UPDATE {t} SET resolution = 'not_applied', resolved_at = now(),
                                resolution_note = $4::text, arguments = NULL,
                                kept_until = now() + $3::int8 * interval '1 microsecond'
                   FROM r
                  WHERE {t}.key = $1 AND r.live AND r.tomb
                 RETURNING 1),
             d AS (
                 DELETE FROM {t} USING r
                  WHERE {t}.key = $1 AND NOT (r.live AND r.tomb)
                    AND ($2 OR NOT r.live OR NOT r.held)
                 RETURNING 1)
             SELECT r.live, r.held, r.lease_us,
                    EXISTS (SELECT 1 FROM d) OR EXISTS (SELECT 1 FROM u) FROM r"
        );
        let key = key.as_uuid();
        let keep = i64::try_from(self.tombstones.as_micros()).unwrap_or(i64::MAX);
        let query = &query;
        let row = self
            .run("forgetting a record", |c| async move {
                self.row(&c, query, types::FORGET, &[&key, &force, &keep, &note])
                    .await
            })
            .await?;
        let Some(row) = row else {
            return Ok(Forgot::NotFound);
        };
        let live: bool = row.try_get(0).map_err(corrupt_row)?;
        let lease_us: i64 = row.try_get(2).map_err(corrupt_row)?;
        let deleted: bool = row.try_get(3).map_err(corrupt_row)?;
        Ok(match (live, deleted) {
            (true, true) => Forgot::Forgotten,
            (true, false) => Forgot::LeaseLive {
                remaining: Duration::from_micros(lease_us.max(0) as u64),
            },
            (false, _) => Forgot::NotFound,
        })
    }

    async fn resolve(
        &self,
        key: &IdempotencyKey,
        decision: Decision,
        outcome: Option<&[u8]>,
        note: Option<&str>,
        ttl: Duration,
    ) -> Result<Resolved, StoreError> {
        check_resolution(decision, outcome)?;
        let t = &self.sql.records;
        // One statement: the row judged is locked, and changed only if it may be. Applied:
        // completed with the outcome, kept for ttl; not applied: expired now (absent for every
        // operation), kept for ttl to show the decision. Either way under a token no holder has,
        // so the holder that lost the record is fenced.
        // The same decision sent again (its reply was lost) finds it standing: `again`.
        let query = format!(
            "WITH r AS (
                 SELECT state, lease_until > now() AS held, {LIVE} AS live,
                        GREATEST(EXTRACT(EPOCH FROM lease_until - now()) * 1000000, 0)::int8 AS lease_us,
                        COALESCE(resolution IS NOT DISTINCT FROM $2
                          AND resolution_note IS NOT DISTINCT FROM $4::text
                          AND CASE WHEN $2 = 'applied'
                                   THEN {LIVE} AND state = 'completed'
                                        AND outcome = $3::bytea
                                   ELSE {EXPIRED} END, false) AS again
                   FROM {t} WHERE key = $1 AND ({LIVE} OR kept_until > now())
                    FOR UPDATE),
             u AS (
                 UPDATE {t} SET
                        state = CASE WHEN $2 = 'applied' THEN 'completed' ELSE {t}.state END,
                        outcome = CASE WHEN $2 = 'applied' THEN $3::bytea ELSE {t}.outcome END,
                        note = CASE WHEN $2 = 'applied' THEN NULL ELSE {t}.note END,
                        token = $6::uuid,
                        expires_at = CASE WHEN $2 = 'applied' THEN now() + $5::int8 {US} ELSE now() END,
                        kept_until = CASE WHEN $2 = 'applied' THEN NULL ELSE now() + $5::int8 {US} END,
                        updated = now(), resolution = $2, resolved_at = now(),
                        resolution_note = $4::text
                   FROM r
                  WHERE {t}.key = $1 AND r.live
                    AND (r.state = 'ambiguous' OR (r.state = 'running' AND NOT r.held))
                 RETURNING 1)
             SELECT r.state, r.lease_us, EXISTS (SELECT 1 FROM u), r.live, r.again FROM r"
        );
        let key = key.as_uuid();
        let word = decision.stored();
        let ttl = micros(ttl);
        let operator = Uuid::new_v4();
        let query = &query;
        let row = self
            .run("resolving a record", |c| async move {
                let params: [&(dyn ToSql + Sync); 6] =
                    [&key, &word, &outcome, &note, &ttl, &operator];
                self.row(&c, query, types::RESOLVE, &params).await
            })
            .await?;
        let Some(row) = row else {
            return Ok(Resolved::NotFound);
        };
        let state: &str = row.try_get(0).map_err(corrupt_row)?;
        let lease_us: i64 = row.try_get(1).map_err(corrupt_row)?;
        let changed: bool = row.try_get(2).map_err(corrupt_row)?;
        let live: bool = row.try_get(3).map_err(corrupt_row)?;
        let again: bool = row.try_get(4).map_err(corrupt_row)?;
        Ok(match (state, changed) {
            (_, true) => Resolved::Resolved,
            _ if again => Resolved::Resolved,
            _ if !live => Resolved::NotFound,
            ("completed", false) => Resolved::Completed,
            ("running", false) => Resolved::LeaseLive {
                remaining: Duration::from_micros(lease_us.max(0) as u64),
            },
            (other, false) => return Err(bad_state(other)),
        })
    }

    async fn settle(
        &self,
        key: &IdempotencyKey,
        token: LeaseToken,
        decision: Decision,
        outcome: Option<&[u8]>,
        note: Option<&str>,
        ttl: Duration,
    ) -> Result<Written, StoreError> {
        check_resolution(decision, outcome)?;
        let t = &self.sql.records;
        // running under $6, live → applied: completed with the outcome, kept for ttl; not
        // applied: expired now (absent for every operation), kept for ttl to show the decision.
        // The decision kept as an operator's is (S24). The token stays the settler's, so a
        // caller that took the record over is never overwritten.
        let query = format!(
            "UPDATE {t} SET
                    state = CASE WHEN $2 = 'applied' THEN 'completed' ELSE state END,
                    outcome = CASE WHEN $2 = 'applied' THEN $3::bytea ELSE outcome END,
                    note = CASE WHEN $2 = 'applied' THEN NULL ELSE note END,
                    expires_at = CASE WHEN $2 = 'applied' THEN now() + $5::int8 {US} ELSE now() END,
                    kept_until = CASE WHEN $2 = 'applied' THEN NULL ELSE now() + $5::int8 {US} END,
                    updated = now(), resolution = $2, resolved_at = now(),
                    resolution_note = $4::text
              WHERE key = $1 AND state = 'running' AND token = $6::uuid AND {LIVE}"
        );
        let key = key.as_uuid();
        let word = decision.stored();
        let ttl = micros(ttl);
        let holder = token.0;
        let query = &query;
        let n = self
            .run("settling a record", |c| async move {
                let params: [&(dyn ToSql + Sync); 6] =
                    [&key, &word, &outcome, &note, &ttl, &holder];
                self.changed(&c, query, types::RESOLVE, &params).await
            })
            .await?;
        Ok(Written::from_changed(n))
    }

    async fn prune(&self, limit: usize) -> Result<usize, StoreError> {
        self.prune_now(limit).await
    }

    async fn counts(&self) -> Result<Vec<Count>, StoreError> {
        let query = format!(
            "SELECT tool, {SHOWN_STATE} AS shown, count(*) FROM {} WHERE {LIVE}
              GROUP BY tool, shown",
            self.sql.records
        );
        let query = &query;
        let rows = self
            .run("counting records", |c| async move {
                self.rows(&c, query, types::NONE, &[]).await
            })
            .await?;
        let mut counts = Vec::with_capacity(rows.len());
        for row in rows {
            let tool: String = row.try_get(0).map_err(corrupt_row)?;
            let state: &str = row.try_get(1).map_err(corrupt_row)?;
            let n: i64 = row.try_get(2).map_err(corrupt_row)?;
            let state = state.parse().map_err(|_| bad_state(state))?;
            counts.push(Count::new(tool, state, u64::try_from(n).unwrap_or(0)));
        }
        counts.sort_by(|a, b| a.tool.cmp(&b.tool).then(a.state.cmp(&b.state)));
        Ok(counts)
    }
}
