"""Settings are checked once, at start: ranges and cross-field rules fail in one line naming the
variable, an unknown FLASHSALE_* name is a warning naming the closest setting, and outside the
local stack the secrets must be long enough and distinct (gateway/auth.py)."""

from __future__ import annotations

import logging

import pytest

from gateway.auth import refuse_dev_secrets
from kernel.settings import Settings, load_settings, problems

# Secrets that pass every rule, for the production cases.
OWN = {
    "FLASHSALE_JWT_SECRET": "j" * 32,
    "FLASHSALE_ADMIN_TOKEN": "a" * 32,
    "FLASHSALE_SERVICE_TOKEN": "s" * 32,
}


def test_the_defaults_break_no_rule() -> None:
    assert problems(Settings()) == []


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("FLASHSALE_GATEWAY_PORT", "-5", "FLASHSALE_GATEWAY_PORT=-5: Expected `int` >= 1"),
        ("FLASHSALE_GATEWAY_PORT", "0", ">= 1"),
        ("FLASHSALE_PG_PORT", "65536", "FLASHSALE_PG_PORT=65536: Expected `int` <= 65535"),
        ("FLASHSALE_WRITER_METRICS_PORT", "-2", ">= -1"),  # 0 and -1 have meanings
        ("FLASHSALE_JWT_LEEWAY_SECONDS", "-100", "FLASHSALE_JWT_LEEWAY_SECONDS=-100"),
        ("FLASHSALE_GATEWAY_DRAIN_DELAY_MS", "-1", ">= 0"),
        ("FLASHSALE_WRITER_BATCH_SIZE", "0", "FLASHSALE_WRITER_BATCH_SIZE=0: Expected `int` >= 1"),
        ("FLASHSALE_ORDERS_PARTITIONS", "0", "FLASHSALE_ORDERS_PARTITIONS=0"),
        ("FLASHSALE_REDIS_TIMEOUT_MS", "0", "FLASHSALE_REDIS_TIMEOUT_MS=0"),
        ("FLASHSALE_USER_RATE_PER_S", "nan", "FLASHSALE_USER_RATE_PER_S=nan"),
        ("FLASHSALE_USER_BURST", "0.5", "FLASHSALE_USER_BURST=0.5: Expected `float` >= 1"),
        ("FLASHSALE_ITEM_CACHE_SECONDS", "-0.5", "FLASHSALE_ITEM_CACHE_SECONDS=-0.5"),
        ("FLASHSALE_REDIS_WAIT_TIMEOUT_MS", "250", "must be less than FLASHSALE_REDIS_TIMEOUT_MS"),
        ("FLASHSALE_JWT_ALGORITHMS", ",", "FLASHSALE_JWT_ALGORITHMS: empty"),
        ("FLASHSALE_LOG_LEVEL", "LOUD", "FLASHSALE_LOG_LEVEL='LOUD': one of"),
    ],
)
def test_a_broken_rule_fails_naming_the_variable(variable: str, value: str, says: str) -> None:
    with pytest.raises(SystemExit) as failed:
        load_settings({variable: value})
    message = str(failed.value)
    assert message.startswith("invalid settings: ") and "\n" not in message
    assert says in message


def test_every_broken_rule_is_named_at_once() -> None:
    with pytest.raises(SystemExit) as failed:
        load_settings({"FLASHSALE_GATEWAY_PORT": "-5", "FLASHSALE_JWT_LEEWAY_SECONDS": "-100"})
    assert "FLASHSALE_GATEWAY_PORT" in str(failed.value)
    assert "FLASHSALE_JWT_LEEWAY_SECONDS" in str(failed.value)


def test_values_inside_the_ranges_start() -> None:
    cfg = load_settings(
        {
            "FLASHSALE_WRITER_METRICS_PORT": "-1",
            "FLASHSALE_RECONCILE_METRICS_PORT": "0",
            "FLASHSALE_GATEWAY_PORT": "65535",
            "FLASHSALE_REDIS_WAIT_REPLICAS": "0",  # no WAIT sent: its timeout does not matter
            "FLASHSALE_REDIS_WAIT_TIMEOUT_MS": "5000",
        }
    )
    assert (cfg.writer_metrics_port, cfg.gateway_port) == (-1, 65535)


def test_an_unknown_variable_warns_naming_the_closest(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="kernel.settings"):
        cfg = load_settings(
            {"FLASHSALE_GATEWAY_PROT": "9000", "FLASHSALE_LOAD_ITEM_ID": "1", "OTHER": "x"}
        )
    assert cfg.gateway_port == Settings().gateway_port  # ignored
    assert [r.getMessage() for r in caplog.records] == [
        "FLASHSALE_GATEWAY_PROT is not a setting and is ignored; "
        "did you mean FLASHSALE_GATEWAY_PORT?"
    ]


def test_an_unknown_variable_with_nothing_close(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="kernel.settings"):
        load_settings({"FLASHSALE_ZZZZZZZZ": "1"})
    assert [r.getMessage() for r in caplog.records] == [
        "FLASHSALE_ZZZZZZZZ is not a setting and is ignored"
    ]


# Secrets, outside the local stack (gateway/auth.py)


def _refused(**env: str) -> str:
    with pytest.raises(SystemExit) as refused:
        refuse_dev_secrets(load_settings({**OWN, **env}))
    message = str(refused.value)
    assert message.startswith("refusing to start: ") and "\n" not in message
    return message


def test_own_long_distinct_secrets_start() -> None:
    refuse_dev_secrets(load_settings(OWN))


def test_a_short_hs256_secret_is_refused() -> None:
    message = _refused(FLASHSALE_JWT_SECRET="x")
    assert "FLASHSALE_JWT_SECRET is 1 bytes, HS256 needs 32" in message
    assert "FLASHSALE_ENV=production" in message


def test_a_longer_hash_needs_a_longer_secret() -> None:
    message = _refused(FLASHSALE_JWT_ALGORITHMS="HS256,HS512", FLASHSALE_JWT_SECRET="k" * 48)
    assert "FLASHSALE_JWT_SECRET is 48 bytes, HS256/HS512 needs 64" in message


def test_short_admin_and_service_tokens_are_refused() -> None:
    message = _refused(FLASHSALE_ADMIN_TOKEN="a", FLASHSALE_SERVICE_TOKEN="s" * 31)
    assert "FLASHSALE_ADMIN_TOKEN is 1 bytes, at least 32 needed" in message
    assert "FLASHSALE_SERVICE_TOKEN is 31 bytes" in message
    assert "FLASHSALE_JWT_SECRET" not in message


def test_a_short_waiting_room_secret_is_refused_when_set() -> None:
    assert "FLASHSALE_WAITING_ROOM_SECRET is 5 bytes" in _refused(
        FLASHSALE_WAITING_ROOM_SECRET="short"
    )


def test_the_admin_token_may_not_be_the_service_token() -> None:
    message = _refused(FLASHSALE_SERVICE_TOKEN=OWN["FLASHSALE_ADMIN_TOKEN"])
    assert "FLASHSALE_ADMIN_TOKEN and FLASHSALE_SERVICE_TOKEN are the same" in message


@pytest.mark.parametrize(
    ("setting", "copied_from", "says"),
    [
        ("FLASHSALE_ADMIN_TOKEN", "FLASHSALE_JWT_SECRET", "ADMIN_TOKEN and FLASHSALE_JWT_SECRET"),
        ("FLASHSALE_SERVICE_TOKEN", "FLASHSALE_JWT_SECRET", "SERVICE_TOKEN and FLASHSALE_JWT"),
        ("FLASHSALE_WAITING_ROOM_SECRET", "FLASHSALE_JWT_SECRET", "ROOM_SECRET and FLASHSALE_JWT"),
        ("FLASHSALE_WAITING_ROOM_SECRET", "FLASHSALE_ADMIN_TOKEN", "TOKEN and FLASHSALE_WAITING"),
    ],
)
def test_no_secret_may_be_another(setting: str, copied_from: str, says: str) -> None:
    """A bearer token's holder must not be able to mint buyers' JWTs or room tickets with it."""
    assert says in _refused(**{setting: OWN[copied_from]})


def test_an_hmac_secret_left_unused_by_a_public_key_is_not_compared() -> None:
    with_key = {
        "FLASHSALE_JWT_PUBLIC_KEY": "-----BEGIN PUBLIC KEY-----",
        "FLASHSALE_ADMIN_TOKEN": "j" * 32,
    }
    refuse_dev_secrets(load_settings({**OWN, **with_key}))


def test_the_local_stack_keeps_its_short_public_secrets() -> None:
    refuse_dev_secrets(load_settings({"FLASHSALE_ENV": "local"}))
    local_same = {"FLASHSALE_ENV": "local", "FLASHSALE_SERVICE_TOKEN": "dev-admin-token"}
    refuse_dev_secrets(load_settings(local_same))
