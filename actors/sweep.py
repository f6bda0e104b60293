"""The sweeper: recovery from Postgres state alone, run by the clock every minute.

It re-enqueues what is due and unsent, turns expired leases into retries or unknown
outcomes, reconciles unknown outcomes, repairs claims committed without their
notifications, and raises and publishes ops alerts. Every step is guarded in SQL, so a
second sweep, or a sweep from a second clock at the same moment, changes nothing.

A flushed (or restarted, empty) Redis, or a reset RabbitMQ, is noticed by a marker that only
the sweeper writes (tocsin/messaging/sweeper_marker.py): when it is missing, every due delivery is
enqueued again, not only stale ones.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

import dramatiq

from db.delivery.alerts import has_unpublished, raise_alerts
from db.delivery.deliveries import schedule_due_deliveries
from db.delivery.recovery import LeaseReport, ReconcileReport, expire_leases, reconcile_unknown
from db.notices.fanout import prepare_claims
from db.notices.rule_notices import unprepared_rule_claims
from db.people.preferences import release_due_deferrals
from db.platform.runs import fan_out_order, record_completed
from db.platform.tenancy import tenant_tx
from domain.delivery.states import UnknownPolicy
from domain.liveness import RunKind
from tocsin.core import runtime
from tocsin.core.clock import utcnow
from tocsin.messaging.broker import current_broker
from tocsin.messaging.priority import BACKGROUND
from tocsin.messaging.sweeper_marker import sweeper_marker
from tocsin.monitoring.metrics import SWEEP_SECONDS
from tocsin.monitoring.ops_alerts import publish_alerts

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
    now = utcnow()
    # One transaction: each one costs a pool check-out, a tenant lookup and a commit (a WAL
    # flush), the fixed cost that dominates a sweep over thousands of quiet tenants. Every
    # step is a guarded UPDATE, so doing them together changes no outcome; the emails and
    # the repaired claims' readers are told once it commits, by the transaction.
    with tenant_tx(slug) as tx:
        leases = expire_leases(tx)
        reconciled = reconcile_unknown(tx, settings.reconcile_window_seconds,
                                       UnknownPolicy(tx.tenant.unknown_outcome_policy))
        repaired = prepare_claims(tx, now)
        # Rule claims whose preparation message was lost: to their product's queue again.
        repaired += unprepared_rule_claims(tx, settings.sweep_interval_seconds)
        release_due_deferrals(tx, now)  # quiet hours over: due now, by the app's clock
        to_send = schedule_due_deliveries(tx, everything=messages_lost)
        raised = raise_alerts(tx, timedelta(seconds=settings.stuck_grace_seconds))
        alerts_waiting = has_unpublished(tx)
        # For `tocsin status`, Needs attention and the next sweep's order.
        record_completed(tx, RunKind.SWEEP)
    # Publishing talks to SNS with the alert rows locked: its own transaction, and only
    # when there is something to publish.
    published = publish_alerts(slug) if alerts_waiting else 0
    return SweepReport(slug, leases, reconciled, repaired, len(to_send), raised, published)


@dramatiq.actor(queue_name="sweep", time_limit=5 * 60_000, max_age=10 * 60_000,  # milliseconds
                 priority=BACKGROUND)
def sweep_tenant(slug: str, messages_lost: bool = False) -> None:
    with SWEEP_SECONDS.time():
        r = run_sweep(slug, messages_lost=messages_lost)
    if r.leases != LeaseReport(0, 0, 0) or r.reconciled != ReconcileReport(0, 0, 0) or r.repaired \
            or r.enqueued or r.alerts_raised:
        log.info("swept tenant=%s retried=%d unknown=%d failed=%d confirmed=%d resent=%d held=%d "
                 "repaired=%d enqueued=%d alerts=%d published=%d", slug, r.leases.retried,
                 r.leases.unknown, r.leases.failed, r.reconciled.confirmed, r.reconciled.resent,
                 r.reconciled.held, r.repaired, r.enqueued, r.alerts_raised, r.alerts_published)


@dramatiq.actor(queue_name="sweep", time_limit=60_000, max_age=10 * 60_000,  # milliseconds
                 priority=BACKGROUND)
def sweep() -> None:
    """Fan out one sweep per active tenant, the tenants swept longest ago first
    (db/platform/runs.py fan_out_order)."""
    marker = sweeper_marker(runtime.settings(), current_broker())
    lost = marker.missing()
    if lost:
        log.warning("the broker holds no sweeper marker (flushed, reset or restarted empty): "
                    "re-enqueueing all due work")
    tenants = fan_out_order(RunKind.SWEEP)
    for slug in tenants:
        sweep_tenant.send(slug, lost)
    if lost:
        marker.leave()
    # One line per sweep, so an operator reading the worker's log sees it run every interval
    # (a tenant's sweep logs only when it changed something).
    log.info("sweep sent to %d tenant(s)%s", len(tenants), " (all due work re-enqueued)" if lost else "")
