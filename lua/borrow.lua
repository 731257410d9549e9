-- borrow: take one unit from another shard of the item when the buyer's home shard is empty.
-- reserve.lua wrote the buyer's pending borrow on the home shard first; claim.lua confirms it.
--
-- KEYS[1] {item:<id>:<j>}:stock   KEYS[2] {item:<id>:<j>}:orders   KEYS[3] {item:<id>:<j>}:outbox
-- ARGV[1] userId   ARGV[2] orderId   ARGV[3] order event payload (bytes)
-- ARGV[4] optional, notAfterMs: the pending borrow's date + half its lease (Redis clock); a call
--         arriving later (a delayed write, a paused node) takes nothing, so once the lease is
--         over a retry may replace the pending borrow without a late unit appearing
--
-- Returns {code, value}:
--   {0, unitsLeft}  BORROWED: a unit was taken from this shard, hold + outbox written
--   {1, ""}         REPLAY: this orderId already holds a unit here
--   {3, ""}         EMPTY: nothing to lend
--   {5, ""}         NOT_LOADED: the stock key is missing: this shard's stock is unknown, not 0
--   {6, ""}         TOO_LATE: past notAfterMs, nothing taken
--
-- Invariant: stock + HLEN(orders) is unchanged; the outbox entry is written with the hold, so a
-- crash before claim.lua still delivers the order, and the pending borrow on the home shard lets
-- the buyer's retry find this unit instead of taking another.
if redis.call('HEXISTS', KEYS[2], ARGV[2]) == 1 then
  return {1, ''}
end
local stock = redis.call('GET', KEYS[1])
if not stock then
  return {5, ''}
end
if ARGV[4] then
  local t = redis.call('TIME')
  if tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) > tonumber(ARGV[4]) then
    return {6, ''}
  end
end
stock = tonumber(stock)
if stock <= 0 then
  return {3, ''}
end
redis.call('DECR', KEYS[1])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[1])
redis.call('HSET', KEYS[3], ARGV[2], ARGV[3])
return {0, tostring(stock - 1)}
