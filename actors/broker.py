"""The Redis broker, configured from the settings before any actor is declared.

Dramatiq binds actors to the broker current at declaration time, so this module is
imported first by the package. Redis only carries messages: every pending thing is also
a row in Postgres, and a flushed Redis or a lost message is repaired by the next scan.
"""

from __future__ import annotations

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from dramatiq.middleware import (
    AgeLimit,
    Callbacks,
    Pipelines,
    Retries,
    ShutdownNotifications,
    TimeLimit,
)

from actors.consumers import ConsumerHeartbeats
from tocsin.config import load_settings

_settings = load_settings()

broker = RedisBroker(  # type: ignore[no-untyped-call]
    url=_settings.redis_url,
    namespace=_settings.dramatiq_namespace,
    # A worker that dies holds its messages until another one notices it is gone; keep
    # that short. Postgres, not redelivery, is what guarantees recovery.
    heartbeat_timeout=30_000,  # milliseconds
    # Out of a million commands: how often a worker looks for dead workers' messages (5%
    # instead of the default 0.1%), so what a dead worker held comes back sooner.
    maintenance_chance=50_000,
    dead_message_ttl=7 * 24 * 3_600_000,  # milliseconds
    middleware=[
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
    ],
)
dramatiq.set_broker(broker)
