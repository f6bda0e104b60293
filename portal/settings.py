"""The portal's own settings, read once at start-up beside tocsin.config.Settings."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from tocsin.config import env_int

INBOX_POLL_DEFAULT = 30  # seconds between two refreshes of the unread badge
INBOX_POLL_MINIMUM = 5  # seconds; faster polling only loads the database


@dataclass(frozen=True)
class PortalSettings:
    inbox_poll_seconds: int  # seconds between two refreshes of the unread badge
    secure_cookies: bool  # cookies only over HTTPS (true when PORTAL_URL is https://)


def load_portal_settings(portal_url: str, env: Mapping[str, str] | None = None) -> PortalSettings:
    env = os.environ if env is None else env
    poll = env_int(env, "INBOX_POLL_SECONDS", INBOX_POLL_DEFAULT, minimum=INBOX_POLL_MINIMUM)
    return PortalSettings(
        inbox_poll_seconds=poll, secure_cookies=portal_url.startswith("https://")
    )
