"""Wire types of the Kafka topics: msgspec Structs, encoders and decoders made once at import."""

from __future__ import annotations

import msgspec


class OrderPlaced(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag="order_placed"):
    """A buyer holds a unit in Redis; the writer turns this into one flash_sale_order row."""

    order_id: str
    item_id: int
    user_id: int
    shard: int  # the shard the unit was taken from (the home shard unless borrowed)
    home_shard: int  # where the buyer's dedup entry lives
    created_at_ms: int
    expires_at_ms: int


class VoucherReserved(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag="voucher_reserved"
):
    """A flash voucher use was taken in Redis; the writer records the redemption."""

    order_id: str
    code: str
    customer_id: int
    order_amount: int
    discount_amount: int
    reserved_at_ms: int
    expires_at_ms: int


Event = OrderPlaced | VoucherReserved

encode = msgspec.json.Encoder().encode
_decoder = msgspec.json.Decoder(Event)


def decode(payload: bytes) -> Event:
    """Decode one event; raises msgspec.DecodeError / ValidationError on a poison message."""
    return _decoder.decode(payload)
