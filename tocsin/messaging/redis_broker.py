"""Dramatiq's Redis broker with consumers that wait for work instead of polling for it.

Dramatiq's Redis consumer has no blocking fetch: when its queue is empty it sleeps a
growing back-off (5, 10, 20 ... ms up to the worker timeout) and asks again with a Lua
script. With a short timeout (low latency) every consumer of every queue asks many times a
second, and after each message the back-off starts again at 5 ms: measured under 100
events/s (bench/events.py), those fetches were about 800 Lua calls a second and 3-5 ms of
worker CPU per event, more than the evaluation itself; with a long timeout, a message to
an idle queue waited up to that long.

Here an idle consumer (its fetch found nothing and it has room for more) waits on the
queue's own Redis list with ``BLMOVE key key LEFT LEFT``: it blocks until the list holds
a message id, then moves the head of the list to the head of the same list, which leaves
the list exactly as it was, and the consumer fetches as Dramatiq always does. So a message
is fetched as soon as it is enqueued, an idle consumer costs one blocked connection and no
CPU, and nothing about how messages are stored, fetched, acknowledged or recovered changes.
The wait ends after IDLE_WAIT_MS at the latest, so heartbeats (sent with each fetch, 30 s
allowed), shutdown and the release of delayed messages keep their pace. A server without
BLMOVE (Redis before 6.2) gets Dramatiq's own sleep. Waiting is an optimisation only:
correctness never depends on the broker (tocsin/messaging/broker.py).
"""

from __future__ import annotations

import time
from typing import Any

import redis
from dramatiq.broker import Consumer, MessageProxy
from dramatiq.brokers.redis import RedisBroker, _RedisConsumer
from dramatiq.common import compute_backoff
from dramatiq.errors import ConnectionClosed
from dramatiq.message import Message

__all__ = ["IDLE_WAIT_MS", "WakingRedisBroker"]

IDLE_WAIT_MS = 1_000  # longest an idle consumer blocks before fetching (and heartbeating) again


class WakingRedisBroker(RedisBroker):
    """RedisBroker whose consumers block on their queue's list while idle."""

    blocking_wait = True  # False once the server refused BLMOVE: Dramatiq's sleep instead

    @property
    def consumer_class(self) -> type[Consumer]:
        return _WakingConsumer


class _WakingConsumer(_RedisConsumer):
    """_RedisConsumer.__next__ (dramatiq 2.x) with the idle sleep replaced by a wait."""

    broker: WakingRedisBroker

    def __next__(self) -> MessageProxy | None:
        try:
            while True:
                if self.message_cache:
                    data = self.message_cache.pop(0)
                    if data is None:  # Dramatiq's own guard (its issue #266)
                        continue
                    self.misses = 0
                    message = Message.decode(data)
                    self.queued_message_ids.add(message.message_id)
                    return MessageProxy(message)
                if self.outstanding_message_count < self.prefetch:
                    self.message_cache = self.broker.do_fetch(
                        self.queue_name, self.prefetch - self.outstanding_message_count)
                    if self.message_cache:
                        continue
                    if self.broker.blocking_wait:
                        self._wait_for_a_message()
                        return None
                # Every prefetched message is still being worked on (or no BLMOVE): Dramatiq's
                # back-off, as before; a worker thread's acknowledgement frees room.
                self.misses, backoff_ms = compute_backoff(self.misses, max_backoff=self.timeout)
                time.sleep(backoff_ms / 1000)
                return None
        except redis.ConnectionError as e:
            raise ConnectionClosed(e) from None  # type: ignore[no-untyped-call]

    def _wait_for_a_message(self) -> None:
        key = f"{self.broker.namespace}:{self.queue_name}"
        client: Any = self.broker.client
        try:
            client.blmove(key, key, IDLE_WAIT_MS / 1000, "LEFT", "LEFT")
        except redis.ResponseError:  # unknown command: a Redis older than 6.2
            self.broker.blocking_wait = False
