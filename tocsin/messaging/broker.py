"""The Dramatiq broker, built from the settings at process start (`install_broker`), never
as a side effect of an import.

Dramatiq binds an actor to the broker that is current when the actor is declared, and the
actor modules are imported before anyone has read the settings. So importing this package
installs a placeholder that refuses to enqueue, and `install_broker` moves every actor
declared so far onto the real broker. A process that forgot to install one fails loudly on
its first send instead of talking to a default Redis on localhost.

The broker is Redis (REDIS_URL, the embedded default) or, when BROKER_URL names one,
RabbitMQ (several worker machines; durable queues, publisher confirms). Either only carries
messages: every pending thing is also a row in Postgres, and a flushed Redis, a purged
queue or a lost message is repaired by the sweeper. Nothing correct depends on the broker's
delays or redelivery.
"""

from __future__ import annotations

import threading
from typing import Any

import dramatiq
from dramatiq.brokers.stub import StubBroker
from dramatiq.middleware import (
    AgeLimit,
    Callbacks,
    Middleware,
    Pipelines,
    Retries,
    ShutdownNotifications,
    TimeLimit,
)

from domain.delivery.preparation_queues import preparation_queues
from tocsin.core.settings import Settings
from tocsin.messaging.consumers import ConsumerHeartbeats
from tocsin.messaging.rabbitmq_broker import OneConnectionRabbitmqBroker
from tocsin.messaging.redis_broker import WakingRedisBroker

__all__ = ["BrokerNotInstalled", "build_broker", "current_broker", "install_broker"]


class BrokerNotInstalled(RuntimeError):
    """A message was sent before the process installed its broker."""


class _Placeholder(StubBroker):
    """Holds actor declarations until the real broker exists; refuses every message."""

    def enqueue(self, message: Any, *, delay: int | None = None) -> Any:
        raise BrokerNotInstalled(
            f"cannot enqueue {message.actor_name}: this process has not installed its broker "
            "(tocsin.boot.start_messaging)"
        )


def _middleware() -> list[Middleware]:
    return [
        AgeLimit(max_age=60 * 60_000),  # milliseconds; the sweeper re-sends what Postgres still owes
        TimeLimit(time_limit=10 * 60_000),  # milliseconds; actors set their own lower limits
        ShutdownNotifications(),
        Callbacks(),
        Pipelines(),
        # For unexpected errors only (a lost database connection): every actor is safe to
        # run again, and provider errors are recorded in Postgres, never raised.
        Retries(max_retries=3, min_backoff=1_000, max_backoff=60_000),  # milliseconds
        # Which queues this worker consumes, for `tocsin status` and /healthz.
        ConsumerHeartbeats(),
    ]


_lock = threading.Lock()
_installed: dramatiq.Broker | None = None
_installed_for: tuple[str | None, str] | None = None  # (broker_url, namespace) it was built from

if dramatiq.broker.global_broker is None:  # get_broker() would build a default Redis broker
    dramatiq.set_broker(_Placeholder(middleware=_middleware()))


def build_broker(settings: Settings) -> dramatiq.Broker:
    if settings.broker_url is not None:
        return OneConnectionRabbitmqBroker(
            url=settings.broker_url,
            # A send returns once RabbitMQ has the message (persistent, in a durable queue),
            # so a message the after-commit hook sent is not lost in a socket buffer; one
            # RabbitMQ cannot route raises instead of vanishing.
            confirm_delivery=True,
            middleware=_middleware(),
        )
    # Idle consumers wait on their queue's list instead of polling it (tocsin/messaging/redis_broker.py).
    return WakingRedisBroker(  # type: ignore[no-untyped-call]
        url=settings.redis_url,
        namespace=settings.dramatiq_namespace,
        # A worker that dies holds its messages until another one notices it is gone; keep
        # that short. Postgres, not redelivery, is what guarantees recovery.
        heartbeat_timeout=30_000,  # milliseconds
        # Out of a million commands: how often a worker looks for dead workers' messages (5%
        # instead of the default 0.1%), so what a dead worker held comes back sooner.
        maintenance_chance=50_000,
        dead_message_ttl=7 * 24 * 3_600_000,  # milliseconds
        middleware=_middleware(),
    )


def install_broker(settings: Settings) -> dramatiq.Broker:
    """Build this process's broker from ``settings``, make it current and move every actor
    declared so far onto it. Idempotent for the same settings."""
    global _installed, _installed_for
    wanted = (settings.broker_url, settings.dramatiq_namespace)
    with _lock:
        current = dramatiq.get_broker()
        if _installed is not None and current is _installed and _installed_for == wanted:
            return _installed
        broker = build_broker(settings)
        for name in sorted(current.get_declared_actors()):
            actor = current.get_actor(name)
            actor.broker = broker
            broker.declare_actor(actor)
        # Each product's preparation queue (actors/prepare.py sends there): declared so this
        # process's worker consumes them and its sends find them.
        for queue in preparation_queues(settings.product_queues):
            broker.declare_queue(queue)
        dramatiq.set_broker(broker)
        if _installed is not None and _installed is not broker:
            _installed.close()  # replaced (a test pointing the process elsewhere): no idle connections
        _installed, _installed_for = broker, wanted
        return broker


def current_broker() -> dramatiq.Broker:
    """The installed broker (for the sweeper and the tests' drains)."""
    if _installed is None:
        raise BrokerNotInstalled("this process has not installed its broker")
    return _installed
