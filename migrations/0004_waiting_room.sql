-- A waiting room per sale (issue 16; gateway/waiting_room/). Off by default, so every existing
-- sale behaves as before. The admission rate is per second (NULL: the gateway's configured
-- default); a proof-of-work difficulty of 0 asks none.
-- depends: 0003_voucher_code_order_id

ALTER TABLE flash_sale
    ADD COLUMN waiting_room boolean NOT NULL DEFAULT false,
    ADD COLUMN admission_rate_per_second integer
        CHECK (admission_rate_per_second BETWEEN 1 AND 100000),
    ADD COLUMN pow_difficulty smallint NOT NULL DEFAULT 0 CHECK (pow_difficulty BETWEEN 0 AND 32);
