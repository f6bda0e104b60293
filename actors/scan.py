"""The licence scan: a tick fans out one message per tenant; each tenant's scan claims,
prepares, commits, and only then are the emails enqueued (by the transaction itself)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

import dramatiq

from db.delivery.deliveries import schedule_due_deliveries
from db.notices.fanout import prepare_claims
from db.notices.licence_scan import ClaimCounts, claim_due_milestones
from db.platform.runs import fan_out_order, record_completed
from db.platform.tenancy import TenantTx, tenant_tx
from db.rules.time_rules import TimeClaimCounts, claim_time_rules
from domain.liveness import RunKind
from domain.people.identity import parse_instant
from tocsin.core.clock import utcnow
from tocsin.messaging.priority import BACKGROUND
from tocsin.monitoring.metrics import SCAN_SECONDS, count_scan, count_time_scan

log = logging.getLogger("tocsin.scan")


@dataclass(frozen=True)
class ScanReport:
    tenant: str
    counts: ClaimCounts
    time: TimeClaimCounts  # the tenant's time rules (obligations, turnarounds)
    prepared: int  # claims turned into inbox rows and deliveries
    enqueued: int  # email messages enqueued after commit


def run_scan(slug: str, as_of: datetime) -> ScanReport:
    """One tenant's scan at an explicit instant. Safe to run any number of times, at once
    or in sequence: what is claimed is skipped, what is unsent is enqueued again.

    The emails and the live-inbox announcements go out once the transaction has committed
    (db/platform/tenancy.py): a message must never name a row that might still roll back. If this
    process dies before (or while) enqueueing, the sweeper sends the rows later.

    The time rules' claims are prepared by the rules' own path once this transaction has
    committed (their product's preparation queue; the sweeper's unprepared_rule_claims if
    that message is lost)."""
    with tenant_tx(slug) as tx:
        counts = claim_due_milestones(tx, as_of)
        time_counts = _time_rules_apart(tx, as_of)
        prepared = prepare_claims(tx, as_of)
        to_send = schedule_due_deliveries(tx)
        # For `tocsin status` and the next tick's order; in the scan's own transaction, so
        # that a scan costs one transaction (one tenant lookup, one commit), not two.
        record_completed(tx, RunKind.SCAN)
    return ScanReport(slug, counts, time_counts, prepared, len(to_send))


def _time_rules_apart(tx: TenantTx, as_of: datetime) -> TimeClaimCounts:
    """The time rules' part of a scan in a savepoint: whatever fails there (each rule has a
    savepoint of its own inside) undoes only its own claims, never the licence claims made
    before it in the same transaction."""
    waiting = len(tx.claims_to_prepare)
    try:
        with tx.conn.transaction():
            counts = claim_time_rules(tx, as_of)
    except Exception as error:
        del tx.claims_to_prepare[waiting:]  # rolled back with the savepoint
        log.exception("tenant=%s time rules' scan failed (licence claims kept)", tx.tenant.slug)
        return TimeClaimCounts(failed=(f"the time rules' scan: {type(error).__name__}: {error}",))
    for failure in counts.failed:
        log.error("tenant=%s time rule failed alone: %s", tx.tenant.slug, failure)
    return counts


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


@dramatiq.actor(queue_name="scan", time_limit=60_000, priority=BACKGROUND)  # milliseconds
def tick(as_of: str | None = None) -> None:
    """Fan out one scan per active tenant, all for the same instant, the tenants scanned
    longest ago first (db/platform/runs.py fan_out_order: no tenant waits behind the same others)."""
    instant = parse_instant(as_of) if as_of else utcnow()
    for slug in fan_out_order(RunKind.SCAN):
        scan_tenant.send(slug, instant.isoformat())
