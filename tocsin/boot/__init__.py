"""One bootstrap per process kind: the web process (tocsin/boot/web.py), the worker
(tocsin/boot/worker.py), the clock (tocsin/boot/clock.py) and the CLI (tocsin/boot/cli.py).
Each wires, for its own process, the settings, the connection pool, the broker and the
after-commit effects, with the three functions below; nothing under it starts a process
(db/platform/pool.py refuses to open a pool nobody configured).
"""

from __future__ import annotations

import gc

from db.platform.pool import configure_pool
from tocsin.boot.effects import install_effects
from tocsin.core import runtime
from tocsin.core.settings import Settings
from tocsin.messaging.broker import install_broker
from tocsin.messaging.inbox_events import configure_announcer

__all__ = ["GC_THRESHOLDS", "start", "start_messaging", "tune_collector"]


def start(settings: Settings) -> Settings:
    """Make ``settings`` the process's settings and configure its pool from them (opened on
    first use). Calling it again replaces both (a test pointing the process elsewhere)."""
    runtime.use(settings)
    configure_pool(settings.database_url, max_size=settings.db_pool_max,
                   prepared=settings.database_prepared_statements,
                   schemas_per_connection=settings.db_connection_max_schemas)
    return settings


def start_messaging(settings: Settings) -> None:
    """The broker and the after-commit effects, for a process that enqueues work or
    announces new inbox rows (worker, web, clock, the CLI's scan and sweep). Builds clients
    only; nothing connects until it is used."""
    install_broker(settings)
    configure_announcer(settings)
    install_effects(settings)


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
