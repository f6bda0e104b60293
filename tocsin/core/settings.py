"""Settings, read once from the environment into a typed object.

A bad value fails loudly at start-up with the variable's name; secrets never appear in
the repr, so a settings object can be logged.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from domain.delivery.preparation_queues import DEFAULT_PRODUCT_QUEUES, parse_product_queues
from domain.delivery.sns_messages import valid_test_origin, valid_topic_arn
from domain.errors import InvalidInput

__all__ = [
    "DEV_SESSION_SECRET",
    "SECRET_FIELDS",
    "TESTING_MARKER",
    "ConfigError",
    "PasswordHashCost",
    "Secrets",
    "Settings",
    "env_float",
    "env_int",
    "load_secrets",
    "load_settings",
    "redact_password",
    "worker_metrics_address",
]


class ConfigError(Exception):
    """A setting is missing or malformed."""


SECRET_FIELDS = frozenset({"aws_secret_access_key", "session_secret", "previous_session_secrets",
                           "smtp_url"})
# Published in the source: tocsin.core.keys refuses it outside the embedded services.
DEV_SESSION_SECRET = "dev-only-session-secret-change-me"
# Set only by the test suite: the one place a setting that weakens security may be chosen.
TESTING_MARKER = "TOCSIN_TESTING"


class PasswordHashCost(StrEnum):
    """The work of one argon2id password hash (db/people/users.py)."""

    STANDARD = "standard"  # RFC 9106's low-memory profile: 64 MiB, 3 passes, 4 lanes
    LOW = "low"  # 1 MiB, 1 pass, 1 lane: a stolen hash is cheap to crack; the test suite only


@dataclass(frozen=True)
class Settings:
    database_url: str
    redis_url: str
    ses_endpoint_url: str | None
    aws_region: str
    aws_access_key_id: str | None
    aws_secret_access_key: str | None = field(repr=False)
    mail_from: str
    portal_url: str
    web_host: str
    web_port: int
    session_secret: str = field(repr=False)
    dramatiq_namespace: str
    scan_interval_seconds: int  # seconds between two clock ticks
    delivery_lease_seconds: int  # seconds a worker owns a delivery before it may be taken over
    home: Path  # where embedded services keep their data
    db_pool_max: int
    ses_max_send_rate: float = 14.0  # emails per second, across every worker
    # The SES configuration set every email is sent with (its event destination publishes the
    # Send, Delivery, Bounce and Complaint events to /hooks/ses); unset: the identity's default.
    ses_configuration_set: str | None = None
    # Seconds one SES call may wait for its answer before it counts as unknown.
    ses_read_timeout_seconds: float = 20.0
    sweep_interval_seconds: int = 60  # seconds between two sweeps
    reconcile_window_seconds: int = 15 * 60  # wait for a provider event before resending
    stuck_grace_seconds: int = 30 * 60  # a claim notifying nobody this long is stuck
    ops_topic_arn: str | None = None  # SNS topic for ops alerts; unset: alerts only logged
    # amqp(s):// selects the RabbitMQ broker; unset: the Redis broker on redis_url.
    broker_url: str | None = None
    # The SNS topics whose messages the SES hook accepts; empty: every message is refused.
    sns_allowed_topic_arns: frozenset[str] = frozenset()
    # Tests only: a loopback origin trusted in place of Amazon's SNS hosts (see domain.delivery.sns_messages).
    sns_test_cert_origin: str | None = None
    # Secrets whose keys still verify but never sign (key rotation), newest first.
    previous_session_secrets: tuple[str, ...] = field(default=(), repr=False)
    # TOCSIN_EMBEDDED=1: set by `tocsin up` only when it started PostgreSQL itself.
    embedded: bool = False
    # Session lifetimes in seconds: idle (slides with each request) and absolute (never slides).
    session_idle_seconds: int = 8 * 60 * 60
    session_absolute_seconds: int = 24 * 60 * 60
    # The worker's Prometheus endpoint (tocsin/monitoring/metrics.py), served by `tocsin worker`; unset: none.
    metrics_worker_port: int | None = None
    metrics_worker_host: str = "127.0.0.1"  # unauthenticated: keep it off public interfaces
    # Attempts at preparing one rule notice before it is left on the Needs-attention page.
    prepare_max_attempts: int = 5
    # Products whose rule notices have a preparation queue of their own (prepare_<code>);
    # the others share prepare_other.
    product_queues: tuple[str, ...] = DEFAULT_PRODUCT_QUEUES
    # The events relay (actors/relay.py): the polling fallback's interval, whether a commit
    # wakes the relay at once, events per claimed batch, how long a batch is owned, how many
    # claims an event gets before it is failed, and the per-tenant circuit breaker.
    events_poll_seconds: int = 5
    events_wakeup: bool = True
    relay_batch: int = 100
    relay_lease_seconds: int = 60
    relay_max_attempts: int = 10
    relay_breaker_failures: int = 3
    relay_breaker_reset_seconds: int = 30
    # Seconds before the clock listens again for hosts' commits after its connection failed
    # (db/events/ready_events.py); meanwhile the polling fallback finds their events.
    events_listen_retry_seconds: float = 2.0
    # Dramatiq's backoff for a preparation message that failed (actors/prepare.py), in
    # seconds: the first retry waits about the minimum, each next one twice as long, none
    # longer than the maximum.
    prepare_backoff_min_seconds: float = 1.0
    prepare_backoff_max_seconds: float = 30.0
    # Seconds a tenant's product takes the queue (with its backoff) after a preparation
    # failed in the relay's own worker, so a poison product costs one failure per pause.
    prepare_inline_pause_seconds: float = 60.0
    password_hash_cost: PasswordHashCost = PasswordHashCost.STANDARD
    # The evidence chain (actors/evidence.py): seconds between two seals of written facts into
    # each tenant's chain, and between two verifications (with a signed checkpoint) of it.
    evidence_seal_seconds: int = 2
    evidence_verify_seconds: int = 60 * 60
    # A folder each signed checkpoint is also written to (a copy outside the database); unset: none.
    evidence_checkpoint_dir: Path | None = None
    # Outbound webhooks (actors/webhooks.py): whether an endpoint may resolve to a loopback,
    # private or link-local address (the SSRF guard refuses them unless set), seconds one
    # call may take in all, and the first retry's ceiling in seconds (each next one triples).
    webhook_allow_private: bool = False
    webhook_timeout_seconds: float = 10.0
    webhook_retry_base_seconds: float = 10.0
    # Hours after which a tick visits a tenant whatever the next-work summary says (the
    # full pass that checks the summary: db/platform/next_work.py).
    full_scan_hours: float = 24.0
    # Email failover (actors/email.py): the SMTP server an email goes through when SES fails in
    # a class the tenant chose (smtp:// with STARTTLS when offered, or smtps://); unset: none.
    smtp_url: str | None = field(default=None, repr=False)
    # SMS through SNS (actors/sms.py): each tenant's monthly spend cap and the price of one
    # segment, in the same currency (USD for SNS); a text that would pass the cap is refused.
    sms_monthly_spend_cap: float = 50.0
    sms_price_per_segment: float = 0.01
    # Where the clock LISTENs for hosts' commits: a session of its own, which a pooler in
    # transaction mode (PgBouncer) cannot give. None: DATABASE_URL.
    database_listen_url: str | None = field(default=None, repr=False)
    # Whether pooled connections prepare their statements; off behind PgBouncer < 1.21.
    database_prepared_statements: bool = True
    # Tenant schemas a pooled connection works in before it is retired, bounding the memory
    # its backend keeps per schema (db/platform/pool.py SCHEMAS_PER_CONNECTION); 0: never.
    db_connection_max_schemas: int = 500

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{f.name}={'***' if f.name in SECRET_FIELDS else _shown(f.name, getattr(self, f.name))!r}"
            for f in fields(self)
        )
        return f"Settings({shown})"


def _shown(name: str, value: object) -> object:
    # A broker URL carries RabbitMQ's password; the rest of it helps whoever reads a log.
    return redact_password(value) if name == "broker_url" and isinstance(value, str) else value


def env_int(env: Mapping[str, str], name: str, default: int, minimum: int = 1) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a whole number, got {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"{name} must be at least {minimum}, got {value}")
    return value


def env_float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number, got {raw!r}") from None
    if not value > 0:
        raise ConfigError(f"{name} must be greater than 0, got {raw}")
    return value


def _backoff(env: Mapping[str, str]) -> tuple[float, float]:
    low = env_float(env, "PREPARE_BACKOFF_MIN_SECONDS", 1.0)
    high = env_float(env, "PREPARE_BACKOFF_MAX_SECONDS", 30.0)
    if high < low:
        raise ConfigError(f"PREPARE_BACKOFF_MAX_SECONDS ({high:g}) must be at least "
                          f"PREPARE_BACKOFF_MIN_SECONDS ({low:g})")
    return low, high


def _password_hash_cost(env: Mapping[str, str]) -> PasswordHashCost:
    """Nothing in the settings tells a test run from a deployment (the suite runs the
    product under the production policy), so the low cost needs the suite's own marker."""
    raw = env.get("PASSWORD_HASH_COST", "").strip().lower() or PasswordHashCost.STANDARD.value
    try:
        cost = PasswordHashCost(raw)
    except ValueError:
        raise ConfigError(f"PASSWORD_HASH_COST must be standard or low, got {raw!r}") from None
    if cost is PasswordHashCost.LOW and env.get(TESTING_MARKER) != "1":
        raise ConfigError(
            "PASSWORD_HASH_COST=low makes stolen password hashes cheap to crack: it is for the "
            f"test suite only ({TESTING_MARKER}=1); unset it to use the standard cost"
        )
    return cost


def _topic_arns(env: Mapping[str, str], name: str) -> frozenset[str]:
    arns = [a.strip() for a in env.get(name, "").split(",") if a.strip()]
    try:
        return frozenset(valid_topic_arn(a) for a in arns)
    except InvalidInput as error:
        raise ConfigError(f"{name}: {error}") from None


def _smtp_url(env: Mapping[str, str]) -> str | None:
    value = (env.get("SMTP_URL") or "").strip() or None
    if value is not None and not value.startswith(("smtp://", "smtps://")):
        raise ConfigError("SMTP_URL must look like smtp://user:password@host:587 or smtps://host:465")
    return value


def _test_origin(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name) or None
    try:
        return None if value is None else valid_test_origin(value)
    except InvalidInput as error:
        raise ConfigError(str(error)) from None


def _optional_port(env: Mapping[str, str], name: str) -> int | None:
    if not env.get(name):
        return None
    port = env_int(env, name, 0)
    if port > 65_535:
        raise ConfigError(f"{name} must be a TCP port (1-65535), got {port}")
    return port


def worker_metrics_address(env: Mapping[str, str]) -> tuple[str, int] | None:
    """(host, port) of the worker's Prometheus endpoint, None when METRICS_WORKER_PORT is
    unset. `tocsin worker`'s supervisor reads only this: the other settings are judged by the
    Dramatiq processes it starts (and restarts)."""
    port = _optional_port(env, "METRICS_WORKER_PORT")
    return None if port is None else (env.get("METRICS_WORKER_HOST") or "127.0.0.1", port)


def _product_queues(env: Mapping[str, str]) -> tuple[str, ...]:
    raw = env.get("PRODUCT_QUEUES")
    if raw is None:
        return DEFAULT_PRODUCT_QUEUES
    try:
        return parse_product_queues(raw)
    except InvalidInput as error:
        raise ConfigError(str(error)) from None


def _broker_url(env: Mapping[str, str]) -> str | None:
    """RabbitMQ's URL, or None for the Redis broker on REDIS_URL (the embedded default)."""
    value = env.get("BROKER_URL") or None
    if value is None:
        return None
    parts = urlsplit(value)
    if parts.scheme not in ("amqp", "amqps") or not parts.hostname:
        raise ConfigError(
            "BROKER_URL must be an amqp:// or amqps:// URL with a host (RabbitMQ), "
            f"got {redact_password(value)!r}; leave it unset to use the Redis broker on REDIS_URL"
        )
    try:
        parts.port  # noqa: B018  (raises on a malformed port)
    except ValueError:
        raise ConfigError(f"BROKER_URL has a malformed port: {redact_password(value)!r}") from None
    return value


def redact_password(url: str) -> str:
    """The URL as it may be shown: any password replaced by ***."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


def _required(env: Mapping[str, str], name: str) -> str:
    value = env.get(name, "")
    if not value:
        raise ConfigError(
            f"{name} is not set; run through `tocsin up` (embedded services) or set it"
        )
    return value


@dataclass(frozen=True)
class Secrets:
    """The signing secrets alone: what a process that must refuse a weak secret reads when
    it needs nothing else (the worker's supervisor)."""

    session_secret: str = field(repr=False)
    previous_session_secrets: tuple[str, ...] = field(repr=False)
    embedded: bool  # run by `tocsin up` on the PostgreSQL it started itself


def load_secrets(env: Mapping[str, str] | None = None) -> Secrets:
    env = os.environ if env is None else env
    return Secrets(
        session_secret=env.get("SESSION_SECRET") or DEV_SESSION_SECRET,
        previous_session_secrets=tuple(
            s.strip() for s in env.get("SESSION_SECRET_PREVIOUS", "").split(",") if s.strip()
        ),
        embedded=env.get("TOCSIN_EMBEDDED", "") == "1",
    )


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    env = os.environ if env is None else env
    secrets = load_secrets(env)
    port = env_int(env, "PORT", 8000)
    host = env.get("WEB_HOST", "127.0.0.1")
    database_url = _required(env, "DATABASE_URL")
    redis_url = _required(env, "REDIS_URL")
    if not database_url.startswith(("postgresql://", "postgres://")):
        raise ConfigError("DATABASE_URL must be a postgresql:// URL")
    if not redis_url.startswith(("redis://", "rediss://", "unix://")):
        raise ConfigError("REDIS_URL must be a redis:// URL")
    backoff = _backoff(env)
    return Settings(
        database_url=database_url,
        redis_url=redis_url,
        ses_endpoint_url=env.get("SES_ENDPOINT_URL") or None,
        aws_region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "eu-west-1",
        aws_access_key_id=env.get("AWS_ACCESS_KEY_ID") or None,
        aws_secret_access_key=env.get("AWS_SECRET_ACCESS_KEY") or None,
        mail_from=env.get("MAIL_FROM", "Tocsin <notifications@tocsin.example>"),
        portal_url=env.get("PORTAL_URL", f"http://{host}:{port}").rstrip("/"),
        web_host=host,
        web_port=port,
        session_secret=secrets.session_secret,
        dramatiq_namespace=env.get("DRAMATIQ_NAMESPACE", "tocsin"),
        scan_interval_seconds=env_int(env, "SCAN_INTERVAL_SECONDS", 15 * 60),
        delivery_lease_seconds=env_int(env, "DELIVERY_LEASE_SECONDS", 5 * 60),
        home=Path(env.get("TOCSIN_HOME", ".tocsin")).resolve(),
        db_pool_max=env_int(env, "DB_POOL_MAX", 10),
        ses_max_send_rate=env_float(env, "SES_MAX_SEND_RATE", 14.0),
        ses_configuration_set=env.get("SES_CONFIGURATION_SET") or None,
        ses_read_timeout_seconds=env_float(env, "SES_READ_TIMEOUT_SECONDS", 20.0),
        sweep_interval_seconds=env_int(env, "SWEEP_INTERVAL_SECONDS", 60),
        reconcile_window_seconds=env_int(env, "RECONCILE_WINDOW_SECONDS", 15 * 60, minimum=0),
        stuck_grace_seconds=env_int(env, "STUCK_GRACE_SECONDS", 30 * 60, minimum=0),
        ops_topic_arn=env.get("OPS_TOPIC_ARN") or None,
        broker_url=_broker_url(env),
        sns_allowed_topic_arns=_topic_arns(env, "SNS_ALLOWED_TOPIC_ARNS"),
        sns_test_cert_origin=_test_origin(env, "SNS_TEST_CERT_ORIGIN"),
        previous_session_secrets=secrets.previous_session_secrets,
        embedded=secrets.embedded,
        session_idle_seconds=env_int(env, "SESSION_IDLE_SECONDS", 8 * 60 * 60, minimum=60),
        session_absolute_seconds=env_int(env, "SESSION_ABSOLUTE_SECONDS", 24 * 60 * 60, minimum=60),
        metrics_worker_port=_optional_port(env, "METRICS_WORKER_PORT"),
        metrics_worker_host=env.get("METRICS_WORKER_HOST") or "127.0.0.1",
        prepare_max_attempts=env_int(env, "PREPARE_MAX_ATTEMPTS", 5),
        product_queues=_product_queues(env),
        events_poll_seconds=env_int(env, "EVENTS_POLL_SECONDS", 5),
        events_wakeup=env.get("EVENTS_WAKEUP", "1").strip().lower() not in ("0", "false", "no", "off"),
        relay_batch=env_int(env, "RELAY_BATCH", 100),
        relay_lease_seconds=env_int(env, "RELAY_LEASE_SECONDS", 60),
        relay_max_attempts=env_int(env, "RELAY_MAX_ATTEMPTS", 10),
        relay_breaker_failures=env_int(env, "RELAY_BREAKER_FAILURES", 3),
        relay_breaker_reset_seconds=env_int(env, "RELAY_BREAKER_RESET_SECONDS", 30),
        events_listen_retry_seconds=env_float(env, "EVENTS_LISTEN_RETRY_SECONDS", 2.0),
        prepare_backoff_min_seconds=backoff[0],
        prepare_backoff_max_seconds=backoff[1],
        prepare_inline_pause_seconds=env_float(env, "PREPARE_INLINE_PAUSE_SECONDS", 60.0),
        password_hash_cost=_password_hash_cost(env),
        evidence_seal_seconds=env_int(env, "EVIDENCE_SEAL_SECONDS", 2),
        evidence_verify_seconds=env_int(env, "EVIDENCE_VERIFY_SECONDS", 60 * 60),
        evidence_checkpoint_dir=Path(env["EVIDENCE_CHECKPOINT_DIR"]).resolve()
        if env.get("EVIDENCE_CHECKPOINT_DIR") else None,
        webhook_allow_private=env.get("WEBHOOK_ALLOW_PRIVATE", "").strip().lower()
        in ("1", "true", "yes", "on"),
        webhook_timeout_seconds=env_float(env, "WEBHOOK_TIMEOUT_SECONDS", 10.0),
        webhook_retry_base_seconds=env_float(env, "WEBHOOK_RETRY_BASE_SECONDS", 10.0),
        smtp_url=_smtp_url(env),
        sms_monthly_spend_cap=env_float(env, "SMS_MONTHLY_SPEND_CAP", 50.0),
        sms_price_per_segment=env_float(env, "SMS_PRICE_PER_SEGMENT", 0.01),
        full_scan_hours=env_float(env, "FULL_SCAN_HOURS", 24.0),
        database_listen_url=_database_listen_url(env),
        database_prepared_statements=_on_off(env, "DATABASE_PREPARED_STATEMENTS", True),
        db_connection_max_schemas=env_int(env, "DB_CONNECTION_MAX_SCHEMAS", 500, minimum=0),
    )


def _database_listen_url(env: Mapping[str, str]) -> str | None:
    url = env.get("DATABASE_LISTEN_URL") or None
    if url is not None and not url.startswith(("postgresql://", "postgres://")):
        raise ConfigError("DATABASE_LISTEN_URL must be a postgresql:// URL")
    return url


def _on_off(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = (env.get(name) or "").strip().lower()
    if not raw:
        return default
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name} must be 1 or 0 (on or off), got {raw!r}")
