-- A flash voucher use that Redis granted but the database refuses (past total_limit or the
-- per-customer limit, after a Redis failover) is stored FAILED with why, as refused orders are:
-- its orderId stays taken, so a redelivery decides the same, and confirm can say so.
-- depends: 0001_initial

ALTER TABLE voucher_redemption DROP CONSTRAINT voucher_redemption_status_check;
ALTER TABLE voucher_redemption ADD CONSTRAINT voucher_redemption_status_check
    CHECK (status IN ('RESERVED', 'CONFIRMED', 'RELEASED', 'EXPIRED', 'FAILED'));
ALTER TABLE voucher_redemption ADD COLUMN failure_reason text;
