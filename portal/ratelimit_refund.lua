-- Give back one counted attempt per key (never below zero, never creating a key: a key
-- that expired meanwhile stays gone). DECR keeps the key's expiry.
for _, key in ipairs(KEYS) do
  if tonumber(redis.call('GET', key) or '0') > 0 then
    redis.call('DECR', key)
  end
end
return 0
