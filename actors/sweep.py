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

import dramatiq

from actors.sms import sync_provider_opt_outs
from db.delivery.chat_deliveries import sweep_chats
from db.delivery.recovery import LeaseReport, ReconcileReport
from db.delivery.sms_deliveries import sweep_sms
from db.delivery.sweep import run_sweep
from db.delivery.webhook_deliveries import sweep_webhooks
from db.platform.next_work import tenants_due
from db.platform.runs import fan_out_order
from domain.liveness import RunKind
from tocsin.core import runtime
from tocsin.core.clock import utcnow
from tocsin.messaging.broker import current_broker
from tocsin.messaging.priority import BACKGROUND
from tocsin.messaging.sweeper_marker import sweeper_marker
from tocsin.monitoring.metrics import RUN_SUMMARY_MISSED, SWEEP_SECONDS

__all__ = ["sweep", "sweep_tenant"]

log = logging.getLogger("tocsin.sweep")


@dramatiq.actor(queue_name="sweep", time_limit=5 * 60_000, max_age=10 * 60_000,  # milliseconds
                 priority=BACKGROUND)
def sweep_tenant(slug: str, messages_lost: bool = False) -> None:
    with SWEEP_SECONDS.time():
        r = run_sweep(slug, messages_lost=messages_lost)
        hooks = sweep_webhooks(slug, everything_due=messages_lost)
        chats = sweep_chats(slug, everything_due=messages_lost)
        texts = sweep_sms(slug, everything_due=messages_lost)
        stopped = sync_provider_opt_outs(slug)
    if stopped:
        log.info("sms tenant=%s numbers opted out at SNS added to the STOP list: %d", slug, stopped)
    if texts.retried or texts.unknown or texts.enqueued:
        log.info("swept sms tenant=%s retried=%d unknown=%d enqueued=%d", slug, texts.retried,
                 texts.unknown, texts.enqueued)
    if hooks.retried or hooks.failed or hooks.enqueued:
        log.info("swept webhooks tenant=%s retried=%d failed=%d enqueued=%d", slug, hooks.retried,
                 hooks.failed, hooks.enqueued)
    if chats.retried or chats.failed or chats.enqueued:
        log.info("swept chats tenant=%s retried=%d failed=%d enqueued=%d", slug, chats.retried,
                 chats.failed, chats.enqueued)
    if r.leases != LeaseReport(0, 0, 0) or r.reconciled != ReconcileReport(0, 0, 0) or r.repaired \
            or r.enqueued or r.alerts_raised:
        log.info("swept tenant=%s retried=%d unknown=%d failed=%d confirmed=%d resent=%d held=%d "
                 "repaired=%d enqueued=%d alerts=%d", slug, r.leases.retried,
                 r.leases.unknown, r.leases.failed, r.reconciled.confirmed, r.reconciled.resent,
                 r.reconciled.held, r.repaired, r.enqueued, r.alerts_raised)
    if r.summary_missed or (r.summary_said_idle and not messages_lost
                            and (hooks.retried or hooks.failed or hooks.enqueued)):
        RUN_SUMMARY_MISSED.labels("sweep").inc()
        log.warning("tenant=%s: the next-work summary said no sweep was due, yet the sweep found "
                    "work: something changed what sweeps read without marking the tenant due "
                    "(db/platform/next_work.py)", slug)


@dramatiq.actor(queue_name="sweep", time_limit=60_000, max_age=10 * 60_000,  # milliseconds
                 priority=BACKGROUND)
def sweep() -> None:
    """Fan out one sweep per active tenant that can have work now, the tenants swept longest
    ago first (db/platform/runs.py fan_out_order): those the next-work summary says are due,
    and every tenant not swept for FULL_SCAN_HOURS (db/platform/next_work.py tenants_due).
    When the broker lost its messages, every active tenant, everything due enqueued again."""
    marker = sweeper_marker(runtime.settings(), current_broker())
    lost = marker.missing()
    if lost:
        log.warning("the broker holds no sweeper marker (flushed, reset or restarted empty): "
                    "re-enqueueing all due work")
    tenants = (fan_out_order(RunKind.SWEEP) if lost
               else tenants_due("sweep", utcnow(), runtime.settings().full_scan_hours))
    for slug in tenants:
        sweep_tenant.send(slug, lost)
    if lost:
        marker.leave()
    # One line per sweep, so an operator reading the worker's log sees it run every interval
    # (a tenant's sweep logs only when it changed something).
    log.info("sweep sent to %d tenant(s)%s", len(tenants), " (all due work re-enqueued)" if lost else "")
