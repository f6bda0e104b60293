"""The licence scan: a tick fans out one message per tenant; each tenant's scan
(db/notices/scan.py) claims, prepares, commits, and only then are the emails enqueued
(by the transaction itself)."""

from __future__ import annotations

import logging

import dramatiq

from db.notices.scan import run_scan
from db.platform.next_work import tenants_due_for_scan
from domain.people.identity import parse_instant
from tocsin.core import runtime
from tocsin.core.clock import utcnow
from tocsin.messaging.priority import BACKGROUND
from tocsin.monitoring.metrics import SCAN_SECONDS, SCAN_SUMMARY_MISSED, count_scan, count_time_scan

__all__ = ["scan_tenant", "tick"]

log = logging.getLogger("tocsin.scan")


@dramatiq.actor(queue_name="scan", time_limit=10 * 60_000, priority=BACKGROUND)  # milliseconds
def scan_tenant(slug: str, as_of: str) -> None:
    with SCAN_SECONDS.time():
        report = run_scan(slug, parse_instant(as_of))
    c, t = report.counts, report.time
    count_scan(c)
    count_time_scan(t)
    log.info("scanned tenant=%s as_of=%s claimed=%d skipped=%d expired=%d closed=%d enqueued=%d "
             "time_claimed=%d time_skipped=%d time_cancelled=%d", slug, as_of, c.claimed, c.skipped,
             c.expired, c.closed, report.enqueued, t.claimed, t.skipped, t.cancelled)
    if report.summary_missed:
        SCAN_SUMMARY_MISSED.inc()
        log.warning("tenant=%s as_of=%s: the next-work summary said nothing was due, yet the scan "
                    "found work (claimed=%d skipped=%d expired=%d closed=%d time_claimed=%d "
                    "time_skipped=%d time_cancelled=%d): something changed what scans read "
                    "without marking the tenant due (db/platform/next_work.py)", slug, as_of,
                    c.claimed, c.skipped, c.expired, c.closed, t.claimed, t.skipped, t.cancelled)


@dramatiq.actor(queue_name="scan", time_limit=60_000, priority=BACKGROUND)  # milliseconds
def tick(as_of: str | None = None) -> None:
    """Fan out one scan per active tenant that can have work at this instant, all for the
    same instant, the tenants scanned longest ago first (no tenant waits behind the same
    others): those the next-work summary says are due, and every tenant not scanned for
    FULL_SCAN_HOURS (db/platform/next_work.py tenants_due_for_scan)."""
    instant = parse_instant(as_of) if as_of else utcnow()
    for slug in tenants_due_for_scan(instant, runtime.settings().full_scan_hours):
        scan_tenant.send(slug, instant.isoformat())
