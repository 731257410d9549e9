-- Flash sales, their items and orders; vouchers and their redemptions.
-- The constraints here are the last guard: every layer above them is an optimisation.
-- depends:

CREATE TABLE flash_sale (
    id                     bigserial PRIMARY KEY,
    name                   text        NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    starts_at              timestamptz NOT NULL,
    ends_at                timestamptz NOT NULL,
    payment_window_seconds integer     NOT NULL DEFAULT 600 CHECK (payment_window_seconds > 0),
    armed_at               timestamptz,
    created_at             timestamptz NOT NULL DEFAULT now(),
    CHECK (ends_at > starts_at)
);

CREATE TABLE flash_sale_item (
    id         bigserial PRIMARY KEY,
    sale_id    bigint   NOT NULL REFERENCES flash_sale (id),
    product_id text     NOT NULL CHECK (length(product_id) BETWEEN 1 AND 200),
    price      bigint   NOT NULL CHECK (price >= 0),          -- minor currency units
    quantity   integer  NOT NULL CHECK (quantity >= 0),
    -- Units held by PENDING or PAID orders: the writer advances it, expiry and cancel lower it.
    sold       integer  NOT NULL DEFAULT 0 CHECK (sold >= 0),
    shards     smallint NOT NULL DEFAULT 4 CHECK (shards BETWEEN 1 AND 256),
    -- Reconciliation --fix repairs Redis only while an item is paused.
    paused     boolean  NOT NULL DEFAULT false,
    CHECK (sold <= quantity)
);
CREATE INDEX flash_sale_item_sale ON flash_sale_item (sale_id);

CREATE TABLE flash_sale_order (
    id             uuid        PRIMARY KEY,
    item_id        bigint      NOT NULL REFERENCES flash_sale_item (id),
    user_id        bigint      NOT NULL,
    shard          smallint    NOT NULL,                      -- the shard the unit came from
    status         text        NOT NULL CHECK (status IN ('PENDING', 'PAID', 'EXPIRED', 'CANCELLED', 'FAILED')),
    created_at     timestamptz NOT NULL,
    expires_at     timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL DEFAULT now(),
    failure_reason text
);
-- At most one active order per buyer and item; a buyer whose hold expired or was cancelled may
-- buy again.
CREATE UNIQUE INDEX flash_sale_order_one_active
    ON flash_sale_order (item_id, user_id) WHERE status IN ('PENDING', 'PAID');
CREATE INDEX flash_sale_order_pending_expiry
    ON flash_sale_order (expires_at) WHERE status = 'PENDING';
CREATE INDEX flash_sale_order_item ON flash_sale_order (item_id, status);

CREATE TABLE voucher (
    code                text PRIMARY KEY CHECK (code ~ '^[A-Za-z0-9_-]{1,64}$'),
    discount_amount     bigint      NOT NULL CHECK (discount_amount > 0),
    min_order_amount    bigint      NOT NULL DEFAULT 0 CHECK (min_order_amount >= 0),
    total_limit         integer     NOT NULL CHECK (total_limit >= 0),
    per_customer_limit  integer     NOT NULL DEFAULT 1 CHECK (per_customer_limit >= 1),
    used_count          integer     NOT NULL DEFAULT 0 CHECK (used_count >= 0),
    starts_at           timestamptz NOT NULL,
    ends_at             timestamptz NOT NULL,
    is_flash            boolean     NOT NULL DEFAULT false,
    created_at          timestamptz NOT NULL DEFAULT now(),
    CHECK (used_count <= total_limit),
    CHECK (ends_at > starts_at)
);

CREATE TABLE voucher_redemption (
    id              bigserial PRIMARY KEY,
    voucher_code    text        NOT NULL REFERENCES voucher (code),
    order_id        text        NOT NULL UNIQUE,
    customer_id     bigint      NOT NULL,
    order_amount    bigint      NOT NULL CHECK (order_amount >= 0),
    discount_amount bigint      NOT NULL,
    status          text        NOT NULL CHECK (status IN ('RESERVED', 'CONFIRMED', 'RELEASED', 'EXPIRED')),
    reserved_at     timestamptz NOT NULL,
    expires_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX voucher_redemption_customer ON voucher_redemption (voucher_code, customer_id);
CREATE INDEX voucher_redemption_reserved_expiry
    ON voucher_redemption (expires_at) WHERE status = 'RESERVED';
