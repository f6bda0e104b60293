"""The worker process's start-up, named by its command: `dramatiq tocsin.boot.worker:boot`.

Importing this module imports the `actors` package, which declares every actor (the worker
runs only the actors its command imports); `boot` then reads the settings, once, and
installs the broker those actors run on.
"""

from __future__ import annotations

import actors  # noqa: F401  (declares every actor)
from tocsin.core import runtime
from tocsin.core.settings import load_settings
from tocsin.messaging.broker import current_broker
from tocsin.monitoring.metrics import install_endpoint

WORKER_BROKER = "tocsin.boot.worker:boot"  # the broker argument of the worker command


def boot() -> None:
    settings = runtime.start(load_settings())
    runtime.start_messaging(settings)
    install_endpoint(current_broker(), settings)  # the Prometheus endpoint, when one is set
    runtime.tune_collector()
