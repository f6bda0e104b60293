"""The chat receivers' rate limits, held in Redis for every worker: one slot scheduler per
incoming-webhook URL (tocsin/providers/send_rate.py, the limiter SES sending uses), spaced
at the channel's rate (Slack: one message per second per webhook). The key names a digest
of the URL, never the URL (it is a credential)."""

from __future__ import annotations

import hashlib
import threading

import redis

from tocsin.providers.send_rate import SendRateLimiter

__all__ = ["MAX_SLOT_WAIT_SECONDS", "chat_limiter"]

MAX_SLOT_WAIT_SECONDS = 10.0  # seconds a worker sleeps for a slot; further away: released, retried later
_KEPT = 256  # limiters kept per process (each is a key name and a registered script)

_lock = threading.Lock()
_client: redis.Redis | None = None
_limiters: dict[tuple[str, float], SendRateLimiter] = {}


def chat_limiter(url: str, per_second: float) -> SendRateLimiter:
    global _client
    digest = hashlib.sha256(url.encode()).hexdigest()[:32]
    with _lock:
        found = _limiters.get((digest, per_second))
        if found is not None:
            return found
        from tocsin.core import runtime

        settings = runtime.settings()
        if _client is None:
            _client = redis.Redis.from_url(settings.redis_url)
        if len(_limiters) >= _KEPT:
            _limiters.clear()
        limiter = _limiters[(digest, per_second)] = SendRateLimiter(
            _client, f"{settings.dramatiq_namespace}:chat-slots:{digest}", per_second,
            max_wait=MAX_SLOT_WAIT_SECONDS)
        return limiter
