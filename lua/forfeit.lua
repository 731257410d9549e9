-- forfeit: the database refused a stored order for capacity (the item had no unit left for it),
-- so Redis granted a unit it did not have (it forgot an earlier order in a failover, or the
-- quantity went down): the order's hold record goes, and its unit does NOT go back to the stock.
-- Giving it back would sell it again, to be refused again, in a loop. A refusal for any other
-- reason (the buyer already holds an order) gives the unit back instead: release.lua.
--
-- KEYS[1] {item:<id>:<j>}:orders   KEYS[2] {item:<id>:<j>}:outbox
-- ARGV[1] orderId
--
-- Returns 1 when the hold record was removed now, 0 when there was none (already forfeited,
-- released, or never written on this node).
--
-- Invariant: the stock never changes; stock + HLEN(orders) shrinks by one only when a hold
-- record is removed, so a repeated call changes nothing.
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('HDEL', KEYS[2], ARGV[1])
return 1
