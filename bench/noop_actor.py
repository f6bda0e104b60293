"""The Dramatiq ceiling of bench/deliver.py: an actor that does nothing, on Tocsin's broker.

    python -m dramatiq bench.noop_actor:boot --queues bench_noop --processes P --threads T

``boot`` installs the very broker the workers use (same Redis, same namespace, same
middleware), as ``tocsin.boot.worker:boot`` does; ``--queues bench_noop`` makes this actor the
only one the worker runs, so what it measures is Dramatiq's own cost per message.
"""

from __future__ import annotations

import dramatiq

import tocsin.messaging.broker  # noqa: F401  (the placeholder broker the actor is declared on)
from tocsin import boot as bootstrap
from tocsin.core.settings import load_settings

QUEUE = "bench_noop"


@dramatiq.actor(queue_name=QUEUE, max_retries=0)
def noop(number: int) -> None:
    """Nothing: the ceiling is the cost of fetching, running and acknowledging a message."""


def boot() -> None:
    settings = bootstrap.start(load_settings())
    bootstrap.start_messaging(settings)
