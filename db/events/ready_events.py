"""The wake-up for events a host commits on the same PostgreSQL: a notification on one
channel, sent inside the host's transaction, so PostgreSQL delivers it only if (and only
when) that transaction commits, and never names an event that rolled back.

A wake-up only makes the relay look sooner: a notification lost (the listener was
reconnecting, the clock was down) leaves the event to the polling fallback, which finds
every pending row by its status.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import psycopg

__all__ = ["READY_CHANNEL", "announce_ready", "ready_tenants"]

log = logging.getLogger("tocsin.ready_events")

READY_CHANNEL = "tocsin_events_ready"  # the payload is the tenant's slug


def announce_ready(cur: psycopg.Cursor[Any], slug: str) -> None:
    """Inside the host's open transaction: wake the relay for ``slug`` once it commits.
    PostgreSQL folds the same notification sent twice in one transaction into one."""
    cur.execute("SELECT pg_notify(%s, %s)", [READY_CHANNEL, slug])


def ready_tenants(database_url: str, on_ready: Callable[[str], None], stop: threading.Event,
                  *, wait_seconds: float = 1.0, retry_seconds: float = 2.0,
                  on_listening: Callable[[], None] | None = None) -> None:
    """Listen on READY_CHANNEL until ``stop`` is set, calling ``on_ready(slug)`` for every
    tenant a committed transaction announced. A lost connection is opened again after
    ``retry_seconds`` (what committed meanwhile is the polling fallback's)."""
    while not stop.is_set():
        try:
            with psycopg.connect(database_url, autocommit=True,
                                 application_name="tocsin-ready-events") as conn:
                conn.execute(f"LISTEN {READY_CHANNEL}")
                if on_listening is not None:
                    on_listening()
                while not stop.is_set():
                    for note in conn.notifies(timeout=wait_seconds, stop_after=100):
                        try:
                            on_ready(note.payload)
                        except Exception:  # Redis down: the polling fallback finds the event
                            log.exception("could not wake the relay for tenant=%s", note.payload)
        except psycopg.Error as error:  # any failure of the connection: the thread stays
            log.warning("listening for committed events failed (%s); again in %ss", error,
                        retry_seconds)
            stop.wait(retry_seconds)
