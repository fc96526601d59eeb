//! The `Store` implementation: each operation one script, retried on a lost connection where
//! repeating it is safe.

use std::time::Duration;

use redis::{Script, Value};
use uuid::Uuid;

use super::RedisStore;
use super::rows::{corrupt_field, existing_of, ms, unexpected};

use crate::error::StoreError;
use crate::key::IdempotencyKey;
use crate::store::{
    AsyncStore, Claim, ClaimRequest, LeaseToken, OperationIds, Outcome, Takeover, Written,
};

/// The transitions, each as the store runs it; [`AsyncStore`] makes them a [`Store`](crate::Store).
impl AsyncStore for RedisStore {
    async fn claim(&self, req: &ClaimRequest<'_>) -> Result<Claim, StoreError> {
        let (fp, token) = (req.fingerprint.to_hex(), req.token.0.to_string());
        let (lease, ttl, grace) = (ms(req.lease), ms(req.ttl), ms(self.grace));
        let args: [&[u8]; 8] = [
            req.tool.as_bytes(),
            fp.as_bytes(),
            token.as_bytes(),
            lease.as_bytes(),
            ttl.as_bytes(),
            grace.as_bytes(),
            req.tenant.as_deref().unwrap_or("").as_bytes(),
            req.arguments.unwrap_or(b""),
        ];
        let key = self.record_key(&req.key);
        let (reply, short): (Value, _) = self
            .invoke_replicated("claim", &self.scripts.claim, &key, &args)
            .await?;
        if let Some(error) = short {
            // Granted on the primary alone: not a claim this caller may act on. A fresh one is
            // given back, so the key does not wait out the lease if the primary stays; a
            // takeover (of a dead holder's or an ambiguous record, whose effect may have
            // happened) is kept ambiguous, as it was: released, the next claim would find
            // nothing and act blind. A claim that wrote nothing (an existing record's answer)
            // is answered as it is.
            match reply {
                Value::Int(1) => {
                    let _ = AsyncStore::release(self, req.key, req.token).await;
                    return Err(error);
                }
                Value::Int(2 | 3) => {
                    let note = "claimed on the primary alone (too few replicas acknowledged)";
                    let _ =
                        AsyncStore::mark_ambiguous(self, req.key, req.token, note, req.ttl).await;
                    return Err(error);
                }
                _ => {}
            }
        }
        match reply {
            Value::Int(1) => Ok(Claim::Acquired { takeover: None }),
            Value::Int(2) => Ok(Claim::Acquired {
                takeover: Some(Takeover::ExpiredHolder),
            }),
            Value::Int(3) => Ok(Claim::Acquired {
                takeover: Some(Takeover::Ambiguous),
            }),
            Value::Array(items) => Ok(Claim::Existing(existing_of(items)?)),
            other => Err(unexpected(&other)),
        }
    }

    async fn complete(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        outcome: Outcome,
        ttl: Duration,
    ) -> Result<Written, StoreError> {
        // S33: the key outlives its time-to-live by the tombstone setting (then the grace).
        let grace = ms(self.grace.saturating_add(self.tombstones));
        let (token, ttl) = (token.0.to_string(), ms(ttl));
        let args: [&[u8]; 4] = [
            token.as_bytes(),
            outcome.as_bytes(),
            ttl.as_bytes(),
            grace.as_bytes(),
        ];
        let n: i64 = self
            .invoke(
                "complete",
                &self.scripts.complete,
                &self.record_key(&key),
                &args,
            )
            .await?;
        Ok(Written::from_changed(n))
    }

    async fn renew(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        lease: Duration,
    ) -> Result<Written, StoreError> {
        let (token, lease, grace) = (token.0.to_string(), ms(lease), ms(self.grace));
        let args: [&[u8]; 3] = [token.as_bytes(), lease.as_bytes(), grace.as_bytes()];
        let n: i64 = self
            .invoke("renew", &self.scripts.renew, &self.record_key(&key), &args)
            .await?;
        Ok(Written::from_changed(n))
    }

    async fn release(&self, key: IdempotencyKey, token: LeaseToken) -> Result<Written, StoreError> {
        let token = token.0.to_string();
        let n: i64 = self
            .invoke(
                "release",
                &self.scripts.release,
                &self.record_key(&key),
                &[token.as_bytes()],
            )
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
        self.noted("restore", &self.scripts.restore, key, token, note, ttl)
            .await
    }

    async fn mark_ambiguous(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        note: &str,
        ttl: Duration,
    ) -> Result<Written, StoreError> {
        self.noted(
            "mark_ambiguous",
            &self.scripts.mark_ambiguous,
            key,
            token,
            note,
            ttl,
        )
        .await
    }

    async fn mark_unknown(
        &self,
        key: IdempotencyKey,
        token: LeaseToken,
        note: &str,
        ttl: Duration,
    ) -> Result<Written, StoreError> {
        self.noted(
            "mark_unknown",
            &self.scripts.mark_unknown,
            key,
            token,
            note,
            ttl,
        )
        .await
    }
}

impl RedisStore {
    /// Runs one of the scripts that write a held record with a note (`restore`, `mark_ambiguous`,
    /// `mark_unknown`): the holder's token, the note, the time-to-live and the grace.
    async fn noted(
        &self,
        what: &'static str,
        script: &Script,
        key: IdempotencyKey,
        token: LeaseToken,
        note: &str,
        ttl: Duration,
    ) -> Result<Written, StoreError> {
        let (token, ttl, grace) = (token.0.to_string(), ms(ttl), ms(self.grace));
        let args: [&[u8]; 4] = [
            token.as_bytes(),
            note.as_bytes(),
            ttl.as_bytes(),
            grace.as_bytes(),
        ];
        let n: i64 = self
            .invoke(what, script, &self.record_key(&key), &args)
            .await?;
        Ok(Written::from_changed(n))
    }
}

#[async_trait::async_trait]
impl OperationIds for RedisStore {
    async fn operation_id(&self, name: &str, fresh: Uuid) -> Result<Uuid, StoreError> {
        let fresh = fresh.to_string();
        let stored: String = self
            .invoke(
                "operation_id",
                &self.scripts.operation_id,
                &self.operation_key(name),
                &[fresh.as_bytes()],
            )
            .await?;
        stored.parse().map_err(|_| corrupt_field("operation id"))
    }
}
