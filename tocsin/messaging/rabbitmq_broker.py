"""Dramatiq's RabbitMQ broker, sending through one connection per process.

Dramatiq's RabbitmqBroker opens a publishing connection per thread and closes them only in
`close()`. A web process sends from a thread pool whose idle threads exit and are replaced,
so every replaced thread would leave an open connection (and its file descriptors) behind,
for as long as the process lives. Here every thread of a process shares one connection
and one channel (with publisher confirms), one send at a time: a send waits for
RabbitMQ's confirm, a millisecond or so on a local network, so the lock costs little next
to the work an actor does. Consumers are unchanged: each keeps its own connection.
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

from dramatiq import Message
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from dramatiq.errors import QueueJoinTimeout

__all__ = ["JOIN_MIN_EMPTY", "OneConnectionRabbitmqBroker"]

JOIN_MIN_EMPTY = 10  # consecutive looks at an empty queue before join() says it is drained


class OneConnectionRabbitmqBroker(RabbitmqBroker):
    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        # Where Dramatiq keeps "this thread's" connection and channel: one place for all.
        self.state = SimpleNamespace()  # type: ignore[assignment]
        self._sending = threading.RLock()

    def enqueue(self, message: Message[Any], *, delay: int | None = None) -> Message[Any]:
        with self._sending:
            return super().enqueue(message, delay=delay)

    def declare_queue(self, queue_name: str, *, ensure: bool = False) -> None:
        with self._sending:
            super().declare_queue(queue_name, ensure=ensure)

    def get_queue_message_counts(self, queue_name: str) -> tuple[int, int, int]:
        with self._sending:
            return super().get_queue_message_counts(queue_name)

    def flush(self, queue_name: str) -> None:
        with self._sending:
            super().flush(queue_name)

    def flush_all(self) -> None:
        with self._sending:
            super().flush_all()

    def close(self) -> None:
        with self._sending:
            super().close()
            self.state = SimpleNamespace()  # type: ignore[assignment]

    def join(self, queue_name: str, min_successes: int = JOIN_MIN_EMPTY, idle_time: int = 100,
             *, timeout: int | None = None) -> None:
        """Dramatiq's join sleeps on the publishing connection, which other threads now use;
        this one sleeps on the clock. ``idle_time`` and ``timeout`` are in milliseconds."""
        deadline = None if timeout is None else time.monotonic() + timeout / 1000
        empty = 0
        while empty < min_successes:
            if deadline is not None and time.monotonic() >= deadline:
                raise QueueJoinTimeout(queue_name)  # type: ignore[no-untyped-call]
            ready, delayed, _dead = self.get_queue_message_counts(queue_name)
            empty = empty + 1 if ready + delayed == 0 else 0
            time.sleep(idle_time / 1000)
