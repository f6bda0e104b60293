"""One tenant's sweep, the use case behind the sweeper actor (actors/sweep.py) and `tocsin
sweep`: recovery from PostgreSQL state alone, in one transaction. It turns expired leases
into retries or unknown outcomes, reconciles unknown outcomes, repairs claims committed
without their notifications, releases deferrals whose quiet hours are over, schedules what
is due and unsent, and raises ops alerts, published once it has committed. Every step is a
guarded statement, so a second sweep at the same moment changes nothing."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from db.delivery.alerts import has_unpublished, raise_alerts
from db.delivery.deliveries import schedule_due_deliveries
from db.delivery.recovery import LeaseReport, ReconcileReport, expire_leases, reconcile_unknown
from db.notices.fanout import prepare_claims
from db.notices.rule_notices import unprepared_rule_claims
from db.people.preferences import release_due_deferrals
from db.platform.effects import PublishAlerts
from db.platform.runs import record_completed
from db.platform.tenancy import tenant_tx
from domain.delivery.states import UnknownPolicy
from domain.liveness import RunKind
from tocsin.core import runtime
from tocsin.core.clock import utcnow

__all__ = ["SweepReport", "run_sweep"]


@dataclass(frozen=True)
class SweepReport:
    tenant: str
    leases: LeaseReport
    reconciled: ReconcileReport
    repaired: int  # claims given the notifications they were committed without
    enqueued: int
    alerts_raised: int
    alerts_waiting: bool  # published once the sweep has committed (a PublishAlerts effect)


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
        if alerts_waiting:  # SNS is called once this transaction has committed, never inside it
            tx.after_commit(PublishAlerts())
        # For `tocsin status`, Needs attention and the next sweep's order.
        record_completed(tx, RunKind.SWEEP)
    return SweepReport(slug, leases, reconciled, repaired, len(to_send), raised, alerts_waiting)
