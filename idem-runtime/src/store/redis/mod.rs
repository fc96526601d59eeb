//! The Redis store: one Lua script per operation, the server's `TIME` as the clock.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ErrorKind, RedisError, RedisResult, Script, Value};

use crate::error::StoreError;
use crate::key::IdempotencyKey;

mod error;
mod options;
mod records;
mod rows;
mod scripts;
mod transitions;

use self::error::{connection_lost, redis_error};
pub use self::options::RedisStoreBuilder;
use self::scripts::Scripts;

/// How often an operation is sent again after its connection was lost. Every script is safe to
/// repeat: the caller's lease token recognises a claim or write that already applied.
const RETRIES_ON_LOST_CONNECTION: u32 = 2;

/// Records claims and outcomes in Redis; its durability limits are below.
///
/// Each record is one hash (`<prefix>rec:<key>`) and each script touches that one key only, so
/// the scripts are valid on Redis Cluster (every key is its own slot). A script runs atomically,
/// which is what makes a claim a claim: no other command sees a record half-changed.
///
/// ```no_run
/// # async fn demo() -> Result<(), idem_runtime::StoreError> {
/// use idem_runtime::{Idem, RedisStore};
///
/// let store = RedisStore::builder("redis://cache.internal:6379/0")
///     .prefix("billing:idemkit:") // optional: one namespace per tenant or environment
///     .connect()
///     .await?;
/// let idem = Idem::new(store);
/// # let _ = idem; Ok(()) }
/// ```
///
/// # Durability: when to choose PostgreSQL instead
///
/// Redis acknowledges a write before it is safe on disk or on a replica:
///
/// - **Replication is asynchronous.** If the primary fails over after acknowledging a claim or a
///   completion but before a replica received it, the new primary has never seen it: the next
///   call finds no record and runs the operation again (with the same key, so a provider that
///   honours idempotency keys still dedupes it), or finds the claim without its outcome.
///   [`RedisStoreBuilder::wait_for_replicas`] closes that for a failover to a replica that
///   acknowledged the write (measured in `tests/failover_redis.rs`).
/// - **AOF with `appendfsync everysec`** (the usual setting) can lose the last second of writes
///   on a crash of the machine (and lost one acknowledged outcome in 80 kills of the process in
///   `tests/failover_redis.rs`; `appendfsync always` lost none); with no persistence a restart
///   loses every record.
/// - **Eviction.** Under `maxmemory` with an `allkeys-*` policy Redis may evict live records,
///   ambiguous ones included (the next call then runs an operation whose outcome was unknown);
///   give idemkit a `noeviction` instance. A `volatile-*` policy evicts only keys with a
///   time-to-live: never a running or ambiguous record's (they have none, S34), but completed
///   ones before their time (a repeat then runs again), so leave it headroom.
///
/// So Redis suits effects that the downstream API also dedupes by key, and short time-to-lives.
/// When a lost record means money moved twice and the provider has no idempotency of its own,
/// use [`PostgresStore`](crate::PostgresStore) (synchronous commit, synchronous replication if
/// you need failover without loss).
///
/// # Expiry
///
/// A completed record stops counting at its time-to-live (the scripts compare with `TIME`) and
/// Redis deletes it by itself a grace period later (`PEXPIREAT`, default one minute); within the
/// grace [`Records::prune`](crate::Records::prune) removes expired records eagerly (it `SCAN`s
/// this store's prefix on the connected node). Nothing needs to call `prune` for memory to be
/// reclaimed.
///
/// A running or ambiguous record never expires by time (S34): its key has no time-to-live (a
/// claim writes the key afresh, without one) and it stays until it completes or a decision
/// settles it (the settler, `idemkit resolve`, `idemkit forget`). A key that an earlier version
/// gave a time-to-live (an ambiguous record, or a running one) loses it at its next claim (a
/// caller's or the settler's); until then it may still expire once, at the time-to-live that
/// version set: run a settle pass, or `idemkit list --state ambiguous`, soon after upgrading.
///
/// # ACL: a user limited to the store's prefix
///
/// The store needs these commands, and keys under its prefix only. For the prefix `billing:`:
///
/// ```text
/// ACL SETUSER idemkit-agent on >PASSWORD resetkeys ~billing:* resetchannels -@all
///     +evalsha +script|load +time +hget +hmget +hset +hdel +del +pexpireat +get +set
/// ```
///
/// - `EVALSHA` runs each operation's script; `SCRIPT LOAD` loads it when the server does not
///   have it (a restart, `SCRIPT FLUSH`). `EVAL` is not needed.
/// - The scripts call `TIME` (the clock), `HGET`/`HMGET`/`HSET`/`HDEL`/`DEL`/`PEXPIREAT` on the
///   record's hash (`<prefix>rec:<key>`) and `GET`/`SET` on operation ids (`<prefix>op:<name>`);
///   Redis checks every command a script calls, and every key it touches, against the user.
/// - An operator's user (the `idemkit` command's `list`, `counts` and `prune`, and
///   [`Records::list`](crate::Records::list)/[`counts`](crate::Records::counts)/[`prune`](crate::Records::prune))
///   adds `+scan`: those walk the prefix with `SCAN … MATCH <prefix>rec:*`. `SCAN` is not limited
///   by key patterns, so such a user can see the *names* (never the values) of other keys of the
///   database; agents do not need it. `get`, `release`, `forget` and `resolve` of one key are
///   scripts and need nothing more.
/// - The connection sends `CLIENT SETINFO` and ignores a refusal; a URL with a database other
///   than 0 adds `+select`.
///
/// A prefix with glob characters (`*?[]\`) must be escaped in `~…` as in `KEYS`. Anything outside
/// the prefix is refused (`NOPERM`, or "can't access at least one of the keys" for a script), and
/// the store reports that as a store error naming the missing permission: a store configured
/// with a prefix the user may not touch fails closed, its tools never run. The test
/// `tests/redis_acl.rs` makes such users and runs the conformance rows through them.
///
/// # A lost connection
///
/// A script whose connection dies (`CLIENT KILL`, a restart, a reset socket) is sent again once
/// the connection is back, twice at most, then reported as
/// [`StoreErrorKind::Unavailable`](crate::StoreErrorKind::Unavailable). The caller's lease token
/// makes that safe: a claim that already went through finds its own token and is granted again;
/// a repeated `complete` or `mark_ambiguous` by the same holder writes the same thing again.
///
/// This store's connection is a single-node, self-reconnecting one (redis-rs's
/// `ConnectionManager`); operation ids (`<prefix>op:<name>`) never expire.
#[derive(Clone)]
pub struct RedisStore {
    conn: Arc<Connection>,
    prefix: String,
    grace: Duration,
    /// S33: how long a tombstone is kept past its time-to-live.
    tombstones: Duration,
    replicas: Option<Replicas>,
    scripts: &'static Scripts,
}

/// `WAIT n timeout` after every script: how many replicas must acknowledge a write, and how long
/// to wait for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Replicas {
    n: u32,
    timeout: Duration,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.prefix)
            .field("replicas", &self.replicas)
            .finish_non_exhaustive()
    }
}

/// The connection, and what it takes to open a new one.
struct Connection {
    current: RwLock<ConnectionManager>,
    client: redis::Client,
    config: ConnectionManagerConfig,
}

impl Connection {
    fn get(&self) -> ConnectionManager {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Replaces a manager that stopped reconnecting: redis-rs retries only I/O failures, so a
    /// connection refused once at the handshake (a disabled user, a password being rotated)
    /// would fail every later call.
    async fn renew(&self) -> Result<(), RedisError> {
        let fresh =
            ConnectionManager::new_with_config(self.client.clone(), self.config.clone()).await?;
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = fresh;
        Ok(())
    }
}

impl RedisStore {
    /// Connects to `url` (`redis://[user:password@]host:port[/db]`) with the prefix `idemkit:`.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::builder(url).connect().await
    }

    /// A builder for a store at `url`, to choose the key prefix and timings.
    pub fn builder(url: impl Into<String>) -> RedisStoreBuilder {
        RedisStoreBuilder {
            url: url.into(),
            prefix: "idemkit:".to_owned(),
            grace: Duration::from_secs(60),
            tombstones: crate::store::DEFAULT_TOMBSTONES,
            timeout: Duration::from_secs(5),
            replicas: None,
        }
    }

    fn record_key(&self, key: &IdempotencyKey) -> String {
        format!("{}rec:{key}", self.prefix)
    }

    /// The key of the operation id named `name` (minted by claims, read by the operator).
    fn operation_key(&self, name: &str) -> String {
        format!("{}op:{name}", self.prefix)
    }

    /// Invokes `script` on one key; sends it again when the connection was lost (the
    /// `ConnectionManager` reconnects meanwhile). With [`RedisStoreBuilder::wait_for_replicas`],
    /// a write that too few replicas acknowledged is an error.
    async fn invoke<T: redis::FromRedisValue>(
        &self,
        what: &'static str,
        script: &Script,
        key: &str,
        args: &[&[u8]],
    ) -> Result<T, StoreError> {
        match self.invoke_replicated(what, script, key, args).await? {
            (value, None) => Ok(value),
            (_, Some(error)) => Err(error),
        }
    }

    /// Invokes a script that only reads: no replica has anything to acknowledge, so it never
    /// waits for them.
    async fn invoke_read<T: redis::FromRedisValue>(
        &self,
        what: &'static str,
        script: &Script,
        key: &str,
        args: &[&[u8]],
    ) -> Result<T, StoreError> {
        Ok(self.send(what, script, key, args, None).await?.0)
    }

    /// [`invoke`](Self::invoke), with the script's answer even when too few replicas
    /// acknowledged it (then with the error to report): a claim granted on the primary alone is
    /// released before its error is reported.
    async fn invoke_replicated<T: redis::FromRedisValue>(
        &self,
        what: &'static str,
        script: &Script,
        key: &str,
        args: &[&[u8]],
    ) -> Result<(T, Option<StoreError>), StoreError> {
        self.send(what, script, key, args, self.replicas).await
    }

    /// Sends `script` on one key, then `WAIT`s for `replicas` if given.
    async fn send<T: redis::FromRedisValue>(
        &self,
        what: &'static str,
        script: &Script,
        key: &str,
        args: &[&[u8]],
        replicas: Option<Replicas>,
    ) -> Result<(T, Option<StoreError>), StoreError> {
        let mut invocation = script.key(key);
        for arg in args {
            invocation.arg(*arg);
        }
        let mut attempt = 0;
        loop {
            let mut conn = self.conn.get();
            let sent = match replicas {
                None => invocation
                    .invoke_async::<T>(&mut conn)
                    .await
                    .map(|v| (v, None)),
                Some(replicas) => {
                    waited(&mut conn, script, key, args, replicas)
                        .await
                        .map(|(v, acked)| {
                            let short = (acked < i64::from(replicas.n))
                                .then(|| not_replicated(what, acked, replicas));
                            (v, short)
                        })
                }
            };
            match sent {
                Ok(reply) => return Ok(reply),
                Err(e) if attempt < RETRIES_ON_LOST_CONNECTION && connection_lost(&e) => {
                    attempt += 1;
                    tracing::warn!(what, attempt, error = %e, "redis connection lost; sending the script again");
                    if e.kind() == ErrorKind::AuthenticationFailed {
                        self.conn.renew().await.map_err(|e| redis_error(e, what))?;
                    }
                }
                Err(e) => return Err(redis_error(e, what)),
            }
        }
    }
}

/// `EVALSHA` and `WAIT` in one pipeline on one connection (so `WAIT` counts this write: a
/// reconnection in between would make it count nothing), loading the script first if the
/// server does not have it. The script's answer and how many replicas acknowledged.
async fn waited<T: redis::FromRedisValue>(
    conn: &mut ConnectionManager,
    script: &Script,
    key: &str,
    args: &[&[u8]],
    replicas: Replicas,
) -> Result<(T, i64), RedisError> {
    let mut pipe = redis::pipe();
    // Each reply as it came (a NOSCRIPT among them), not the pipeline failing as a whole.
    pipe.ignore_errors();
    let eval = pipe.cmd("EVALSHA").arg(script.get_hash()).arg(1).arg(key);
    for arg in args {
        eval.arg(*arg);
    }
    pipe.cmd("WAIT")
        .arg(replicas.n)
        .arg(replicas.timeout.as_millis().max(1) as u64);
    for loaded in [false, true] {
        let mut replies: Vec<RedisResult<Value>> = pipe.query_async(conn).await?;
        let (Some(acked), Some(reply)) = (replies.pop(), replies.pop()) else {
            return Err(RedisError::from((
                ErrorKind::UnexpectedReturnType,
                "EVALSHA and WAIT answered fewer than two replies",
            )));
        };
        match reply {
            Err(e)
                if !loaded && e.kind() == ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
            {
                script.prepare_invoke().load_async(conn).await?;
            }
            Err(e) => return Err(e),
            Ok(reply) => {
                let acked: i64 = redis::from_redis_value(acked?)?;
                return Ok((redis::from_redis_value(reply)?, acked));
            }
        }
    }
    unreachable!("the second pass returns")
}

/// A write the primary applied that fewer replicas than asked acknowledged in time.
fn not_replicated(what: &str, acked: i64, replicas: Replicas) -> StoreError {
    StoreError::unavailable(format!(
        "Redis applied the write while {what} on the primary, but {acked} of the {} replicas asked \
         for acknowledged it within {:?} (WAIT): not acknowledged, as a failover could lose it",
        replicas.n, replicas.timeout
    ))
}

impl RedisStore {
    /// The store's own claim and complete scripts, exactly as it loads them (arguments: tool,
    /// fingerprint hex, token, lease ms, ttl ms, grace ms; token, outcome, ttl ms, grace ms), for
    /// the benchmark that runs them by hand as its baseline. Not a stable API.
    #[doc(hidden)]
    pub fn __claim_and_complete_scripts() -> [String; 2] {
        scripts::claim_and_complete_sources()
    }
}
