"""Digests: the clock's tick fans out one build per tenant; each build claims the digests
due by then, commits, and only then enqueues their emails."""

from __future__ import annotations

import logging
from datetime import datetime

import dramatiq

from db.delivery.deliveries import schedule_deliveries
from db.delivery.digests import BuiltDigest, build_due_digests, next_digest_at
from db.platform.next_work import begin_visit, mute_own_notes, record_next, tenants_due
from db.platform.runs import record_completed
from db.platform.tenancy import tenant_tx
from domain.liveness import RunKind
from domain.people.identity import parse_instant
from tocsin.core import runtime
from tocsin.core.clock import utcnow
from tocsin.messaging.priority import BACKGROUND
from tocsin.monitoring.metrics import RUN_SUMMARY_MISSED

__all__ = ["build_digests", "digest_tick", "run_digests"]

log = logging.getLogger("tocsin.digest")


def run_digests(slug: str, as_of: datetime) -> list[BuiltDigest]:
    """One tenant's digests due by ``as_of``. Safe to run any number of times, at once or
    in sequence: a claimed (user, period) is skipped. A lost enqueue is re-sent by the
    sweeper, which finds the digest's delivery pending in Postgres.

    The tenant's next digest instant goes into the next-work summary once this has
    committed (db/platform/next_work.py); a build that finds digests the summary said were
    not due counts in tocsin_run_summary_missed_total{kind="digest"} with a warning."""
    visit = begin_visit("digest", slug, as_of)
    with tenant_tx(slug, once_per_tick=True) as tx:
        mute_own_notes(tx, "digest")  # its own writes are in the instant it computes
        built = build_due_digests(tx, as_of)
        # Sent once this commits, by the transaction: never naming a row that may roll back.
        schedule_deliveries(tx, [digest.delivery_id for digest in built])
        record_completed(tx, RunKind.DIGEST)  # for `tocsin status`, in the same transaction
        next_at = next_digest_at(tx, as_of)
    if visit is not None:
        record_next(visit, next_at)
        if visit.summary_said_idle and built:
            RUN_SUMMARY_MISSED.labels("digest").inc()
            log.warning("tenant=%s as_of=%s: the next-work summary said no digest was due, yet "
                        "%d were built: something changed what digest builds read without "
                        "marking the tenant due (db/platform/next_work.py)", slug, as_of.isoformat(),
                        len(built))
    return built


@dramatiq.actor(queue_name="digest", time_limit=10 * 60_000, priority=BACKGROUND)  # milliseconds
def build_digests(slug: str, as_of: str) -> None:
    built = run_digests(slug, parse_instant(as_of))
    log.info("digests tenant=%s as_of=%s built=%d items=%d", slug, as_of, len(built),
             sum(d.items for d in built))


@dramatiq.actor(queue_name="digest", time_limit=60_000, priority=BACKGROUND)  # milliseconds
def digest_tick(as_of: str | None = None) -> None:
    """Fan out one digest build per active tenant where a digest can fall due, all for the
    same instant, the tenants built longest ago first (db/platform/runs.py fan_out_order):
    those the next-work summary says are due, and every tenant not built for
    FULL_SCAN_HOURS (db/platform/next_work.py tenants_due)."""
    instant = parse_instant(as_of) if as_of else utcnow()
    for slug in tenants_due("digest", instant, runtime.settings().full_scan_hours):
        build_digests.send(slug, instant.isoformat())
