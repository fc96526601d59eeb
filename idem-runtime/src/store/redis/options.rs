//! The Redis store's options: where it connects, its key prefix, timeouts, replicas to wait for.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::error::redis_error;
use super::scripts::scripts;
use super::{Connection, RedisStore, Replicas};
use crate::error::{StoreError, StoreErrorKind};
use crate::store::redacted_url;

/// Configures a [`RedisStore`].
#[must_use]
#[derive(Clone)]
pub struct RedisStoreBuilder {
    pub(super) url: String,
    pub(super) prefix: String,
    pub(super) grace: Duration,
    pub(super) tombstones: Duration,
    pub(super) timeout: Duration,
    pub(super) replicas: Option<Replicas>,
}

impl std::fmt::Debug for RedisStoreBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStoreBuilder")
            .field("url", &redacted_url(&self.url))
            .field("prefix", &self.prefix)
            .field("grace", &self.grace)
            .field("timeout", &self.timeout)
            .field("replicas", &self.replicas)
            .finish()
    }
}

impl RedisStoreBuilder {
    /// The prefix of every key this store writes. Default `idemkit:`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// How long a tombstone (S33: a completed record past its time-to-live, its outcome
    /// dropped by a prune) is kept past that time-to-live: its key's own expiry (`PEXPIREAT`)
    /// is set that much later (then the grace), and a prune deletes it no sooner; default
    /// [`DEFAULT_TOMBSTONES`](crate::store::DEFAULT_TOMBSTONES) (400 days). Until then a repeat
    /// of its key is answered "done on DATE; its result is no longer kept", never run.
    pub fn tombstones(mut self, keep: Duration) -> Self {
        self.tombstones = keep;
        self
    }

    /// How long Redis keeps a record after its time-to-live before deleting it by itself.
    /// Default one minute.
    pub fn expiry_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// How long connecting, and each reply, may take. Default 5 s.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Acknowledge a claim, renewal, completion, release or ambiguity mark only once `n`
    /// replicas have it: each script is followed, on the same connection, by Redis's
    /// `WAIT n timeout`; if fewer than `n` replicas acknowledged within `timeout`, the
    /// transition fails as [`StoreErrorKind::Unavailable`] (a claim granted on the primary
    /// alone is released first, best effort). Default: off (`n` = 0). A reply may then take up
    /// to `timeout` longer than [`timeout`](Self::timeout) allows, which is lengthened to match.
    ///
    /// **What it closes**: with `n` at least 1 and a failover that promotes a replica holding
    /// every write the old primary acknowledged (Sentinel and Cluster prefer the replica with
    /// the largest replication offset; with `n` equal to the number of replicas any of them
    /// will do), no acknowledged claim, lease, outcome or ambiguity mark is lost: no caller is
    /// told an outcome that the next primary has never seen, and no key runs twice because its
    /// claim vanished (measured in `tests/failover_redis.rs`).
    ///
    /// **What it does not close**: `WAIT` does not roll back. A write that timed out was still
    /// applied on the primary and may or may not survive: the caller is told it failed (a
    /// claim: the body did not run; a completion: retried, then the outcome is unknown, S17).
    /// It says nothing of disk: replicas and primary that all restart at once keep only what
    /// their persistence kept (AOF `appendfsync always` for that). A promoted replica that had
    /// not acknowledged (more replicas than `n`, and a failover that picks a lagging one) loses
    /// what it lacks. Nor does it help a holder cut off from the new primary: that holder's
    /// lease runs out and the key is taken over as after any crash (S13, S19, S20).
    pub fn wait_for_replicas(mut self, n: u32, timeout: Duration) -> Self {
        self.replicas = (n > 0).then_some(Replicas { n, timeout });
        self
    }

    /// Opens the connection.
    pub async fn connect(self) -> Result<RedisStore, StoreError> {
        let client = redis::Client::open(self.url.as_str()).map_err(|e| {
            StoreError::new(
                StoreErrorKind::Other,
                "the Redis URL does not parse; expected redis://[user:password@]host:port[/db]",
            )
            .with_source(e)
        })?;
        let response = self.timeout + self.replicas.map_or(Duration::ZERO, |r| r.timeout);
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(response))
            // Few, quick reconnection attempts: a dead server surfaces as `Error::Store` fast.
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(500));
        let conn = ConnectionManager::new_with_config(client.clone(), config.clone())
            .await
            .map_err(|e| redis_error(e, "connecting"))?;
        Ok(RedisStore {
            conn: Arc::new(Connection {
                current: RwLock::new(conn),
                client,
                config,
            }),
            prefix: self.prefix,
            grace: self.grace,
            tombstones: self.tombstones,
            replicas: self.replicas,
            scripts: scripts(),
        })
    }
}
