-- A voucher reservation is keyed by (voucher code, orderId), not by the orderId alone: one order
-- may carry several different vouchers (a discount and a shipping voucher), each reserved under
-- the order's id. The same orderId on the same code by another customer stays a conflict (409).
-- The index behind the new key serves every lookup and transition, all by (code, orderId).
-- depends: 0002_voucher_failed

ALTER TABLE voucher_redemption DROP CONSTRAINT voucher_redemption_order_id_key;
ALTER TABLE voucher_redemption
    ADD CONSTRAINT voucher_redemption_code_order_id UNIQUE (voucher_code, order_id);
