-- reassert: make one item shard hold what the database says a stored (active) order holds; the
-- writer calls it for every order it stores. A failover can promote a replica that never got
-- the order's reservation: the unit is back in stock, the hold and the buyer's dedup entry are
-- gone. This puts them back, once: every later call finds them and writes nothing.
--
-- KEYS[1] {item:<id>:<k>}:stock   KEYS[2] {item:<id>:<k>}:orders   KEYS[3] {item:<id>:<k>}:buyers
-- ARGV[1] userId   ARGV[2] orderId
-- ARGV[3] "1": the order's unit came from this shard: its hold record must be here
-- ARGV[4] "1": this is the buyer's home shard: their dedup entry must name this order
--
-- Returns {hold, buyer}:
--   hold   0 not asked (ARGV[3] is not "1")
--          1 PRESENT: the hold record is here; nothing written
--          2 RESTORED: written now, and a unit taken from the stock with it
--          3 UNBACKED: written now, but the stock was 0 (the forgotten unit was sold again):
--            the stock stays 0, one hold too many; the database refuses the extra order for
--            capacity and forfeit.lua then drops its hold without a unit
--   buyer  0 not asked (ARGV[4] is not "1")
--          1 PRESENT: the entry names this order (claimed, or its pending borrow)
--          2 RESTORED: there was none; written now
--          3 OTHER: it names another order of the buyer: left as it is (the database refuses
--            one of the two, whose give-back frees the entry, and the next call fills it)
--   {5, 5} NOT_LOADED: the stock key is missing: nothing written (a load rebuilds the shard from
--          the database, this order included)
--
-- Invariant: the stock never goes below 0 and changes only with a hold record written here, so
-- stock + HLEN(orders) is unchanged by RESTORED, and a repeated call changes nothing.
local stock = redis.call('GET', KEYS[1])
if not stock then
  return {5, 5}
end
local hold, buyer = 0, 0
if ARGV[3] == '1' then
  if redis.call('HEXISTS', KEYS[2], ARGV[2]) == 1 then
    hold = 1
  else
    redis.call('HSET', KEYS[2], ARGV[2], ARGV[1])
    if tonumber(stock) > 0 then
      redis.call('DECR', KEYS[1])
      hold = 2
    else
      hold = 3
    end
  end
end
if ARGV[4] == '1' then
  local existing = redis.call('HGET', KEYS[3], ARGV[1])
  if not existing then
    redis.call('HSET', KEYS[3], ARGV[1], ARGV[2])
    buyer = 2
  elseif existing == ARGV[2] or string.match(existing, '^~%d+~(.+)$') == ARGV[2] then
    buyer = 1
  else
    buyer = 3
  end
end
return {hold, buyer}
