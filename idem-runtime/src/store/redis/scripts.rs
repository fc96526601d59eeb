//! The Lua scripts, one per state transition, each touching one key (so Redis Cluster works).

use redis::Script;

/// The server's clock in milliseconds, a formatter that keeps them integral in the hash, and
/// whether a record is live (`live(state, expires_at, res)`): before its expiry, or running or
/// ambiguous with no decision on it, which never expires by time (S34: an unknown outcome waits
/// for a decision however long that takes; a running record whose holder's lease lapsed reads
/// as one, S31); or completed (S33: past its expiry, a tombstone, never absent until pruned past
/// the tombstone setting, its key's own expiry, or forgotten: `res` 'forgotten', no longer live,
/// kept until `kept_until` to show that decision); a record written before with an expiry on
/// such a record reads the same.
pub(super) const PRELUDE: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function ms(x) return string.format('%.0f', x) end
local function live(state, expires, res)
  return (tonumber(expires) or 0) > now or (state == 'completed' and res ~= 'forgotten')
    or ((state == 'running' or state == 'ambiguous') and not res)
end
";

/// KEYS[1] record; ARGV tool, fingerprint, token, lease ms, ttl ms, grace ms, tenant ('' or
/// absent: none), arguments (S28: the JSON a tool with `verify` keeps; '' or absent: none, and a
/// takeover keeps the ones the record had). The record is written afresh (`DEL`, then `HSET`): its key has no time-to-live
/// while it runs (S34), a key written before with one included.
/// absent or expired → running; same fingerprint and (lease over, ambiguous, or already ours:
/// a retried claim) → running (take over); otherwise the live record is returned untouched.
/// Taken, it answers what it took over: 1 nothing (a new record), 2 a holder whose lease was
/// over, 3 an ambiguous record (ours claimed again: what our claim took over). A live record
/// taken over is kept in fields prefixed `p:` (S27: a claim given back unused, [`RESTORE`],
/// brings it back); ours claimed again keeps its own. A takeover keeps when the operation was
/// first made, its Unknown answers (S32) and its note (S31); a new record is first made now.
const CLAIM: &str = r"
local r = redis.call('HMGET', KEYS[1], 'fp', 'state', 'token', 'lease_until', 'expires_at', 'outcome', 'p:state', 'res', 'updated')
local took = 1
local prior = {}
local kept = {'first_made', ms(now)}
if r[1] and live(r[2], r[5], r[8]) then
  local lease_left = (tonumber(r[4]) or now) - now
  local same = r[1] == ARGV[2]
  local ours = r[3] == ARGV[3] and r[2] == 'running'
  local take = same and (r[2] == 'ambiguous'
    or (r[2] == 'running' and (lease_left <= 0 or ours)))
  if not take then
    local tomb = '0'
    if r[2] == 'completed' and (tonumber(r[5]) or 0) <= now then tomb = '1' end
    return {r[1], r[2], math.max(lease_left or 0, 0), r[6] or '', tomb, r[9] or '', r[8] and '1' or '0'}
  end
  local names = {}
  for i, f in ipairs(FIELDS) do names[i] = ours and ('p:' .. f) or f end
  local vals = redis.call('HMGET', KEYS[1], unpack(names))
  for i, f in ipairs(FIELDS) do
    if vals[i] then
      prior[#prior + 1] = 'p:' .. f
      prior[#prior + 1] = vals[i]
    end
  end
  local was = r[2]
  if ours then was = r[7] end
  if was == 'ambiguous' then took = 3 elseif was then took = 2 end
  local k = redis.call('HMGET', KEYS[1], 'first_made', 'created', 'unknowns', 'unknown_since', 'note', 'args')
  kept = {'first_made', k[1] or k[2] or '0'}
  if k[3] then kept[#kept + 1] = 'unknowns'; kept[#kept + 1] = k[3] end
  if k[4] then kept[#kept + 1] = 'unknown_since'; kept[#kept + 1] = k[4] end
  if k[5] then kept[#kept + 1] = 'note'; kept[#kept + 1] = k[5] end
  if k[6] then kept[#kept + 1] = 'args'; kept[#kept + 1] = k[6] end
end
if ARGV[8] and ARGV[8] ~= '' then kept[#kept + 1] = 'args'; kept[#kept + 1] = ARGV[8] end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'tool', ARGV[1], 'fp', ARGV[2], 'state', 'running', 'token', ARGV[3],
  'lease_until', ms(now + ARGV[4]), 'expires_at', ms(now + ARGV[5]), 'created', ms(now), 'updated', ms(now),
  'tenant', ARGV[7] or '', unpack(kept))
if #prior > 0 then redis.call('HSET', KEYS[1], unpack(prior)) end
return took
";

/// The fields of a record, as a claim keeps them for a takeover (prefixed `p:`, S27): read by
/// name (`HMGET`), so the scripts need no command beyond those the store's ACL lists.
const FIELDS: &str = r"
local FIELDS = {'tool', 'fp', 'state', 'token', 'lease_until', 'expires_at', 'outcome', 'note',
  'created', 'updated', 'tenant', 'res', 'res_at', 'res_note', 'kept_until', 'first_made', 'unknowns',
  'unknown_since', 'args'}
";

/// Whether the live record of KEYS[1] is held by token ARGV[1] in one of the given states.
const HELD: &str = r"
local function held(...)
  local r = redis.call('HMGET', KEYS[1], 'token', 'state', 'expires_at', 'res')
  if r[1] ~= ARGV[1] or not live(r[2], r[3], r[4]) then return false end
  for _, s in ipairs({...}) do if r[2] == s then return true end end
  return false
end
";

/// KEYS[1] record; ARGV token, outcome, ttl ms, grace ms.
/// running (our token) → completed, kept for ttl; completed by us already → the same (a retry).
const COMPLETE: &str = r"
if not held('running', 'completed') then return 0 end
redis.call('HSET', KEYS[1], 'state', 'completed', 'outcome', ARGV[2], 'expires_at', ms(now + ARGV[3]),
  'updated', ms(now))
redis.call('HDEL', KEYS[1], 'note')
redis.call('PEXPIREAT', KEYS[1], ms(now + ARGV[3] + ARGV[4]))
return 1
";

/// KEYS[1] record; ARGV token, lease ms, grace ms.
/// running (our token) → running with the lease ending `lease` from now; the record's expiry
/// moves to the lease end if that is later (its key has no time-to-live while it runs, S34).
const RENEW: &str = r"
if not held('running') then return 0 end
local until_ = now + ARGV[2]
redis.call('HSET', KEYS[1], 'lease_until', ms(until_), 'updated', ms(now))
local expires = tonumber(redis.call('HGET', KEYS[1], 'expires_at'))
if until_ > expires then
  redis.call('HSET', KEYS[1], 'expires_at', ms(until_))
end
return 1
";

/// KEYS[1] record; ARGV token. running (our token) → absent.
const RELEASE: &str = r"
if not held('running') then return 0 end
redis.call('DEL', KEYS[1])
return 1
";

/// KEYS[1] record; ARGV token, note, ttl ms, grace ms. S27, a claim given back unused: running
/// (our token) → what the claim took over (its `p:` fields, as they were: an expired holder's
/// running record under that holder's token and lease end, or an ambiguous one), or absent
/// after a new record. One level is kept: a holder's record brought back gets `p:state`
/// 'unknown', and its own claim given back later keeps it ambiguous with `note` (the safe side).
const RESTORE: &str = r"
if not held('running') then return 0 end
local names = {}
for i, f in ipairs(FIELDS) do names[i] = 'p:' .. f end
local vals = redis.call('HMGET', KEYS[1], unpack(names))
local prior = {}
local was = false
for i, f in ipairs(FIELDS) do
  if vals[i] then
    if f == 'state' then was = vals[i] end
    prior[#prior + 1] = f
    prior[#prior + 1] = vals[i]
  end
end
if was == 'unknown' then
  redis.call('HSET', KEYS[1], 'state', 'ambiguous', 'note', ARGV[2], 'expires_at', ms(now + ARGV[3]),
    'updated', ms(now))
  redis.call('HDEL', KEYS[1], 'outcome', 'p:state')
  return 1
end
redis.call('DEL', KEYS[1])
if #prior == 0 then return 1 end
redis.call('HSET', KEYS[1], unpack(prior))
if was == 'running' then redis.call('HSET', KEYS[1], 'p:state', 'unknown') end
return 1
";

/// KEYS[1] record; ARGV token, note, ttl ms, grace ms.
/// running (our token) → ambiguous, kept until a decision (S34: its key has no time-to-live,
/// as its claim wrote it); ambiguous by us already → the same (a retry).
const MARK_AMBIGUOUS: &str = r"
if not held('running', 'ambiguous') then return 0 end
redis.call('HSET', KEYS[1], 'state', 'ambiguous', 'note', ARGV[2], 'expires_at', ms(now + ARGV[3]),
  'updated', ms(now))
redis.call('HDEL', KEYS[1], 'outcome')
return 1
";

/// KEYS[1] record; ARGV token, note, ttl ms, grace ms. [`MARK_AMBIGUOUS`] after an Unknown
/// answer of verify, counting it (S32) when the record was running (not when the mark is sent
/// again).
const MARK_UNKNOWN: &str = r"
if not held('running', 'ambiguous') then return 0 end
local r = redis.call('HMGET', KEYS[1], 'state', 'unknowns', 'unknown_since')
if r[1] == 'running' then
  redis.call('HSET', KEYS[1], 'unknowns', tostring((tonumber(r[2]) or 0) + 1))
  if not r[3] then redis.call('HSET', KEYS[1], 'unknown_since', ms(now)) end
end
redis.call('HSET', KEYS[1], 'state', 'ambiguous', 'note', ARGV[2], 'expires_at', ms(now + ARGV[3]),
  'updated', ms(now))
redis.call('HDEL', KEYS[1], 'outcome')
return 1
";

/// KEYS[1] record. The record, for operators: the live one, or one released by an operator's
/// not-applied and kept until `kept_until` to show that decision (nil otherwise), with the
/// server's time; `created`/`updated`/`tenant` are '' in a record written before they were kept
/// (and `tenant` in one made under no tenant), `res`/`res_at` '' when no operator decided, and
/// `res_note` false when the decision has no note; then the lease end, `first_made` ('' in a
/// record written before it was kept), `unknowns` and `unknown_since` ('' when none), and the
/// arguments (S28; '' when none kept).
const GET: &str = r"
local r = redis.call('HMGET', KEYS[1], 'tool', 'fp', 'state', 'token', 'lease_until', 'expires_at', 'outcome', 'note', 'created', 'updated', 'tenant',
  'res', 'res_at', 'res_note', 'kept_until', 'first_made', 'unknowns', 'unknown_since', 'args')
if not r[1] then return nil end
if not live(r[3], r[6], r[12]) and not (r[15] and tonumber(r[15]) > now) then return nil end
return {r[1], r[2], r[3], r[4], math.max(tonumber(r[5] or now) - now, 0), math.max(tonumber(r[6]) - now, 0), r[7] or '', r[8] or '',
  r[9] or '', r[10] or '', now, r[11] or '', r[12] or '', r[13] or '', r[14] and {r[14]} or {},
  r[5] or '', r[16] or '', r[17] or '', r[18] or '', r[19] or ''}
";

/// KEYS[1] record; ARGV tombstone setting ms, grace ms. expired → absent (a record released by an
/// operator once its `kept_until` has passed; never a running or ambiguous one with no
/// decision, S34); S33: a tombstone (completed, past its expiry) → absent once the tombstone
/// setting has passed too, else kept without its outcome (the key written afresh, its expiry
/// the tombstone setting and the grace past its time-to-live).
const PRUNE: &str = r"
local r = redis.call('HMGET', KEYS[1], 'expires_at', 'kept_until', 'state', 'res')
if r[3] == 'completed' and r[4] ~= 'forgotten' and r[1] and tonumber(r[1]) <= now then
  local until_ = tonumber(r[1]) + tonumber(ARGV[1])
  if until_ <= now then redis.call('DEL', KEYS[1]) return 1 end
  local o = redis.call('HGET', KEYS[1], 'outcome')
  if o and #o > 0 then
    -- Written afresh without the outcome and the arguments (S28: they serve verify only): a
    -- hash that held a long value keeps Redis's larger encoding until it is rewritten.
    local vals = redis.call('HMGET', KEYS[1], unpack(FIELDS))
    local kept = {}
    for i, f in ipairs(FIELDS) do
      if vals[i] and f ~= 'outcome' and f ~= 'args' then kept[#kept + 1] = f; kept[#kept + 1] = vals[i] end
    end
    redis.call('DEL', KEYS[1])
    redis.call('HSET', KEYS[1], 'outcome', '', unpack(kept))
    redis.call('PEXPIREAT', KEYS[1], ms(until_ + tonumber(ARGV[2])))
  end
  return 0
end
if r[1] and not live(r[3], r[1], r[4]) and not (r[2] and tonumber(r[2]) > now) then
  redis.call('DEL', KEYS[1]) return 1
end
return 0
";

/// KEYS[1] operation; ARGV fresh id. absent → fresh; returns the stored id.
const OPERATION_ID: &str = r"
local v = redis.call('GET', KEYS[1])
if v then return v end
redis.call('SET', KEYS[1], ARGV[1])
return ARGV[1]
";

pub(super) struct Scripts {
    pub(super) claim: Script,
    pub(super) complete: Script,
    pub(super) renew: Script,
    pub(super) release: Script,
    pub(super) mark_ambiguous: Script,
    pub(super) mark_unknown: Script,
    pub(super) restore: Script,
    pub(super) get: Script,
    pub(super) prune: Script,
    pub(super) operation_id: Script,
}

/// The claim and complete scripts' sources, as [`scripts`] loads them.
pub(super) fn claim_and_complete_sources() -> [String; 2] {
    [
        [PRELUDE, FIELDS, CLAIM].concat(),
        [PRELUDE, HELD, COMPLETE].concat(),
    ]
}

pub(super) fn scripts() -> &'static Scripts {
    static SCRIPTS: std::sync::OnceLock<Scripts> = std::sync::OnceLock::new();
    SCRIPTS.get_or_init(|| {
        let with = |parts: &[&str]| Script::new(&parts.concat());
        Scripts {
            claim: with(&[PRELUDE, FIELDS, CLAIM]),
            complete: with(&[PRELUDE, HELD, COMPLETE]),
            renew: with(&[PRELUDE, HELD, RENEW]),
            release: with(&[PRELUDE, HELD, RELEASE]),
            mark_ambiguous: with(&[PRELUDE, HELD, MARK_AMBIGUOUS]),
            mark_unknown: with(&[PRELUDE, HELD, MARK_UNKNOWN]),
            restore: with(&[PRELUDE, FIELDS, HELD, RESTORE]),
            get: with(&[PRELUDE, GET]),
            prune: with(&[PRELUDE, FIELDS, PRUNE]),
            operation_id: Script::new(OPERATION_ID),
        }
    })
}
