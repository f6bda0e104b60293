"""Email deliveries: the last-moment eligibility check, the lease-and-token claim, and
result writes fenced by that token.

One send is three short transactions around the provider call (each may cover several
deliveries of one tenant: actors/email.py claims up to 20 at once, marks a group of them
just before their calls, and records their acceptances together):
  1. claim: lock the due row, re-check eligibility, then one UPDATE to `sending` with a
     fresh claim_token, a lease and attempts + 1 (or cancel it, with the reason);
  2. `mark_provider_called`, committed right before the call: from here on a lost answer
     means "unknown", not "safe to retry";
  3. the result, written only where the row still carries our token.

The in-flight boundary: a change committed after step 2 (a renewal, a deactivation, an
opt-out) cannot stop a message already handed to the provider. Everything committed
before step 1 is honoured; between 1 and 2 the lease makes other workers wait, and
step 2 refuses to proceed once the lease has run out.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from uuid import UUID

from db.digests import digest_email, mark_digest_items_delivered
from db.preferences import apply_send_check, email_send_check
from db.tenancy import TenantTx
from domain.delivery import WAITING, Status, guard

REENQUEUE_AFTER_SECONDS = 600  # a due delivery enqueued longer ago than this is re-enqueued

# The statuses each guarded UPDATE below may leave, from domain/delivery.py's table (the one
# source of truth; Postgres enforces the same table on every status change, see
# db/migrations/__init__.py sync_delivery_moves).
_WAITING = sorted(s.value for s in WAITING)
_TO_SENDING = guard(Status.SENDING)
_TO_ACCEPTED = guard(Status.ACCEPTED)

# Why a due delivery is no longer wanted, checked in the claiming transaction. Subject
# eligibility is per rule: a licence notice is about one due date, and stops applying
# once the client's licence has moved to another (a renewal) or the claim was cancelled.
_VERDICT = """
    CASE
        WHEN u.deactivated_at IS NOT NULL THEN 'recipient deactivated before the send'
        WHEN EXISTS (SELECT 1 FROM suppressed_addresses s WHERE s.email = lower(u.email))
            THEN 'address suppressed after a bounce or complaint'
        WHEN l.id IS NOT NULL AND l.status <> 'claimed'
            THEN 'notification ' || l.status || ' before the send'
        WHEN l.rule = 'licence' AND l.subject_kind = 'client'
             AND (c.id IS NULL OR c.access_expires_on <> l.due_on)
            THEN 'licence renewed: this notice was for ' || to_char(l.due_on, 'YYYY-MM-DD')
    END
"""


@dataclass(frozen=True)
class DueDelivery:
    """A due delivery locked by the claiming transaction, with what decides its fate."""

    delivery_id: int
    recipient_user_id: int
    category: str | None  # None for a digest, which lists several
    verdict: str | None  # why it must not be sent, or None


@dataclass(frozen=True)
class ClaimedEmail:
    delivery_id: int
    claim_token: UUID
    attempt: int
    recipient_user_id: int
    recipient: str
    category: str | None  # None for a digest
    title: str
    body: str  # for a digest, the whole text with its links
    href: str | None
    digest_id: int | None = None


def lock_due_delivery(tx: TenantTx, delivery_id: int) -> DueDelivery | None:
    """Lock a due pending or deferred delivery for this transaction, or None when it is
    not ours to send (sent, being sent, cancelled, not yet due). It waits for a short
    transaction holding the row (a scan marking it enqueued, another worker claiming it)
    and then re-reads it: skipping would drop the message while the row stays unsent."""
    row = tx.conn.execute(
        f"""
        SELECT d.id, u.id, n.category, {_VERDICT}
        FROM notification_deliveries d
        LEFT JOIN notifications n ON n.id = d.notification_id
        LEFT JOIN digests g ON g.id = d.digest_id
        JOIN users u ON u.id = coalesce(n.recipient_user_id, g.user_id)
        LEFT JOIN notification_ledger l ON l.id = coalesce(n.ledger_id, g.ledger_id)
        LEFT JOIN clients c ON l.subject_kind = 'client' AND c.id = l.subject_id
        WHERE d.id = %s AND d.status = ANY(%s) AND d.send_after <= now()
        FOR UPDATE OF d
        """,
        [delivery_id, _WAITING],
    ).fetchone()
    if row is None:
        return None
    return DueDelivery(int(str(row[0])), int(str(row[1])), None if row[2] is None else str(row[2]),
                       None if row[3] is None else str(row[3]))


def settle_unsent(
    tx: TenantTx, delivery_id: int, status: str, reason: str, send_after: datetime | None = None
) -> None:
    """Move a locked, unclaimed delivery to cancelled, deferred or batched, with why."""
    if status not in ("cancelled", "deferred", "batched"):
        raise ValueError(f"cannot settle an unsent delivery as {status}")
    tx.conn.execute(
        """
        UPDATE notification_deliveries
        SET status = %(status)s, status_reason = %(reason)s, enqueued_at = NULL,
            send_after = coalesce(%(send_after)s, send_after), updated_at = now()
        WHERE id = %(id)s AND status = ANY(%(from)s)
        """,
        {"id": delivery_id, "status": status, "reason": reason[:500], "send_after": send_after,
         "from": guard(Status(status), WAITING)},
    )


def start_attempt(tx: TenantTx, delivery_id: int, lease_seconds: int, portal_url: str = "") -> ClaimedEmail:
    """The claim: one guarded UPDATE to sending, with a fresh token, a lease and the
    attempt counted, plus the attempt's history row. The row must be locked by
    ``lock_due_delivery`` in this transaction."""
    row = tx.conn.execute(
        """
        WITH claimed AS (
            UPDATE notification_deliveries
            SET status = 'sending', claim_token = gen_random_uuid(),
                lease_until = now() + make_interval(secs => %(lease)s),
                attempts = attempts + 1, status_reason = NULL, updated_at = now()
            WHERE id = %(id)s AND status = ANY(%(from)s) AND send_after <= now()
            RETURNING id, notification_id, digest_id, claim_token, attempts
        ), attempt AS (
            INSERT INTO delivery_attempts (delivery_id, attempt_no, claim_token)
            SELECT id, attempts, claim_token FROM claimed
        )
        SELECT c.id, c.claim_token, c.attempts, u.id, u.email, n.category, n.title, n.body,
               n.data ->> 'href', c.digest_id
        FROM claimed c
        LEFT JOIN notifications n ON n.id = c.notification_id
        LEFT JOIN digests g ON g.id = c.digest_id
        JOIN users u ON u.id = coalesce(n.recipient_user_id, g.user_id)
        """,
        {"id": delivery_id, "lease": lease_seconds, "from": _TO_SENDING},
    ).fetchone()
    if row is None:
        raise RuntimeError(f"delivery {delivery_id} was not locked for its claim")
    token = row[1]
    assert isinstance(token, UUID)
    digest_id = None if row[9] is None else int(str(row[9]))
    title, body = str(row[6]), str(row[7])
    if digest_id is not None:
        title, body = digest_email(tx, digest_id, portal_url)
    return ClaimedEmail(
        int(str(row[0])), token, int(str(row[2])), int(str(row[3])), str(row[4]),
        None if row[5] is None else str(row[5]), title, body,
        None if row[8] is None else str(row[8]), digest_id,
    )


@dataclass(frozen=True)
class Settled:
    """A due delivery that was not claimed, and why."""

    delivery_id: int
    action: str  # cancelled, defer, batch
    reason: str


def claim_delivery(
    tx: TenantTx, delivery_id: int, lease_seconds: int, now: datetime | None = None,
    portal_url: str = "",
) -> ClaimedEmail | Settled | None:
    """Lock, re-check and claim in one transaction: the claim to send with; or, when the
    delivery must not go now, what became of it (cancelled with the reason, deferred to
    the end of quiet hours, batched for a digest); or None when it is not ours.
    Commit before calling the provider."""
    due = lock_due_delivery(tx, delivery_id)
    if due is None:
        return None
    if due.verdict is not None:
        settle_unsent(tx, due.delivery_id, "cancelled", due.verdict)
        return Settled(due.delivery_id, "cancelled", due.verdict)
    # The recipient's preference as it is now: an opt-out, new quiet hours or a switch to
    # digests made after the claim is honoured here. The locked row already names the
    # recipient and category (delivery_send_check would look them up again: one round trip
    # of the few every send pays); a digest (no category) always goes, as there.
    if due.category is None:
        return start_attempt(tx, due.delivery_id, lease_seconds, portal_url)
    check = email_send_check(tx, due.recipient_user_id, due.category, now or datetime.now(UTC))
    if check.action.value != "send":
        apply_send_check(tx, due.delivery_id, check)
        return Settled(due.delivery_id, check.action.value, check.reason or check.action.value)
    return start_attempt(tx, due.delivery_id, lease_seconds, portal_url)


def claim_deliveries(
    tx: TenantTx, delivery_ids: list[int], lease_seconds: int, now: datetime | None = None,
    portal_url: str = "",
) -> list[ClaimedEmail | Settled]:
    """``claim_delivery`` for each of these deliveries in one transaction, in id order (the
    order every claim takes its row locks in, so two claims of overlapping ids cannot
    deadlock); those not ours are left out."""
    results = []
    for delivery_id in sorted(delivery_ids):
        result = claim_delivery(tx, delivery_id, lease_seconds, now, portal_url)
        if result is not None:
            results.append(result)
    return results


def mark_provider_called(tx: TenantTx, claim: ClaimedEmail) -> bool:
    """Commit, just before the provider call, that the call is about to happen. False if
    our lease has run out or another worker holds the row now: then do not call."""
    row = tx.conn.execute(
        """
        UPDATE delivery_attempts a SET provider_called_at = now()
        FROM notification_deliveries d
        WHERE a.delivery_id = %(id)s AND a.claim_token = %(token)s AND a.ended_at IS NULL
          AND d.id = a.delivery_id AND d.claim_token = %(token)s AND d.status = 'sending'
          AND d.lease_until > now()
        RETURNING a.id
        """,
        {"id": claim.delivery_id, "token": claim.claim_token},
    ).fetchone()
    return row is not None


def record_accepted(
    tx: TenantTx, claim: ClaimedEmail, provider_message_id: str, request_id: str | None
) -> bool:
    """Record the provider's acceptance; False if another worker has claimed the row since.
    A row the sweeper marked unknown while we waited still carries our token: the answer
    we hold is the truth about it, so it is recorded."""
    row = tx.conn.execute(
        """
        WITH accepted AS (
            UPDATE notification_deliveries
            SET status = 'accepted', provider_message_id = coalesce(provider_message_id, %(message_id)s),
                accepted_at = now(), lease_until = NULL, unknown_since = NULL, last_error = NULL,
                last_error_class = NULL, status_reason = NULL, updated_at = now()
            WHERE id = %(id)s AND claim_token = %(token)s AND status = ANY(%(from)s)
            RETURNING id, notification_id
        ), attempt AS (
            UPDATE delivery_attempts
            SET ended_at = now(), outcome = 'accepted', provider_message_id = %(message_id)s,
                provider_request_id = %(request_id)s, error = NULL, error_class = NULL
            WHERE delivery_id = %(id)s AND claim_token = %(token)s
              AND EXISTS (SELECT 1 FROM accepted)
        ), ledger AS (
            UPDATE notification_ledger l SET delivered_at = coalesce(l.delivered_at, now())
            FROM notifications n, accepted a
            WHERE n.id = a.notification_id AND l.id = n.ledger_id
        )
        SELECT id FROM accepted
        """,
        {"id": claim.delivery_id, "token": claim.claim_token, "message_id": provider_message_id,
         "request_id": request_id, "from": _TO_ACCEPTED},
    ).fetchone()
    if row is not None and claim.digest_id is not None:
        mark_digest_items_delivered(tx, claim.digest_id)
    return row is not None


def record_failure(
    tx: TenantTx,
    claim: ClaimedEmail,
    *,
    error_class: str,
    error: str,
    retry_at: datetime | None,
    request_id: str | None = None,
) -> bool:
    """A failed attempt: back to pending at ``retry_at``, or failed for good. Fenced by
    the claim token like every result write."""
    row = tx.conn.execute(
        """
        WITH updated AS (
            UPDATE notification_deliveries
            SET status = CASE WHEN %(retry_at)s::timestamptz IS NULL THEN 'failed' ELSE 'pending' END,
                send_after = coalesce(%(retry_at)s, send_after), lease_until = NULL,
                enqueued_at = NULL, last_error = %(error)s, last_error_class = %(error_class)s,
                updated_at = now()
            WHERE id = %(id)s AND claim_token = %(token)s AND status = 'sending'
            RETURNING id
        )
        UPDATE delivery_attempts
        SET ended_at = now(), error_class = %(error_class)s, error = %(error)s,
            outcome = CASE WHEN %(retry_at)s::timestamptz IS NULL THEN 'failed' ELSE 'retry' END,
            provider_request_id = %(request_id)s
        WHERE delivery_id = %(id)s AND claim_token = %(token)s AND ended_at IS NULL
          AND EXISTS (SELECT 1 FROM updated)
        RETURNING id
        """,
        {"id": claim.delivery_id, "token": claim.claim_token, "retry_at": retry_at,
         "error": error[:500], "error_class": error_class, "request_id": request_id},
    ).fetchone()
    return row is not None


def record_unknown(tx: TenantTx, claim: ClaimedEmail, error: str) -> bool:
    """The request left and no answer came back: the provider may have the message.
    Reconciliation (the sweeper, or a provider event) decides what happens next."""
    row = tx.conn.execute(
        """
        WITH updated AS (
            UPDATE notification_deliveries
            SET status = 'unknown', unknown_since = now(), lease_until = NULL,
                last_error = %(error)s, last_error_class = 'uncertain', updated_at = now()
            WHERE id = %(id)s AND claim_token = %(token)s AND status = 'sending'
            RETURNING id
        )
        UPDATE delivery_attempts
        SET ended_at = now(), outcome = 'unknown', error_class = 'uncertain', error = %(error)s
        WHERE delivery_id = %(id)s AND claim_token = %(token)s AND ended_at IS NULL
          AND EXISTS (SELECT 1 FROM updated)
        RETURNING id
        """,
        {"id": claim.delivery_id, "token": claim.claim_token, "error": error[:500]},
    ).fetchone()
    return row is not None


def schedule_due_deliveries(tx: TenantTx, *, everything: bool = False, limit: int = 10_000) -> list[int]:
    """Take the due pending or deferred deliveries that were never enqueued, or whose message
    may be lost (enqueued long ago and still waiting: a crash after commit, a flushed
    Redis), mark them enqueued and register them to be sent once ``tx`` commits.
    ``everything``: also those enqueued recently (Redis is known to have lost them).

    Marked in the same transaction that finds them, and rows another transaction is taking
    right now are skipped: three scans at the same moment enqueue each delivery once, not
    three times. If the process dies between the commit and the send, the row waits
    REENQUEUE_AFTER_SECONDS for the sweeper; a lost message delays, never drops."""
    rows = tx.conn.execute(
        """
        UPDATE notification_deliveries SET enqueued_at = now()
        WHERE id IN (
            SELECT id FROM notification_deliveries
            WHERE status = ANY(%(waiting)s) AND send_after <= now()
              AND (%(everything)s OR enqueued_at IS NULL
                   OR enqueued_at < now() - make_interval(secs => %(stale)s))
            ORDER BY send_after, id
            LIMIT %(limit)s
            FOR UPDATE SKIP LOCKED
        )
        RETURNING id
        """,
        {"waiting": _WAITING, "everything": everything, "stale": REENQUEUE_AFTER_SECONDS,
         "limit": limit},
    ).fetchall()
    ids = sorted(int(str(r[0])) for r in rows)
    tx.emails_to_send.extend(ids)
    return ids


def schedule_deliveries(tx: TenantTx, delivery_ids: list[int]) -> None:
    """Mark these new deliveries enqueued and register them to be sent once ``tx`` commits
    (an invitation, a renewal notice: written and announced by one use case)."""
    if not delivery_ids:
        return
    rows = tx.conn.execute(
        """
        UPDATE notification_deliveries SET enqueued_at = now()
        WHERE id = ANY(%(ids)s) AND status = ANY(%(waiting)s) AND send_after <= now()
        RETURNING id
        """,
        {"ids": delivery_ids, "waiting": _WAITING},
    ).fetchall()
    tx.emails_to_send.extend(sorted(int(str(r[0])) for r in rows))
