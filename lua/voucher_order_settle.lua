-- voucher_order_settle: the reserve that followed a claim (voucher_order_claim.lua) is decided.
--
-- KEYS[1] {voucher-order:<orderId>}   (see voucher_order_claim.lua)
-- ARGV[1] "1": a use may be held under the orderId now (taken, a replay, or not known: a
--         deadline passed), so the orderId stays its customer's for good; "0": this claim took
--         no use (out of stock, the customer's limit, ...)
--
-- Returns 1 when the claim stays, 0 when it was dropped (no claim pending, no use ever held:
-- the orderId is free again, and in one-use-per-order mode so is the choice of voucher).
--
-- Invariant: a claim with a use is never dropped; one without is dropped only once no other
-- claim of it is pending, so a concurrent claim that takes a use keeps it.
local pending = redis.call('HINCRBY', KEYS[1], 'pending', -1)
if ARGV[1] == '1' then
  redis.call('HSET', KEYS[1], 'used', '1')
end
if pending <= 0 and redis.call('HEXISTS', KEYS[1], 'used') == 0 then
  redis.call('DEL', KEYS[1])
  return 0
end
return 1
