//! The `Store` implementation: each operation one statement of [`sql`] on the connection, its
//! rows decoded by `rows`.

use std::sync::atomic::Ordering;
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, named_params};
use uuid::Uuid;

use super::conn::Access;
use super::error::sql_error;
use super::group::Scope;
use super::rows::{corrupt, decode, ms, now_ms};
use super::{PRUNE_BATCH, PRUNE_EVERY, SqliteStore, sql};
use crate::error::StoreError;
use crate::key::IdempotencyKey;
use crate::store::{
    AsyncStore, Claim, ClaimRequest, Existing, ExistingState, LeaseToken, OperationIds, Outcome,
    Record, RecordState, Takeover, Written,
};

/// What a claim that took the record replaced, from the live record it read first: a Running
/// one (its lease had ended) or an Ambiguous one; a Completed one is never taken while live.
/// Our own (this claim sent again, its first answer lost): what that one took over, kept as
/// `prior` (S27).
fn taken_over(before: RecordState, ours: LeaseToken, prior: Option<&str>) -> Option<Takeover> {
    match before {
        RecordState::Running { token, .. } if token == ours => match prior? {
            "ambiguous" => Some(Takeover::Ambiguous),
            _ => Some(Takeover::ExpiredHolder),
        },
        RecordState::Running { .. } => Some(Takeover::ExpiredHolder),
        RecordState::Ambiguous { .. } => Some(Takeover::Ambiguous),
        RecordState::Completed { .. } | RecordState::Tombstone => None,
    }
}

/// The transitions, each one statement of `sql.rs` on the connection (on the caller's thread
/// when it can, else on the store's); [`AsyncStore`] makes them a [`Store`](crate::Store).
impl AsyncStore for SqliteStore {
    async fn claim(&self, req: &ClaimRequest<'_>) -> Result<Claim, StoreError> {
        let (key, tool, fingerprint, token) =
            (req.key, req.tool.to_owned(), req.fingerprint, req.token);
        let tenant = req.tenant.clone();
        let arguments = req.arguments.map(<[u8]>::to_vec);
        let (lease, ttl) = (ms(req.lease), ms(req.ttl));
        let tombstones = self.here().db.settings.tombstones;
        let prune =
            self.here().claims.fetch_add(1, Ordering::Relaxed) % PRUNE_EVERY == PRUNE_EVERY - 1;
        // A claim that also prunes (up to `PRUNE_BATCH` rows) runs on the store's thread.
        let access = if prune { Access::Long } else { Access::Write };
        self.run(access, move |conn, path| {
            let now = now_ms();
            let claim = (|| {
                // What a lease end further ahead is capped by: the holder's lease length.
                let mut cap_by = lease;
                let mut own_prior: Option<String> = None;
                // The write lock first (see `Scope`).
                let tx = Scope::begin(conn)?;
                let key_text = key.as_str();
                let (lease_until, expires_at) = (now.saturating_add(lease), now.saturating_add(ttl));
                let claim_params = named_params! {
                    ":key": key_text, ":tool": tool, ":fingerprint": fingerprint.0,
                    ":token": token.0.as_bytes(), ":now": now,
                    ":lease_until": lease_until, ":lease_ms": lease, ":expires_at": expires_at,
                    ":tenant": tenant.as_deref(), ":arguments": arguments.as_deref(),
                };
                // A key without a row (the usual claim): inserted, nothing else to read.
                let inserted: Option<Vec<u8>> = tx
                    .prepare_cached(sql::INSERT_NEW)?
                    .query_row(claim_params, |row| row.get(0))
                    .optional()?;
                let (took, before) = match inserted {
                    Some(token) => (Some(token), None),
                    None => {
                        // A row is there. The live record (the write lock held, nothing changes
                        // it meanwhile): the answer when the claim does not take it, what it took
                        // over when it does (SQLite's RETURNING sees only the new row).
                        let before = tx.prepare_cached(sql::LIVE)?.query_row(
                            named_params! { ":key": key.as_str(), ":now": now },
                            // The holder's lease (column 14, `lease_ms`): NULL in a record
                            // written before it was kept; anything but an integer is an error.
                            // What it took over itself (column 19, `prior_state`), for this
                            // claim sent again under its own token.
                            |row| {
                                let holder_lease = row.get::<_, Option<i64>>(14)?;
                                let prior = row.get::<_, Option<String>>(19)?;
                                Ok(decode(row, &key, path).map(|rec| (rec, holder_lease, prior)))
                            },
                        ).optional()?;
                        let (before, holder_lease) = match before {
                            Some(Ok((rec, holder_lease, prior))) => {
                                own_prior = prior;
                                (Some(Ok(rec)), holder_lease)
                            }
                            Some(Err(e)) => (Some(Err(e)), None),
                            None => (None, None),
                        };
                        // The holder's own lease (S23): a record written before it was kept
                        // is capped by this claimer's, as then.
                        cap_by = holder_lease.filter(|ms| *ms > 0).unwrap_or(lease);
                        // A completed record is never taken while live (a replay): no write.
                        let replay = matches!(&before, Some(Ok(Record { state: RecordState::Completed { .. } | RecordState::Tombstone, .. })));
                        let took: Option<Vec<u8>> = if replay {
                            None
                        } else {
                            tx.prepare_cached(sql::CLAIM)?
                                .query_row(claim_params, |row| row.get(0))
                                .optional()?
                        };
                        (took, before)
                    }
                };
                let (mut live, takeover) = match took {
                    Some(_) => (None, before.and_then(|rec| taken_over(rec.ok()?.state, token, own_prior.as_deref()))),
                    None => (before, None),
                };
                // A lease end further ahead than the holder's own lease from now was written by
                // a clock ahead of this one: capped, so a dead holder's key frees within its
                // lease here. By the holder's lease, never this claimer's (S23): a claimer with
                // a shorter lease would take a live holder's key over while it renews.
                if let Some(Ok(Record { state: RecordState::Running { lease_remaining, .. }, .. })) = &mut live
                    && ms(*lease_remaining) > cap_by
                {
                    let cap = now.saturating_add(cap_by);
                    tx.prepare_cached(sql::CAP_LEASE)?
                        .execute(named_params! { ":key": key.as_str(), ":cap": cap })?;
                    tracing::warn!(%key, ahead_ms = ms(*lease_remaining) - cap_by, "a lease ends further ahead than the holder's lease from now (a clock ahead of this one?); capped");
                    *lease_remaining = Duration::from_millis(u64::try_from(cap_by).unwrap_or(0));
                }
                tx.commit()?;
                Ok::<_, rusqlite::Error>((took, live, takeover))
            })();
            let (took, live, takeover) = claim.map_err(|e| sql_error(path, "claim a key in", e))?;
            if prune {
                // Best effort: a failed prune leaves expired rows for the next one.
                if let Err(e) = prune_expired(conn, now, PRUNE_BATCH, tombstones) {
                    tracing::debug!(error = %e, "opportunistic prune failed");
                }
            }
            match (took, live) {
                (Some(t), _) if t == token.0.as_bytes() => Ok(Claim::Acquired { takeover }),
                (Some(_), _) => Err(corrupt(path, &key, "token", "the claim returned another holder's token")),
                (None, Some(rec)) => {
                    let rec = rec?;
                    let state = match rec.state {
                        RecordState::Running { lease_remaining, .. } => ExistingState::Running { lease_remaining },
                        RecordState::Completed { outcome } => ExistingState::Completed { outcome: outcome.into() },
                        RecordState::Ambiguous { .. } => ExistingState::Ambiguous,
                        // S33: done, past its time-to-live.
                        RecordState::Tombstone => ExistingState::Tombstone {
                            done: rec.updated,
                            resolved: rec.resolution.is_some(),
                        },
                    };
                    Ok(Claim::Existing(Existing { fingerprint: rec.fingerprint, state }))
                }
                (None, None) => Err(corrupt(path, &key, "expires_at", "the claim neither took the record nor found it live")),
            }
        })
        .await
    }

    async fn complete(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        outcome: Outcome,
        ttl: Duration,
    ) -> Result<Written, StoreError> {
        let ttl = ms(ttl);
        self.run(Access::Write, move |conn, path| {
            let now = now_ms();
            let changed = conn
                .prepare_cached(sql::COMPLETE)
                .and_then(|mut st| {
                    st.execute(named_params! {
                        ":key": key.as_str(), ":token": token.0.as_bytes(), ":outcome": outcome.as_bytes(),
                        ":now": now, ":expires_at": now.saturating_add(ttl),
                    })
                })
                .map_err(|e| sql_error(path, "record an outcome in", e))?;
            Ok(Written::from_changed(changed))
        })
        .await
    }

    async fn renew(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        lease: Duration,
    ) -> Result<Written, StoreError> {
        let lease = ms(lease);
        self.run(Access::Write, move |conn, path| {
            let now = now_ms();
            let changed = conn
                .prepare_cached(sql::RENEW)
                .and_then(|mut st| {
                    st.execute(named_params! {
                        ":key": key.as_str(), ":token": token.0.as_bytes(), ":now": now,
                        ":lease_until": now.saturating_add(lease), ":lease_ms": lease,
                    })
                })
                .map_err(|e| sql_error(path, "renew a lease in", e))?;
            Ok(Written::from_changed(changed))
        })
        .await
    }

    async fn release(&self, key: IdempotencyKey, token: LeaseToken) -> Result<Written, StoreError> {
        self.run(Access::Write, move |conn, path| {
            let changed = conn
                .prepare_cached(sql::RELEASE)
                .and_then(|mut st| {
                    st.execute(named_params! { ":key": key.as_str(), ":token": token.0.as_bytes(), ":now": now_ms() })
                })
                .map_err(|e| sql_error(path, "release a key in", e))?;
            Ok(Written::from_changed(changed))
        })
        .await
    }

    async fn restore(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        note: &str,
        ttl: Duration,
    ) -> Result<Written, StoreError> {
        let (note, ttl) = (note.to_owned(), ms(ttl));
        self.run(Access::Write, move |conn, path| {
            let now = now_ms();
            let params =
                named_params! { ":key": key.as_str(), ":token": token.0.as_bytes(), ":now": now };
            // The three cases exclude each other: at most one applies.
            let changed = (|| {
                let taken = conn.prepare_cached(sql::RESTORE_TAKEN)?.execute(params)?;
                if taken > 0 {
                    return Ok(taken);
                }
                let unknown =
                    conn.prepare_cached(sql::RESTORE_UNKNOWN)?
                        .execute(named_params! {
                            ":key": key.as_str(), ":token": token.0.as_bytes(), ":now": now,
                            ":note": note, ":expires_at": now.saturating_add(ttl),
                        })?;
                if unknown > 0 {
                    return Ok(unknown);
                }
                conn.prepare_cached(sql::RESTORE_NEW)?.execute(params)
            })()
            .map_err(|e| sql_error(path, "give a claim back in", e))?;
            Ok(Written::from_changed(changed))
        })
        .await
    }

    async fn mark_ambiguous(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        note: &str,
        ttl: Duration,
    ) -> Result<Written, StoreError> {
        self.mark(sql::MARK_AMBIGUOUS, key, token, note, ttl).await
    }

    async fn mark_unknown(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        note: &str,
        ttl: Duration,
    ) -> Result<Written, StoreError> {
        self.mark(sql::MARK_UNKNOWN, key, token, note, ttl).await
    }
}

impl SqliteStore {
    /// Running → ambiguous by `statement` ([`sql::MARK_AMBIGUOUS`], [`sql::MARK_UNKNOWN`]).
    async fn mark(
        &self,
        statement: &'static str,
        key: IdempotencyKey,
        token: LeaseToken,
        note: &str,
        ttl: Duration,
    ) -> Result<Written, StoreError> {
        let (note, ttl) = (note.to_owned(), ms(ttl));
        self.run(Access::Write, move |conn, path| {
            let now = now_ms();
            let changed = conn
                .prepare_cached(statement)
                .and_then(|mut st| {
                    st.execute(named_params! {
                        ":key": key.as_str(), ":token": token.0.as_bytes(), ":note": note,
                        ":now": now, ":expires_at": now.saturating_add(ttl),
                    })
                })
                .map_err(|e| sql_error(path, "mark a key ambiguous in", e))?;
            Ok(Written::from_changed(changed))
        })
        .await
    }
}

#[async_trait::async_trait]
impl OperationIds for SqliteStore {
    async fn operation_id(&self, name: &str, fresh: Uuid) -> Result<Uuid, StoreError> {
        let name = name.to_owned();
        self.run(Access::Write, move |conn, path| {
            let id: Vec<u8> = conn
                .prepare_cached(sql::OPERATION_ID)
                .and_then(|mut st| {
                    st.query_row(named_params! { ":name": name, ":id": fresh.as_bytes() }, |row| row.get(0))
                })
                .map_err(|e| sql_error(path, "store an operation id in", e))?;
            Uuid::from_slice(&id).map_err(|_| {
                StoreError::corrupt(format!(
                    "the operation id of `{name}` in {} is {} bytes, not a 16-byte UUID; \
                     delete that row (`DELETE FROM operations WHERE name = '{name}'`) or restore the file from a backup",
                    path.display(),
                    id.len()
                ))
            })
        })
        .await
    }
}

pub(super) fn prune_expired(
    conn: &Connection,
    now: i64,
    limit: usize,
    tombstones: Duration,
) -> rusqlite::Result<usize> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let tombstones_before = now.saturating_sub(ms(tombstones));
    let pruned = conn.prepare_cached(sql::PRUNE)?.execute(
        named_params! { ":now": now, ":limit": limit, ":tombstones_before": tombstones_before },
    )?;
    conn.prepare_cached(sql::DROP_OUTCOMES)?
        .execute(named_params! { ":now": now, ":limit": limit })?;
    Ok(pruned)
}
