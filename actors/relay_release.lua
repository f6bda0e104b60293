-- One round trip: the lock let go (only by its holder), and whether another relay asked
-- for another pass meanwhile.
if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('del', KEYS[1]) end
local again = redis.call('get', KEYS[2])
redis.call('del', KEYS[2])
return again
