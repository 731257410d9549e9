-- Events the writer dead-lettered without a row to store (undecodable, of an unsupported type,
-- invalid), by the orderId their Kafka key names, per stream ('orders', 'vouchers'). The hold
-- such an event left in Redis has no order, outbox entry or Kafka message any more: without
-- this record reconciliation could only call it a ghost; with it, it releases the hold (its
-- unit or use goes back) once (jobs/audit.py).
-- depends: 0006_room_controls

CREATE TABLE dead_lettered_event (
    stream text NOT NULL,
    order_id text NOT NULL CHECK (length(order_id) BETWEEN 1 AND 64),
    kind text NOT NULL,
    reason text NOT NULL,
    dead_lettered_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (stream, order_id)
);
