-- voucher_forfeit: the database refused a stored flash voucher use for its total limit (no use
-- was left for it), so Redis granted a use it did not have (it forgot an earlier one in a
-- failover): the hold goes, and the use does NOT go back to remaining, where it would be taken
-- and refused again. A refusal for another reason gives the use back: voucher_release.lua.
--
-- KEYS[1] {voucher:<code>}:customers   KEYS[2] {voucher:<code>}:holds
-- KEYS[3] {voucher:<code>}:outbox      KEYS[4] {voucher:<code>}:ended   (see voucher_reserve.lua)
-- ARGV[1] orderId
--
-- Returns 1 when the hold was removed now, 0 when there was none.
--
-- Invariant: remaining never changes; the customer's count shrinks only with their hold record;
-- the orderId is remembered in ended, so a retry of it never takes a use again; a repeated call
-- changes nothing.
local customer = redis.call('HGET', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[4], ARGV[1], customer or '')
if not customer then
  return 0
end
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
if redis.call('HINCRBY', KEYS[1], customer, -1) <= 0 then
  redis.call('HDEL', KEYS[1], customer)
end
return 1
