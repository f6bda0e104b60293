"""What the sweeper repairs, from Postgres state alone: expired leases and unknown outcomes.

Each statement locks the rows it moves with SKIP LOCKED and guards every UPDATE with the
statuses it may leave, so two sweepers (two clocks) never move a row twice.
"""

from __future__ import annotations

from dataclasses import dataclass

from db.delivery.digests import mark_digest_items_delivered
from db.platform.tenancy import TenantTx
from domain.delivery.states import DELIVERY, MAX_ATTEMPTS, Status, UnknownPolicy

__all__ = ["HELD_REASON", "LeaseReport", "ReconcileReport", "expire_leases", "reconcile_unknown"]

# Why a delivery whose outcome is unknown waits for a person (the tenant's policy is hold):
# Needs attention lists it with two decisions (db/delivery/reviews.py).
HELD_REASON = "held for review: no provider event arrived after an unknown outcome"

# The status guards of the UPDATEs below, from the domain's DELIVERY machine.
_LEASE_EXPIRED = DELIVERY.where(to=(Status.UNKNOWN, Status.FAILED, Status.PENDING),
                                from_=[Status.SENDING], alias="d")
_PROVEN = DELIVERY.where(to=Status.ACCEPTED, from_=[Status.UNKNOWN], alias="d")
_RESENT = DELIVERY.where(to=Status.PENDING, from_=[Status.UNKNOWN])


@dataclass(frozen=True)
class LeaseReport:
    retried: int  # the worker stopped before calling the provider: safe to send again
    unknown: int  # the worker called the provider and the answer was lost
    failed: int  # out of attempts


def expire_leases(tx: TenantTx) -> LeaseReport:
    """Deliveries whose worker held them past the lease: back to pending when the provider
    was never called, unknown when it was. The token is kept, so the original worker's
    late answer, if it ever comes, is still recorded."""
    rows = tx.conn.execute(
        f"""
        WITH expired AS (
            SELECT d.id, d.claim_token, d.attempts,
                   EXISTS (SELECT 1 FROM delivery_attempts a
                           WHERE a.delivery_id = d.id AND a.claim_token = d.claim_token
                             AND a.provider_called_at IS NOT NULL) AS called
            FROM notification_deliveries d
            WHERE d.status = 'sending' AND d.lease_until < now()
            ORDER BY d.id
            FOR UPDATE OF d SKIP LOCKED
        ), moved AS (
            UPDATE notification_deliveries d
            SET status = CASE WHEN e.called THEN 'unknown'
                              WHEN e.attempts >= %(max)s THEN 'failed' ELSE 'pending' END,
                unknown_since = CASE WHEN e.called THEN now() END,
                lease_until = NULL, enqueued_at = NULL, send_after = now(),
                last_error = 'the worker stopped before recording the outcome',
                last_error_class = CASE WHEN e.called THEN 'uncertain' ELSE 'transient' END,
                updated_at = now()
            FROM expired e
            WHERE d.id = e.id AND {_LEASE_EXPIRED}
            RETURNING d.id, d.status
        ), ended AS (
            UPDATE delivery_attempts a
            SET ended_at = now(), outcome = CASE WHEN e.called THEN 'unknown' ELSE 'abandoned' END,
                unknown_at = CASE WHEN e.called THEN now() END,
                error_class = CASE WHEN e.called THEN 'uncertain' ELSE 'transient' END,
                error = 'lease expired before the outcome was recorded'
            FROM expired e
            WHERE a.delivery_id = e.id AND a.claim_token = e.claim_token AND a.ended_at IS NULL
        )
        SELECT status, count(*) FROM moved GROUP BY status
        """,
        {"max": MAX_ATTEMPTS},
    ).fetchall()
    counts = {str(r[0]): int(str(r[1])) for r in rows}
    return LeaseReport(counts.get("pending", 0), counts.get("unknown", 0), counts.get("failed", 0))


@dataclass(frozen=True)
class ReconcileReport:
    confirmed: int  # a provider event proved the send: accepted, not resent
    resent: int  # no event within the window: sent again with the same Message-ID
    held: int  # no event, and the tenant holds unknown outcomes for review


def reconcile_unknown(tx: TenantTx, window_seconds: int, policy: UnknownPolicy) -> ReconcileReport:
    """Unknown outcomes older than the window. An event from the provider naming the
    delivery settles it as accepted; without one, the tenant's policy decides."""
    confirmed = tx.conn.execute(
        f"""
        WITH proven AS (
            SELECT d.id, d.notification_id, e.provider_message_id
            FROM notification_deliveries d
            JOIN LATERAL (SELECT provider_message_id FROM delivery_events ev
                          WHERE ev.delivery_id = d.id ORDER BY ev.occurred_at LIMIT 1) e ON true
            WHERE d.status = 'unknown'
            ORDER BY d.id FOR UPDATE OF d SKIP LOCKED
        ), accepted AS (
            UPDATE notification_deliveries d
            SET status = 'accepted', accepted_at = now(), unknown_since = NULL,
                provider_message_id = coalesce(d.provider_message_id, p.provider_message_id),
                status_reason = NULL, updated_at = now()
            FROM proven p WHERE d.id = p.id AND {_PROVEN}
            RETURNING d.notification_id, d.digest_id
        ), ledger AS (
            UPDATE notification_ledger l SET delivered_at = coalesce(l.delivered_at, now())
            FROM notifications n, accepted a
            WHERE n.id = a.notification_id AND l.id = n.ledger_id
        )
        SELECT digest_id FROM accepted
        """
    ).fetchall()
    for (digest_id,) in confirmed:
        if digest_id is not None:
            mark_digest_items_delivered(tx, int(str(digest_id)))
    if policy is UnknownPolicy.RESEND:
        moved = tx.conn.execute(
            f"""
            UPDATE notification_deliveries
            SET status = 'pending', send_after = now(), enqueued_at = NULL, unknown_since = NULL,
                status_reason = 'resent after an unknown outcome', updated_at = now()
            WHERE id IN (
                SELECT id FROM notification_deliveries
                WHERE status = 'unknown' AND unknown_since < now() - make_interval(secs => %s)
                ORDER BY id FOR UPDATE SKIP LOCKED
            ) AND {_RESENT}
            RETURNING id
            """,
            [window_seconds],
        ).fetchall()
        return ReconcileReport(len(confirmed), len(moved), 0)
    held = tx.conn.execute(
        """
        UPDATE notification_deliveries
        SET status_reason = %s, updated_at = now()
        WHERE id IN (
            SELECT id FROM notification_deliveries
            WHERE status = 'unknown' AND status_reason IS NULL
              AND unknown_since < now() - make_interval(secs => %s)
            ORDER BY id FOR UPDATE SKIP LOCKED
        )
        RETURNING id
        """,
        [HELD_REASON, window_seconds],
    ).fetchall()
    return ReconcileReport(len(confirmed), 0, len(held))
