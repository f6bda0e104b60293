"""SMS deliveries: one per notification (one claim, one recipient), queued with the notices,
claimed under a lease and a token, the publish marked (and its price reserved against the
month's cap) in its own commit right before it leaves, every answer written only where the
row still carries that token, and every attempt kept.

One text is three short transactions (actors/sms.py):
  1. claim: lock the due rows, re-check the recipient now (number, SMS choice for the
     category, STOP list, quiet hours unless critical), then move them to `sending` with a
     fresh claim_token, a lease and attempts + 1, plus an attempt row; or cancel or defer
     them, with why;
  2. mark_called, committed right before the publish and refused once the lease has run out:
     the month's spend is read under a per-tenant lock, and the text is refused (cancelled,
     with the reason) when it would pass the cap; otherwise its price is reserved and from
     here on a lost answer means "unknown";
  3. record_answer: accepted, a retry at its backoff, failed, or unknown.
A worker killed between 2 and 3 leaves its delivery `sending` with an attempt marked called:
when the lease runs out the sweeper records it unknown and holds it (a receiver cannot drop
a repeated text, and each costs money); one killed before 2 is simply retried.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from uuid import UUID

from db.platform.effects import SendSms
from db.platform.tenancy import TenantTx, tenant_tx
from domain.delivery.preferences import SendAction
from domain.delivery.sms import (
    OPTED_OUT_AT_PROVIDER,
    SmsRecipient,
    cost_of,
    effective_cap,
    segments,
    sms_decision,
    sms_text,
    spend_refusal,
)
from domain.delivery.states import DELIVERY, WAITING, ErrorClass, Status, retry_delay, should_retry
from tocsin.core.clock import utcnow

__all__ = [
    "ClaimedSms",
    "Marked",
    "SweptSms",
    "claim_sms",
    "mark_called",
    "queue_notice_sms",
    "record_accepted",
    "record_error",
    "record_opted_out",
    "record_provider_opt_outs",
    "sweep_sms",
]

REENQUEUE_AFTER_SECONDS = 60  # a due text enqueued longer ago than this is enqueued again
SWEEP_BATCH = 1_000  # due texts one sweep enqueues per tenant

_WAITING = sorted(s.value for s in WAITING)
_SETTLE = {s: DELIVERY.where(to=s, within=WAITING) for s in (Status.CANCELLED, Status.DEFERRED)}
_TO_SENDING = DELIVERY.where(to=Status.SENDING)
# The statuses an attempt's end may move its delivery to, each with the statuses it leaves.
_END = {
    Status.ACCEPTED: DELIVERY.where(to=Status.ACCEPTED, from_=[Status.SENDING, Status.UNKNOWN]),
    Status.PENDING: DELIVERY.where(to=Status.PENDING, from_=[Status.SENDING]),
    Status.FAILED: DELIVERY.where(to=Status.FAILED, from_=[Status.SENDING]),
    Status.UNKNOWN: DELIVERY.where(to=Status.UNKNOWN, from_=[Status.SENDING]),
    Status.CANCELLED: DELIVERY.where(to=Status.CANCELLED, from_=[Status.SENDING]),
}
_LEASE_OVER = DELIVERY.where(to=(Status.PENDING, Status.UNKNOWN), from_=[Status.SENDING], alias="d")


@dataclass(frozen=True)
class ClaimedSms:
    delivery_id: int
    claim_token: UUID
    attempt: int
    phone: str
    text: str


# --- queueing ----------------------------------------------------------------------------

_QUEUE = """
INSERT INTO sms_deliveries (notification_id, enqueued_at)
SELECT n.id, now()
FROM notifications n
JOIN sms_numbers p ON p.user_id = n.recipient_user_id
LEFT JOIN sms_preferences sp ON sp.user_id = n.recipient_user_id AND sp.category = n.category
WHERE n.ledger_id = ANY(%(ledger_ids)s) AND (sp.sms OR n.data ->> 'sms' = 'true')
ORDER BY n.id
ON CONFLICT (notification_id) DO NOTHING
RETURNING id
"""


def queue_notice_sms(tx: TenantTx, ledger_ids: list[int], *, rule_chose: bool = False) -> list[int]:
    """One text per notification of these claims whose recipient gave a number and either
    turned texts on for its category or got it from a rule naming sms (``rule_chose``; the
    notice's data says ``sms``: the rule's choice stands in for the person's per category,
    while the STOP list, the provider's opt-outs, the cap and quiet hours still hold), in
    the transaction that writes the notices; a claim prepared twice queues nothing more.
    Whether it goes now is decided when it is claimed."""
    if not ledger_ids:
        return []
    if not rule_chose and tx.conn.execute(
            "SELECT 1 FROM sms_preferences WHERE sms LIMIT 1").fetchone() is None:
        return []  # the usual case: nobody in the tenant takes texts
    ids = sorted(int(str(r[0])) for r in tx.conn.execute(_QUEUE, {"ledger_ids": ledger_ids}))
    if ids:
        tx.after_commit(SendSms(list(ids)))
    return ids


# --- the claim ---------------------------------------------------------------------------

_LOCK_DUE = """
SELECT d.id, u.deactivated_at IS NOT NULL, l.status, p.phone,
       coalesce(sp.sms, false) OR coalesce(n.data ->> 'sms' = 'true', false),
       o.phone IS NOT NULL,
       coalesce(n.data ->> 'critical' = 'true', false) OR coalesce(cd.critical, false),
       quiet_hours_end(%(now)s, coalesce(u.time_zone, %(tenant_zone)s), s.quiet_start, s.quiet_end),
       n.title, n.data ->> 'href'
FROM sms_deliveries d
JOIN notifications n ON n.id = d.notification_id
JOIN users u ON u.id = n.recipient_user_id
LEFT JOIN notification_ledger l ON l.id = n.ledger_id
LEFT JOIN sms_numbers p ON p.user_id = u.id
LEFT JOIN sms_preferences sp ON sp.user_id = u.id AND sp.category = n.category
LEFT JOIN sms_opt_outs o ON o.phone = p.phone
LEFT JOIN category_defaults cd ON cd.category = n.category
LEFT JOIN delivery_schedules s ON s.user_id = u.id
WHERE d.id = ANY(%(ids)s) AND d.status = ANY(%(waiting)s) AND d.send_after <= now()
ORDER BY d.id
FOR UPDATE OF d
"""


def _settle(tx: TenantTx, delivery_id: int, status: Status, reason: str | None,
            send_after: datetime | None = None) -> None:
    tx.conn.execute(
        f"""
        UPDATE sms_deliveries
        SET status = %(status)s, status_reason = %(reason)s, enqueued_at = NULL,
            send_after = coalesce(%(send_after)s, send_after), updated_at = now()
        WHERE id = %(id)s AND {_SETTLE[status]}
        """,
        {"id": delivery_id, "status": status.value, "reason": (reason or "")[:500] or None,
         "send_after": send_after},
    )


def claim_sms(slug: str, delivery_ids: list[int], lease_seconds: int, portal_url: str,
              now: datetime | None = None) -> list[ClaimedSms]:
    """Lock, re-check and claim these texts of the tenant in one transaction; those that
    must not go now are cancelled or deferred with why, those not ours are left out."""
    with tenant_tx(slug) as tx:
        rows = tx.conn.execute(_LOCK_DUE, {
            "ids": sorted(delivery_ids), "waiting": _WAITING, "now": now or utcnow(),
            "tenant_zone": tx.tenant.time_zone}).fetchall()
        to_send: dict[int, tuple[str, str]] = {}
        for r in rows:
            delivery_id = int(str(r[0]))
            if r[1]:
                _settle(tx, delivery_id, Status.CANCELLED, "recipient deactivated before the send")
                continue
            if r[2] is not None and r[2] != "claimed":
                _settle(tx, delivery_id, Status.CANCELLED, f"notification {r[2]} before the send")
                continue
            quiet_end = r[7]
            assert quiet_end is None or isinstance(quiet_end, datetime)
            phone = None if r[3] is None else str(r[3])
            check = sms_decision(SmsRecipient(phone, bool(r[4]), bool(r[5]), bool(r[6])), quiet_end)
            if check.action is SendAction.CANCEL:
                _settle(tx, delivery_id, Status.CANCELLED, check.reason)
            elif check.action is SendAction.DEFER:
                _settle(tx, delivery_id, Status.DEFERRED, "quiet hours", check.until)
            else:
                assert phone is not None
                href = None if r[9] is None else f"{portal_url}{r[9]}"
                to_send[delivery_id] = (phone, sms_text(str(r[8]), href))
        if not to_send:
            return []
        claimed = tx.conn.execute(
            f"""
            WITH claimed AS (
                UPDATE sms_deliveries
                SET status = 'sending', claim_token = gen_random_uuid(),
                    lease_until = now() + make_interval(secs => %(lease)s),
                    attempts = attempts + 1, status_reason = NULL, updated_at = now()
                WHERE id = ANY(%(ids)s) AND {_TO_SENDING}
                RETURNING id, claim_token, attempts
            ), attempt AS (
                INSERT INTO sms_attempts (delivery_id, attempt_no, claim_token)
                SELECT id, attempts, claim_token FROM claimed
            )
            SELECT id, claim_token, attempts FROM claimed ORDER BY id
            """,
            {"ids": sorted(to_send), "lease": lease_seconds},
        ).fetchall()
    claims = []
    for row in claimed:
        token = row[1]
        assert isinstance(token, UUID)
        phone, text = to_send[int(str(row[0]))]
        claims.append(ClaimedSms(int(str(row[0])), token, int(str(row[2])), phone, text))
    return claims


# --- the publish -------------------------------------------------------------------------

@dataclass(frozen=True)
class Marked:
    go: bool  # marked called, price reserved: publish now
    refused: str | None  # why not (the lease ran out, the cap), when not


def mark_called(slug: str, claim: ClaimedSms, price_per_segment: Decimal, cap: Decimal) -> Marked:
    """Committed right before the publish: the month's spend read under a per-tenant lock
    (two workers cannot both take the last of the budget), the text refused when it would
    pass the cap (the tenant's own, never above ``cap``, the operator's), else its price
    reserved and the attempt marked called. The month is the database clock's calendar
    month in UTC, the clock that stamps called_at."""
    cost = cost_of(claim.text, price_per_segment)
    with tenant_tx(slug) as tx:
        tx.conn.execute("SELECT pg_advisory_xact_lock(hashtext('tocsin.sms_spend.' || %s))",
                        [tx.tenant.schema])
        ours = tx.conn.execute(
            "SELECT 1 FROM sms_deliveries WHERE id = %s AND claim_token = %s AND status = 'sending' "
            "AND lease_until > now() FOR UPDATE", [claim.delivery_id, claim.claim_token]).fetchone()
        if ours is None:
            return Marked(False, "the lease ran out or the text is no longer ours")
        spent_row = tx.conn.execute(
            """
            SELECT coalesce(sum(a.cost), 0), to_char(m.start AT TIME ZONE 'UTC', 'YYYY-MM')
            FROM (SELECT date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS start) m
            LEFT JOIN sms_attempts a ON a.called_at >= m.start AND a.cost IS NOT NULL
            GROUP BY m.start
            """).fetchone()
        assert spent_row is not None
        own = tx.conn.execute("SELECT cap FROM sms_spend_cap").fetchone()
        cap = effective_cap(None if own is None else Decimal(str(own[0])), cap)
        refusal = spend_refusal(Decimal(str(spent_row[0])), cost, cap, str(spent_row[1]))
        if refusal is not None:
            _end(tx, claim, Status.CANCELLED, "cancelled", refusal)
            return Marked(False, refusal)
        tx.conn.execute(
            "UPDATE sms_attempts SET called_at = now(), phone = %s, segments = %s, cost = %s "
            "WHERE delivery_id = %s AND claim_token = %s AND ended_at IS NULL",
            [claim.phone, segments(claim.text), cost, claim.delivery_id, claim.claim_token])
    return Marked(True, None)


def _end(tx: TenantTx, claim: ClaimedSms, status: Status, outcome: str, reason: str, *,
         retry_at: datetime | None = None, keep_cost: bool = False,
         message_id: str | None = None) -> bool:
    """One attempt's end and its delivery's next status, fenced by the claim token."""
    row = tx.conn.execute(
        f"""
        WITH updated AS (
            UPDATE sms_deliveries
            SET status = %(status)s, status_reason = %(reason)s, lease_until = NULL, enqueued_at = NULL,
                send_after = coalesce(%(retry_at)s, send_after),
                provider_message_id = coalesce(%(message_id)s, provider_message_id),
                accepted_at = CASE WHEN %(status)s = 'accepted' THEN now() END, updated_at = now()
            WHERE id = %(id)s AND claim_token = %(token)s AND {_END[status]}
            RETURNING id
        )
        UPDATE sms_attempts
        SET ended_at = now(), outcome = %(outcome)s, error = %(error)s,
            provider_message_id = %(message_id)s,
            cost = CASE WHEN %(keep_cost)s THEN cost END
        WHERE delivery_id = %(id)s AND claim_token = %(token)s
          AND (ended_at IS NULL OR outcome = 'unknown') AND EXISTS (SELECT 1 FROM updated)
        RETURNING id
        """,
        {"id": claim.delivery_id, "token": claim.claim_token, "status": status.value,
         "outcome": outcome, "reason": None if status is Status.ACCEPTED else reason[:500],
         "error": None if status is Status.ACCEPTED else reason[:500], "retry_at": retry_at,
         "keep_cost": keep_cost, "message_id": message_id},
    ).fetchone()
    return row is not None


def record_accepted(slug: str, claim: ClaimedSms, message_id: str) -> bool:
    """SNS took the text; its claim counts as delivered (as an email's acceptance does), so a
    notice that went by text alone is not reported stuck."""
    with tenant_tx(slug) as tx:
        if not _end(tx, claim, Status.ACCEPTED, "accepted", "", keep_cost=True, message_id=message_id):
            return False
        tx.conn.execute(
            "UPDATE notification_ledger l SET delivered_at = now() "
            "FROM sms_deliveries d JOIN notifications n ON n.id = d.notification_id "
            "WHERE d.id = %s AND l.id = n.ledger_id AND l.delivered_at IS NULL", [claim.delivery_id])
        return True


def record_error(slug: str, claim: ClaimedSms, error_class: ErrorClass, error: str,
                 jitter: float) -> Status:
    """A failed publish: unknown when the request left without an answer (its price kept:
    SNS may have sent it), else a retry at its backoff or failed for good (price given back)."""
    with tenant_tx(slug) as tx:
        if error_class is ErrorClass.UNCERTAIN:
            _end(tx, claim, Status.UNKNOWN, "unknown", error, keep_cost=True)
            return Status.UNKNOWN
        if should_retry(error_class, claim.attempt):
            _end(tx, claim, Status.PENDING, "retry", error,
                 retry_at=utcnow() + retry_delay(claim.attempt, jitter))
            return Status.PENDING
        _end(tx, claim, Status.FAILED, "failed", error)
        return Status.FAILED


def record_opted_out(slug: str, claim: ClaimedSms) -> None:
    """The provider says the number opted out: the text is cancelled (nothing was published)
    and the number joins the tenant's STOP list, so no later text is even claimed."""
    with tenant_tx(slug) as tx:
        tx.conn.execute("INSERT INTO sms_opt_outs (phone, source) VALUES (%s, 'provider') "
                        "ON CONFLICT (phone) DO NOTHING", [claim.phone])
        _end(tx, claim, Status.CANCELLED, "cancelled", OPTED_OUT_AT_PROVIDER)


def record_provider_opt_outs(slug: str, numbers: frozenset[str]) -> int:
    """The tenant's people whose number SNS lists as opted out join its STOP list (source
    provider), so their texts are cancelled at the claim, before any call to SNS."""
    if not numbers:
        return 0
    with tenant_tx(slug) as tx:
        rows = tx.conn.execute(
            "INSERT INTO sms_opt_outs (phone, source) SELECT DISTINCT phone, 'provider' FROM sms_numbers "
            "WHERE phone = ANY(%s) ON CONFLICT (phone) DO NOTHING RETURNING phone",
            [sorted(numbers)]).fetchall()
    return len(rows)


# --- the sweep ---------------------------------------------------------------------------

@dataclass(frozen=True)
class SweptSms:
    retried: int  # leases that ran out before the publish: pending again
    unknown: int  # leases that ran out after it: held as unknown
    enqueued: int


def sweep_sms(slug: str, *, everything_due: bool = False) -> SweptSms:
    """Expired leases ended (before the publish: retried; after it: unknown, held for a
    person), and the due texts enqueued again."""
    with tenant_tx(slug) as tx:
        ended = tx.conn.execute(
            f"""
            WITH expired AS (
                SELECT d.id, d.claim_token, a.called_at IS NOT NULL AS called
                FROM sms_deliveries d
                JOIN sms_attempts a ON a.delivery_id = d.id AND a.claim_token = d.claim_token
                WHERE d.status = 'sending' AND d.lease_until < now()
                FOR UPDATE OF d
            ), moved AS (
                UPDATE sms_deliveries d
                SET status = CASE WHEN e.called THEN 'unknown' ELSE 'pending' END,
                    status_reason = CASE WHEN e.called
                        THEN 'the worker stopped after the publish left: it may have been sent'
                        ELSE 'the worker stopped before the publish' END,
                    lease_until = NULL, enqueued_at = NULL, updated_at = now()
                FROM expired e
                WHERE d.id = e.id AND {_LEASE_OVER}
                RETURNING d.id, e.claim_token, e.called
            ), attempts AS (
                UPDATE sms_attempts a
                SET ended_at = now(), outcome = CASE WHEN m.called THEN 'unknown' ELSE 'retry' END,
                    error = 'lease ran out', cost = CASE WHEN m.called THEN a.cost END
                FROM moved m
                WHERE a.delivery_id = m.id AND a.claim_token = m.claim_token AND a.ended_at IS NULL
            )
            SELECT called FROM moved
            """).fetchall()
        due = [int(str(r[0])) for r in tx.conn.execute(
            """
            UPDATE sms_deliveries SET enqueued_at = now()
            WHERE id IN (
                SELECT id FROM sms_deliveries
                WHERE status = ANY(%(waiting)s) AND send_after <= now()
                  AND (%(everything)s OR enqueued_at IS NULL
                       OR enqueued_at < now() - make_interval(secs => %(stale)s))
                ORDER BY send_after, id LIMIT %(limit)s
                FOR UPDATE SKIP LOCKED
            )
            RETURNING id
            """,
            {"waiting": _WAITING, "everything": everything_due, "stale": REENQUEUE_AFTER_SECONDS,
             "limit": SWEEP_BATCH}).fetchall()]
        if due:
            tx.after_commit(SendSms(sorted(due)))
    called = sum(1 for r in ended if r[0])
    return SweptSms(len(ended) - called, called, len(due))
