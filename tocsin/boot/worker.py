"""The worker process's bootstrap, named by its command: `dramatiq tocsin.boot.worker:boot`
(tocsin/shell/processes.py WORKER_BROKER).

Importing this module imports the `actors` package, which declares every actor (the worker
runs only the actors its command imports); `boot` then reads the settings, once, and
installs the pool, the broker those actors run on and the after-commit effects.
"""

from __future__ import annotations

import actors  # noqa: F401  (declares every actor)
from tocsin import boot as bootstrap
from tocsin.core.settings import load_settings
from tocsin.messaging.broker import current_broker
from tocsin.monitoring.metrics import install_endpoint

__all__ = ["boot"]


def boot() -> None:
    settings = bootstrap.start(load_settings())
    bootstrap.start_messaging(settings)
    install_endpoint(current_broker(), settings)  # the Prometheus endpoint, when one is set
    bootstrap.tune_collector()
