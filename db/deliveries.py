"""Email deliveries: the lease-and-token claim, fenced result writes, and re-enqueueing.

A delivery is claimed by one UPDATE that moves it to `sending` with a fresh claim_token;
every result write names that token, so a worker that lost its lease changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from db.tenancy import TenantTx

REENQUEUE_AFTER_SECONDS = 600  # a pending delivery enqueued longer ago than this is re-enqueued


@dataclass(frozen=True)
class ClaimedEmail:
    delivery_id: int
    claim_token: UUID
    attempt: int
    recipient: str
    recipient_active: bool
    title: str
    body: str
    href: str | None


def deliveries_to_enqueue(tx: TenantTx, limit: int = 10_000) -> list[int]:
    """Due pending deliveries that were never enqueued, or whose message may be lost
    (enqueued long ago and still pending: a crash after commit, a flushed Redis)."""
    rows = tx.conn.execute(
        """
        SELECT id FROM notification_deliveries
        WHERE status = 'pending' AND send_after <= now()
          AND (enqueued_at IS NULL OR enqueued_at < now() - make_interval(secs => %s))
        ORDER BY send_after, id
        LIMIT %s
        """,
        [REENQUEUE_AFTER_SECONDS, limit],
    ).fetchall()
    return [int(str(r[0])) for r in rows]


def mark_enqueued(tx: TenantTx, delivery_ids: list[int]) -> None:
    """Note that messages were sent. Rows another scan is marking right now are skipped:
    waiting for them could deadlock (scans lock in whatever order the plan visits rows),
    and that scan is recording the same fact."""
    tx.conn.execute(
        """
        UPDATE notification_deliveries SET enqueued_at = now()
        WHERE id IN (
            SELECT id FROM notification_deliveries
            WHERE id = ANY(%s) AND status = 'pending'
            ORDER BY id FOR UPDATE SKIP LOCKED
        )
        """,
        [delivery_ids],
    )


def claim_delivery(tx: TenantTx, delivery_id: int, lease_seconds: int) -> ClaimedEmail | None:
    """Take a due pending delivery for one attempt, or None if it is not ours to send
    (already sent, being sent, cancelled, not yet due). Commit before calling the provider."""
    row = tx.conn.execute(
        """
        WITH claimed AS (
            UPDATE notification_deliveries
            SET status = 'sending', claim_token = gen_random_uuid(),
                lease_until = now() + make_interval(secs => %(lease)s),
                attempts = attempts + 1, updated_at = now()
            WHERE id = %(id)s AND status = 'pending' AND send_after <= now()
            RETURNING id, notification_id, claim_token, attempts
        ), attempt AS (
            INSERT INTO delivery_attempts (delivery_id, attempt_no, claim_token)
            SELECT id, attempts, claim_token FROM claimed
        )
        SELECT c.id, c.claim_token, c.attempts, u.email, u.deactivated_at IS NULL,
               n.title, n.body, n.data ->> 'href'
        FROM claimed c
        JOIN notifications n ON n.id = c.notification_id
        JOIN users u ON u.id = n.recipient_user_id
        """,
        {"id": delivery_id, "lease": lease_seconds},
    ).fetchone()
    if row is None:
        return None
    token = row[1]
    assert isinstance(token, UUID)
    return ClaimedEmail(
        int(str(row[0])), token, int(str(row[2])), str(row[3]), bool(row[4]),
        str(row[5]), str(row[6]), None if row[7] is None else str(row[7]),
    )


def record_accepted(
    tx: TenantTx, claim: ClaimedEmail, provider_message_id: str, request_id: str | None
) -> bool:
    """Record the provider's acceptance; False if our claim was taken over meanwhile."""
    row = tx.conn.execute(
        """
        WITH accepted AS (
            UPDATE notification_deliveries
            SET status = 'accepted', provider_message_id = %(message_id)s, accepted_at = now(),
                lease_until = NULL, last_error = NULL, last_error_class = NULL, updated_at = now()
            WHERE id = %(id)s AND claim_token = %(token)s AND status = 'sending'
            RETURNING id, notification_id
        ), attempt AS (
            UPDATE delivery_attempts
            SET ended_at = now(), outcome = 'accepted', provider_message_id = %(message_id)s,
                provider_request_id = %(request_id)s
            WHERE delivery_id = %(id)s AND claim_token = %(token)s AND ended_at IS NULL
              AND EXISTS (SELECT 1 FROM accepted)
        ), ledger AS (
            UPDATE notification_ledger l SET delivered_at = coalesce(l.delivered_at, now())
            FROM notifications n, accepted a
            WHERE n.id = a.notification_id AND l.id = n.ledger_id
        )
        SELECT id FROM accepted
        """,
        {"id": claim.delivery_id, "token": claim.claim_token, "message_id": provider_message_id,
         "request_id": request_id},
    ).fetchone()
    return row is not None


def record_failure(
    tx: TenantTx,
    claim: ClaimedEmail,
    *,
    outcome: str,
    error_class: str,
    error: str,
    retry_at: datetime | None,
    request_id: str | None = None,
) -> bool:
    """Record a failed attempt: back to pending at ``retry_at``, or ``outcome`` for good
    (failed, cancelled). Fenced by the claim token like every result write."""
    status = "pending" if retry_at is not None else outcome
    row = tx.conn.execute(
        """
        WITH updated AS (
            UPDATE notification_deliveries
            SET status = %(status)s, send_after = coalesce(%(retry_at)s, send_after),
                lease_until = NULL, enqueued_at = NULL, last_error = %(error)s,
                last_error_class = %(error_class)s,
                status_reason = CASE WHEN %(status)s = 'cancelled' THEN %(error)s END,
                updated_at = now()
            WHERE id = %(id)s AND claim_token = %(token)s AND status = 'sending'
            RETURNING id
        )
        UPDATE delivery_attempts
        SET ended_at = now(), outcome = %(outcome)s, error_class = %(error_class)s,
            error = %(error)s, provider_request_id = %(request_id)s
        WHERE delivery_id = %(id)s AND claim_token = %(token)s AND ended_at IS NULL
          AND EXISTS (SELECT 1 FROM updated)
        RETURNING id
        """,
        {"id": claim.delivery_id, "token": claim.claim_token, "status": status,
         "retry_at": retry_at, "error": error[:500], "error_class": error_class,
         "outcome": "retry" if retry_at is not None else outcome, "request_id": request_id},
    ).fetchone()
    return row is not None
