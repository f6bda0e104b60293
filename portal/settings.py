"""The portal's own settings, read once at start-up beside tocsin.core.settings.Settings."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from litestar import Request

from portal.client_address import IPNetwork, parse_trusted_proxies
from tocsin.core.settings import ConfigError, Settings, env_float, env_int

__all__ = [
    "API_EVENTS_PER_MINUTE_DEFAULT",
    "API_EVENTS_PER_MINUTE_MINIMUM",
    "API_TENANT_EVENTS_PER_MINUTE_DEFAULT",
    "INBOX_POLL_DEFAULT",
    "INBOX_POLL_MINIMUM",
    "INBOX_STREAM_DEFAULT",
    "INBOX_STREAM_MAXIMUM",
    "METRICS_TOKEN_MINIMUM",
    "PortalSettings",
    "app_settings",
    "load_portal_settings",
]

INBOX_POLL_DEFAULT = 30  # seconds between two refreshes of the unread badge
INBOX_POLL_MINIMUM = 5  # seconds; faster polling only loads the database
INBOX_STREAM_DEFAULT = 10 * 60  # seconds an inbox event stream lives before the browser reconnects
# seconds at most: a stream is checked against the session only when it opens, so its
# lifetime bounds how long it outlives a sign-out.
INBOX_STREAM_MAXIMUM = 60 * 60
API_EVENTS_PER_MINUTE_DEFAULT = 60_000  # events per API key per minute (a batch counts each)
API_EVENTS_PER_MINUTE_MINIMUM = 500  # one full batch must fit in a minute
API_TENANT_EVENTS_PER_MINUTE_DEFAULT = 120_000  # events per tenant per minute, all its keys together


@dataclass(frozen=True)
class PortalSettings:
    inbox_poll_seconds: int  # seconds between two refreshes of the unread badge
    secure_cookies: bool  # cookies only over HTTPS (true when PORTAL_URL is https://)
    live_push: bool = True  # the open inbox hears of new notices at once (else it only polls)
    inbox_stream_seconds: int = INBOX_STREAM_DEFAULT  # seconds one event stream lives
    inbox_streams_per_user: int = 5  # open event streams per user per process (tabs)
    inbox_streams_per_process: int = 1000  # open event streams in one web process
    export_connections: int = 2  # database connections kept for ledger exports, per process
    exports_per_tenant: int = 1  # ledger exports one tenant may run at once, per process
    export_seconds: int = 10 * 60  # seconds one ledger export may take from start to end
    export_statement_seconds: int = 60  # seconds one database fetch of an export may take
    password_checks_at_once: int = 4  # argon2 checks running at once per process (64 MiB each)
    password_check_wait_seconds: float = 5.0  # seconds a sign-in waits for a turn, then 503
    trusted_proxies: tuple[IPNetwork, ...] = ()  # peers whose X-Forwarded-For is believed
    metrics_token: str | None = field(default=None, repr=False)  # /metrics wants this bearer token
    metrics_database_seconds: int = 30  # seconds /metrics serves one PostgreSQL reading again
    # Where the ledger exports read (a read replica), when not DATABASE_URL; may hold a password.
    evidence_database_url: str | None = field(default=None, repr=False)
    api_events_per_minute: int = API_EVENTS_PER_MINUTE_DEFAULT  # events one API key may send a minute
    # events one tenant's keys may send a minute together
    api_tenant_events_per_minute: int = API_TENANT_EVENTS_PER_MINUTE_DEFAULT


def _env_switch(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name, "").strip().lower()
    if raw == "":
        return default
    if raw in ("1", "on", "true", "yes"):
        return True
    if raw in ("0", "off", "false", "no"):
        return False
    raise ConfigError(f"{name} must be on or off, got {raw!r}")


def load_portal_settings(portal_url: str, env: Mapping[str, str] | None = None) -> PortalSettings:
    env = os.environ if env is None else env
    poll = env_int(env, "INBOX_POLL_SECONDS", INBOX_POLL_DEFAULT, minimum=INBOX_POLL_MINIMUM)
    return PortalSettings(
        inbox_poll_seconds=poll,
        secure_cookies=portal_url.startswith("https://"),
        live_push=_env_switch(env, "INBOX_LIVE_PUSH", True),
        inbox_stream_seconds=_at_most(
            env_int(env, "INBOX_STREAM_SECONDS", INBOX_STREAM_DEFAULT), INBOX_STREAM_MAXIMUM,
            "INBOX_STREAM_SECONDS",
        ),
        inbox_streams_per_user=env_int(env, "INBOX_STREAMS_PER_USER", 5),
        inbox_streams_per_process=env_int(env, "INBOX_STREAMS_PER_PROCESS", 1000),
        export_connections=env_int(env, "EXPORT_CONNECTIONS", 2),
        exports_per_tenant=env_int(env, "EXPORTS_PER_TENANT", 1),
        export_seconds=env_int(env, "EXPORT_SECONDS", 10 * 60),
        export_statement_seconds=env_int(env, "EXPORT_STATEMENT_SECONDS", 60),
        password_checks_at_once=env_int(env, "PASSWORD_CHECKS_AT_ONCE", 4),
        password_check_wait_seconds=env_float(env, "PASSWORD_CHECK_WAIT_SECONDS", 5.0),
        trusted_proxies=parse_trusted_proxies(env.get("TRUSTED_PROXIES", "")),
        metrics_token=_metrics_token(env),
        metrics_database_seconds=env_int(env, "METRICS_DATABASE_SECONDS", 30),
        evidence_database_url=_evidence_database_url(env),
        api_events_per_minute=env_int(env, "API_EVENTS_PER_MINUTE", API_EVENTS_PER_MINUTE_DEFAULT,
                                      minimum=API_EVENTS_PER_MINUTE_MINIMUM),
        api_tenant_events_per_minute=env_int(env, "API_TENANT_EVENTS_PER_MINUTE",
                                             API_TENANT_EVENTS_PER_MINUTE_DEFAULT,
                                             minimum=API_EVENTS_PER_MINUTE_MINIMUM),
    )


def _evidence_database_url(env: Mapping[str, str]) -> str | None:
    """EVIDENCE_DATABASE_URL: a PostgreSQL (typically a read replica of DATABASE_URL) for
    the ledger exports, which only read; unset, they read from DATABASE_URL."""
    url = env.get("EVIDENCE_DATABASE_URL", "").strip()
    if not url:
        return None
    if not url.startswith(("postgresql://", "postgres://")):
        raise ConfigError("EVIDENCE_DATABASE_URL must be a postgresql:// URL")
    return url


def app_settings(request: Request[Any, Any, Any]) -> Settings:
    """The process's settings, as the app factory was handed them (never read again here)."""
    settings = request.app.state.settings
    assert isinstance(settings, Settings)
    return settings


def _at_most(value: int, maximum: int, name: str) -> int:
    if value > maximum:
        raise ConfigError(f"{name} must be at most {maximum}, got {value}")
    return value


METRICS_TOKEN_MINIMUM = 16  # characters: a bearer token anyone can try against /metrics


def _metrics_token(env: Mapping[str, str]) -> str | None:
    token = env.get("METRICS_TOKEN", "").strip()
    if not token:
        return None
    if len(token) < METRICS_TOKEN_MINIMUM:
        raise ConfigError(f"METRICS_TOKEN must be at least {METRICS_TOKEN_MINIMUM} characters")
    return token
