"""One send rate for every worker: a slot scheduler in Redis (GCRA).

Each caller reserves the next free slot, spaced 1/rate apart on Redis' own clock, and
sleeps until it. Slots are handed out atomically by a Lua script, so however many
processes and threads send, the provider sees at most ``rate`` requests per second,
evenly spaced. A flushed Redis only forgets the reservations: the rate holds again from
the next call.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

import redis

__all__ = ["RateLimited", "SendRateLimiter", "Slot", "Slots", "get_limiter", "set_limiter"]

_RESERVE = (Path(__file__).parent / "send_rate_reserve.lua").read_text()  # Lua, run in Redis


class RateLimited(Exception):
    """The next slot is further away than the caller may wait."""


@dataclass(frozen=True)
class Slot:
    at_us: int  # the reserved instant on Redis' clock, in microseconds
    waited: float  # seconds slept to reach it


@dataclass(frozen=True)
class Slots:
    """Consecutive slots reserved in one round trip, the first already reached."""

    at_us: list[int]  # each reserved instant on Redis' clock, in microseconds
    waited: float  # seconds slept to reach the first
    first_at: float  # time.monotonic() when the first was reached
    spacing: float  # seconds between two slots

    def seconds_until(self, n: int) -> float:
        """How long until slot ``n`` (0 or less once it is reached)."""
        return self.first_at + n * self.spacing - time.monotonic()

    def wait_for(self, n: int) -> None:
        """Sleep until slot ``n`` (0 is the first, reached already)."""
        delay = self.seconds_until(n)
        if delay > 0:
            time.sleep(delay)


class SendRateLimiter:
    def __init__(self, client: redis.Redis, key: str, per_second: float, max_wait: float = 60.0):
        if per_second <= 0:
            raise ValueError("the send rate must be positive")
        self._client = client
        self._key = key
        self._spacing_us = max(1, round(1_000_000 / per_second))
        self._max_wait_us = round(max_wait * 1_000_000)
        self._script = client.register_script(_RESERVE)
        self.per_second = per_second

    def acquire(self) -> Slot:
        """Reserve the next slot and sleep until it; RateLimited if it is too far away."""
        slots = self.reserve(1)
        return Slot(slots.at_us[0], slots.waited)

    def reserve(self, count: int) -> Slots:
        """Reserve the next ``count`` consecutive slots in one round trip and sleep until
        the first; RateLimited if the first is too far away. The caller sleeps until each
        of the others with ``Slots.wait_for``."""
        if count < 1:
            raise ValueError(f"reserve at least one slot, not {count}")
        wait_us, slot_us = (int(v) for v in self._script(
            keys=[self._key], args=[self._spacing_us * count, self._max_wait_us]))
        if wait_us < 0:
            raise RateLimited(f"no send slot within {self._max_wait_us / 1e6:.0f}s")
        if wait_us:
            time.sleep(wait_us / 1_000_000)
        return Slots([slot_us + n * self._spacing_us for n in range(count)], wait_us / 1_000_000,
                     time.monotonic(), self._spacing_us / 1_000_000)


_lock = threading.Lock()
_limiter: SendRateLimiter | None = None


def get_limiter() -> SendRateLimiter:
    global _limiter
    with _lock:
        if _limiter is None:
            from tocsin.core import runtime

            settings = runtime.settings()
            _limiter = SendRateLimiter(
                redis.Redis.from_url(settings.redis_url),
                f"{settings.dramatiq_namespace}:ses-send-slots",
                settings.ses_max_send_rate,
            )
        return _limiter


def set_limiter(limiter: SendRateLimiter | None) -> None:
    global _limiter
    with _lock:
        _limiter = limiter
