//! The Redis store's operator reads and repairs ([`Records`]): a repair is one script on one
//! key; lists and counts `SCAN` this store's prefix on the connected node (not a cluster's other
//! nodes) and read each record with the same script as `get`.

use std::time::SystemTime;

use std::time::Duration;

use redis::{Script, Value};
use uuid::Uuid;

use super::RedisStore;
use super::error::redis_error;
use super::rows::{bad_state, bytes, corrupt_field, fields, int, ms, record_of, unexpected};
use super::scripts::PRELUDE;
use crate::error::StoreError;
use crate::key::IdempotencyKey;
use crate::store::records::count_records;
use crate::store::resolution::check_resolution;
use crate::store::{Count, Decision, Forgot, RecordFilter, Records, Released, Resolved, StateKind};
use crate::store::{LeaseToken, Record, Written};

/// KEYS[1] record; ARGV force ('1' or '0'). Running → absent, unless its lease is live and not
/// forced. Returns {what, lease ms left}: 'absent', 'live', 'released', or the state.
const RELEASE_BY_OPERATOR: &str = r"
local r = redis.call('HMGET', KEYS[1], 'state', 'lease_until', 'expires_at', 'res')
if not r[1] or not live(r[1], r[3], r[4]) then return {'absent', 0} end
if r[1] ~= 'running' then return {r[1], 0} end
local left = tonumber(r[2]) - now
if left > 0 and ARGV[1] ~= '1' then return {'live', left} end
redis.call('DEL', KEYS[1])
return {'released', 0}
";

/// KEYS[1] record; ARGV force ('1' or '0'), tombstone setting ms, grace ms, note, has a note
/// ('1' or '0'). Any state → absent
/// (a released record kept to show its decision too), unless a holder's lease on it is live and
/// not forced; a tombstone (S33) → forgotten, kept to show that decision. Returns {what,
/// lease ms left}: 'forgotten' (it was live), 'absent', 'live'.
const FORGET: &str = r"
local r = redis.call('HMGET', KEYS[1], 'state', 'lease_until', 'expires_at', 'res')
if not r[1] then return {'absent', 0} end
local is_live = live(r[1], r[3], r[4])
if is_live and r[1] == 'running' and ARGV[1] ~= '1' then
  local left = tonumber(r[2]) - now
  if left > 0 then return {'live', left} end
end
-- S33: a tombstone is kept as forgotten (no longer live), shown until the tombstone setting
-- (ARGV[2] ms) has passed; its key goes a grace (ARGV[3] ms) later.
if is_live and r[1] == 'completed' and (tonumber(r[3]) or 0) <= now then
  local until_ = now + tonumber(ARGV[2])
  redis.call('HDEL', KEYS[1], 'res_note', 'args')
  redis.call('HSET', KEYS[1], 'res', 'forgotten', 'res_at', ms(now), 'kept_until', ms(until_))
  if ARGV[5] == '1' then redis.call('HSET', KEYS[1], 'res_note', ARGV[4]) end
  redis.call('PEXPIREAT', KEYS[1], ms(until_ + tonumber(ARGV[3])))
  return {'forgotten', 0}
end
redis.call('DEL', KEYS[1])
if is_live then return {'forgotten', 0} end
return {'absent', 0}
";

/// KEYS[1] record; ARGV decision ('applied', 'not_applied'), outcome, note, has a note ('1' or
/// '0'), ttl ms, grace ms, a token no holder has. An operator's decision (S24): ambiguous, or
/// running with its lease over → applied: completed with the outcome, kept for ttl; not
/// applied: expired now (absent for every operation), kept for ttl to show the decision. Either
/// way under the new token, so the holder that lost the record is fenced. Returns {what, lease
/// ms left}: 'resolved', 'absent', 'live', 'completed'.
const RESOLVE: &str = r"
local r = redis.call('HMGET', KEYS[1], 'state', 'lease_until', 'expires_at', 'res', 'res_note', 'outcome', 'kept_until')
if not r[1] then return {'absent', 0} end
local is_live = live(r[1], r[3], r[4])
-- The same decision sent again (its reply was lost), while it stands.
if r[4] == ARGV[1] and ((ARGV[4] == '1' and r[5] == ARGV[3]) or (ARGV[4] ~= '1' and not r[5])) then
  if ARGV[1] == 'applied' and is_live and r[1] == 'completed' and r[6] == ARGV[2] then return {'resolved', 0} end
  if ARGV[1] ~= 'applied' and not is_live and r[7] and tonumber(r[7]) > now then return {'resolved', 0} end
end
if not is_live then return {'absent', 0} end
if r[1] == 'completed' then return {'completed', 0} end
if r[1] == 'running' then
  local left = tonumber(r[2]) - now
  if left > 0 then return {'live', left} end
end
if ARGV[1] == 'applied' then
  redis.call('HSET', KEYS[1], 'state', 'completed', 'outcome', ARGV[2], 'expires_at', ms(now + ARGV[5]))
  redis.call('HDEL', KEYS[1], 'note', 'kept_until')
else
  redis.call('HSET', KEYS[1], 'expires_at', ms(now), 'kept_until', ms(now + ARGV[5]))
end
redis.call('HSET', KEYS[1], 'token', ARGV[7], 'updated', ms(now), 'res', ARGV[1], 'res_at', ms(now))
if ARGV[4] == '1' then
  redis.call('HSET', KEYS[1], 'res_note', ARGV[3])
else
  redis.call('HDEL', KEYS[1], 'res_note')
end
redis.call('PEXPIREAT', KEYS[1], ms(now + ARGV[5] + ARGV[6]))
return {'resolved', 0}
";

/// KEYS[1] record; ARGV token, decision ('applied', 'not_applied'), outcome, note, has a note
/// ('1' or '0'), ttl ms, grace ms. A settler's decision (S28): running under the token, live →
/// applied: completed with the outcome, kept for ttl; not applied: expired now (absent for every
/// operation), kept for ttl to show the decision; kept as an operator's is. Returns 1 if
/// written, 0 if the record is not held by the token (fenced).
const SETTLE: &str = r"
local r = redis.call('HMGET', KEYS[1], 'token', 'state', 'expires_at', 'res')
if r[1] ~= ARGV[1] or r[2] ~= 'running' or not live(r[2], r[3], r[4]) then return 0 end
if ARGV[2] == 'applied' then
  redis.call('HSET', KEYS[1], 'state', 'completed', 'outcome', ARGV[3], 'expires_at', ms(now + ARGV[6]))
  redis.call('HDEL', KEYS[1], 'note', 'kept_until')
else
  redis.call('HSET', KEYS[1], 'expires_at', ms(now), 'kept_until', ms(now + ARGV[6]))
end
redis.call('HSET', KEYS[1], 'updated', ms(now), 'res', ARGV[2], 'res_at', ms(now))
if ARGV[5] == '1' then
  redis.call('HSET', KEYS[1], 'res_note', ARGV[4])
else
  redis.call('HDEL', KEYS[1], 'res_note')
end
redis.call('PEXPIREAT', KEYS[1], ms(now + ARGV[6] + ARGV[7]))
return 1
";

struct OperatorScripts {
    release: Script,
    forget: Script,
    resolve: Script,
    settle: Script,
}

fn operator_scripts() -> &'static OperatorScripts {
    static SCRIPTS: std::sync::OnceLock<OperatorScripts> = std::sync::OnceLock::new();
    SCRIPTS.get_or_init(|| OperatorScripts {
        release: Script::new(&[PRELUDE, RELEASE_BY_OPERATOR].concat()),
        forget: Script::new(&[PRELUDE, FORGET].concat()),
        resolve: Script::new(&[PRELUDE, RESOLVE].concat()),
        settle: Script::new(&[PRELUDE, SETTLE].concat()),
    })
}

impl RedisStore {
    /// The live record of `key` and the server's time, read by the `get` script.
    async fn read(&self, key: IdempotencyKey) -> Result<Option<(Record, SystemTime)>, StoreError> {
        let reply: Value = self
            .invoke_read("get", &self.scripts.get, &self.record_key(&key), &[])
            .await?;
        match reply {
            Value::Nil => Ok(None),
            Value::Array(items) => record_of(key, items).map(Some),
            other => Err(unexpected(&other)),
        }
    }

    /// The live record of `key` (for `Store::get` and `Records::get`).
    pub(super) async fn live_record(
        &self,
        key: &IdempotencyKey,
    ) -> Result<Option<Record>, StoreError> {
        Ok(self.read(*key).await?.map(|(record, _)| record))
    }

    /// One `SCAN` step over this store's records on the connected node: the next cursor
    /// (0 at the end) and a batch of hash names.
    async fn scan_step(
        &self,
        cursor: u64,
        what: &'static str,
    ) -> Result<(u64, Vec<String>), StoreError> {
        let pattern = format!("{}rec:*", glob_escape(&self.prefix));
        let mut conn = self.conn.get();
        redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await
            .map_err(|e| redis_error(e, what))
    }

    /// Every live record of this store on the connected node, with the server's time.
    async fn all_records(&self) -> Result<Vec<(Record, SystemTime)>, StoreError> {
        let rec_prefix = format!("{}rec:", self.prefix);
        let mut found = Vec::new();
        let mut cursor = 0;
        loop {
            let (next, names) = self.scan_step(cursor, "scanning for records").await?;
            for name in names {
                // A name under the prefix that is not a record's is not ours to judge.
                let Some(key) = name
                    .strip_prefix(&rec_prefix)
                    .and_then(|k| k.parse::<IdempotencyKey>().ok())
                else {
                    continue;
                };
                if let Some(read) = self.read(key).await? {
                    found.push(read);
                }
            }
            cursor = next;
            if cursor == 0 {
                return Ok(found);
            }
        }
    }

    /// Deletes up to `limit` expired records (for `Store::prune` and `Records::prune`).
    pub(super) async fn prune_now(&self, limit: usize) -> Result<usize, StoreError> {
        let mut cursor = 0;
        let mut pruned = 0;
        let tombstones = self.tombstones.as_millis().to_string();
        let grace = self.grace.as_millis().to_string();
        loop {
            let (next, names) = self
                .scan_step(cursor, "scanning for expired records")
                .await?;
            for name in names {
                if pruned >= limit {
                    return Ok(pruned);
                }
                let n: i64 = self
                    .invoke(
                        "prune",
                        &self.scripts.prune,
                        &name,
                        &[tombstones.as_bytes(), grace.as_bytes()],
                    )
                    .await?;
                pruned += n as usize;
            }
            cursor = next;
            if cursor == 0 || pruned >= limit {
                return Ok(pruned);
            }
        }
    }
}

#[async_trait::async_trait]
impl Records for RedisStore {
    async fn operation(&self, name: &str) -> Result<Option<Uuid>, StoreError> {
        let mut conn = self.conn.get();
        let stored: Option<String> = redis::cmd("GET")
            .arg(self.operation_key(name))
            .query_async(&mut conn)
            .await
            .map_err(|e| redis_error(e, "reading an operation id"))?;
        stored
            .map(|s| s.parse().map_err(|_| corrupt_field("operation id")))
            .transpose()
    }

    async fn get(&self, key: &IdempotencyKey) -> Result<Option<Record>, StoreError> {
        self.live_record(key).await
    }

    async fn list(&self, filter: &RecordFilter) -> Result<Vec<Record>, StoreError> {
        let mut records: Vec<Record> = self
            .all_records()
            .await?
            .into_iter()
            .filter(|(record, now)| record.is_live() && filter.matches(record, *now))
            .map(|(record, _)| record)
            .collect();
        filter.newest_first(&mut records);
        Ok(records)
    }

    async fn release_key(&self, key: &IdempotencyKey, force: bool) -> Result<Released, StoreError> {
        let force: &[u8] = if force { b"1" } else { b"0" };
        let reply: Vec<Value> = self
            .invoke(
                "releasing a record",
                &operator_scripts().release,
                &self.record_key(key),
                &[force],
            )
            .await?;
        let [what, left] = fields::<2>(reply)?;
        let left = Duration::from_millis(int(left)?.max(0) as u64);
        Ok(match bytes(what)?.as_slice() {
            b"absent" => Released::NotFound,
            b"live" => Released::LeaseLive { remaining: left },
            b"released" => Released::Released,
            b"completed" => Released::NotRunning(StateKind::Completed),
            b"ambiguous" => Released::NotRunning(StateKind::Ambiguous),
            other => return Err(bad_state(other)),
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
        let force: &[u8] = if force { b"1" } else { b"0" };
        let (keep, grace) = (ms(self.tombstones), ms(self.grace));
        let reply: Vec<Value> = self
            .invoke(
                "forgetting a record",
                &operator_scripts().forget,
                &self.record_key(key),
                &[
                    force,
                    keep.as_bytes(),
                    grace.as_bytes(),
                    note.unwrap_or_default().as_bytes(),
                    if note.is_some() { b"1" } else { b"0" },
                ],
            )
            .await?;
        let [what, left] = fields::<2>(reply)?;
        let left = Duration::from_millis(int(left)?.max(0) as u64);
        Ok(match bytes(what)?.as_slice() {
            b"forgotten" => Forgot::Forgotten,
            b"absent" => Forgot::NotFound,
            b"live" => Forgot::LeaseLive { remaining: left },
            other => return Err(bad_state(other)),
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
        let word = decision.stored().as_bytes();
        let has_note: &[u8] = if note.is_some() { b"1" } else { b"0" };
        // S33: an applied decision's key outlives its time-to-live by the tombstone setting.
        let grace = match decision {
            Decision::Applied => self.grace.saturating_add(self.tombstones),
            _ => self.grace,
        };
        let (ttl, grace) = (ms(ttl), ms(grace));
        let token = Uuid::new_v4().to_string();
        let args: [&[u8]; 7] = [
            word,
            outcome.unwrap_or_default(),
            note.unwrap_or_default().as_bytes(),
            has_note,
            ttl.as_bytes(),
            grace.as_bytes(),
            token.as_bytes(),
        ];
        let reply: Vec<Value> = self
            .invoke(
                "resolving a record",
                &operator_scripts().resolve,
                &self.record_key(key),
                &args,
            )
            .await?;
        let [what, left] = fields::<2>(reply)?;
        let left = Duration::from_millis(int(left)?.max(0) as u64);
        Ok(match bytes(what)?.as_slice() {
            b"resolved" => Resolved::Resolved,
            b"absent" => Resolved::NotFound,
            b"live" => Resolved::LeaseLive { remaining: left },
            b"completed" => Resolved::Completed,
            other => return Err(bad_state(other)),
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
        let token = token.0.to_string();
        let has_note: &[u8] = if note.is_some() { b"1" } else { b"0" };
        // S33: an applied decision's key outlives its time-to-live by the tombstone setting.
        let grace = match decision {
            Decision::Applied => self.grace.saturating_add(self.tombstones),
            _ => self.grace,
        };
        let (ttl, grace) = (ms(ttl), ms(grace));
        let args: [&[u8]; 7] = [
            token.as_bytes(),
            decision.stored().as_bytes(),
            outcome.unwrap_or_default(),
            note.unwrap_or_default().as_bytes(),
            has_note,
            ttl.as_bytes(),
            grace.as_bytes(),
        ];
        let n: i64 = self
            .invoke(
                "settling a record",
                &operator_scripts().settle,
                &self.record_key(key),
                &args,
            )
            .await?;
        Ok(Written::from_changed(n))
    }

    async fn prune(&self, limit: usize) -> Result<usize, StoreError> {
        self.prune_now(limit).await
    }

    async fn counts(&self) -> Result<Vec<Count>, StoreError> {
        let records = self.all_records().await?;
        Ok(count_records(
            records
                .iter()
                .filter(|(r, _)| r.is_live())
                .map(|(r, _)| (r.tool.as_str(), r.state.kind())),
        ))
    }
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
