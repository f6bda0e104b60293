"""One process's settings: read once, at start-up, then handed to what needs them.

Each entry point (the web factory, the worker, the clock, the CLI) calls `start` with the
settings it read; code that runs later asks `settings()` for that same object instead of
reading the environment again. A process that never called `start` (a test helper, a
script) gets the environment read once, on first use.
"""

from __future__ import annotations

import threading

from tocsin.config import Settings, load_settings

_lock = threading.Lock()
_settings: Settings | None = None


def start(settings: Settings) -> Settings:
    """Make ``settings`` this process's settings. Calling it again replaces them (a test
    pointing the process elsewhere); the pool is reopened lazily from the new ones."""
    global _settings
    from db.pool import configure_pool

    with _lock:
        _settings = settings
    configure_pool(settings.database_url, max_size=settings.db_pool_max)
    return settings


def settings() -> Settings:
    global _settings
    current = _settings
    if current is not None:
        return current
    with _lock:
        if _settings is None:
            _settings = load_settings()
        return _settings


def start_messaging(settings: Settings) -> None:
    """The broker and the after-commit wake-ups, for a process that enqueues work or
    announces new inbox rows (worker, web, clock, CLI scan). Builds clients only; nothing
    connects until it is used."""
    from actors.broker import install_broker
    from actors.dispatch import send_committed_emails
    from actors.prepare import send_committed_claims
    from actors.relay import wake_relay_after_commit
    from db.tenancy import on_commit
    from tocsin.inbox_events import announce_committed_notifications, configure_announcer

    install_broker(settings)
    configure_announcer(settings)
    on_commit(send_committed_emails)
    on_commit(announce_committed_notifications)
    on_commit(wake_relay_after_commit)
    on_commit(send_committed_claims)
