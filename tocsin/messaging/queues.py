"""What the queues hold and who consumes them: the reader behind `tocsin status` and
/healthz, and the registry the workers' heartbeats write (tocsin/messaging/consumers.py).

Dramatiq's own Redis heartbeats say which worker processes are alive, not which queues
they consume (a worker may be started with `--queues email`), so each worker also
records, every few seconds and with an expiry, the queues it consumes. A queue has live
consumers while some record for it has not expired. The registry lives in Redis whatever
the broker; reading depths is broker-specific (`QueueDepths`): the Redis broker's and
RabbitMQ's below.
Nothing here builds a broker, so the portal can read it without importing the actors.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pika
import pika.exceptions
import redis
from redis.exceptions import RedisError

from domain.delivery.preparation_queues import DEFAULT_PRODUCT_QUEUES, preparation_queues
from tocsin.core.clock import timestamp
from tocsin.core.settings import Settings

__all__ = [
    "CONSUMER_BEAT_SECONDS",
    "CONSUMER_TTL_SECONDS",
    "PRODUCT_QUEUES",
    "ConsumerRegistry",
    "QueueDepth",
    "QueueDepths",
    "QueueInspector",
    "QueueState",
    "QueuesUnavailable",
    "RabbitmqQueueDepths",
    "RedisQueueDepths",
]

# Every queue the product's actors use (tests/integration/test_status.py checks this
# against the queues the actors declare): each needs a live consumer.
# The preparation queues are those of the default PRODUCT_QUEUES setting; a queue of a
# product added to that setting is judged once it holds messages.
PRODUCT_QUEUES = ("scan", "sweep", "digest", "email", "relay", "webhooks",
                  "chat",
                  "sms",
                  *preparation_queues(DEFAULT_PRODUCT_QUEUES))
CONSUMER_BEAT_SECONDS = 5.0  # seconds between two records of a worker's queues
CONSUMER_TTL_SECONDS = 3 * CONSUMER_BEAT_SECONDS  # seconds a record lives: two beats may be missed


class QueuesUnavailable(Exception):
    """The broker (or the consumer registry) did not answer; ``service`` names which, for an
    answer that must not carry the details (hosts, addresses)."""

    def __init__(self, message: str, service: str = "Redis") -> None:
        super().__init__(message)
        self.service = service


@dataclass(frozen=True)
class QueueDepth:
    ready: int  # messages waiting to be fetched
    delayed: int  # messages waiting in the delay queue (retries, eta): fetched and held until due
    # Age of the next ready message; None when none waits, or when the broker cannot tell
    # without taking it (RabbitMQ).
    oldest_age_seconds: float | None


@dataclass(frozen=True)
class QueueState:
    name: str
    ready: int
    delayed: int
    oldest_age_seconds: float | None
    consumers: int  # live worker processes consuming this queue

    @property
    def unconsumed(self) -> bool:
        """Nobody will run this queue's messages: a queue the product uses, or any queue
        with messages waiting, that no live worker consumes."""
        return self.consumers == 0 and (self.name in PRODUCT_QUEUES or self.ready + self.delayed > 0)


class QueueDepths(Protocol):
    """How many messages a queue holds and how old the next one is; one per broker kind."""

    def depth(self, queue: str) -> QueueDepth: ...

    def holding_messages(self) -> set[str]:
        """Every queue holding messages, named or not (reads the whole keyspace: for the
        command, not for a health check polled every few seconds)."""
        ...


class ConsumerRegistry:
    """Which queues live workers consume: one sorted set, member ``queue|worker``, scored
    by the record's expiry (milliseconds since the epoch)."""

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self._redis = client
        self._key = f"{namespace}:__consumers__"

    def beat(self, worker_id: str, queues: Iterable[str]) -> None:
        """Record that this worker consumes these queues for the next TTL; forget expired
        records of any worker (one that died never forgets its own)."""
        now_ms = timestamp() * 1000
        expires = now_ms + CONSUMER_TTL_SECONDS * 1000
        members = {f"{queue}|{worker_id}": expires for queue in queues}
        pipe = self._redis.pipeline(transaction=True)
        if members:
            pipe.zadd(self._key, members)
        pipe.zremrangebyscore(self._key, "-inf", now_ms)
        pipe.pexpire(self._key, int(CONSUMER_TTL_SECONDS * 1000))
        pipe.execute()

    def forget(self, worker_id: str) -> None:
        """A worker shutting down stops counting at once, not one TTL later."""
        members = [_text(m) for m in self._redis.zrange(self._key, 0, -1)
                   if _text(m).endswith(f"|{worker_id}")]
        if members:
            self._redis.zrem(self._key, *members)

    def live_consumers(self) -> Counter[str]:
        """How many live workers consume each queue."""
        now_ms = timestamp() * 1000
        counts: Counter[str] = Counter()
        for member in self._redis.zrangebyscore(self._key, now_ms, "+inf"):
            queue, _, _worker = _text(member).rpartition("|")
            counts[queue] += 1
        return counts


class RedisQueueDepths:
    """Depths as Dramatiq's Redis broker stores them: ``ns:queue`` is the list of waiting
    message ids (fetched from the head), ``ns:queue.msgs`` maps ids to encoded messages,
    and ``ns:queue.DQ`` is the delay queue. The next message's age comes from its
    ``message_timestamp`` (milliseconds since the epoch, set when it was first enqueued)."""

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self._redis = client
        self._namespace = namespace

    def depth(self, queue: str) -> QueueDepth:
        ready_key = f"{self._namespace}:{queue}"
        delayed_key = f"{self._namespace}:{queue}.DQ"
        pipe = self._redis.pipeline(transaction=False)
        pipe.llen(ready_key)
        pipe.llen(delayed_key)
        pipe.lindex(ready_key, 0)
        ready, delayed, head = pipe.execute()
        age = None
        if head is not None:
            age = _age_seconds(self._redis.hget(f"{ready_key}.msgs", head), timestamp())
        return QueueDepth(int(ready), int(delayed), age)

    def waiting(self, queue: str) -> int:
        """Messages ready or delayed in ``queue``, in one round trip (not those a worker
        has already fetched)."""
        pipe = self._redis.pipeline(transaction=False)
        pipe.llen(f"{self._namespace}:{queue}")
        pipe.llen(f"{self._namespace}:{queue}.DQ")
        ready, delayed = pipe.execute()
        return int(ready) + int(delayed)

    def holding_messages(self) -> set[str]:
        found = set()
        prefix = f"{self._namespace}:"
        for key in self._redis.scan_iter(match=f"{prefix}*.msgs", count=1000):
            name = _text(key)[len(prefix):].removesuffix(".msgs")
            if name.endswith(".XQ"):  # dead letters are kept for a person, never consumed
                continue
            found.add(name.removesuffix(".DQ"))
        return found


class RabbitmqQueueDepths:
    """Depths as Dramatiq's RabbitMQ broker stores them: durable queues ``queue`` and
    ``queue.DQ`` (delayed), counted by a passive declare, which sees messages not yet
    delivered to a worker (the ones a worker holds unacknowledged are not counted, as the
    Redis reader does not count what a worker fetched). The next message's age is unknown:
    RabbitMQ shows a message only by delivering it, which would reorder the queue.

    Each look opens its own short connection: a blocking connection left idle between two
    health checks would miss its heartbeats and be closed by RabbitMQ anyway."""

    def __init__(self, url: str, timeout_seconds: float = 5.0) -> None:
        self._url = url
        self._timeout = timeout_seconds  # seconds to connect or wait for one answer

    def depth(self, queue: str) -> QueueDepth:
        parameters = pika.URLParameters(self._url)
        parameters.socket_timeout = self._timeout
        parameters.blocked_connection_timeout = self._timeout
        parameters.connection_attempts = 1
        try:
            connection = pika.BlockingConnection(parameters)
            try:
                return QueueDepth(_count(connection, queue), _count(connection, f"{queue}.DQ"), None)
            finally:
                if connection.is_open:
                    connection.close()
        except (pika.exceptions.AMQPError, OSError) as error:
            raise QueuesUnavailable(f"RabbitMQ did not answer: {error!r}", "RabbitMQ") from None

    def holding_messages(self) -> set[str]:
        """AMQP cannot list a vhost's queues; RabbitMQ's management tools show stray ones."""
        return set()


def _count(connection: Any, queue: str) -> int:
    """Messages ready in ``queue``; 0 for a queue not declared yet (or deleted)."""
    channel = connection.channel()
    try:
        declared = channel.queue_declare(queue, passive=True)
    except pika.exceptions.ChannelClosedByBroker as error:
        if error.reply_code == 404:  # NOT_FOUND: it holds nothing
            return 0
        raise
    channel.close()
    return int(declared.method.message_count)


def _age_seconds(encoded: object, now: float) -> float | None:
    """The age of an encoded message (Dramatiq's default JSON encoding); None when it was
    consumed in the meantime or is not in that encoding."""
    if encoded is None:
        return None
    try:
        timestamp_ms = json.loads(_text(encoded))["message_timestamp"]
    except (ValueError, KeyError, TypeError):
        return None
    return max(0.0, now - float(timestamp_ms) / 1000)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class QueueInspector:
    """The state of every queue the product uses and of every queue someone consumes."""

    def __init__(self, depths: QueueDepths, registry: ConsumerRegistry) -> None:
        self._depths = depths
        self._registry = registry

    @classmethod
    def for_redis(cls, redis_url: str, namespace: str) -> QueueInspector:
        """Connections are made on first use, not here."""
        client = redis.Redis.from_url(redis_url, socket_timeout=5, socket_connect_timeout=5)
        return cls(RedisQueueDepths(client, namespace), ConsumerRegistry(client, namespace))

    @classmethod
    def for_settings(cls, settings: Settings) -> QueueInspector:
        """Depths from the broker the settings select; consumers from Redis either way."""
        if settings.broker_url is None:
            return cls.for_redis(settings.redis_url, settings.dramatiq_namespace)
        client = redis.Redis.from_url(settings.redis_url, socket_timeout=5, socket_connect_timeout=5)
        return cls(RabbitmqQueueDepths(settings.broker_url),
                   ConsumerRegistry(client, settings.dramatiq_namespace))

    def states(self, queues: Sequence[str] = PRODUCT_QUEUES, *, discover: bool = False) -> list[QueueState]:
        """The named queues, those someone consumes and, with ``discover``, every other
        queue holding messages (a stray queue nobody will ever drain)."""
        try:
            consumers = self._registry.live_consumers()
            others = set(consumers) | (self._depths.holding_messages() if discover else set())
            names = [*queues, *sorted(others - set(queues))]
            states = []
            for name in names:
                d = self._depths.depth(name)
                states.append(QueueState(name, d.ready, d.delayed, d.oldest_age_seconds, consumers[name]))
        except (RedisError, OSError) as error:
            raise QueuesUnavailable(f"Redis did not answer: {error}") from None
        return states
