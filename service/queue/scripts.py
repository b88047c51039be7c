"""The Lua scripts the Redis queue runs, each one atomic step that a MULTI block could not express because
it depends on what is stored."""

from __future__ import annotations

# KEYS: stream, job, the owner's kept jobs, the job's file. ARGV: max queue, ttl, job JSON, max kept jobs (0: a
# request's job, not kept), max kept bytes, the job's kept bytes, the job keys' prefix, the file ("" for none),
# then the job hash's fields and values. Adds the job unless the stream (jobs queued or in flight: ended ones are
# deleted) already holds max queue, or its owner keeps as many jobs or bytes as it may (the kept hash, job id ->
# bytes, forgets the jobs whose keys are gone). Returns the stream's length when full, {jobs, bytes} kept when
# those are, -1 when added.
SUBMIT = """
local depth = redis.call('XLEN', KEYS[1])
if depth >= tonumber(ARGV[1]) then return depth end
if tonumber(ARGV[4]) > 0 then
  local entries = redis.call('HGETALL', KEYS[3])
  local jobs, bytes = 0, 0
  for i = 1, #entries, 2 do
    if redis.call('EXISTS', ARGV[7] .. entries[i]) == 1 then
      jobs = jobs + 1
      bytes = bytes + tonumber(entries[i + 1])
    else
      redis.call('HDEL', KEYS[3], entries[i])
    end
  end
  if jobs >= tonumber(ARGV[4]) or bytes + tonumber(ARGV[6]) > tonumber(ARGV[5]) then return {jobs, bytes} end
  redis.call('HSET', KEYS[3], string.sub(KEYS[2], #ARGV[7] + 1), ARGV[6])
  redis.call('EXPIRE', KEYS[3], ARGV[2])
end
if ARGV[8] ~= '' then redis.call('SET', KEYS[4], ARGV[8], 'EX', ARGV[2]) end
redis.call('HSET', KEYS[2], unpack(ARGV, 9))
redis.call('EXPIRE', KEYS[2], ARGV[2])
redis.call('XADD', KEYS[1], '*', 'job', ARGV[3])
return -1
"""

# KEYS: job, outputs, stream, the job's file, its owner's kept jobs. ARGV: status, error, too_large ("1" or ""),
# done, ttl, group, entry id, channel, job id, the attention maps' JSON (/attention; "" for none), then one Output
# JSON per text. Answers only a job still queued or running (the first answer wins; a cancelled job or an
# abandoned request's stays as it is; a background job's file and its owner's kept jobs live as long as it does),
# keeping error, too_large and attention only where they are not "", and publishes its id on the channel (none for
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
  if redis.call('EXISTS', KEYS[4]) == 1 then redis.call('EXPIRE', KEYS[4], ARGV[5]) end
  if redis.call('EXISTS', KEYS[5]) == 1 then redis.call('EXPIRE', KEYS[5], ARGV[5]) end
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
