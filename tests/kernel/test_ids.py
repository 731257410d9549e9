"""Order ids: UUIDv8 carrying the item id, unique, and never shared by a forked process."""

from __future__ import annotations

import os
import uuid

from kernel.ids import item_of, new_order_id, parse_order_id


def test_ids_are_uuid_v8_that_carry_their_item() -> None:
    for item_id in (1, 637, 2**48 - 1):
        order_id = new_order_id(item_id)
        parsed = uuid.UUID(order_id)
        assert str(parsed) == order_id
        assert parsed.version == 8
        assert parsed.variant == uuid.RFC_4122
        assert item_of(order_id) == item_id


def test_ids_do_not_repeat_across_batches() -> None:
    ids = {new_order_id(5) for _ in range(20_000)}  # ~40 refills of the random buffer
    assert len(ids) == 20_000


def test_a_forked_child_does_not_reuse_the_parents_random_bytes() -> None:
    new_order_id(5)  # the parent now holds unread random bytes
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(write_end, new_order_id(5).encode())
        os._exit(0)
    os.close(write_end)
    child_id = os.read(read_end, 64).decode()
    os.waitpid(pid, 0)
    assert child_id != new_order_id(5)


def test_item_of_refuses_foreign_ids() -> None:
    assert item_of("not-a-uuid") is None
    assert item_of(str(uuid.uuid4())) is None


def test_only_the_canonical_form_parses() -> None:
    order_id = new_order_id(637)
    assert parse_order_id(order_id) == uuid.UUID(order_id)
    assert parse_order_id(order_id.upper()) == uuid.UUID(order_id)
    assert item_of(order_id.upper()) == 637
    digits = str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")  # Arabic-Indic digits
    for spelling in (
        "{" + order_id + "}",
        "urn:uuid:" + order_id,
        order_id.replace("-", ""),
        order_id.translate(digits),
        order_id[:8] + order_id[9:13] + "-" + order_id[8] + order_id[13:],
    ):
        assert uuid.UUID(spelling) == uuid.UUID(order_id)  # uuid.UUID reads it as the same id
        assert parse_order_id(spelling) is None, spelling
        assert item_of(spelling) is None, spelling
