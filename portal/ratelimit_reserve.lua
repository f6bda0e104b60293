-- KEYS: the account's and the address's counters; ARGV: their limits, then the window in
-- seconds. An attempt is counted only when both counts are under their limits, and the
-- answer is the wait (seconds) when one is not, 0 when the attempt may go ahead. The window
-- starts with the first attempt (SET NX EX: EXPIRE ... NX needs Redis 7, the embedded one
-- is 6.2).
local wait = 0
for i, key in ipairs(KEYS) do
  if tonumber(redis.call('GET', key) or '0') >= tonumber(ARGV[i]) then
    local ttl = redis.call('TTL', key)
    if ttl < 0 then
      redis.call('EXPIRE', key, ARGV[3])
      ttl = tonumber(ARGV[3])
    end
    wait = math.max(wait, ttl, 1)
  end
end
if wait > 0 then
  return wait
end
for _, key in ipairs(KEYS) do
  redis.call('SET', key, 0, 'EX', ARGV[3], 'NX')
  redis.call('INCR', key)
end
return 0
