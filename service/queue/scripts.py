"""The Lua scripts the Redis queue runs, each one atomic step that a MULTI block could not express because
it depends on what is stored."""

from __future__ import annotations

# KEYS: stream, job. ARGV: max queue, ttl, job JSON, then the job hash's fields and values. Adds the job unless
# the stream (jobs queued or in flight: ended ones are deleted) already holds max queue; returns that length when
# full, -1 when added.
SUBMIT = """
local depth = redis.call('XLEN', KEYS[1])
if depth >= tonumber(ARGV[1]) then return depth end
redis.call('HSET', KEYS[2], unpack(ARGV, 4))
redis.call('EXPIRE', KEYS[2], ARGV[2])
redis.call('XADD', KEYS[1], '*', 'job', ARGV[3])
return -1
"""

# KEYS: job, outputs, stream. ARGV: status, error, too_large ("1" or ""), done, ttl, group, entry id, channel, job
# id, the attention maps' JSON (/attention; "" for none), then one Output JSON per text. Answers only a job still
# queued or running (the first answer wins; a cancelled job or an abandoned request's stays as it is), keeping
# error, too_large and attention only where they are not "", and publishes its id on the channel (none for
# background jobs: nobody waits on them), then acknowledges and deletes the stream entry either way.
FINISH = """
local status = redis.call('HGET', KEYS[1], 'status')
local answered = 0
if status == 'queued' or status == 'running' then
  redis.call('DEL', KEYS[2])
  for i = 11, #ARGV, 1000 do
    redis.call('RPUSH', KEYS[2], unpack(ARGV, i, math.min(i + 999, #ARGV)))
  end
  redis.call('HSET', KEYS[1], 'status', ARGV[1], 'done', ARGV[4])
  if ARGV[2] ~= '' then redis.call('HSET', KEYS[1], 'error', ARGV[2]) end
  if ARGV[3] ~= '' then redis.call('HSET', KEYS[1], 'too_large', ARGV[3]) end
  if ARGV[10] ~= '' then redis.call('HSET', KEYS[1], 'attention', ARGV[10]) end
  redis.call('EXPIRE', KEYS[1], ARGV[5])
  if #ARGV >= 11 then redis.call('EXPIRE', KEYS[2], ARGV[5]) end
  if ARGV[8] ~= '' then redis.call('PUBLISH', ARGV[8], ARGV[9]) end
  answered = 1
end
if ARGV[7] ~= '' then
  redis.call('XACK', KEYS[3], ARGV[6], ARGV[7])
  redis.call('XDEL', KEYS[3], ARGV[7])
end
return answered
"""

# KEYS: job, outputs. A request's answer, read once: nil while its job is queued or running; {"lost"} when its job
# hash is gone (Redis restarted); else {status, error, too_large, attention, outputs}, and its keys are deleted.
TAKE = """
local s = redis.call('HMGET', KEYS[1], 'status', 'error', 'too_large', 'attention')
if not s[1] then return {'lost'} end
if s[1] ~= 'done' and s[1] ~= 'failed' then return false end
local outputs = redis.call('LRANGE', KEYS[2], 0, -1)
redis.call('DEL', KEYS[1], KEYS[2])
return {s[1], s[2] or '', s[3] or '', s[4] or '', outputs}
"""

# KEYS: job. Cancels a job still queued or running (a worker drops it at its next heartbeat); an ended or
# forgotten one stays as it is (no key is made again without its expiry).
CANCEL = """
local status = redis.call('HGET', KEYS[1], 'status')
if status == 'queued' or status == 'running' then
  redis.call('HSET', KEYS[1], 'status', 'cancelled')
  return 1
end
return 0
"""

# KEYS: job. ARGV: worker name. Marks a queued job running (never a cancelled or ended one).
START = """
local status = redis.call('HGET', KEYS[1], 'status')
if status == 'queued' or status == 'running' then
  redis.call('HSET', KEYS[1], 'status', 'running', 'worker', ARGV[1])
  return 1
end
return 0
"""

# KEYS: job. ARGV: texts done. Progress never goes back (a reclaimed job starts over on another worker).
PROGRESS = """
if tonumber(redis.call('HGET', KEYS[1], 'done') or '0') < tonumber(ARGV[1]) then
  redis.call('HSET', KEYS[1], 'done', ARGV[1])
end
return 0
"""

# KEYS: bucket. ARGV: tokens per minute (also the capacity), 1 to take a token or 0 to look.
# Returns the milliseconds to wait for a token, as a string ("0": one was there). Redis's clock, so that
# every API process sees the same buckets.
THROTTLE = """
local capacity = tonumber(ARGV[1])
local rate = capacity / 60000.0
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local bucket = redis.call('HMGET', KEYS[1], 'tokens', 'ms')
local tokens = tonumber(bucket[1]) or capacity
local last = tonumber(bucket[2]) or now
tokens = math.min(capacity, tokens + math.max(0, now - last) * rate)
local wait = 0
if tokens >= 1 then
  if ARGV[2] == '1' then tokens = tokens - 1 end
else
  wait = (1 - tokens) / rate
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ms', tostring(now))
redis.call('PEXPIRE', KEYS[1], 120000)
return tostring(wait)
"""
