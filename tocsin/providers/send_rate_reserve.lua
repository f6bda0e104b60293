-- KEYS[1]: the schedule key. ARGV: the time reserved in µs (slot spacing x slots), longest
-- wait granted in µs.
-- Returns {wait_us, slot_us}, or {-1, 0} when the next slot is further than the longest wait.
local now = redis.call('TIME')
local t = tonumber(now[1]) * 1000000 + tonumber(now[2])
local spacing = tonumber(ARGV[1])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < t then tat = t end
local wait = tat - t
if wait > tonumber(ARGV[2]) then return {-1, 0} end
-- %.0f: tostring() would print the microseconds in %.14g and lose the last digits
local ttl = math.floor((wait + spacing) / 1000) + 1000
redis.call('SET', KEYS[1], string.format('%.0f', tat + spacing), 'PX', ttl)
return {wait, tat}
