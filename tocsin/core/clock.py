"""The application's notion of "now" for decisions made in Python (quiet hours, digest
periods, link expiry). Production reads the system clock; tests pin it to the instant a
scenario happens at, so no test depends on the hour it runs."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

__all__ = ["pinned", "timestamp", "utcnow"]

_pinned: datetime | None = None


def utcnow() -> datetime:
    return _pinned if _pinned is not None else datetime.now(UTC)


@contextmanager
def pinned(instant: datetime) -> Iterator[None]:
    """Within the block, utcnow() answers ``instant`` (for every thread of the process)."""
    global _pinned
    if instant.tzinfo is None:
        raise ValueError("pin an aware instant")
    previous, _pinned = _pinned, instant
    try:
        yield
    finally:
        _pinned = previous


def timestamp() -> float:
    """utcnow() as seconds since the epoch (for TTLs and ages kept in Redis)."""
    return utcnow().timestamp()
