//! The SQLite store's operator reads and repairs ([`Records`]): their statements, and each one
//! run on the connection like the claim state machine's.

use std::time::Duration;

use rusqlite::{OptionalExtension, named_params};
use uuid::Uuid;

use super::conn::Access;
use super::error::sql_error;
use super::group::Scope;
use super::rows::{decode_shown, ms, now_ms, remaining};
use super::sql::{live, record_columns};
use super::transitions::prune_expired;
use super::{SqliteStore, sql};
use crate::error::StoreError;
use crate::key::IdempotencyKey;
use crate::store::resolution::check_resolution;
use crate::store::{Count, Forgot, RecordFilter, Records, Released, Resolved, StateKind};
use crate::store::{Decision, LeaseToken, Record, Written};

/// The state operators read a row in (S31): a running row whose holder's lease lapsed is an
/// ambiguous one; (S33) a completed row past its expiry is a tombstone.
macro_rules! shown_state {
    () => {
        "(CASE WHEN state = 'running' AND lease_until <= :now THEN 'ambiguous'
               WHEN state = 'completed' AND expires_at <= :now THEN 'tombstone' ELSE state END)"
    };
}

/// Live records that pass the filter (each condition off when its parameter is NULL), newest
/// first. `:made_before`/`:made_after` are unix ms, `now` minus the ages asked for.
const LIST: &str = concat!(
    "SELECT ",
    record_columns!(),
    ", key
    FROM records
    WHERE ",
    live!(""),
    "
      AND (:tool IS NULL OR tool = :tool)
      AND (:tenant IS NULL OR tenant = :tenant)
      AND (:state IS NULL OR ",
    shown_state!(),
    " = :state)
      AND (:made_before IS NULL OR created <= :made_before)
      AND (:made_after IS NULL OR created > :made_after)
    ORDER BY created DESC, key
    LIMIT :limit"
);

/// What an operator's release judges, read in its transaction.
const RELEASE_CHECK: &str = concat!(
    "
    SELECT state, token, lease_until FROM records WHERE key = :key AND ",
    live!("")
);

/// running under :token → absent (the record judged, not one that replaced it).
const RELEASE_JUDGED: &str = "
    DELETE FROM records WHERE key = :key AND state = 'running' AND token = :token";

/// What an operator's forget or resolve judges, read in its transaction.
const JUDGE: &str = concat!(
    "
    SELECT state, lease_until FROM records WHERE key = :key AND ",
    live!("")
);

/// What an operator's resolve judges, read in its transaction: the record, live or kept to show
/// a decision, and the decision kept with it (a resolve sent again finds its own).
const RESOLVE_JUDGE: &str = concat!(
    "
    SELECT state, lease_until, ",
    live!(""),
    ", resolution, resolution_note, outcome
    FROM records WHERE key = :key AND (",
    live!(""),
    " OR kept_until > :now)"
);

/// any state → absent (a released record kept to show its decision too); says whether the
/// record was live.
/// S33: a tombstone (completed, past its expiry, not forgotten already) → forgotten: no longer
/// live, kept until :kept_until to show the operator's decision (stored as `not_applied` on a
/// completed row: the column's CHECK allows no third word).
const FORGET_TOMBSTONE: &str = "
    UPDATE records SET resolution = 'not_applied', resolved_at = :now, resolution_note = :note,
                       kept_until = :kept_until, arguments = NULL
    WHERE key = :key AND state = 'completed' AND expires_at <= :now
      AND resolution IS NOT 'not_applied'
    RETURNING 1";

const FORGET: &str = concat!(
    "
    DELETE FROM records WHERE key = :key RETURNING ",
    live!("")
);

/// A settler's applied (S28): running under :token, live → completed with :outcome until
/// :expires_at, the decision kept as an operator's is.
const SETTLE_APPLIED: &str = concat!(
    "
    UPDATE records SET state = 'completed', outcome = :outcome, token = NULL, lease_until = NULL,
                       note = NULL, expires_at = :expires_at, updated = :now,
                       resolution = 'applied', resolved_at = :now, resolution_note = :note,
                       kept_until = NULL
    WHERE key = :key AND state = 'running' AND token = :token AND ",
    live!("")
);

/// A settler's not-applied (S28): running under :token, live → expired now (absent for every
/// operation), kept until :kept_until to show the decision.
const SETTLE_NOT_APPLIED: &str = concat!(
    "
    UPDATE records SET expires_at = :now, updated = :now,
                       resolution = 'not_applied', resolved_at = :now, resolution_note = :note,
                       kept_until = :kept_until
    WHERE key = :key AND state = 'running' AND token = :token AND ",
    live!("")
);

/// Live records by tool and state.
const COUNTS: &str = concat!(
    "SELECT tool, ",
    shown_state!(),
    " AS shown, count(*) FROM records WHERE ",
    live!(""),
    "
    GROUP BY tool, shown ORDER BY tool, shown"
);

fn state_of(word: &str) -> Option<StateKind> {
    word.parse().ok()
}

impl SqliteStore {
    /// The live record of `key` (for `Store::get` and `Records::get`).
    pub(super) async fn live_record(
        &self,
        key: &IdempotencyKey,
    ) -> Result<Option<Record>, StoreError> {
        let key = *key;
        self.run(Access::Read, move |conn, path| {
            let rec = conn
                .prepare_cached(sql::SHOWN)
                .and_then(|mut st| {
                    st.query_row(
                        named_params! { ":key": key.as_str(), ":now": now_ms() },
                        |row| Ok(decode_shown(row, &key, path)),
                    )
                    .optional()
                })
                .map_err(|e| sql_error(path, "read a record from", e))?;
            rec.transpose()
        })
        .await
    }

    /// Deletes up to `limit` expired records (for `Store::prune` and `Records::prune`).
    pub(super) async fn prune_now(&self, limit: usize) -> Result<usize, StoreError> {
        let tombstones = self.here().db.settings.tombstones;
        self.run(Access::Long, move |conn, path| {
            prune_expired(conn, now_ms(), limit, tombstones)
                .map_err(|e| sql_error(path, "prune expired records from", e))
        })
        .await
    }
}

#[async_trait::async_trait]
impl Records for SqliteStore {
    async fn operation(&self, name: &str) -> Result<Option<Uuid>, StoreError> {
        let name = name.to_owned();
        self.run(Access::Read, move |conn, path| {
            let id: Option<Vec<u8>> = conn
                .prepare_cached("SELECT id FROM operations WHERE name = :name")
                .and_then(|mut st| {
                    st.query_row(named_params! { ":name": name }, |row| row.get(0))
                        .optional()
                })
                .map_err(|e| sql_error(path, "read an operation id from", e))?;
            id.map(|id| {
                Uuid::from_slice(&id).map_err(|_| {
                    StoreError::corrupt(format!(
                        "the operation id of `{name}` in {} is not a 16-byte UUID",
                        path.display()
                    ))
                })
            })
            .transpose()
        })
        .await
    }

    async fn get(&self, key: &IdempotencyKey) -> Result<Option<Record>, StoreError> {
        self.live_record(key).await
    }

    async fn list(&self, filter: &RecordFilter) -> Result<Vec<Record>, StoreError> {
        let filter = filter.clone();
        // On the store's thread: a scan of a large file must not hold an async worker.
        self.run(Access::Long, move |conn, path| {
            let now = now_ms();
            let before = filter.older_than.map(|d| now.saturating_sub(ms(d)));
            let after = filter.newer_than.map(|d| now.saturating_sub(ms(d)));
            let limit = i64::try_from(filter.limit).unwrap_or(i64::MAX);
            let failed = |e| sql_error(path, "list the records of", e);
            let mut st = conn.prepare_cached(LIST).map_err(failed)?;
            let rows = st
                .query_map(
                    named_params! {
                        ":now": now, ":tool": filter.tool, ":state": filter.state.map(|s| s.as_str()),
                        ":made_before": before, ":made_after": after, ":limit": limit,
                        ":tenant": filter.tenant,
                    },
                    |row| {
                        let key: String = row.get(19)?;
                        Ok(match key.parse::<IdempotencyKey>() {
                            Ok(key) => decode_shown(row, &key, path),
                            Err(_) => Err(StoreError::corrupt(format!(
                                "a record in {} has the key `{key}`, which is not a UUID; delete that row \
                                 (`DELETE FROM records WHERE key = '{key}'`)",
                                path.display()
                            ))),
                        })
                    },
                )
                .map_err(failed)?;
            let mut records = Vec::new();
            for row in rows {
                records.push(row.map_err(failed)??);
            }
            Ok(records)
        })
        .await
    }

    async fn release_key(&self, key: &IdempotencyKey, force: bool) -> Result<Released, StoreError> {
        let key = *key;
        self.run(Access::Write, move |conn, path| {
            let now = now_ms();
            let released = (|| {
                let tx = Scope::begin(conn)?;
                let found: Option<(String, Option<Vec<u8>>, Option<i64>)> = tx
                    .prepare_cached(RELEASE_CHECK)?
                    .query_row(named_params! { ":key": key.as_str(), ":now": now }, |row| {
                        Ok((row.get(0)?, row.get(1)?, row.get(2)?))
                    })
                    .optional()?;
                let answer = match found {
                    None => Released::NotFound,
                    Some((state, _, _)) if state != "running" => {
                        Released::NotRunning(state_of(&state).unwrap_or(StateKind::Ambiguous))
                    }
                    Some((_, _, Some(until))) if until > now && !force => Released::LeaseLive {
                        remaining: remaining(until, now),
                    },
                    Some((_, token, _)) => {
                        tx.prepare_cached(RELEASE_JUDGED)?
                            .execute(named_params! { ":key": key.as_str(), ":token": token })?;
                        Released::Released
                    }
                };
                tx.commit()?;
                Ok::<_, rusqlite::Error>(answer)
            })();
            released.map_err(|e| sql_error(path, "release a key in", e))
        })
        .await
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
        let key = *key;
        let note = note.map(str::to_owned);
        let keep = ms(self.here().db.settings.tombstones);
        self.run(Access::Write, move |conn, path| {
            let now = now_ms();
            let forgot = (|| {
                let tx = Scope::begin(conn)?;
                let found: Option<(String, Option<i64>)> = tx
                    .prepare_cached(JUDGE)?
                    .query_row(named_params! { ":key": key.as_str(), ":now": now }, |row| {
                        Ok((row.get(0)?, row.get(1)?))
                    })
                    .optional()?;
                let answer = match found {
                    Some((state, Some(until))) if state == "running" && until > now && !force => {
                        Forgot::LeaseLive {
                            remaining: remaining(until, now),
                        }
                    }
                    _ if tx
                        .prepare_cached(FORGET_TOMBSTONE)?
                        .query_row(
                            named_params! {
                                ":key": key.as_str(), ":now": now,
                                ":kept_until": now.saturating_add(keep), ":note": note,
                            },
                            |_| Ok(()),
                        )
                        .optional()?
                        .is_some() =>
                    {
                        Forgot::Forgotten
                    }
                    _ => {
                        let live = tx
                            .prepare_cached(FORGET)?
                            .query_row(named_params! { ":key": key.as_str(), ":now": now }, |row| {
                                row.get::<_, bool>(0)
                            })
                            .optional()?;
                        match live {
                            Some(true) => Forgot::Forgotten,
                            _ => Forgot::NotFound,
                        }
                    }
                };
                tx.commit()?;
                Ok::<_, rusqlite::Error>(answer)
            })();
            forgot.map_err(|e| sql_error(path, "forget a key in", e))
        })
        .await
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
        let (key, ttl) = (*key, ms(ttl));
        let outcome = outcome.map(<[u8]>::to_vec);
        let note = note.map(str::to_owned);
        self.run(Access::Write, move |conn, path| {
            let now = now_ms();
            let resolved = (|| {
                // The write lock first: the record judged is the one changed.
                let tx = Scope::begin(conn)?;
                type Judged = (
                    String,
                    Option<i64>,
                    bool,
                    Option<String>,
                    Option<String>,
                    Option<Vec<u8>>,
                );
                let found: Option<Judged> = tx
                    .prepare_cached(RESOLVE_JUDGE)?
                    .query_row(named_params! { ":key": key.as_str(), ":now": now }, |row| {
                        Ok((
                            row.get(0)?,
                            row.get(1)?,
                            row.get(2)?,
                            row.get(3)?,
                            row.get(4)?,
                            row.get(5)?,
                        ))
                    })
                    .optional()?;
                // The same decision sent again (its reply was lost), while it stands.
                let again = |live: bool,
                             kept: &Option<String>,
                             kept_note: &Option<String>,
                             stored: &Option<Vec<u8>>| {
                    let word = decision.stored();
                    kept.as_deref() == Some(word)
                        && kept_note.as_deref() == note.as_deref()
                        && live == outcome.is_some()
                        && (outcome.is_none() || stored == &outcome)
                };
                let answer = match found {
                    None => Resolved::NotFound,
                    Some((_, _, live, kept, kept_note, stored))
                        if again(live, &kept, &kept_note, &stored) =>
                    {
                        Resolved::Resolved
                    }
                    Some((_, _, false, ..)) => Resolved::NotFound,
                    Some((state, ..)) if state == "completed" => Resolved::Completed,
                    Some((state, Some(until), ..)) if state == "running" && until > now => {
                        Resolved::LeaseLive {
                            remaining: remaining(until, now),
                        }
                    }
                    Some(_) => {
                        let until = now.saturating_add(ttl);
                        match &outcome {
                            Some(outcome) => {
                                tx.prepare_cached(sql::RESOLVE_APPLIED)?
                                    .execute(named_params! {
                                        ":key": key.as_str(), ":outcome": outcome, ":now": now,
                                        ":expires_at": until, ":note": note,
                                    })?
                            }
                            None => tx.prepare_cached(sql::RESOLVE_NOT_APPLIED)?.execute(
                                named_params! {
                                    ":key": key.as_str(), ":now": now, ":kept_until": until,
                                    ":note": note,
                                },
                            )?,
                        };
                        Resolved::Resolved
                    }
                };
                tx.commit()?;
                Ok::<_, rusqlite::Error>(answer)
            })();
            resolved.map_err(|e| sql_error(path, "resolve a key in", e))
        })
        .await
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
        let (key, ttl) = (*key, ms(ttl));
        let outcome = outcome.map(<[u8]>::to_vec);
        let note = note.map(str::to_owned);
        self.run(Access::Write, move |conn, path| {
            let now = now_ms();
            let until = now.saturating_add(ttl);
            let token = token.0.as_bytes();
            let changed = match &outcome {
                Some(outcome) => conn.prepare_cached(SETTLE_APPLIED).and_then(|mut st| {
                    st.execute(named_params! {
                        ":key": key.as_str(), ":token": token, ":outcome": outcome, ":now": now,
                        ":expires_at": until, ":note": note,
                    })
                }),
                None => conn.prepare_cached(SETTLE_NOT_APPLIED).and_then(|mut st| {
                    st.execute(named_params! {
                        ":key": key.as_str(), ":token": token, ":now": now,
                        ":kept_until": until, ":note": note,
                    })
                }),
            }
            .map_err(|e| sql_error(path, "settle a key in", e))?;
            Ok(Written::from_changed(changed))
        })
        .await
    }

    async fn prune(&self, limit: usize) -> Result<usize, StoreError> {
        self.prune_now(limit).await
    }

    async fn counts(&self) -> Result<Vec<Count>, StoreError> {
        self.run(Access::Long, move |conn, path| {
            let failed = |e| sql_error(path, "count the records of", e);
            let mut st = conn.prepare_cached(COUNTS).map_err(failed)?;
            let rows = st
                .query_map(named_params! { ":now": now_ms() }, |row| {
                    Ok((
                        row.get::<_, String>(0)?,
                        row.get::<_, String>(1)?,
                        row.get::<_, i64>(2)?,
                    ))
                })
                .map_err(failed)?;
            let mut counts = Vec::new();
            for row in rows {
                let (tool, state, n) = row.map_err(failed)?;
                let state = state_of(&state).ok_or_else(|| {
                    StoreError::corrupt(format!(
                        "records of `{tool}` in {} have the state `{state}`, which idemkit never writes",
                        path.display()
                    ))
                })?;
                counts.push(Count::new(tool, state, u64::try_from(n).unwrap_or(0)));
            }
            // Grouped already; sorted by the state machine's order rather than the words'.
            counts.sort_by(|a, b| a.tool.cmp(&b.tool).then(a.state.cmp(&b.state)));
            Ok(counts)
        })
        .await
    }
}
