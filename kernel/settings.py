"""One typed settings object, read once from ``FLASHSALE_*`` environment variables.

Nothing else in the project reads ``os.environ``. Defaults point at the local stack that
``flashsale stack up`` starts, on ports chosen so they never collide with a system Redis,
Kafka or PostgreSQL on the default ports.
"""

from __future__ import annotations

import difflib
import functools
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Annotated, Any, get_type_hints

import msgspec

from kernel.resources import default_state_dir

PREFIX = "FLASHSALE_"
PROJECT_ROOT = Path(__file__).resolve().parent.parent


def _split(value: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in value.split(",") if part.strip())


@dataclass(frozen=True, slots=True)
class Settings:
    # Where things are.
    # 3 primaries, 2 replicas each: a 202 waits for one replica (WAIT), so a primary must keep
    # a replica after a failover, or its promoted replica could confirm nothing until the dead
    # node rejoins (measured with one replica: its shards answered 503 for 7.2-8.4 s).
    redis_nodes: tuple[str, ...] = tuple(f"127.0.0.1:{port}" for port in range(7101, 7110))
    redis_replicas_per_primary: int = 2
    kafka_bootstrap: str = "127.0.0.1:19092"
    pg_dsn: str = "postgresql://flashsale@127.0.0.1:54329/flashsale"
    # .stack in a checkout, else $XDG_STATE_HOME/flashsale (kernel/resources.py).
    state_dir: Path = default_state_dir(os.environ)
    # Downloaded artefacts (the Kafka jars) live here, outside the repository.
    cache_dir: Path = Path.home() / ".cache" / "flashsale"

    # Local stack ports (only used by `flashsale stack`).
    pg_port: int = 54329
    kafka_controller_port: int = 19093
    kafka_heap: str = "512m"
    # The replicated stack (flashsale/stack/kafka.py, redis_cluster.py). Kafka runs 3
    # brokers (replication factor 3, min.insync.replicas 2) as production does, or 1 for a quick
    # local run. Broker n listens on the port of kafka_bootstrap's first address + 2(n-1), its
    # controller on kafka_controller_port + 2(n-1); kafka_bootstrap may list all of them.
    kafka_brokers: int = 3
    # A broker silent this long is fenced: it leaves every ISR and its partitions' leadership
    # moves (Kafka: 9 s). Until then acks=all waits for a hung follower, so this must sit well
    # inside kafka_timeout_ms: at 3 s a SIGSTOPped broker was fenced 3.2 s after, past the
    # deadline (503s); at 1.5 s, 1.2-1.5 s after (load average 13-22). Heartbeats go every
    # sixth of it; a live broker is fenced only if the controller sees none for all of it.
    kafka_session_timeout_ms: int = 1500
    # How long a Redis primary may be unreachable before its replica takes over, and how stale
    # (in node timeouts) a replica may be and still do so (loadtest.bench --only failover).
    # Measured after a SIGKILL, replica writable: 3000 ms → 4.4-5.7 s, 1000 → 1.9-2.8 s, 500 →
    # 1.6-1.9 s; a primary paused 1 s is failed over at 500 (2/3) and 750 (1/8), not at 1000
    # (0/8); 2 s pauses are, below 2000. The validity factor changed nothing measurable. A dead
    # process is not left to this timeout: the failover watch (below) promotes its replica in
    # 0.2-0.3 s, so the timeout only has to outlast pauses: 2 s ones are not failed over at 2000.
    redis_node_timeout_ms: int = 2000
    redis_replica_validity_factor: int = 10
    # The failover watch (jobs/redis_failover.py): a primary whose port refused this many
    # probes in a row, one every redis_failover_probe_ms, is dead, not paused: its most
    # up-to-date replica is promoted at once (CLUSTER FAILOVER FORCE).
    redis_failover_probe_ms: int = 100
    redis_failover_refusals: int = 2

    # Kafka topics and their partition counts (created explicitly, never auto-created).
    orders_topic: str = "flashsale.orders"
    orders_partitions: int = 12
    vouchers_topic: str = "flashsale.vouchers"
    vouchers_partitions: int = 6
    deadletter_topic: str = "flashsale.deadletter"

    # Auth.
    jwt_secret: str = "dev-only-secret-for-the-local-stack-change-me-0123456789abcdef0123"  # noqa: S105 - local stack
    jwt_public_key: str = ""
    jwt_algorithms: tuple[str, ...] = ("HS256",)
    jwt_leeway_seconds: int = 5
    admin_token: str = "dev-admin-token"  # noqa: S105 - local stack
    service_token: str = "dev-service-token"  # noqa: S105 - local stack
    # Where this runs. The three secrets above are public: a gateway keeps them only when this
    # is "local", which the project's own starters set (flashsale/stack/processes.py: the demo,
    # the tests, the load tests); otherwise it refuses to start with them (gateway/auth.py).
    env: str = "production"
    jwt_audience: str = ""  # when set, a buyer token's `aud` must name it
    jwt_issuer: str = ""  # when set, a buyer token's `iss` must be it
    # Verified tokens remembered (LRU): ~0.4 KB each (measured, 156-character tokens), so ~40 MB.
    jwt_cache_size: int = 100_000

    # Redis writes confirmed on the replica (shard_router/autopipeline.py). Every
    # pipelined batch with a script call ends with WAIT <replicas> <timeout> on the same node
    # connection; fewer acknowledgements fail the batch's writes with ShardUnavailable (503). The
    # timeout stays well inside redis_timeout_ms, the batch's deadline; 0 replicas sends no WAIT
    # (to measure its cost: loadtest.bench --only wait_cost). Loads wait for the replica too.
    redis_wait_replicas: int = 1
    redis_wait_timeout_ms: int = 100
    # How long a buyer's unfinished borrow (home shard empty, a unit taken from another shard)
    # keeps their dedup entry pending before a retry may replace it; no shard lends to it past
    # half of this (shard_router/reserving.py).
    borrow_lease_ms: int = 1000

    # Gateway.
    gateway_host: str = "127.0.0.1"
    gateway_port: int = 8088
    gateway_workers: int = 1
    redis_timeout_ms: int = 250
    kafka_timeout_ms: int = 3000
    # How long the producer waits to fill a batch. Orders are keyed by orderId over 12
    # partitions, so at 2 ms a partition's batch held ~1 order at 4,000 orders/s; at 10 ms the
    # broker's CPU per order fell from ~49 to ~30 µs and librdkafka's thread's from ~22 to
    # ~12 µs (one gateway, 6 s runs); 5 ms keeps most of that for ~3 ms more on the 202.
    kafka_linger_ms: int = 5
    # The producer reads its topics' metadata this often; while a partition has no leader or
    # fewer in-sync replicas than kafka_min_insync_replicas, a purchase answers 503 before it
    # takes a unit (a send would only wait out kafka_timeout_ms with the unit held). 0: the
    # topics' min.insync.replicas (2 with 3 brokers, 1 with one).
    kafka_health_interval_ms: int = 250
    kafka_min_insync_replicas: int = 0
    inflight_cap: int = 4096
    # Young-generation GC threshold of a gateway process (CPython's default is 700), see app.py.
    gc_gen0_threshold: int = 20_000
    user_rate_per_s: float = 5.0
    user_burst: float = 10.0
    ip_rate_per_s: float = 20000.0
    ip_burst: float = 40000.0
    item_cache_seconds: float = 2.0
    sold_out_flag_ttl_ms: int = 1000
    shard_breaker_failures: int = 5
    shard_breaker_cooldown_ms: int = 1000
    outbox_relay_interval_ms: int = 1000
    outbox_relay_min_age_ms: int = 5000
    # Outboxes (item shards, voucher codes) looked at per relay round: a round's cost stays flat
    # however many items are live; every outbox is visited within ceil(outboxes / budget) rounds.
    outbox_relay_scan_budget: int = 256

    # The edge: connections, admission, limits (gateway/__main__.py, admission.py, limits.py).
    # A connection that has not sent a whole request head within this time is closed: silent,
    # slow-header and idle keep-alive connections alike (granian's HTTP/1 header read timeout,
    # 30 s by default; measured closed at 2.0 s). A load balancer's idle timeout towards the
    # gateway must be shorter than this, or it may reuse a connection the gateway is closing.
    gateway_header_timeout_ms: int = 2000
    # Connections one worker holds (granian's backpressure takes one permit per connection:
    # past it the rest wait in the listen backlog unserved). Capped by the open-files limit.
    gateway_max_connections: int = 16384
    gateway_backlog: int = 4096
    # A request body must arrive whole within this time, else 408 and the connection closes.
    body_timeout_ms: int = 5000
    # Graceful stop (gateway/shutdown.py): on SIGTERM a gateway answers /readyz 503 for this long
    # while it goes on serving, so a balancer's health check takes it out of rotation before it
    # stops accepting. At least the balancer's time to notice: haproxy's fall x inter (the fleet:
    # 2 x 400 ms), Kubernetes' failureThreshold x periodSeconds plus endpoint propagation.
    gateway_drain_delay_ms: int = 2000
    # Admission (gateway/admission.py), CoDel-like: a request arriving while every reservation
    # of the last interval took longer than the target (a standing queue, not a burst) is
    # answered 503 OVERLOADED before any work (0: measure, refuse nothing). The target is above
    # a reservation's service time on a busy machine (WAIT + acks=all); the interval covers the
    # hand-over of a burst answered within a second: see admission.py for the measurements.
    admission_target_ms: float = 250.0
    admission_interval_ms: float = 500.0
    # The latency budget: a request that waited this long is refused, and a process holds at
    # most its best answer rate of the last 5 s times the budget in admitted requests (the
    # in-flight cap), never fewer than the floor (a sale's first burst comes before any rate).
    admission_budget_ms: float = 1000.0
    admission_min_in_flight: int = 1024
    # Order lookups, pay and cancel, per buyer; /metrics and /readyz, per client address.
    order_rate_per_s: float = 2.0
    order_burst: float = 20.0
    ops_rate_per_s: float = 10.0
    ops_burst: float = 50.0
    # A wrong admin or service token (a bearer presented that is not the one configured) takes
    # one of these per client address; with none left the address gets 429 for every admin and
    # voucher call, right token or not, so guessing is throttled to the rate.
    auth_failure_rate_per_s: float = 0.2
    auth_failure_burst: float = 10.0
    # Peers (CIDRs) whose X-Forwarded-For names the client; anyone else's is ignored.
    trusted_proxies: tuple[str, ...] = ()

    # Writer and jobs.
    writer_group: str = "flashsale-writer"
    # The vouchers topic has its own group, so voucher uses never wait behind an orders backlog.
    voucher_writer_group: str = "flashsale-voucher-writer"
    writer_streams: tuple[str, ...] = ("orders", "vouchers")  # what a writer process consumes
    writer_batch_size: int = 1000
    writer_batch_ms: int = 50
    writer_metrics_port: int = 9108  # 0 picks a free port, -1 serves none
    metrics_host: str = "127.0.0.1"  # where the writer's /metrics listens
    expiry_interval_ms: int = 1000
    voucher_hold_seconds: int = 900
    # 0: one voucher use per orderId, on whichever voucher took it first (the voucher design's
    # order_id UNIQUE); 1: one order may carry one use of each of several vouchers. Either way
    # an orderId is the first customer's who took a use under it.
    voucher_order_combines: int = 0
    # Reconciliation on its own (`flashsale reconcile --every`, jobs/reconcile_loop.py): its
    # /metrics on metrics_host at this port (0 picks a free port, -1 serves none).
    reconcile_metrics_port: int = 9109

    # Observability (flashsale/stack/prometheus.py, flashsale watch/report, deploy/).
    # Where Prometheus answers: the local stack's, or any deployment's.
    prometheus_url: str = "http://127.0.0.1:19090"
    prometheus_port: int = 19090  # the local stack's Prometheus listens here
    redis_exporter_port: int = 19121  # the local stack's redis_exporter (replication health)
    # A spike lasts seconds: the recording rules rate over 10 s, so scrape at least every 2.5 s.
    scrape_interval_s: int = 1
    # The jobs no spike figure reads: the Redis nodes' replication health (redis_exporter; its
    # alert waits 30 s and judges a 10 s lag) and Prometheus's own page. Each node's scrape
    # costs the exporter ~2.4 ms and the node ~0.5 ms of CPU (a node, 500 scrapes): at 1 s the 9
    # nodes' were most of the exporter's idle ~0.07 core.
    health_scrape_interval_s: int = 5
    # The /metrics addresses Prometheus scrapes (host:port): the local gateway, the demo's
    # gateway (flashsale/demo.py DEMO_PORT), the writer, the reconciliation job.
    gateway_targets: tuple[str, ...] = ("127.0.0.1:8088", "127.0.0.1:18188")
    writer_targets: tuple[str, ...] = ("127.0.0.1:9108",)
    job_targets: tuple[str, ...] = ("127.0.0.1:9109",)

    # The fleet (docs/fleet.md): gateway hosts in network namespaces behind haproxy.
    # A private /24 the fleet creates: .1 is the host's bridge (the balancer's source address,
    # the only one the gateways trust), .11, .12, ... the gateway hosts.
    fleet_subnet: str = "10.77.0.0/24"
    fleet_balancer_port: int = 18500  # haproxy listens on 127.0.0.1 here
    # The fleet's name: its namespaces, veths, bridge and nftables tables start with it, its files
    # live in <state>/fleet (default name) or <state>/fleet-<name>. Fleets of different names,
    # subnets and balancer ports run side by side (tests pick their own).
    fleet_name: str = "fsf"
    # The sold-out agent re-checks each flag it set this often, as a gateway does (half its TTL).
    fleet_resync_ms: int = 500

    # The balancer as the edge (deploy/haproxy/haproxy.cfg.tmpl): requests one gateway
    # process is given at once (haproxy's per-server maxconn; the rest wait in haproxy, where no
    # Python runs), requests queued per gateway past which a newcomer is answered 503 OVERLOADED
    # at once, and how long a queued one may wait (timeout queue). Measured by the overload
    # section (python -m loadtest.bench --only overload). edge_maxconn: client connections
    # haproxy holds. Measured on the quiet machine with haproxy off the gateway's core: 384
    # slots keep a gateway's pipelines full (0.96 of its maximum at 2x offered, 0.92 at 5x;
    # 256 gave 0.88, 0.80); a queue of 32 drains in ~6 ms, so nearly every refusal is
    # the at-once kind (p99 9.5 ms at 2x; 256 queued gave ~100 ms, the queue timeout itself).
    edge_server_maxconn: int = 384
    edge_queue_per_server: int = 32
    edge_queue_timeout_ms: int = 100
    edge_maxconn: int = 16000
    # How long the balancer keeps an idle client connection open (haproxy's http-keep-alive);
    # the project's own clients drop theirs at half of it (rig/http.py), so none reuses one
    # as it closes.
    edge_keepalive_ms: int = 1000
    # How long the balancer waits for a client's whole request head from its first byte
    # awaited (haproxy's timeout http-request): a silent or slowloris socket is closed by then.
    edge_request_timeout_ms: int = 2000
    # The path prefixes the balancer's public listener forwards; anything else it answers 404
    # NOT_FOUND itself ("/" forwards every route). Operators reach /admin, /vouchers and
    # /metrics through the fleet's operator listener (balancer port + 1, loopback only).
    edge_public_prefixes: tuple[str, ...] = ("/api/flash-sales/",)

    # Every process logs to stderr at this level (kernel/logs.py); its starter picks the file.
    log_level: str = "INFO"
    # text: one "time pid logger level message" line per event; json: one JSON object per
    # line, with the request id and trace id of the order it concerns (docs/operations.md).
    log_format: str = "text"
    # OpenTelemetry tracing (kernel/tracing.py; the `otel` extra): none, otlp (OTLP over HTTP,
    # to OTEL_EXPORTER_OTLP_ENDPOINT, the SDK's own variables) or console (spans on stdout). A
    # span per purchase in the gateway and per batch in the writer, joined through the
    # traceparent carried in the Kafka headers. none: nothing of OpenTelemetry is imported.
    otel_exporter: str = "none"

    # Waiting room (docs/waiting-room.md), a per-sale option. Tickets and admissions
    # are HMAC-signed with this secret, so any gateway verifies them without a lookup (and a
    # restarted one still accepts them). Empty: a key derived from admin_token (a secret every
    # deployment already sets, gateway/auth.py), so turning the room on needs no new secret.
    # The frontier is advanced and broadcast every tick.
    waiting_room_secret: str = ""
    waiting_room_tick_ms: int = 100
    waiting_room_rate_per_s: int = 500  # admissions per second of a sale that names none
    waiting_room_admission_s: int = 120  # how long an admission lets its buyer purchase
    waiting_room_max_retry_after_s: int = 30
    # Joins and polls per buyer (after the client address's bucket): one who honours
    # Retry-After polls at most once a second; a bot that hammers gets 429.
    waiting_room_buyer_rate_per_s: float = 2.0
    waiting_room_buyer_burst: float = 10.0
    # Joins per client address, its own bucket (the shared per-IP one allows 20,000/s): a
    # household or an office behind one NAT joins a few buyers at once, a bot farm on one
    # address joins thousands of buyer ids. Behind the balancer the address is the client's.
    waiting_room_join_address_rate_per_s: float = 1.0
    waiting_room_join_address_burst: float = 20.0

    # Named failpoints armed for tests (comma separated), inert otherwise.
    failpoints: tuple[str, ...] = ()

    @property
    def pg_data_dir(self) -> Path:
        return self.state_dir / "postgres"

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "logs"


def _coerce(raw: str, kind: Any) -> Any:
    if kind is int:
        return int(raw)
    if kind is float:
        return float(raw)
    if kind is Path:
        return Path(raw)
    if kind == tuple[str, ...]:
        return _split(raw)
    return raw


# The ranges, checked once at start (``problems``) with msgspec's constraints. By name: ports,
# durations (``_ms``, ``_seconds``, ``_s``: never negative), and every other number at least 0;
# these must be more than 0 (sizes, counts, rates, the periods of loops).
_PORT = msgspec.Meta(ge=1, le=65535)
_PORT_OR_CHOICE = msgspec.Meta(ge=-1, le=65535)  # 0 picks a free port, -1 serves none
_AT_LEAST_0 = msgspec.Meta(ge=0)
_MORE_THAN_0 = msgspec.Meta(gt=0)
_AT_LEAST_1 = msgspec.Meta(ge=1)  # a bucket's burst: below one token nothing ever passes
_RANGES: dict[str, msgspec.Meta] = {
    "writer_metrics_port": _PORT_OR_CHOICE,
    "reconcile_metrics_port": _PORT_OR_CHOICE,
    **dict.fromkeys(
        (
            "orders_partitions",
            "vouchers_partitions",
            "kafka_brokers",
            "redis_failover_refusals",
            "redis_failover_probe_ms",
            "redis_timeout_ms",
            "kafka_timeout_ms",
            "kafka_health_interval_ms",
            "jwt_cache_size",
            "gateway_workers",
            "inflight_cap",
            "gateway_max_connections",
            "gateway_backlog",
            "gateway_header_timeout_ms",
            "body_timeout_ms",
            "admission_interval_ms",
            "admission_budget_ms",
            "admission_min_in_flight",
            "outbox_relay_interval_ms",
            "outbox_relay_scan_budget",
            "writer_batch_size",
            "expiry_interval_ms",
            "voucher_hold_seconds",
            "scrape_interval_s",
            "health_scrape_interval_s",
            "fleet_resync_ms",
            "edge_server_maxconn",
            "edge_queue_timeout_ms",
            "edge_maxconn",
            "edge_keepalive_ms",
            "edge_request_timeout_ms",
            "waiting_room_tick_ms",
            "waiting_room_rate_per_s",
            "waiting_room_admission_s",
            "waiting_room_max_retry_after_s",
            "user_rate_per_s",
            "ip_rate_per_s",
            "order_rate_per_s",
            "ops_rate_per_s",
            "waiting_room_buyer_rate_per_s",
            "waiting_room_join_address_rate_per_s",
            "auth_failure_rate_per_s",
            "borrow_lease_ms",
        ),
        _MORE_THAN_0,
    ),
    **dict.fromkeys(
        (
            "user_burst",
            "ip_burst",
            "order_burst",
            "ops_burst",
            "waiting_room_buyer_burst",
            "waiting_room_join_address_burst",
            "auth_failure_burst",
        ),
        _AT_LEAST_1,
    ),
}
_LOG_LEVELS = ("CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG")
_LOG_FORMATS = ("text", "json")
OTEL_EXPORTERS = ("none", "otlp", "console")
# Namespaces under the prefix that are not settings: the locustfile's own options.
_NOT_SETTINGS = (PREFIX + "LOAD_",)
_log = logging.getLogger(__name__)


def _range(name: str, value: object) -> msgspec.Meta | None:
    if name in _RANGES:
        return _RANGES[name]
    if name.endswith("_port"):
        return _PORT
    if isinstance(value, int | float) and not isinstance(value, bool):
        return _AT_LEAST_0
    return None


def _env_name(name: str) -> str:
    return PREFIX + name.upper()


def problems(cfg: Settings) -> list[str]:
    """Every range and cross-field rule ``cfg`` breaks, each naming its variable."""
    found = []
    for f in fields(Settings):
        value = getattr(cfg, f.name)
        meta = _range(f.name, value)
        if meta is None:
            continue
        try:
            msgspec.convert(value, Annotated[type(value), meta])
        except msgspec.ValidationError as exc:
            found.append(f"{_env_name(f.name)}={value!r}: {exc}")
    if cfg.redis_wait_replicas and cfg.redis_wait_timeout_ms >= cfg.redis_timeout_ms:
        found.append(
            f"{_env_name('redis_wait_timeout_ms')}={cfg.redis_wait_timeout_ms}: must be less "
            f"than {_env_name('redis_timeout_ms')}={cfg.redis_timeout_ms} (the batch's deadline)"
        )
    if not cfg.jwt_algorithms:
        found.append(f"{_env_name('jwt_algorithms')}: empty; name at least one")
    if cfg.log_level.upper() not in _LOG_LEVELS:
        found.append(f"{_env_name('log_level')}={cfg.log_level!r}: one of {', '.join(_LOG_LEVELS)}")
    if cfg.log_format not in _LOG_FORMATS:
        found.append(f"{_env_name('log_format')}={cfg.log_format!r}: one of text, json")
    if cfg.otel_exporter not in OTEL_EXPORTERS:
        choices = ", ".join(OTEL_EXPORTERS)
        found.append(f"{_env_name('otel_exporter')}={cfg.otel_exporter!r}: one of {choices}")
    return found


def unknown_variables(env: Mapping[str, str]) -> list[str]:
    """One warning per ``FLASHSALE_*`` variable that names no setting, with the closest one."""
    known = [f.name for f in fields(Settings)]
    warnings = []
    for name in sorted(env):
        if not name.startswith(PREFIX) or name.startswith(_NOT_SETTINGS):
            continue
        setting = name.removeprefix(PREFIX).lower()
        if setting in known and name == _env_name(setting):
            continue
        close = difflib.get_close_matches(setting, known, n=1)  # not the prefix all share
        hint = f"; did you mean {_env_name(close[0])}?" if close else ""
        warnings.append(f"{name} is not a setting and is ignored{hint}")
    return warnings


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Build settings from an environment mapping, checked once: a bad value or a broken rule
    fails loudly at start-up (one line naming each variable), an unknown name is a warning."""
    env = os.environ if environ is None else environ
    hints = get_type_hints(Settings)
    values: dict[str, Any] = {}
    for f in fields(Settings):
        raw = env.get(PREFIX + f.name.upper())
        if raw is None:
            continue
        try:
            values[f.name] = _coerce(raw, hints[f.name])
        except ValueError as exc:
            raise SystemExit(f"invalid {PREFIX}{f.name.upper()}={raw!r}: {exc}") from exc
    for warning in unknown_variables(env):
        _log.warning("%s", warning)
    cfg = Settings(**values)
    broken = problems(cfg)
    if broken:
        raise SystemExit("invalid settings: " + "; ".join(broken))
    return cfg


@functools.cache
def settings() -> Settings:
    return load_settings()
