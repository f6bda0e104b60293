"""One process's settings: read once, at start-up, then handed to what needs them.

Each entry point (the web factory, the worker, the clock, the CLI) calls `start` with the
settings it read; code that runs later asks `settings()` for that same object instead of
reading the environment again. A process that never called `start` (a test helper, a
script) gets the environment read once, on first use.
"""

from __future__ import annotations

import gc
import threading

from tocsin.core.settings import Settings, load_settings

_lock = threading.Lock()
_settings: Settings | None = None


def start(settings: Settings) -> Settings:
    """Make ``settings`` this process's settings. Calling it again replaces them (a test
    pointing the process elsewhere); the pool is reopened lazily from the new ones."""
    global _settings
    from db.platform.pool import configure_pool

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
    from actors.prepare import send_committed_claims
    from actors.relay import wake_relay_after_commit
    from db.platform.tenancy import on_commit
    from tocsin.messaging.broker import install_broker
    from tocsin.messaging.dispatch import send_committed_emails
    from tocsin.messaging.inbox_events import announce_committed_notifications, configure_announcer

    install_broker(settings)
    configure_announcer(settings)
    on_commit(send_committed_emails)
    on_commit(announce_committed_notifications)
    on_commit(wake_relay_after_commit)
    on_commit(send_committed_claims)


# Allocations between young-generation collections, and how many of each generation's
# collections trigger the next one's. Python's defaults (700, 10, 10) are sized for small
# scripts: a rule evaluation makes a few hundred short-lived objects per event (traces,
# outcomes, fact dicts), so with the defaults the collector ran every few events and its
# older-generation passes walked every long-lived object of the process (parsed rules,
# pools, modules): a fifth of an evaluation's time (bench/rules_loading.py).
GC_THRESHOLDS = (10_000, 20, 20)


def tune_collector() -> None:
    """For a long-running process (worker, web, clock), once its modules are imported:
    what exists now is moved out of the collector's sight (gc.freeze: it lives as long as
    the process) and young objects are collected in larger steps. Reference counting still
    frees every object that is not in a cycle the moment it is unused; only the search for
    cycles runs less often."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
