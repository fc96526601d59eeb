//! The Redis store: one Lua script per operation, the server's `TIME` as the clock.
//!
//! Each record is one hash (`<prefix>rec:<key>`) and each script touches that one key only, so
//! the scripts are valid on Redis Cluster (every key is its own slot). A script runs atomically,
//! which is what makes a claim a claim: no other command sees a record half-changed.
//!
//! ```no_run
//! # async fn demo() -> Result<(), idem_runtime::StoreError> {
//! use idem_runtime::{Idem, RedisStore};
//!
//! let store = RedisStore::builder("redis://cache.internal:6379/0")
//!     .prefix("billing:idemkit:") // optional: one namespace per tenant or environment
//!     .connect()
//!     .await?;
//! let idem = Idem::new(store);
//! # let _ = idem; Ok(()) }
//! ```
//!
//! # Durability: when to choose PostgreSQL instead
//!
//! Redis acknowledges a write before it is safe on disk or on a replica:
//!
//! - **Replication is asynchronous.** If the primary fails over after acknowledging a claim or a
//!   completion but before a replica received it, the new primary has never seen it: the next
//!   call finds no record and runs the operation again (with the same key, so a provider that
//!   honours idempotency keys still dedupes it). `WAIT` narrows this window but does not close it.
//! - **AOF with `appendfsync everysec`** (the usual setting) can lose the last second of writes
//!   on a crash of the machine; with no persistence a restart loses every record.
//! - **Eviction.** Under `maxmemory` with an `allkeys-*` policy Redis may evict live records;
//!   give idemkit a `noeviction` (or `volatile-*` with headroom) instance.
//!
//! So Redis suits effects that the downstream API also dedupes by key, and short time-to-lives.
//! When a lost record means money moved twice and the provider has no idempotency of its own,
//! use [`PostgresStore`](crate::PostgresStore) (synchronous commit, synchronous replication if
//! you need failover without loss).
//!
//! # Expiry
//!
//! A record stops counting at its time-to-live (the scripts compare with `TIME`) and Redis
//! deletes it by itself a grace period later (`PEXPIREAT`, default one minute); within the grace
//! [`Store::prune`] removes expired records eagerly (it `SCAN`s this store's
//! prefix on the connected node). Nothing needs to call `prune` for memory to be reclaimed.
//!
//! # A lost connection
//!
//! A script whose connection dies (`CLIENT KILL`, a restart, a reset socket) is sent again once
//! the connection is back, twice at most, then reported as
//! [`StoreErrorKind::Unavailable`]. The caller's lease token
//! makes that safe: a claim that already went through finds its own token and is granted again;
//! a repeated `complete` or `mark_ambiguous` by the same holder writes the same thing again.
//!
//! This store's connection is a single-node, self-reconnecting one (redis-rs's
//! `ConnectionManager`); operation ids (`<prefix>op:<name>`) never expire.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ErrorKind, RedisError, Script, Value};
use uuid::Uuid;

use super::{
    Claim, ClaimRequest, Existing, ExistingState, LeaseToken, Record, RecordState, Store, Written,
};
use crate::error::{StoreError, StoreErrorKind};
use crate::fingerprint::Fingerprint;
use crate::key::IdempotencyKey;

/// How often an operation is sent again after its connection was lost. Every script is safe to
/// repeat: the caller's lease token recognises a claim or write that already applied.
const RETRIES_ON_LOST_CONNECTION: u32 = 2;

/// The server's clock in milliseconds, and a formatter that keeps them integral in the hash.
const PRELUDE: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function ms(x) return string.format('%.0f', x) end
";

/// KEYS[1] record; ARGV tool, fingerprint, token, lease ms, ttl ms, grace ms.
/// absent or expired → running; same fingerprint and (lease over, ambiguous, or already ours:
/// a retried claim) → running (take over); otherwise the live record is returned untouched.
const CLAIM: &str = r"
local r = redis.call('HMGET', KEYS[1], 'fp', 'state', 'token', 'lease_until', 'expires_at', 'outcome')
if r[1] and tonumber(r[5]) > now then
  local lease_left = tonumber(r[4]) - now
  local same = r[1] == ARGV[2]
  local take = same and (r[2] == 'ambiguous'
    or (r[2] == 'running' and (lease_left <= 0 or r[3] == ARGV[3])))
  if not take then
    return {r[1], r[2], math.max(lease_left, 0), r[6] or ''}
  end
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'tool', ARGV[1], 'fp', ARGV[2], 'state', 'running', 'token', ARGV[3],
  'lease_until', ms(now + ARGV[4]), 'expires_at', ms(now + ARGV[5]))
redis.call('PEXPIREAT', KEYS[1], ms(now + ARGV[5] + ARGV[6]))
return 1
";

/// Whether the live record of KEYS[1] is held by token ARGV[1] in one of the given states.
const HELD: &str = r"
local function held(...)
  local r = redis.call('HMGET', KEYS[1], 'token', 'state', 'expires_at')
  if r[1] ~= ARGV[1] or tonumber(r[3]) <= now then return false end
  for _, s in ipairs({...}) do if r[2] == s then return true end end
  return false
end
";

/// KEYS[1] record; ARGV token, outcome, ttl ms, grace ms.
/// running (our token) → completed, kept for ttl; completed by us already → the same (a retry).
const COMPLETE: &str = r"
if not held('running', 'completed') then return 0 end
redis.call('HSET', KEYS[1], 'state', 'completed', 'outcome', ARGV[2], 'expires_at', ms(now + ARGV[3]))
redis.call('HDEL', KEYS[1], 'note')
redis.call('PEXPIREAT', KEYS[1], ms(now + ARGV[3] + ARGV[4]))
return 1
";

/// KEYS[1] record; ARGV token, lease ms, grace ms.
/// running (our token) → running with the lease ending `lease` from now; the record's expiry
/// moves to the lease end if that is later.
const RENEW: &str = r"
if not held('running') then return 0 end
local until_ = now + ARGV[2]
redis.call('HSET', KEYS[1], 'lease_until', ms(until_))
local expires = tonumber(redis.call('HGET', KEYS[1], 'expires_at'))
if until_ > expires then
  redis.call('HSET', KEYS[1], 'expires_at', ms(until_))
  redis.call('PEXPIREAT', KEYS[1], ms(until_ + ARGV[3]))
end
return 1
";

/// KEYS[1] record; ARGV token. running (our token) → absent.
const RELEASE: &str = r"
if not held('running') then return 0 end
redis.call('DEL', KEYS[1])
return 1
";

/// KEYS[1] record; ARGV token, note, ttl ms, grace ms.
/// running (our token) → ambiguous, kept for ttl; ambiguous by us already → the same (a retry).
const MARK_AMBIGUOUS: &str = r"
if not held('running', 'ambiguous') then return 0 end
redis.call('HSET', KEYS[1], 'state', 'ambiguous', 'note', ARGV[2], 'expires_at', ms(now + ARGV[3]))
redis.call('HDEL', KEYS[1], 'outcome')
redis.call('PEXPIREAT', KEYS[1], ms(now + ARGV[3] + ARGV[4]))
return 1
";

/// KEYS[1] record. The live record, for operators (nil when absent or expired).
const GET: &str = r"
local r = redis.call('HMGET', KEYS[1], 'tool', 'fp', 'state', 'token', 'lease_until', 'expires_at', 'outcome', 'note')
if not r[1] or tonumber(r[6]) <= now then return nil end
return {r[1], r[2], r[3], r[4], math.max(tonumber(r[5]) - now, 0), tonumber(r[6]) - now, r[7] or '', r[8] or ''}
";

/// KEYS[1] record. expired → absent.
const PRUNE: &str = r"
local e = redis.call('HGET', KEYS[1], 'expires_at')
if e and tonumber(e) <= now then redis.call('DEL', KEYS[1]) return 1 end
return 0
";

/// KEYS[1] operation; ARGV fresh id. absent → fresh; returns the stored id.
const OPERATION_ID: &str = r"
local v = redis.call('GET', KEYS[1])
if v then return v end
redis.call('SET', KEYS[1], ARGV[1])
return ARGV[1]
";

/// Records claims and outcomes in Redis. See the [module docs](self), including its durability
/// limits.
#[derive(Clone)]
pub struct RedisStore {
    conn: Arc<Connection>,
    prefix: String,
    grace: Duration,
    scripts: &'static Scripts,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.prefix)
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

struct Scripts {
    claim: Script,
    complete: Script,
    renew: Script,
    release: Script,
    mark_ambiguous: Script,
    get: Script,
    prune: Script,
    operation_id: Script,
}

fn scripts() -> &'static Scripts {
    static SCRIPTS: std::sync::OnceLock<Scripts> = std::sync::OnceLock::new();
    SCRIPTS.get_or_init(|| {
        let with = |parts: &[&str]| Script::new(&parts.concat());
        Scripts {
            claim: with(&[PRELUDE, CLAIM]),
            complete: with(&[PRELUDE, HELD, COMPLETE]),
            renew: with(&[PRELUDE, HELD, RENEW]),
            release: with(&[PRELUDE, HELD, RELEASE]),
            mark_ambiguous: with(&[PRELUDE, HELD, MARK_AMBIGUOUS]),
            get: with(&[PRELUDE, GET]),
            prune: with(&[PRELUDE, PRUNE]),
            operation_id: Script::new(OPERATION_ID),
        }
    })
}

/// Configures a [`RedisStore`].
#[must_use]
#[derive(Debug, Clone)]
pub struct RedisStoreBuilder {
    url: String,
    prefix: String,
    grace: Duration,
    timeout: Duration,
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
            timeout: Duration::from_secs(5),
        }
    }

    fn record_key(&self, key: &IdempotencyKey) -> String {
        format!("{}rec:{key}", self.prefix)
    }

    /// Invokes `script` on one key; sends it again when the connection was lost (the
    /// `ConnectionManager` reconnects meanwhile).
    async fn invoke<T: redis::FromRedisValue>(
        &self,
        what: &'static str,
        script: &Script,
        key: &str,
        args: &[&[u8]],
    ) -> Result<T, StoreError> {
        let mut invocation = script.key(key);
        for arg in args {
            invocation.arg(*arg);
        }
        let mut attempt = 0;
        loop {
            let mut conn = self.conn.get();
            match invocation.invoke_async::<T>(&mut conn).await {
                Ok(value) => return Ok(value),
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

impl RedisStoreBuilder {
    /// The prefix of every key this store writes. Default `idemkit:`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
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

    /// Opens the connection.
    pub async fn connect(self) -> Result<RedisStore, StoreError> {
        let client = redis::Client::open(self.url.as_str()).map_err(|e| {
            StoreError::new(
                StoreErrorKind::Other,
                "the Redis URL does not parse; expected redis://[user:password@]host:port[/db]",
            )
            .with_source(e)
        })?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout))
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
            scripts: scripts(),
        })
    }
}

#[async_trait::async_trait]
impl Store for RedisStore {
    async fn claim(&self, req: &ClaimRequest<'_>) -> Result<Claim, StoreError> {
        let (fp, token) = (req.fingerprint.to_hex(), req.token.0.to_string());
        let (lease, ttl, grace) = (ms(req.lease), ms(req.ttl), ms(self.grace));
        let args: [&[u8]; 6] = [
            req.tool.as_bytes(),
            fp.as_bytes(),
            token.as_bytes(),
            lease.as_bytes(),
            ttl.as_bytes(),
            grace.as_bytes(),
        ];
        let key = self.record_key(&req.key);
        let reply: Value = self
            .invoke("claim", &self.scripts.claim, &key, &args)
            .await?;
        match reply {
            Value::Int(1) => Ok(Claim::Acquired),
            Value::Array(items) => {
                let [fp, state, lease_left, outcome] = fields::<4>(items)?;
                let fingerprint = fingerprint_of(&bytes(fp)?)?;
                let state = match bytes(state)?.as_slice() {
                    b"running" => ExistingState::Running {
                        lease_remaining: Duration::from_millis(int(lease_left)?.max(0) as u64),
                    },
                    b"completed" => ExistingState::Completed {
                        outcome: bytes(outcome)?,
                    },
                    b"ambiguous" => ExistingState::Ambiguous,
                    other => return Err(bad_state(other)),
                };
                Ok(Claim::Existing(Existing { fingerprint, state }))
            }
            other => Err(unexpected(&other)),
        }
    }

    async fn complete(
        &self,
        key: &IdempotencyKey,
        token: LeaseToken,
        outcome: &[u8],
        ttl: Duration,
    ) -> Result<Written, StoreError> {
        let (token, ttl, grace) = (token.0.to_string(), ms(ttl), ms(self.grace));
        let args: [&[u8]; 4] = [token.as_bytes(), outcome, ttl.as_bytes(), grace.as_bytes()];
        let n: i64 = self
            .invoke(
                "complete",
                &self.scripts.complete,
                &self.record_key(key),
                &args,
            )
            .await?;
        Ok(Written::from_changed(n))
    }

    async fn renew(
        &self,
        key: &IdempotencyKey,
        token: LeaseToken,
        lease: Duration,
    ) -> Result<Written, StoreError> {
        let (token, lease, grace) = (token.0.to_string(), ms(lease), ms(self.grace));
        let args: [&[u8]; 3] = [token.as_bytes(), lease.as_bytes(), grace.as_bytes()];
        let n: i64 = self
            .invoke("renew", &self.scripts.renew, &self.record_key(key), &args)
            .await?;
        Ok(Written::from_changed(n))
    }

    async fn release(
        &self,
        key: &IdempotencyKey,
        token: LeaseToken,
    ) -> Result<Written, StoreError> {
        let token = token.0.to_string();
        let n: i64 = self
            .invoke(
                "release",
                &self.scripts.release,
                &self.record_key(key),
                &[token.as_bytes()],
            )
            .await?;
        Ok(Written::from_changed(n))
    }

    async fn mark_ambiguous(
        &self,
        key: &IdempotencyKey,
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
            .invoke(
                "mark_ambiguous",
                &self.scripts.mark_ambiguous,
                &self.record_key(key),
                &args,
            )
            .await?;
        Ok(Written::from_changed(n))
    }

    async fn get(&self, key: &IdempotencyKey) -> Result<Option<Record>, StoreError> {
        let reply: Value = self
            .invoke("get", &self.scripts.get, &self.record_key(key), &[])
            .await?;
        let items = match reply {
            Value::Nil => return Ok(None),
            Value::Array(items) => items,
            other => return Err(unexpected(&other)),
        };
        let [
            tool,
            fp,
            state,
            token,
            lease_left,
            expires_in,
            outcome,
            note,
        ] = fields::<8>(items)?;
        let tool = String::from_utf8(bytes(tool)?).map_err(|_| corrupt_field("tool"))?;
        let state = match bytes(state)?.as_slice() {
            b"running" => RecordState::Running {
                token: LeaseToken(
                    std::str::from_utf8(&bytes(token)?)
                        .ok()
                        .and_then(|t| t.parse().ok())
                        .ok_or_else(|| corrupt_field("token"))?,
                ),
                lease_remaining: Duration::from_millis(int(lease_left)?.max(0) as u64),
            },
            b"completed" => RecordState::Completed {
                outcome: bytes(outcome)?,
            },
            b"ambiguous" => RecordState::Ambiguous {
                note: String::from_utf8_lossy(&bytes(note)?).into_owned(),
            },
            other => return Err(bad_state(other)),
        };
        Ok(Some(Record {
            tool,
            fingerprint: fingerprint_of(&bytes(fp)?)?,
            state,
            expires_in: Duration::from_millis(int(expires_in)?.max(0) as u64),
        }))
    }

    async fn prune(&self, limit: usize) -> Result<usize, StoreError> {
        let pattern = format!("{}rec:*", glob_escape(&self.prefix));
        let mut cursor: u64 = 0;
        let mut pruned = 0;
        loop {
            let mut conn = self.conn.get();
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut conn)
                .await
                .map_err(|e| redis_error(e, "scanning for expired records"))?;
            for key in keys {
                if pruned >= limit {
                    return Ok(pruned);
                }
                let n: i64 = self.invoke("prune", &self.scripts.prune, &key, &[]).await?;
                pruned += n as usize;
            }
            cursor = next;
            if cursor == 0 || pruned >= limit {
                return Ok(pruned);
            }
        }
    }

    async fn operation_id(&self, name: &str, fresh: Uuid) -> Result<Uuid, StoreError> {
        let fresh = fresh.to_string();
        let stored: String = self
            .invoke(
                "operation_id",
                &self.scripts.operation_id,
                &format!("{}op:{name}", self.prefix),
                &[fresh.as_bytes()],
            )
            .await?;
        stored.parse().map_err(|_| corrupt_field("operation id"))
    }
}

fn connection_lost(e: &RedisError) -> bool {
    e.is_connection_dropped() || e.is_io_error() || e.is_unrecoverable_error()
}

fn redis_error(e: RedisError, what: &str) -> StoreError {
    let kind = if connection_lost(&e) || e.is_timeout() || e.is_connection_refusal() {
        StoreErrorKind::Unavailable
    } else {
        StoreErrorKind::Other
    };
    StoreError::new(
        kind,
        format!(
            "Redis failed while {what}: {e}; check that the server is up and that this user may run scripts (EVALSHA)"
        ),
    )
    .with_source(e)
}

fn ms(d: Duration) -> String {
    // At least 1 ms: Redis counts in milliseconds, and a zero lease would be no lease.
    d.as_millis().max(1).to_string()
}

fn fields<const N: usize>(items: Vec<Value>) -> Result<[Value; N], StoreError> {
    let n = items.len();
    items
        .try_into()
        .map_err(|_| StoreError::corrupt(format!("a script returned {n} fields, not {N}")))
}

fn bytes(v: Value) -> Result<Vec<u8>, StoreError> {
    match v {
        Value::BulkString(b) => Ok(b),
        Value::SimpleString(s) => Ok(s.into_bytes()),
        Value::Nil => Ok(Vec::new()),
        other => Err(unexpected(&other)),
    }
}

fn int(v: Value) -> Result<i64, StoreError> {
    match v {
        Value::Int(n) => Ok(n),
        other => Err(unexpected(&other)),
    }
}

fn fingerprint_of(hex: &[u8]) -> Result<Fingerprint, StoreError> {
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = [0u8; 32];
    if hex.len() != 64 {
        return Err(corrupt_field("fingerprint"));
    }
    for (i, pair) in hex.chunks(2).enumerate() {
        match (digit(pair[0]), digit(pair[1])) {
            (Some(h), Some(l)) => out[i] = h << 4 | l,
            _ => return Err(corrupt_field("fingerprint")),
        }
    }
    Ok(Fingerprint(out))
}

fn corrupt_field(field: &str) -> StoreError {
    StoreError::corrupt(format!(
        "a record's `{field}` is not what idemkit writes; was the hash edited by hand? Delete the key"
    ))
}

fn bad_state(state: &[u8]) -> StoreError {
    StoreError::corrupt(format!(
        "a record is in state `{}`, which idemkit never writes; delete the key",
        String::from_utf8_lossy(state)
    ))
}

fn unexpected(v: &Value) -> StoreError {
    StoreError::corrupt(format!(
        "a script returned {v:?}, which this build of idemkit does not expect; are all workers on the same version?"
    ))
}

/// Escapes the glob characters of `SCAN MATCH`, so a prefix matches only itself.
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}
