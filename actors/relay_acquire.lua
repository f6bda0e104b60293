-- One round trip: the wake-up flag cleared (an event committed from now on sends a
-- wake-up of its own) and the tenant's lock taken; when another relay holds the lock,
-- "again" is set for it instead, and it claims once more before it lets go.
redis.call('del', KEYS[1])
if redis.call('set', KEYS[2], ARGV[1], 'NX', 'EX', ARGV[2]) then
    redis.call('del', KEYS[3])
    return 1
end
redis.call('set', KEYS[3], '1', 'EX', ARGV[2])
return 0
