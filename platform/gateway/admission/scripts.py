"""The Lua that makes admission one atomic Redis call per request.

Why Lua and not `limits` for these (measured on loopback, Redis 7.0, redis-py 8.1; numbers
in the admission report): an admission checks up to five limits at once and must take all
or nothing — a request refused for its tokens must not spend a request, and one refused for
concurrency must spend neither. `limits` offers one atomic hit per limit, so the same check
costs one round trip per limit and leaves partial charges behind on a refusal. It also has
no way to give tokens back (the reservation is prompt + max_tokens, reconciled to actual
use), and its moving window stores one list entry per unit of cost — a 4,000-token request
pushes 4,000 entries. Concurrency leases (a sorted set pruned by expiry) are not a rate limit
at all. (The cold-load budget is not admission's: live placement's policy core keeps it, see
loraplex.serving.policy.budget.)

Keys share the tenant's hash tag (`{tenant}`) so a Redis Cluster keeps them on one slot.
Numbers cross the Lua boundary as strings: Redis truncates Lua floats to integers.
"""

from __future__ import annotations

# A token bucket is a hash {level, ts}. `refill` grows the level by limit/window per second
# since ts, capped at the limit; ts never moves backwards, so an API replica whose clock
# lags another's cannot refill a bucket twice.
_BUCKET = """
local function refill(key, limit, now, window)
  local state = redis.call('HMGET', key, 'level', 'ts')
  local level, ts = tonumber(state[1]), tonumber(state[2])
  if level == nil then return limit, now end
  local elapsed = math.max(0, now - ts)
  return math.min(limit, level + elapsed * limit / window), math.max(ts, now)
end

local function store(key, level, ts, window)
  redis.call('HSET', key, 'level', tostring(level), 'ts', tostring(ts))
  redis.call('EXPIRE', key, math.ceil(window) * 2)
end
"""

# KEYS: requests bucket, tokens bucket, daily counter, request leases, stream leases.
# ARGV: now, window_s, then limits (-1 = none) for requests/min, tokens/min, daily tokens,
#       concurrent requests, concurrent streams; cost (tokens), request id, lease expiry,
#       is_stream (1|0), daily counter ttl, charge (1|0: 0 only asks whether it would fit).
# Returns {admitted, reason, requests level, tokens level, daily used, requests held,
#          streams held}; a refused request, or one not charged, changes nothing but the
#          pruning of dead leases.
ADMIT = (
    _BUCKET
    + """
local now, window = tonumber(ARGV[1]), tonumber(ARGV[2])
local rpm, tpm, daily = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local max_req, max_streams = tonumber(ARGV[6]), tonumber(ARGV[7])
local cost, rid, expiry = tonumber(ARGV[8]), ARGV[9], tonumber(ARGV[10])
local is_stream, day_ttl = ARGV[11] == '1', tonumber(ARGV[12])
local charge = ARGV[13] ~= '0'

local function held(key, limit)
  if limit < 0 then return 0 end
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  return redis.call('ZCARD', key)
end

local req_level, req_ts = 0, now
if rpm >= 0 then req_level, req_ts = refill(KEYS[1], rpm, now, window) end
local tok_level, tok_ts = 0, now
if tpm >= 0 then tok_level, tok_ts = refill(KEYS[2], tpm, now, window) end
local used = tonumber(redis.call('GET', KEYS[3]) or '0')
local n_req = held(KEYS[4], max_req)
local n_streams = held(KEYS[5], max_streams)

local reason = ''
if daily >= 0 and used + cost > daily then reason = 'daily_tokens'
elseif max_req >= 0 and n_req >= max_req then reason = 'concurrent_requests'
elseif is_stream and max_streams >= 0 and n_streams >= max_streams then
  reason = 'concurrent_streams'
elseif rpm >= 0 and req_level < 1 then reason = 'requests_per_minute'
elseif tpm >= 0 and tok_level < cost then reason = 'tokens_per_minute'
end

if reason == '' and charge then
  if rpm >= 0 then req_level = req_level - 1; store(KEYS[1], req_level, req_ts, window) end
  if tpm >= 0 then tok_level = tok_level - cost; store(KEYS[2], tok_level, tok_ts, window) end
  if daily >= 0 then
    used = redis.call('INCRBY', KEYS[3], cost)
    redis.call('EXPIRE', KEYS[3], day_ttl)
  end
  local lease_ttl = math.ceil(expiry - now) + 1
  if max_req >= 0 then
    redis.call('ZADD', KEYS[4], expiry, rid); redis.call('EXPIRE', KEYS[4], lease_ttl)
    n_req = n_req + 1
  end
  if is_stream and max_streams >= 0 then
    redis.call('ZADD', KEYS[5], expiry, rid); redis.call('EXPIRE', KEYS[5], lease_ttl)
    n_streams = n_streams + 1
  end
end
return {reason == '' and 1 or 0, reason, tostring(req_level), tostring(tok_level),
        tostring(used), n_req, n_streams}
"""
)

# KEYS: tokens bucket, daily counter, request leases, stream leases.
# ARGV: now, window_s, tokens/min limit (-1 = none), tokens to give back (negative takes
#       more: the request used more than it reserved), request id.
# Returns the tokens bucket's level afterwards.
SETTLE = (
    _BUCKET
    + """
local now, window, tpm = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local give_back, rid = tonumber(ARGV[4]), ARGV[5]
redis.call('ZREM', KEYS[3], rid)
redis.call('ZREM', KEYS[4], rid)
local level = 0
if tpm >= 0 then
  local ts
  level, ts = refill(KEYS[1], tpm, now, window)
  if give_back ~= 0 then
    level = math.min(tpm, level + give_back)
    store(KEYS[1], level, ts, window)
  end
end
-- The daily counter of the day the request was admitted; gone means that day has expired.
if give_back ~= 0 and redis.call('EXISTS', KEYS[2]) == 1 then
  local used = redis.call('DECRBY', KEYS[2], give_back)
  if used < 0 then redis.call('SET', KEYS[2], 0, 'KEEPTTL') end
end
return tostring(level)
"""
)

# KEYS: the lease sets the request holds a slot in. ARGV: new expiry, key ttl, request id.
# Returns how many leases were still held (and so renewed); a lease that already expired
# is not re-added, since its slot may have gone to someone else.
RENEW = """
local renewed = 0
for _, key in ipairs(KEYS) do
  if redis.call('ZSCORE', key, ARGV[3]) then
    redis.call('ZADD', key, ARGV[1], ARGV[3])
    redis.call('EXPIRE', key, ARGV[2])
    renewed = renewed + 1
  end
end
return renewed
"""

# Money budgets: one counter of micro-units spent per budget and period, reserved at
# admission and settled at the real cost, as the daily token counter is.
# KEYS: n spend counters, then their n "alerted" flags. ARGV: cost (micro-units), then per
#       counter: limit, alert threshold, ttl (seconds).
# Returns {admitted, index of the refusing counter (1-based, 0 if none), its spend before,
#          then per counter 1 when this reservation crossed its alert threshold first}.
# A refusal changes nothing; every counter is checked before any is charged.
SPEND_RESERVE = """
local n = #KEYS / 2
local cost = tonumber(ARGV[1])
local before = {}
for i = 1, n do
  local limit = tonumber(ARGV[2 + (i - 1) * 3])
  before[i] = tonumber(redis.call('GET', KEYS[i]) or '0')
  -- A request that costs nothing passes even a budget already past (a price set to 0).
  if cost > 0 and before[i] + cost > limit then return {0, i, tostring(before[i])} end
end
local result = {1, 0, '0'}
for i = 1, n do
  local alert_at, ttl = tonumber(ARGV[3 + (i - 1) * 3]), tonumber(ARGV[4 + (i - 1) * 3])
  local after = redis.call('INCRBY', KEYS[i], cost)
  redis.call('EXPIRE', KEYS[i], ttl)
  local crossed = 0
  if before[i] <= alert_at and after > alert_at then
    if redis.call('SET', KEYS[n + i], '1', 'NX', 'EX', ttl) then crossed = 1 end
  end
  result[3 + i] = crossed
end
return result
"""

# KEYS: the spend counters a reservation charged. ARGV: micro-units to give back (negative
# takes more). A counter that expired (its period is over) is left alone.
SPEND_SETTLE = """
local give_back = tonumber(ARGV[1])
for _, key in ipairs(KEYS) do
  if give_back ~= 0 and redis.call('EXISTS', key) == 1 then
    local used = redis.call('DECRBY', key, give_back)
    if used < 0 then redis.call('SET', key, 0, 'KEEPTTL') end
  end
end
return 1
"""

# A fine-tuning job's hold, kept from its creation to its end. KEYS: the kept hold, then the
# counters it charged. ARGV: micro-units to give back (negative takes more). Settles once:
# the hold is deleted as it is settled, so a second call finds none and changes nothing.
# Returns 1 when this call settled it, else 0.
JOB_SPEND_SETTLE = """
if redis.call('DEL', KEYS[1]) == 0 then return 0 end
local give_back = tonumber(ARGV[1])
for i = 2, #KEYS do
  if give_back ~= 0 and redis.call('EXISTS', KEYS[i]) == 1 then
    local used = redis.call('DECRBY', KEYS[i], give_back)
    if used < 0 then redis.call('SET', KEYS[i], 0, 'KEEPTTL') end
  end
end
return 1
"""
