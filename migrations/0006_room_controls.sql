-- A waiting room's controls during the sale (gateway/waiting_room/controls.py): paused or not,
-- and its rate (admission_rate_per_second, changed in place). room_version counts the changes:
-- Redis applies a version only if newer than the one it holds, so a write that reached this
-- row but not Redis is applied by the gateways' next tick, and an older one never wins.
-- depends: 0005_voucher_order_owner

ALTER TABLE flash_sale
    ADD COLUMN room_paused boolean NOT NULL DEFAULT false,
    ADD COLUMN room_version bigint NOT NULL DEFAULT 0 CHECK (room_version >= 0);
