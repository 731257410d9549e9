-- Who an orderId belongs to over every voucher: the first customer who took a use under it.
-- A redemption is keyed by (voucher code, orderId), so nothing else stops another customer
-- reserving another voucher under someone's orderId. Every redemption row's orderId gets its
-- owner here (the trigger: the writer's flash uses as well as the ordinary reserve, which also
-- writes and locks the row itself, domain/voucher_lifecycle.py); the primary key keeps one.
-- depends: 0004_waiting_room

CREATE TABLE voucher_order (
    order_id    text        PRIMARY KEY,
    customer_id bigint      NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

INSERT INTO voucher_order (order_id, customer_id)
SELECT DISTINCT ON (order_id) order_id, customer_id
FROM voucher_redemption
ORDER BY order_id, reserved_at, id;

CREATE FUNCTION voucher_order_owner() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO voucher_order (order_id, customer_id) VALUES (NEW.order_id, NEW.customer_id)
    ON CONFLICT (order_id) DO NOTHING;
    RETURN NULL;
END
$$;

CREATE TRIGGER voucher_redemption_owner AFTER INSERT ON voucher_redemption
    FOR EACH ROW EXECUTE FUNCTION voucher_order_owner();
