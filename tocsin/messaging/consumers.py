"""The worker side of "is anyone consuming this queue": a middleware that, in every worker
process, records every few seconds which queues it consumes (tocsin/messaging/queues.py reads them).

A daemon thread per worker beats from after_worker_boot to before_worker_shutdown. A
worker killed outright stops beating and its records expire within CONSUMER_TTL_SECONDS;
a flushed Redis is written again at the next beat.
"""

from __future__ import annotations

import logging
import threading
import uuid
from dataclasses import dataclass

import dramatiq
import redis
from dramatiq.common import q_name
from redis.exceptions import RedisError

from tocsin.core import runtime
from tocsin.messaging.queues import CONSUMER_BEAT_SECONDS, ConsumerRegistry

__all__ = ["STOP_WAIT_SECONDS", "ConsumerHeartbeats", "consumed_queues"]

log = logging.getLogger("tocsin.consumers")

STOP_WAIT_SECONDS = 10.0  # seconds shutdown waits for a beat in progress (one Redis round trip)


@dataclass(frozen=True)
class _Beating:
    worker_id: str
    registry: ConsumerRegistry
    stop: threading.Event
    thread: threading.Thread


def consumed_queues(worker: dramatiq.Worker) -> set[str]:
    """The queues this worker fetches from right now (a delay queue counts as its queue)."""
    return {q_name(name) for name, consumer in list(worker.consumers.items()) if consumer.is_alive()}


class ConsumerHeartbeats(dramatiq.Middleware):
    def __init__(self, beat_seconds: float = CONSUMER_BEAT_SECONDS):
        self._beat_seconds = beat_seconds
        # One entry per running Worker: a process may start several (the tests do, in turn).
        self._beating: dict[int, _Beating] = {}
        self._lock = threading.Lock()

    def after_worker_boot(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        # The records go in Redis under the namespace: the Redis broker's own client, or
        # (RabbitMQ carries the messages) a client on REDIS_URL, which stays required. Made in
        # this worker process, never before a fork.
        client, namespace = getattr(broker, "client", None), getattr(broker, "namespace", None)
        if not isinstance(client, redis.Redis) or not isinstance(namespace, str):
            settings = runtime.settings()
            client = redis.Redis.from_url(settings.redis_url, socket_timeout=5, socket_connect_timeout=5)
            namespace = settings.dramatiq_namespace
        registry = ConsumerRegistry(client, namespace)
        worker_id = uuid.uuid4().hex
        stop = threading.Event()
        thread = threading.Thread(target=self._beat, args=(worker, worker_id, registry, stop),
                                  name="tocsin-consumer-heartbeat", daemon=True)
        with self._lock:
            self._beating[id(worker)] = _Beating(worker_id, registry, stop, thread)
        thread.start()

    def before_worker_shutdown(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        with self._lock:
            beating = self._beating.pop(id(worker), None)
        if beating is None:
            return
        beating.stop.set()
        beating.thread.join(STOP_WAIT_SECONDS)
        try:
            beating.registry.forget(beating.worker_id)
        except RedisError as error:  # its records expire on their own
            log.warning("could not withdraw this worker's queues from the registry: %s", error)

    def _beat(self, worker: dramatiq.Worker, worker_id: str, registry: ConsumerRegistry,
              stop: threading.Event) -> None:
        while True:
            try:
                registry.beat(worker_id, consumed_queues(worker))
            except RedisError as error:  # Redis down: the broker says so too; beat again later
                log.warning("could not record this worker's queues: %s", error)
            if stop.wait(self._beat_seconds):
                return
