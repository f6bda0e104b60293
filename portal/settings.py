"""The portal's own settings, read once at start-up beside tocsin.config.Settings."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from litestar import Request

from tocsin.config import ConfigError, Settings, env_int

INBOX_POLL_DEFAULT = 30  # seconds between two refreshes of the unread badge
INBOX_POLL_MINIMUM = 5  # seconds; faster polling only loads the database
INBOX_STREAM_DEFAULT = 10 * 60  # seconds an inbox event stream lives before the browser reconnects


@dataclass(frozen=True)
class PortalSettings:
    inbox_poll_seconds: int  # seconds between two refreshes of the unread badge
    secure_cookies: bool  # cookies only over HTTPS (true when PORTAL_URL is https://)
    live_push: bool = True  # the open inbox hears of new notices at once (else it only polls)
    inbox_stream_seconds: int = INBOX_STREAM_DEFAULT  # seconds one event stream lives


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
        inbox_stream_seconds=env_int(env, "INBOX_STREAM_SECONDS", INBOX_STREAM_DEFAULT),
    )


def app_settings(request: Request[Any, Any, Any]) -> Settings:
    """The process's settings, as the app factory was handed them (never read again here)."""
    settings = request.app.state.settings
    assert isinstance(settings, Settings)
    return settings
