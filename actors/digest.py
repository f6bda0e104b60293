"""Digests: the clock's tick fans out one build per tenant; each build claims the digests
due by then, commits, and only then enqueues their emails."""

from __future__ import annotations

import logging
from datetime import datetime

import dramatiq

from db.delivery.deliveries import schedule_deliveries
from db.delivery.digests import BuiltDigest, build_due_digests
from db.platform.runs import fan_out_order, record_completed
from db.platform.tenancy import tenant_tx
from domain.liveness import RunKind
from domain.people.identity import parse_instant
from tocsin.core.clock import utcnow
from tocsin.messaging.priority import BACKGROUND

__all__ = ["build_digests", "digest_tick", "run_digests"]

log = logging.getLogger("tocsin.digest")


def run_digests(slug: str, as_of: datetime) -> list[BuiltDigest]:
    """One tenant's digests due by ``as_of``. Safe to run any number of times, at once or
    in sequence: a claimed (user, period) is skipped. A lost enqueue is re-sent by the
    sweeper, which finds the digest's delivery pending in Postgres."""
    with tenant_tx(slug) as tx:
        built = build_due_digests(tx, as_of)
        # Sent once this commits, by the transaction: never naming a row that may roll back.
        schedule_deliveries(tx, [digest.delivery_id for digest in built])
        record_completed(tx, RunKind.DIGEST)  # for `tocsin status`, in the same transaction
    return built


@dramatiq.actor(queue_name="digest", time_limit=10 * 60_000, priority=BACKGROUND)  # milliseconds
def build_digests(slug: str, as_of: str) -> None:
    built = run_digests(slug, parse_instant(as_of))
    log.info("digests tenant=%s as_of=%s built=%d items=%d", slug, as_of, len(built),
             sum(d.items for d in built))


@dramatiq.actor(queue_name="digest", time_limit=60_000, priority=BACKGROUND)  # milliseconds
def digest_tick(as_of: str | None = None) -> None:
    """Fan out one digest build per active tenant, all for the same instant, the tenants
    built longest ago first (db/platform/runs.py fan_out_order)."""
    instant = parse_instant(as_of) if as_of else utcnow()
    for slug in fan_out_order(RunKind.DIGEST):
        build_digests.send(slug, instant.isoformat())
