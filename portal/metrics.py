"""What a web process's /metrics reports besides its HTTP latency (portal/routes/metrics.py).

Read when Prometheus scrapes, never counted in the request path:
- the queues (tocsin/messaging/queues.py: a few Redis commands per queue, read every scrape);
- this process's open live-inbox streams (portal/live.py);
- from PostgreSQL, the deliveries that wait or need attention, by status and channel
  (db/delivery/totals.py) and how long the tenants have gone without a completed scan,
  sweep and digest run (db/platform/runs.py). These cost a few statements over every tenant, so they
  are read at most once every `database_seconds` and the last reading is served in between:
  several Prometheus servers, or a short scrape interval, do not multiply the load.

No label names a tenant: the numbers are totals and maxima over all tenants (per-tenant
detail is `tocsin status`). Every label takes values from a short fixed set: queue names,
statuses, channels, run kinds, the two sources.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from db.delivery.totals import CHANNELS, OPEN_STATUSES, open_deliveries
from db.events.relay import backlog
from db.platform.errors import DatabaseUnavailable, NotMigrated
from db.platform.runs import last_runs_of_active_tenants
from db.platform.tenancy import list_tenants
from domain.liveness import RunKind
from portal.live import InboxListener
from tocsin.messaging.queues import QueueInspector, QueuesUnavailable
from tocsin.monitoring.status import tenant_liveness

__all__ = ["WebCollector"]


@dataclass(frozen=True)
class _DatabaseReading:
    deliveries: dict[tuple[str, str], int]
    tenants: int  # active tenants
    oldest_run_seconds: dict[RunKind, float]  # the longest any active tenant went without a run
    sweep_overdue: int  # active tenants whose sweep is overdue (the /healthz verdict's rule)
    outbox_waiting: int = 0  # events not yet evaluated, over every tenant
    outbox_failed: int = 0  # events given up on (too many attempts)
    outbox_oldest_seconds: float = 0.0  # the oldest event not yet evaluated: the outbox lag


class WebCollector(Collector):
    def __init__(self, inspector: QueueInspector, listener: InboxListener, *,
                 sweep_interval_seconds: int, database_seconds: float) -> None:
        self._inspector = inspector
        self._listener = listener
        self._sweep_interval_seconds = sweep_interval_seconds
        self._database_seconds = database_seconds  # seconds a database reading is served again
        self._lock = threading.Lock()  # one scrape reads the database; the others wait for it
        self._reading: _DatabaseReading | None = None
        self._read_at = float("-inf")  # time.monotonic() of the last reading attempt

    def collect(self) -> Iterable[Metric]:
        queues = self._queues()
        reading = self._database_reading()
        up = GaugeMetricFamily("tocsin_metrics_source_up", "1 when the source answered, else 0 "
                               "(redis, for the queues: this scrape; postgresql, for deliveries and "
                               "runs: the last reading, at most METRICS_DATABASE_SECONDS old).",
                               labels=["source"])
        up.add_metric(["redis"], int(queues is not None))
        up.add_metric(["postgresql"], int(reading is not None))
        yield up
        yield GaugeMetricFamily(
            "tocsin_sse_connections", "Live inbox event streams open in this web process.",
            value=self._listener.watching)
        yield from queues or ()
        if reading is not None:
            yield from _database_families(reading)

    def _queues(self) -> list[Metric] | None:
        try:
            states = self._inspector.states()
        except QueuesUnavailable:
            return None
        messages = GaugeMetricFamily("tocsin_queue_messages", "Messages in a queue: ready to be "
                                     "fetched, or delayed (retries, eta).", labels=["queue", "state"])
        age = GaugeMetricFamily("tocsin_queue_oldest_message_age_seconds", "Age of the next ready "
                                "message of a queue (seconds; 0 when none waits).", labels=["queue"])
        consumers = GaugeMetricFamily("tocsin_queue_consumers", "Live worker processes consuming a "
                                      "queue.", labels=["queue"])
        unconsumed = GaugeMetricFamily("tocsin_queue_unconsumed", "1 when nobody will run a queue's "
                                       "messages: no live consumer for a product queue or a queue "
                                       "holding messages.", labels=["queue"])
        for q in states:
            messages.add_metric([q.name, "ready"], q.ready)
            messages.add_metric([q.name, "delayed"], q.delayed)
            age.add_metric([q.name], q.oldest_age_seconds or 0.0)
            consumers.add_metric([q.name], q.consumers)
            unconsumed.add_metric([q.name], int(q.unconsumed))
        return [messages, age, consumers, unconsumed]

    def _database_reading(self) -> _DatabaseReading | None:
        with self._lock:
            if time.monotonic() - self._read_at >= self._database_seconds:
                self._read_at = time.monotonic()
                try:
                    self._reading = self._read_database()
                except (DatabaseUnavailable, NotMigrated):
                    self._reading = None
            return self._reading

    def _read_database(self) -> _DatabaseReading:
        deliveries = open_deliveries()
        tenants = [tenant_liveness(r, self._sweep_interval_seconds) for r in last_runs_of_active_tenants()]
        oldest: dict[RunKind, float] = {}
        for t in tenants:
            for kind in RunKind:
                age = t.age(kind)
                if age is None:
                    age = t.runs.as_of - t.runs.created_at
                oldest[kind] = max(oldest.get(kind, 0.0), age.total_seconds())
        outbox = backlog(list_tenants(active_only=True))
        return _DatabaseReading(
            dict(deliveries), len(tenants), oldest, sum(t.sweep_overdue for t in tenants),
            sum(b.pending + b.processing for b in outbox), sum(b.failed for b in outbox),
            max((b.age.total_seconds() for b in outbox if b.age is not None), default=0.0))


def _database_families(reading: _DatabaseReading) -> Iterator[Metric]:
    deliveries = GaugeMetricFamily(
        "tocsin_deliveries", "Deliveries waiting or needing attention, by status and channel, over "
        "every tenant (settled ones are counted by the workers' counters).", labels=["status", "channel"])
    for status in OPEN_STATUSES:
        for channel in CHANNELS:
            deliveries.add_metric([status, channel], reading.deliveries.get((status, channel), 0))
    yield deliveries
    yield GaugeMetricFamily("tocsin_tenants_active", "Active tenants.", value=reading.tenants)
    ages = GaugeMetricFamily(
        "tocsin_run_age_seconds", "The longest any active tenant has gone without a completed run of "
        "this kind (seconds; since its creation when it has none yet).", labels=["kind"])
    for kind in RunKind:
        ages.add_metric([kind.value], reading.oldest_run_seconds.get(kind, 0.0))
    yield ages
    events = GaugeMetricFamily(
        "tocsin_outbox_events", "Outbox events over every tenant: waiting to be evaluated (pending or in "
        "flight) and failed (given up on after RELAY_MAX_ATTEMPTS).", labels=["state"])
    events.add_metric(["waiting"], reading.outbox_waiting)
    events.add_metric(["failed"], reading.outbox_failed)
    yield events
    yield GaugeMetricFamily(
        "tocsin_outbox_oldest_event_age_seconds", "Age of the oldest outbox event not yet evaluated, over "
        "every tenant: the relay's lag (0 when none waits).", value=reading.outbox_oldest_seconds)
    yield GaugeMetricFamily(
        "tocsin_tenants_sweep_overdue", "Active tenants whose sweep is overdue (as /healthz judges).",
        value=reading.sweep_overdue)
