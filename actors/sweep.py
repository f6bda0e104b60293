"""The sweeper: recovery from Postgres state alone, run by the clock every minute.

It re-enqueues what is due and unsent, turns expired leases into retries or unknown
outcomes, reconciles unknown outcomes, repairs claims committed without their
notifications, and raises and publishes ops alerts. Every step is guarded in SQL, so a
second sweep, or a sweep from a second clock at the same moment, changes nothing.

A flushed (or restarted, empty) Redis, or a reset RabbitMQ, is noticed by a marker that only
the sweeper writes (actors/sweeper_marker.py): when it is missing, every due delivery is
enqueued again, not only stale ones.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

import dramatiq

from actors.broker import current_broker
from actors.ops import publish_alerts
from actors.sweeper_marker import sweeper_marker
from db.alerts import raise_alerts
from db.deliveries import schedule_due_deliveries
from db.ledger import prepare_claims
from db.preferences import release_due_deferrals
from db.recovery import LeaseReport, ReconcileReport, expire_leases, reconcile_unknown
from db.runs import mark_completed
from db.tenancy import list_tenants, tenant_tx
from domain.delivery import UnknownPolicy
from domain.liveness import RunKind
from tocsin import runtime
from tocsin.timekeeping import utcnow

log = logging.getLogger("tocsin.sweep")


@dataclass(frozen=True)
class SweepReport:
    tenant: str
    leases: LeaseReport
    reconciled: ReconcileReport
    repaired: int  # claims given the notifications they were committed without
    enqueued: int
    alerts_raised: int
    alerts_published: int


def run_sweep(slug: str, *, messages_lost: bool = False) -> SweepReport:
    settings = runtime.settings()
    with tenant_tx(slug) as tx:
        leases = expire_leases(tx)
    with tenant_tx(slug) as tx:
        reconciled = reconcile_unknown(tx, settings.reconcile_window_seconds,
                                       UnknownPolicy(tx.tenant.unknown_outcome_policy))
    # Sent (and repaired claims' readers told) once this commits, by the transaction.
    with tenant_tx(slug) as tx:
        repaired = prepare_claims(tx, utcnow())
        release_due_deferrals(tx, utcnow())  # quiet hours over: due now, by the app's clock
        to_send = schedule_due_deliveries(tx, everything=messages_lost)
    with tenant_tx(slug) as tx:
        raised = raise_alerts(tx, timedelta(seconds=settings.stuck_grace_seconds))
    published = publish_alerts(slug)
    mark_completed(slug, RunKind.SWEEP)  # for `tocsin status` and Needs attention: deliveries are processed
    return SweepReport(slug, leases, reconciled, repaired, len(to_send), raised, published)


@dramatiq.actor(queue_name="sweep", time_limit=5 * 60_000, max_age=10 * 60_000)  # milliseconds
def sweep_tenant(slug: str, messages_lost: bool = False) -> None:
    r = run_sweep(slug, messages_lost=messages_lost)
    if r.leases != LeaseReport(0, 0, 0) or r.reconciled != ReconcileReport(0, 0, 0) or r.repaired \
            or r.enqueued or r.alerts_raised:
        log.info("swept tenant=%s retried=%d unknown=%d failed=%d confirmed=%d resent=%d held=%d "
                 "repaired=%d enqueued=%d alerts=%d published=%d", slug, r.leases.retried,
                 r.leases.unknown, r.leases.failed, r.reconciled.confirmed, r.reconciled.resent,
                 r.reconciled.held, r.repaired, r.enqueued, r.alerts_raised, r.alerts_published)


@dramatiq.actor(queue_name="sweep", time_limit=60_000, max_age=10 * 60_000)  # milliseconds
def sweep() -> None:
    """Fan out one sweep per active tenant."""
    marker = sweeper_marker(runtime.settings(), current_broker())
    lost = marker.missing()
    if lost:
        log.warning("the broker holds no sweeper marker (flushed, reset or restarted empty): "
                    "re-enqueueing all due work")
    for tenant in list_tenants(active_only=True):
        sweep_tenant.send(tenant.slug, lost)
    if lost:
        marker.leave()
