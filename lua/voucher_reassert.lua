-- voucher_reassert: make a flash voucher hold a use the database says a stored (active)
-- redemption holds; the writer calls it for every use it stores. A failover can promote a
-- replica that never got the reservation: the use is back in remaining, its hold record and the
-- customer's count lost. This puts them back, once: every later call finds them.
--
-- KEYS[1] {voucher:<code>}:remaining   KEYS[2] {voucher:<code>}:customers
-- KEYS[3] {voucher:<code>}:holds       (as in voucher_reserve.lua)
-- ARGV[1] customerId   ARGV[2] orderId
--
-- Returns:
--   1 PRESENT: this orderId holds a use of this customer; nothing written
--   2 RESTORED: hold and customer count written now, one use taken from remaining with them
--   3 UNBACKED: written now, but remaining was 0 (the forgotten use was taken again): it stays
--     0; the database refuses the extra use for the limit, and voucher_forfeit.lua then drops
--     its hold without giving a use back
--   4 CONFLICT: this orderId holds another customer's use here: nothing written (the database
--     refuses that one as a conflict; its release frees the orderId, and the next call fills it)
--   5 NOT_LOADED: remaining is missing (the voucher is not armed here): nothing written
--
-- Invariant: remaining never goes below 0 and changes only with a hold record written here;
-- every customer's count stays the number of their hold records; a repeated call writes nothing.
local left = redis.call('GET', KEYS[1])
if not left then
  return 5
end
local holder = redis.call('HGET', KEYS[3], ARGV[2])
if holder then
  if holder == ARGV[1] then
    return 1
  end
  return 4
end
redis.call('HSET', KEYS[3], ARGV[2], ARGV[1])
redis.call('HINCRBY', KEYS[2], ARGV[1], 1)
if tonumber(left) > 0 then
  redis.call('DECR', KEYS[1])
  return 2
end
return 3
