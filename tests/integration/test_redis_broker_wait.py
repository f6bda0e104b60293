"""The Redis broker's idle consumers wait on their queue's list (tocsin/messaging/redis_broker.py)
instead of sleeping and polling, against the real Redis the suite runs on.

No figure here depends on timing: an idle wait is made a minute long, so a consumer that
returns the message within the join's limit was woken by the enqueue, not by its timeout.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import dramatiq
import pytest
import redis

from tocsin.core import runtime
from tocsin.messaging import redis_broker
from tocsin.messaging.redis_broker import WakingRedisBroker

from .conftest import wait_until


@pytest.fixture
def broker() -> Iterator[WakingRedisBroker]:
    namespace = f"waittest-{uuid.uuid4().hex[:8]}"
    made = WakingRedisBroker(url=runtime.settings().redis_url, namespace=namespace,  # type: ignore[no-untyped-call]
                             middleware=[])
    yield made
    keys = made.client.keys(f"{namespace}:*")
    if keys:
        made.client.delete(*keys)
    made.close()


def _actor(broker: WakingRedisBroker, queue: str) -> Any:
    def noop(n: int) -> None:
        pass

    return dramatiq.actor(broker=broker, queue_name=queue, actor_name=f"noop_{queue}")(noop)


def _blocked_clients(client: redis.Redis) -> int:
    return int(client.info("clients")["blocked_clients"])


def test_an_idle_consumer_is_woken_by_the_enqueue_not_by_its_timeout(
        broker: WakingRedisBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redis_broker, "IDLE_WAIT_MS", 60_000)  # a minute: far past the join below
    actor = _actor(broker, "q_wake")
    consumer = broker.consume("q_wake", prefetch=4, timeout=100)
    got: list[Any] = []

    def consume() -> None:
        while not got:
            message = next(consumer)
            if message is not None:
                got.append(message)

    before = _blocked_clients(broker.client)
    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    wait_until(lambda: _blocked_clients(broker.client) > before, "the consumer blocks on its queue")
    actor.send(7)
    thread.join(timeout=20)
    assert not thread.is_alive(), "the enqueue did not wake the idle consumer"
    assert [m.args for m in got] == [(7,)]
    consumer.ack(got[0])
    consumer.close()


def test_the_wait_leaves_the_queue_exactly_as_it_was(broker: WakingRedisBroker) -> None:
    actor = _actor(broker, "q_keep")
    for n in range(3):
        actor.send(n)
    key = f"{broker.namespace}:q_keep"
    before = broker.client.lrange(key, 0, -1)
    consumer: Any = broker.consume("q_keep", prefetch=10, timeout=100)
    consumer._wait_for_a_message()  # returns at once: the list holds messages
    assert broker.client.lrange(key, 0, -1) == before
    # and they are fetched in the order they were sent
    received: list[int] = []
    while len(received) < 3:
        message = next(consumer)
        if message is not None:
            received.append(message.args[0])
            consumer.ack(message)
    assert received == [0, 1, 2]
    consumer.close()


def test_a_consumer_with_no_room_does_not_wait_on_the_list(
        broker: WakingRedisBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every prefetched message still being worked on: the list is not empty, so waiting
    on it would return at once and spin; Dramatiq's back-off applies instead."""
    monkeypatch.setattr(redis_broker, "IDLE_WAIT_MS", 60_000)
    actor = _actor(broker, "q_full")
    for n in range(3):
        actor.send(n)
    consumer = broker.consume("q_full", prefetch=1, timeout=50)
    held = None
    while held is None:
        held = next(consumer)  # one prefetched and not acknowledged: no room left
    waits: list[int] = []
    monkeypatch.setattr(consumer, "_wait_for_a_message", lambda: waits.append(1))
    assert next(consumer) is None  # backs off (at most the 50 ms timeout) instead
    assert waits == []
    consumer.ack(held)
    consumer.close()
