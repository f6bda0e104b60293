"""The licence scan: a tick fans out one message per tenant; each tenant's scan claims,
prepares, commits, and only then enqueues the emails."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime

import dramatiq

from actors.email import deliver_email
from db.deliveries import deliveries_to_enqueue, mark_enqueued
from db.ledger import prepare_claims
from db.licences import ClaimCounts, claim_due_milestones
from db.runs import mark_completed
from db.tenancy import list_tenants, tenant_tx
from domain.identity import parse_instant
from domain.liveness import RunKind
from tocsin.inbox_events import announce_new_notifications

log = logging.getLogger("tocsin.scan")


@dataclass(frozen=True)
class ScanReport:
    tenant: str
    counts: ClaimCounts
    prepared: int  # claims turned into inbox rows and deliveries
    enqueued: int  # email messages enqueued after commit


def run_scan(slug: str, as_of: datetime) -> ScanReport:
    """One tenant's scan at an explicit instant. Safe to run any number of times, at once
    or in sequence: what is claimed is skipped, what is unsent is enqueued again."""
    with tenant_tx(slug) as tx:
        counts = claim_due_milestones(tx, as_of)
        prepared = prepare_claims(tx, as_of)
        to_send = deliveries_to_enqueue(tx)
    # After commit: a message must never name a row that might still roll back. If this
    # process dies before (or while) enqueueing, the rows stay unenqueued and the next
    # scan sends them. The open inbox pages of the people notified hear of it likewise.
    announce_new_notifications(tx)
    enqueue_deliveries(slug, to_send)
    mark_completed(slug, RunKind.SCAN)  # for `tocsin status`: the scans run
    return ScanReport(slug, counts, prepared, len(to_send))


def enqueue_deliveries(slug: str, delivery_ids: list[int]) -> None:
    if not delivery_ids:
        return
    for delivery_id in delivery_ids:
        deliver_email.send(slug, delivery_id)
    with tenant_tx(slug) as tx:
        mark_enqueued(tx, delivery_ids)


@dramatiq.actor(queue_name="scan", time_limit=10 * 60_000)  # milliseconds
def scan_tenant(slug: str, as_of: str) -> None:
    report = run_scan(slug, parse_instant(as_of))
    c = report.counts
    log.info("scanned tenant=%s as_of=%s claimed=%d skipped=%d expired=%d closed=%d enqueued=%d",
             slug, as_of, c.claimed, c.skipped, c.expired, c.closed, report.enqueued)


@dramatiq.actor(queue_name="scan", time_limit=60_000)  # milliseconds
def tick(as_of: str | None = None) -> None:
    """Fan out one scan per active tenant, all for the same instant."""
    instant = parse_instant(as_of) if as_of else datetime.now(UTC)
    for tenant in list_tenants(active_only=True):
        scan_tenant.send(tenant.slug, instant.isoformat())
