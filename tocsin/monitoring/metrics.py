"""The workers' metrics: what the actors count (claims, provider calls, run durations), and
the Prometheus endpoint `tocsin worker` serves them on, beside Dramatiq's own counters.

Dramatiq's Prometheus middleware (dramatiq.middleware.prometheus) does the serving: every
worker process writes its samples to files in one directory (prometheus-client's
multiprocess mode), and a process the Dramatiq master forks for the middleware sums them on
each scrape at METRICS_WORKER_HOST:METRICS_WORKER_PORT. The middleware reads its directory
and address from the environment when it is imported, and prometheus-client chooses its
multiprocess storage when it is first imported (before any actor module is), so
`tocsin worker` puts all of it in the Dramatiq command's environment before any worker
process starts (`endpoint_environment`). A worker started another way with
METRICS_WORKER_PORT set refuses to boot rather than serve numbers of one process only.

Labels are bounded on purpose: rule names, outcomes and error classes, never a tenant
(thousands of them, and their slugs are what people type to sign in). Per-tenant detail is
`tocsin status`; the web's /metrics reads the totals from PostgreSQL (portal/metrics.py).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import dramatiq
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from db.notices.licence_scan import ClaimCounts
from db.rules.time_rules import TimeClaimCounts
from domain.delivery.states import ErrorClass
from domain.notices.licence import RULE as LICENCE_RULE
from tocsin.core.settings import ConfigError, Settings

__all__ = [
    "EMAIL_ATTEMPTS",
    "EMAIL_ERRORS",
    "MULTIPROCESS_DIR",
    "RELAY_BREAKERS_OPEN",
    "RELAY_EVENTS",
    "RELAY_LAG",
    "RUN_BUCKETS",
    "SCAN_CLAIMS",
    "SCAN_LICENCE_MOVES",
    "SCAN_SECONDS",
    "SCAN_SUMMARY_MISSED",
    "SCAN_TIME_CANCELLED",
    "SWEEP_SECONDS",
    "TIME_RULES",
    "WORKER_REGISTRY",
    "count_scan",
    "count_time_scan",
    "endpoint_environment",
    "install_endpoint",
    "remove_sample_directory",
    "sample_directory",
]

TIME_RULES = "time"  # the label of every tenant time rule's claims (rule ids are unbounded)

MULTIPROCESS_DIR = "PROMETHEUS_MULTIPROC_DIR"  # prometheus-client's switch to shared files
# seconds: a tenant's scan or sweep is a few transactions; minutes means something is wrong
RUN_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)

# The actors' own registry, not the process's default: a web process imports these modules
# (to enqueue) and must not report a worker's counters at zero. The endpoint reads the
# samples from the shared directory, whatever registry they were declared in.
WORKER_REGISTRY = CollectorRegistry()

SCAN_CLAIMS = Counter(
    "tocsin_scan_claims", "Ledger rows the scans claimed (to send) or recorded as skipped (window passed), "
    "by rule.", ["rule", "outcome"], registry=WORKER_REGISTRY)
SCAN_LICENCE_MOVES = Counter(
    "tocsin_scan_licence_moves", "Clients the scans moved to expired or to closed.", ["to"],
    registry=WORKER_REGISTRY)
SCAN_TIME_CANCELLED = Counter(
    "tocsin_scan_time_cancelled", "Waiting claims of time rules the scans cancelled because their due "
    "date moved.", registry=WORKER_REGISTRY)
SCAN_SECONDS = Histogram(
    "tocsin_scan_duration_seconds", "One tenant's scan, from start to its completion record (seconds).",
    buckets=RUN_BUCKETS, registry=WORKER_REGISTRY)
SCAN_SUMMARY_MISSED = Counter(
    "tocsin_scan_summary_missed_total",
    "Scans that found work where the next-work summary said none was due (goal: 0).",
    registry=WORKER_REGISTRY)
RUN_SUMMARY_MISSED = Counter(
    "tocsin_run_summary_missed_total",
    "Sweeps and digest builds that found work where the next-work summary said none was due, "
    "by kind (goal: 0).", ["kind"], registry=WORKER_REGISTRY)
SWEEP_SECONDS = Histogram(
    "tocsin_sweep_duration_seconds", "One tenant's sweep, from start to its completion record (seconds).",
    buckets=RUN_BUCKETS, registry=WORKER_REGISTRY)
EMAIL_ATTEMPTS = Counter(
    "tocsin_email_attempts", "Calls to the email provider (each claimed attempt that reached the call).",
    registry=WORKER_REGISTRY)
EMAIL_ERRORS = Counter(
    "tocsin_email_errors", "Email provider calls that did not end accepted, by error class "
    "(transient: retried; permanent: failed; uncertain: outcome unknown, reconciled).", ["error_class"],
    registry=WORKER_REGISTRY)

RELAY_EVENTS = Counter(
    "tocsin_relay_events_evaluated", "Outbox events the rules were evaluated on.", registry=WORKER_REGISTRY)
RELAY_LAG = Histogram(
    "tocsin_relay_lag_seconds", "From an event's commit to the commit of its evaluation (seconds): the "
    "outbox lag.", buckets=(0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0),
    registry=WORKER_REGISTRY)
RELAY_BREAKERS_OPEN = Gauge(
    "tocsin_relay_breakers_open", "Tenants whose relay circuit breaker is open (their events wait "
    "while it probes).", multiprocess_mode="livesum", registry=WORKER_REGISTRY)

# Every label value exists from the start, at zero: a rate over a series that appears only
# with its first event reads as "no data", and the alerts would miss the first failures.
for _outcome in ("claimed", "skipped"):
    SCAN_CLAIMS.labels(LICENCE_RULE, _outcome)
    SCAN_CLAIMS.labels(TIME_RULES, _outcome)
for _to in ("expired", "closed"):
    SCAN_LICENCE_MOVES.labels(_to)
for _error_class in ErrorClass:
    EMAIL_ERRORS.labels(_error_class.value)


def count_time_scan(counts: TimeClaimCounts) -> None:
    """One tenant's scan of its time rules, counted beside the licence's (rule="time")."""
    SCAN_CLAIMS.labels(TIME_RULES, "claimed").inc(counts.claimed)
    SCAN_CLAIMS.labels(TIME_RULES, "skipped").inc(counts.skipped)
    SCAN_TIME_CANCELLED.inc(counts.cancelled)


def count_scan(counts: ClaimCounts) -> None:
    """One tenant's licence scan, counted."""
    SCAN_CLAIMS.labels(LICENCE_RULE, "claimed").inc(counts.claimed)
    SCAN_CLAIMS.labels(LICENCE_RULE, "skipped").inc(counts.skipped)
    SCAN_LICENCE_MOVES.labels("expired").inc(counts.expired)
    SCAN_LICENCE_MOVES.labels("closed").inc(counts.closed)


def endpoint_environment(address: tuple[str, int], directory: Path) -> dict[str, str]:
    """What the Dramatiq command's environment needs for the endpoint: the shared sample
    directory, for prometheus-client and for the middleware, and the address to serve."""
    host, port = address
    return {
        MULTIPROCESS_DIR: str(directory),
        "dramatiq_prom_db": str(directory),
        "dramatiq_prom_host": host,
        "dramatiq_prom_port": str(port),
    }


def sample_directory() -> Path:
    """A fresh directory for one `tocsin worker`'s samples. It outlives restarts of its
    Dramatiq (the counters of a crashed process still count) and is removed when the
    command ends (`remove_sample_directory`)."""
    return Path(tempfile.mkdtemp(prefix="tocsin-worker-metrics-"))


def remove_sample_directory(directory: Path) -> None:
    shutil.rmtree(directory, ignore_errors=True)


def install_endpoint(broker: dramatiq.Broker, settings: Settings) -> None:
    """In a worker process, at boot: serve the metrics when METRICS_WORKER_PORT is set."""
    if settings.metrics_worker_port is None:
        return
    if not os.environ.get(MULTIPROCESS_DIR):
        raise ConfigError(
            "METRICS_WORKER_PORT is served by `tocsin worker`, which gives the worker processes "
            "the directory they share their samples in; start the worker with it")
    from dramatiq.middleware.prometheus import Prometheus

    broker.add_middleware(Prometheus())
