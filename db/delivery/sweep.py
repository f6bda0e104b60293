"""One tenant's sweep, the use case behind the sweeper actor (actors/sweep.py) and `tocsin
sweep`: recovery from PostgreSQL state alone, in one transaction. It turns expired leases
into retries or unknown outcomes, reconciles unknown outcomes, repairs claims committed
without their notifications, releases deferrals whose quiet hours are over, schedules what
is due and unsent, and raises ops alerts, published once it has committed. Every step is a
guarded statement, so a second sweep at the same moment changes nothing."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from db.delivery.alerts import has_unpublished, raise_alerts
from db.delivery.deliveries import REENQUEUE_AFTER_SECONDS, schedule_due_deliveries
from db.delivery.recovery import LeaseReport, ReconcileReport, expire_leases, reconcile_unknown
from db.delivery.webhook_deliveries import REENQUEUE_AFTER_SECONDS as WEBHOOK_REENQUEUE_AFTER_SECONDS
from db.notices.fanout import prepare_claims
from db.notices.rule_notices import unprepared_rule_claims
from db.people.preferences import release_due_deferrals
from db.platform.effects import PublishAlerts
from db.platform.next_work import begin_visit, mute_own_notes, record_next
from db.platform.runs import record_completed
from db.platform.tenancy import TenantTx, tenant_tx
from domain.delivery.states import UnknownPolicy
from domain.liveness import RunKind
from tocsin.core import runtime
from tocsin.core.clock import utcnow

__all__ = ["SweepReport", "next_sweep_instant", "run_sweep"]


@dataclass(frozen=True)
class SweepReport:
    tenant: str
    leases: LeaseReport
    reconciled: ReconcileReport
    repaired: int  # claims given the notifications they were committed without
    enqueued: int
    alerts_raised: int
    alerts_waiting: bool  # published once the sweep has committed (a PublishAlerts effect)
    # The next-work summary (db/platform/next_work.py) said no sweep was due here ...
    summary_said_idle: bool = False
    # ... and this one changed something: what the summary missed (goal: never).
    summary_missed: bool = False

    @property
    def found_work(self) -> bool:
        """Leases moved, outcomes reconciled, claims repaired, deliveries enqueued, alerts
        raised or waiting to be published."""
        return bool(self.leases != LeaseReport(0, 0, 0) or self.reconciled != ReconcileReport(0, 0, 0)
                    or self.repaired or self.enqueued or self.alerts_raised or self.alerts_waiting)


def run_sweep(slug: str, *, messages_lost: bool = False) -> SweepReport:
    """One tenant's sweep. Its next instant (``next_sweep_instant``, computed in the same
    transaction) goes into the next-work summary once it has committed, unless something
    changed meanwhile (db/platform/next_work.py)."""
    settings = runtime.settings()
    now = utcnow()
    visit = begin_visit("sweep", slug, now)
    # One transaction: each one costs a pool check-out, a tenant lookup and a commit (a WAL
    # flush), the fixed cost that dominates a sweep over thousands of quiet tenants. Every
    # step is a guarded UPDATE, so doing them together changes no outcome; the emails and
    # the repaired claims' readers are told once it commits, by the transaction.
    with tenant_tx(slug, once_per_tick=True) as tx:
        mute_own_notes(tx, "sweep")  # what it moves is in the instant it computes
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
        next_at = next_sweep_instant(tx, reconcile_window_seconds=settings.reconcile_window_seconds,
                                     sweep_interval_seconds=settings.sweep_interval_seconds,
                                     stuck_grace=timedelta(seconds=settings.stuck_grace_seconds))
        # Nothing sent or published (an idle tenant's sweep, most of them): its commit need
        # not wait for the WAL flush (redone by the next sweep if a crash loses it).
        tx.commit_unflushed_if_nothing_leaves()
    report = SweepReport(slug, leases, reconciled, repaired, len(to_send), raised, alerts_waiting)
    if visit is None:
        return report
    record_next(visit, next_at)
    # A sweep after the broker lost its messages enqueues everything on purpose: not missed.
    return replace(report, summary_said_idle=visit.summary_said_idle,
                   summary_missed=visit.summary_said_idle and report.found_work and not messages_lost)


# The earliest instant at which each of the sweep's steps can find work, as the steps select
# it: a lease running out; a deferral's end; a pending delivery coming due, or its message
# going stale in the broker; an unknown outcome's reconciliation window closing; one held
# for review, or a failed delivery, not alerted yet; a licence claim without notifications;
# a rule claim whose preparation message may be lost; a claim that becomes stuck; an alert
# not published; the webhooks' leases and due deliveries. now() (this transaction's start)
# for what is due at once. NULL: nothing ahead until something changes (and then a trigger
# of tenant migration 0061 makes the tenant due).
_NEXT_SWEEP = """
SELECT least(
  (SELECT min(CASE
       WHEN d.status = 'sending' THEN d.lease_until
       WHEN d.status = 'deferred' THEN d.send_after
       WHEN d.status = 'pending' AND d.enqueued_at IS NULL THEN d.send_after
       WHEN d.status = 'pending'
           THEN greatest(d.send_after, d.enqueued_at + make_interval(secs => %(stale)s))
       WHEN d.status = 'unknown' AND d.status_reason IS NULL
           THEN d.unknown_since + make_interval(secs => %(window)s)
       WHEN d.status = 'unknown' AND d.status_reason LIKE 'held for review%%' AND NOT EXISTS (
               SELECT 1 FROM ops_alerts a WHERE a.kind = 'unknown_held' AND a.ref_id = d.id)
           THEN now()
       WHEN d.status = 'failed' AND NOT EXISTS (
               SELECT 1 FROM ops_alerts a WHERE a.kind = 'failed_delivery' AND a.ref_id = d.id)
           THEN now()
     END)
   FROM notification_deliveries d
   WHERE d.status IN ('pending', 'deferred', 'sending', 'unknown', 'failed')),
  (SELECT min(CASE
       WHEN l.rule_id IS NULL AND l.prepared_at IS NULL THEN now()
       WHEN l.rule_id IS NOT NULL AND l.prepared_at IS NULL AND l.prepare_failed_at IS NULL
           THEN least(l.claimed_at + make_interval(secs => %(interval)s), l.claimed_at + %(grace)s)
       WHEN l.prepare_failed_at IS NULL AND NOT EXISTS (
               SELECT 1 FROM ops_alerts a WHERE a.kind = 'stuck_claim' AND a.ref_id = l.id)
            AND NOT EXISTS (
               SELECT 1 FROM notifications n JOIN notification_deliveries nd ON nd.notification_id = n.id
               WHERE n.ledger_id = l.id AND nd.status NOT IN ('pending', 'sending'))
           THEN l.claimed_at + %(grace)s
     END)
   FROM notification_ledger l WHERE l.status = 'claimed' AND l.delivered_at IS NULL),
  (SELECT now() FROM ops_alerts WHERE published_at IS NULL LIMIT 1),
  (SELECT min(CASE WHEN w.status = 'sending' THEN w.lease_until
                   WHEN w.enqueued_at IS NULL THEN w.send_after
                   ELSE greatest(w.send_after, w.enqueued_at + make_interval(secs => %(webhook_stale)s))
              END)
   FROM webhook_deliveries w JOIN webhook_endpoints e ON e.id = w.endpoint_id
   WHERE w.status = 'sending' OR (w.status = 'pending' AND e.enabled))
)
"""


def next_sweep_instant(tx: TenantTx, *, reconcile_window_seconds: int, sweep_interval_seconds: int,
                       stuck_grace: timedelta) -> datetime | None:
    """When a sweep can next find work in ``tx``'s tenant (None: not before something
    changes), from what ``tx`` sees."""
    row = tx.conn.execute(_NEXT_SWEEP, {
        "stale": REENQUEUE_AFTER_SECONDS, "window": reconcile_window_seconds,
        "interval": sweep_interval_seconds, "grace": stuck_grace,
        "webhook_stale": WEBHOOK_REENQUEUE_AFTER_SECONDS}).fetchone()
    value = None if row is None else row[0]
    return value if isinstance(value, datetime) else None
