-- voucher_order_claim: an orderId belongs to the first customer who takes a voucher use under
-- it, on any voucher. A voucher's keys share its own hash tag, so the owner of an orderId (whose
-- uses may be spread over several vouchers, on several nodes) is a key of its own, claimed here
-- before the reserve and settled after it (voucher_order_settle.lua).
--
-- KEYS[1] {voucher-order:<orderId>}  hash: customer (the owner), code (the one voucher of the
--         order, when an order carries one use), pending (claims not settled yet), used (set
--         once a use may be held under the orderId: the claim then stays for good)
-- ARGV[1] customerId   ARGV[2] voucher code
-- ARGV[3] "1": one order may carry uses of several vouchers; "0": one voucher use per order
--
-- Returns:
--   0 CLAIMED: the orderId is this customer's (now or before); reserve, then settle
--   1 CONFLICT: the orderId is another customer's: nothing written
--   2 OTHER_VOUCHER: one use per order, and this order's is (or is being taken) on another
--     voucher: nothing written
--
-- Invariant: the owner never changes while a claim is pending or a use may be held; a claim
-- writes only with its pending count, which its settle takes back.
local owner = redis.call('HGET', KEYS[1], 'customer')
if owner and owner ~= ARGV[1] then
  return 1
end
if ARGV[3] ~= '1' then
  local code = redis.call('HGET', KEYS[1], 'code')
  if code and code ~= ARGV[2] then
    return 2
  end
  redis.call('HSET', KEYS[1], 'code', ARGV[2])
end
redis.call('HSET', KEYS[1], 'customer', ARGV[1])
redis.call('HINCRBY', KEYS[1], 'pending', 1)
return 0
