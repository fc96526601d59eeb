//! The `Store` implementation: each operation one statement of `Sql`, sent again on a lost
//! connection or a serialization failure where repeating it is safe.

use std::time::Duration;

use tokio_postgres::types::ToSql;
use uuid::Uuid;

use super::PostgresStore;
use super::rows::{corrupt_row, existing_of, micros};
use super::sql::types;
use crate::error::{StoreError, StoreErrorKind};
use crate::key::IdempotencyKey;
use crate::store::{
    AsyncStore, Claim, ClaimRequest, ExistingState, LeaseToken, OperationIds, Outcome, Takeover,
    Written,
};

/// The transitions, each as the store runs it; [`AsyncStore`] makes them a [`Store`](crate::Store).
impl AsyncStore for PostgresStore {
    async fn claim(&self, req: &ClaimRequest<'_>) -> Result<Claim, StoreError> {
        let key = req.key.as_uuid();
        let fingerprint = &req.fingerprint.0[..];
        let token = req.token.0;
        let (lease, ttl) = (micros(req.lease), micros(req.ttl));
        let tenant = req.tenant.as_deref();
        let arguments = req.arguments;
        // The row may change between the two statements (completed, released, expired); when it
        // turns out to be claimable after all, claim again. Each round trip sees progress by
        // another caller, so a few rounds always settle.
        for _ in 0..8 {
            let acquired = self
                .run("claim", |c| async move {
                    self.row(
                        &c,
                        &self.sql.claim,
                        types::CLAIM,
                        &[
                            &key,
                            &req.tool,
                            &fingerprint,
                            &token,
                            &lease,
                            &ttl,
                            &tenant,
                            &arguments,
                        ],
                    )
                    .await
                })
                .await?;
            if let Some(row) = acquired {
                // What the claim took over (see the statement): the kinds it names.
                let takeover = match row.try_get::<_, Option<&str>>(0).map_err(corrupt_row)? {
                    None => None,
                    Some("ambiguous") => Some(Takeover::Ambiguous),
                    Some(_) => Some(Takeover::ExpiredHolder),
                };
                return Ok(Claim::Acquired { takeover });
            }
            let existing = self
                .run("claim", |c| async move {
                    self.row(&c, &self.sql.existing, types::KEY, &[&key]).await
                })
                .await?;
            let Some(row) = existing else {
                continue; // Gone (released or expired) since the claim: claim again.
            };
            let existing = existing_of(&row)?;
            let same = existing.fingerprint == req.fingerprint;
            match existing.state {
                ExistingState::Ambiguous if same => continue,
                ExistingState::Running { lease_remaining } if same && lease_remaining.is_zero() => {
                    continue;
                }
                _ => return Ok(Claim::Existing(existing)),
            }
        }
        Err(StoreError::unavailable(
            "the record changed under every claim (8 rounds); the table is under heavy contention on this key, retry the call",
        ))
    }

    async fn complete(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        outcome: Outcome,
        ttl: Duration,
    ) -> Result<Written, StoreError> {
        let (key, token, ttl) = (key.as_uuid(), token.0, micros(ttl));
        let outcome = outcome.as_bytes();
        let n = self
            .run("complete", |c| async move {
                let params: [&(dyn ToSql + Sync); 4] = [&key, &token, &outcome, &ttl];
                self.changed(&c, &self.sql.complete, types::COMPLETE, &params)
                    .await
            })
            .await?;
        Ok(Written::from_changed(n))
    }

    async fn renew(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        lease: Duration,
    ) -> Result<Written, StoreError> {
        let (key, token, lease) = (key.as_uuid(), token.0, micros(lease));
        let n = self
            .run("renew", |c| async move {
                self.changed(&c, &self.sql.renew, types::RENEW, &[&key, &token, &lease])
                    .await
            })
            .await?;
        Ok(Written::from_changed(n))
    }

    async fn release(&self, key: IdempotencyKey, token: LeaseToken) -> Result<Written, StoreError> {
        let (key, token) = (key.as_uuid(), token.0);
        let n = self
            .run("release", |c| async move {
                self.changed(&c, &self.sql.release, types::RELEASE, &[&key, &token])
                    .await
            })
            .await?;
        Ok(Written::from_changed(n))
    }

    async fn restore(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        note: &str,
        ttl: Duration,
    ) -> Result<Written, StoreError> {
        let (key, token, ttl) = (key.as_uuid(), token.0, micros(ttl));
        let n = self
            .run("restore", |c| async move {
                // The three cases exclude each other: at most one applies.
                let params: [&(dyn ToSql + Sync); 2] = [&key, &token];
                let taken = self.changed(&c, &self.sql.restore_taken, types::RELEASE, &params);
                if let n @ 1.. = taken.await? {
                    return Ok(n);
                }
                let marked: [&(dyn ToSql + Sync); 4] = [&key, &token, &note, &ttl];
                let unknown = self.changed(
                    &c,
                    &self.sql.restore_unknown,
                    types::MARK_AMBIGUOUS,
                    &marked,
                );
                if let n @ 1.. = unknown.await? {
                    return Ok(n);
                }
                self.changed(&c, &self.sql.restore_new, types::RELEASE, &params)
                    .await
            })
            .await?;
        Ok(Written::from_changed(n))
    }

    async fn mark_ambiguous(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        note: &str,
        ttl: Duration,
    ) -> Result<Written, StoreError> {
        let (key, token, ttl) = (key.as_uuid(), token.0, micros(ttl));
        let n = self
            .run("mark_ambiguous", |c| async move {
                let params: [&(dyn ToSql + Sync); 4] = [&key, &token, &note, &ttl];
                self.changed(&c, &self.sql.mark_ambiguous, types::MARK_AMBIGUOUS, &params)
                    .await
            })
            .await?;
        Ok(Written::from_changed(n))
    }

    async fn mark_unknown(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        note: &str,
        ttl: Duration,
    ) -> Result<Written, StoreError> {
        let (key, token, ttl) = (key.as_uuid(), token.0, micros(ttl));
        let n = self
            .run("mark_unknown", |c| async move {
                let params: [&(dyn ToSql + Sync); 4] = [&key, &token, &note, &ttl];
                self.changed(&c, &self.sql.mark_unknown, types::MARK_AMBIGUOUS, &params)
                    .await
            })
            .await?;
        Ok(Written::from_changed(n))
    }
}

#[async_trait::async_trait]
impl OperationIds for PostgresStore {
    async fn operation_id(&self, name: &str, fresh: Uuid) -> Result<Uuid, StoreError> {
        let row = self
            .run("operation_id", |c| async move {
                self.row(
                    &c,
                    &self.sql.operation_id,
                    types::OPERATION_ID,
                    &[&name, &fresh],
                )
                .await
            })
            .await?;
        let row = row.ok_or_else(|| {
            StoreError::new(
                StoreErrorKind::Other,
                "PostgreSQL answered no row for an operation id; the operations table was changed by something else",
            )
        })?;
        row.try_get(0).map_err(corrupt_row)
    }
}
