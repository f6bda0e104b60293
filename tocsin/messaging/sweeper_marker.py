"""The sweeper's marker: has the broker lost the messages it held since the last sweep?

A Redis broker loses everything on FLUSHALL or a restart without persistence; a RabbitMQ
node loses its queues when it is reset or its vhost is deleted and made again. The sweeper
leaves a marker in the same store as the messages, so the marker disappears with them; a
missing marker means every message may be gone, and the sweep enqueues every due delivery
again instead of only the stale ones.

The marker makes recovery quick, not correct: the sweep re-sends any delivery left
enqueued for REENQUEUE_AFTER_SECONDS whatever the marker says, so a single purged queue
(which leaves the marker in place) still heals, one re-send interval later.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Protocol

import dramatiq
import pika
import pika.exceptions
import redis

from tocsin.core.settings import Settings

__all__ = [
    "MARKER_NAME",
    "RABBITMQ_TIMEOUT_SECONDS",
    "RabbitmqMarker",
    "RedisMarker",
    "SweeperMarker",
    "sweeper_marker",
]

MARKER_NAME = "sweeper-marker"
RABBITMQ_TIMEOUT_SECONDS = 10.0  # seconds to connect to RabbitMQ or wait for one answer


class SweeperMarker(Protocol):
    def missing(self) -> bool:
        """True when the marker is gone: every message the broker held may be lost."""
        ...

    def leave(self) -> None:
        """Put the marker back (after the sweep has re-enqueued everything due)."""
        ...


class RedisMarker:
    """A key beside the Redis broker's queues, under its namespace."""

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self._redis = client
        self._key = f"{namespace}:{MARKER_NAME}"

    def missing(self) -> bool:
        return not self._redis.exists(self._key)

    def leave(self) -> None:
        self._redis.set(self._key, "1")


class RabbitmqMarker:
    """An empty durable queue in the broker's vhost: it lives exactly as long as the
    durable queues that hold the messages (a reset node or a recreated vhost loses both).
    Each call opens its own short connection: the sweep runs once a minute, and the
    broker's channels belong to its consumers."""

    def __init__(self, url: str, namespace: str) -> None:
        self._url = url
        self._queue = f"{namespace}.{MARKER_NAME}"

    def missing(self) -> bool:
        with self._channel() as channel:
            try:
                channel.queue_declare(self._queue, passive=True)
            except pika.exceptions.ChannelClosedByBroker as error:
                if error.reply_code == 404:  # NOT_FOUND: the queue is gone
                    return True
                raise
        return False

    def leave(self) -> None:
        with self._channel() as channel:
            channel.queue_declare(self._queue, durable=True)

    @contextlib.contextmanager
    def _channel(self) -> Iterator[Any]:
        parameters = pika.URLParameters(self._url)
        parameters.socket_timeout = RABBITMQ_TIMEOUT_SECONDS
        parameters.blocked_connection_timeout = RABBITMQ_TIMEOUT_SECONDS
        connection = pika.BlockingConnection(parameters)
        try:
            yield connection.channel()
        finally:
            if connection.is_open:
                connection.close()


def sweeper_marker(settings: Settings, broker: dramatiq.Broker) -> SweeperMarker:
    """The marker for this process's broker: in RabbitMQ when BROKER_URL names it (a flushed
    Redis loses no RabbitMQ message), else in the Redis broker's own Redis."""
    if settings.broker_url is not None:
        return RabbitmqMarker(settings.broker_url, settings.dramatiq_namespace)
    client = getattr(broker, "client", None)
    if not isinstance(client, redis.Redis):
        client = redis.Redis.from_url(settings.redis_url)
    return RedisMarker(client, settings.dramatiq_namespace)
