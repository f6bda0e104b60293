"""The Dramatiq ceiling of bench/deliver.py: an actor that does nothing, on Tocsin's broker.

    python -m dramatiq bench.noop_actor --queues bench_noop --processes P --threads T

Importing ``actors.broker`` configures the very broker the workers use (same Redis, same
namespace, same middleware); ``--queues bench_noop`` makes this actor the only one the
worker runs, so what it measures is Dramatiq's own cost per message.
"""

from __future__ import annotations

import dramatiq

from actors.broker import broker as broker

QUEUE = "bench_noop"


@dramatiq.actor(queue_name=QUEUE, max_retries=0)
def noop(number: int) -> None:
    """Nothing: the ceiling is the cost of fetching, running and acknowledging a message."""
