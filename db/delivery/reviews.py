"""A person's decision on a delivery held for review: its provider call's outcome is unknown,
no provider event settled it, and the tenant's unknown-outcome policy is hold (db/delivery/recovery.py
reconcile_unknown). Either it is sent again, once, with the same Message-ID, or it is marked
delivered (the recipient confirmed it arrived) and nothing is sent. Each decision is recorded
with who made it and when, beside the attempt whose outcome was unknown."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from db.delivery.deliveries import schedule_deliveries
from db.delivery.digests import mark_digest_items_delivered
from db.delivery.recovery import HELD_REASON
from db.evidence.audit import record_audit
from db.platform.tenancy import TenantTx
from domain.delivery.states import DELIVERY, Status
from domain.errors import Conflict, NotFound

__all__ = ["Decision", "Review", "decide_held_delivery", "reviews_of"]

# Both decisions move a delivery held in unknown (to pending, or to delivered).
_DECIDED = DELIVERY.where(to=(Status.PENDING, Status.DELIVERED), from_=[Status.UNKNOWN], alias="d")


class Decision(StrEnum):
    SEND_AGAIN = "send_again"
    MARK_DELIVERED = "mark_delivered"


@dataclass(frozen=True)
class Review:
    decision: Decision
    decided_by: str  # the deciding user's email
    decided_at: datetime
    attempt_no: int


def decide_held_delivery(tx: TenantTx, delivery_id: int, decision: Decision, user_id: int) -> None:
    """Apply a person's decision to a held delivery, once: a second decision (a double click,
    a colleague at the same moment) finds it no longer held and is refused with Conflict.
    Send again puts it back to pending, due now, and hands it to the workers after commit;
    mark delivered settles it and its claim as delivered."""
    target = Status.PENDING if decision is Decision.SEND_AGAIN else Status.DELIVERED
    row = tx.conn.execute(
        f"""
        WITH held AS (
            SELECT id, attempts, notification_id, digest_id FROM notification_deliveries
            WHERE id = %(id)s AND status = 'unknown' AND status_reason = %(held)s
            FOR UPDATE
        ), moved AS (
            UPDATE notification_deliveries d
            SET status = %(target)s, unknown_since = NULL, send_after = now(), enqueued_at = NULL,
                accepted_at = CASE WHEN %(target)s = 'delivered' THEN coalesce(d.accepted_at, now())
                                   ELSE d.accepted_at END,
                status_reason = CASE WHEN %(target)s = 'delivered'
                                     THEN 'marked delivered by a person after an unknown outcome'
                                     ELSE 'sent again by a person after an unknown outcome' END,
                updated_at = now()
            FROM held h WHERE d.id = h.id AND {_DECIDED}
            RETURNING d.id, h.attempts, d.notification_id, d.digest_id
        ), reviewed AS (
            INSERT INTO delivery_reviews (delivery_id, decision, decided_by, attempt_no)
            SELECT id, %(decision)s, %(user)s, attempts FROM moved
        ), ledger AS (
            UPDATE notification_ledger l SET delivered_at = coalesce(l.delivered_at, now())
            FROM notifications n, moved m
            WHERE %(target)s = 'delivered' AND n.id = m.notification_id AND l.id = n.ledger_id
        )
        SELECT id, digest_id FROM moved
        """,
        {"id": delivery_id, "held": HELD_REASON, "target": target.value,
         "decision": decision.value, "user": user_id},
    ).fetchone()
    if row is None:
        exists = tx.conn.execute("SELECT status FROM notification_deliveries WHERE id = %s",
                                 [delivery_id]).fetchone()
        if exists is None:
            raise NotFound("there is no such delivery")
        raise Conflict("this delivery is no longer held for review: someone has decided already, "
                       "or a provider event settled it")
    record_audit(tx, f"delivery.{decision.value}", "delivery", delivery_id,
                 before={"status": "unknown"}, after={"status": target.value})
    if decision is Decision.SEND_AGAIN:
        schedule_deliveries(tx, [delivery_id])
    elif row[1] is not None:
        mark_digest_items_delivered(tx, int(str(row[1])))


def reviews_of(tx: TenantTx, delivery_ids: list[int]) -> dict[int, list[Review]]:
    """Each delivery's decisions, oldest first."""
    rows = tx.conn.execute(
        """
        SELECT r.delivery_id, r.decision, u.email, r.decided_at,
               r.attempt_no
        FROM delivery_reviews r JOIN users u ON u.id = r.decided_by
        WHERE r.delivery_id = ANY(%s) ORDER BY r.decided_at, r.id
        """,
        [delivery_ids],
    ).fetchall()
    found: dict[int, list[Review]] = {}
    for delivery_id, decision, who, at, attempt_no in rows:
        assert isinstance(at, datetime)
        found.setdefault(int(str(delivery_id)), []).append(
            Review(Decision(str(decision)), str(who), at, int(str(attempt_no))))
    return found
