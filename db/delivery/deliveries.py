"""Email deliveries: the last-moment eligibility check, the lease-and-token claim, and
result writes fenced by that token.

One send is a claim and then, per provider call, one short transaction (actors/email.py
claims up to 20 deliveries of a tenant at once, then sends them one by one):
  1. claim: lock the due rows, re-check eligibility, then one UPDATE to `sending` with a
     fresh claim_token, a lease and attempts + 1 (or cancel, defer or batch, with why);
  2. `record_step`, committed right before each call: the call marked
     provider-called (from here on a lost answer means "unknown", not "safe to retry"),
     together with the previous call's answer; the last answer is recorded alone. Each
     result is written only where the row still carries our token.
So a crash leaves at most one delivery per sending thread marked provider-called without
an outcome: the call in flight, whose answer died with the worker.

The in-flight boundary: a change committed after step 2 (a renewal, a deactivation, an
opt-out) cannot stop a message already handed to the provider. Everything committed
before step 1 is honoured; between 1 and 2 the lease makes other workers wait, and
step 2 refuses to proceed once the lease has run out.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from uuid import UUID

from psycopg import sql
from psycopg.types.numeric import Int8

from db.delivery.digests import digest_email, mark_digest_items_delivered
from db.people.preferences import apply_send_check, email_send_checks
from db.platform.effects import SendEmails
from db.platform.tenancy import TenantTx, in_schema, tenant_statement_alone, tenant_tx
from domain.delivery.states import DELIVERY, WAITING, Status
from tocsin.core.clock import utcnow

__all__ = [
    "REENQUEUE_AFTER_SECONDS",
    "Answer",
    "ClaimedEmail",
    "DueDelivery",
    "Recorded",
    "Settled",
    "claim_deliveries",
    "lock_due_deliveries",
    "record_failure",
    "record_step",
    "record_step_at_once",
    "record_unknown",
    "schedule_deliveries",
    "schedule_due_deliveries",
    "settle_unsent",
    "start_attempts",
]

REENQUEUE_AFTER_SECONDS = 600  # a due delivery enqueued longer ago than this is re-enqueued

# Every status UPDATE below is guarded by the statuses it may leave, from the domain's
# DELIVERY machine (PostgreSQL checks every change against the same moves: control.state_moves).
_WAITING = sorted(s.value for s in WAITING)
_SETTLE = {s: DELIVERY.where(to=s, within=WAITING)
           for s in (Status.CANCELLED, Status.DEFERRED, Status.BATCHED)}
_TO_SENDING = DELIVERY.where(to=Status.SENDING)
_TO_ACCEPTED = DELIVERY.where(to=Status.ACCEPTED, alias="d")
_RETRY_OR_FAIL = DELIVERY.where(to=(Status.FAILED, Status.PENDING), from_=[Status.SENDING])
_TO_UNKNOWN = DELIVERY.where(to=Status.UNKNOWN)

# Why a due delivery is no longer wanted, checked in the claiming transaction. Subject
# eligibility is per rule: a licence notice is about one due date, and stops applying
# once the client's licence has moved to another (a renewal) or the claim was cancelled;
# so is a due-date time rule's notice (the field moved to another date, or was removed).
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
        WHEN t.rule_id IS NOT NULL AND t.due IS NULL THEN 'due date removed'
        WHEN t.rule_id IS NOT NULL AND t.due <> l.due_on
            THEN 'due date moved from ' || to_char(l.due_on, 'YYYY-MM-DD') || ' to '
                 || to_char(t.due, 'YYYY-MM-DD')
    END
"""

# A notice of a due-date time rule is about one date: the date its subject's field holds
# now (db/rules/moved_due_dates.py cancels the same claims; this is the last-moment check, for a
# date moved while the claim was being made).
_DUE_NOW = """
    LEFT JOIN LATERAL (
        SELECT r.id AS rule_id,
               (SELECT iso_date_or_null(f.value #>> '{}') FROM subject_fields f
                WHERE f.subject_id = l.subject_id AND jsonb_typeof(f.value) = 'string'
                  AND f.name = substr(r.definition #>> '{trigger,due,fact}', 7)) AS due
        FROM rules r
        WHERE r.id = l.rule_id AND l.subject_kind = 'subject' AND l.threshold LIKE 'offset:%%'
          AND r.definition #>> '{trigger,due,fact}' LIKE 'field.%%'
    ) t ON true
"""


@dataclass(frozen=True)
class DueDelivery:
    """A due delivery locked by the claiming transaction, with what decides its fate."""

    delivery_id: int
    recipient_user_id: int
    category: str | None  # None for a digest, which lists several
    verdict: str | None  # why it must not be sent, or None
    critical: bool = False  # the notice itself is critical (a rule said so): quiet hours do not hold it


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


def lock_due_deliveries(tx: TenantTx, delivery_ids: list[int]) -> list[DueDelivery]:
    """Lock those of these deliveries that are due, pending or deferred, in id order (the
    order every claim locks in, so two claims of overlapping ids cannot deadlock); the
    others are not ours to send (sent, being sent, cancelled, not yet due). It waits for a
    short transaction holding a row (a scan marking it enqueued, another worker claiming
    it) and then re-reads it: skipping would drop the message while the row stays unsent."""
    rows = tx.conn.execute(
        f"""
        SELECT d.id, u.id, n.category, {_VERDICT},
               coalesce(n.data ->> 'critical' = 'true', false)
        FROM notification_deliveries d
        LEFT JOIN notifications n ON n.id = d.notification_id
        LEFT JOIN digests g ON g.id = d.digest_id
        JOIN users u ON u.id = coalesce(n.recipient_user_id, g.user_id)
        LEFT JOIN notification_ledger l ON l.id = coalesce(n.ledger_id, g.ledger_id)
        LEFT JOIN clients c ON l.subject_kind = 'client' AND c.id = l.subject_id
        {_DUE_NOW}
        WHERE d.id = ANY(%s) AND d.status = ANY(%s) AND d.send_after <= now()
        ORDER BY d.id
        FOR UPDATE OF d
        """,
        [sorted(delivery_ids), _WAITING],
    ).fetchall()
    return [DueDelivery(int(str(r[0])), int(str(r[1])), None if r[2] is None else str(r[2]),
                        None if r[3] is None else str(r[3]), bool(r[4])) for r in rows]


def settle_unsent(
    tx: TenantTx, delivery_id: int, status: str, reason: str, send_after: datetime | None = None
) -> None:
    """Move a locked, unclaimed delivery to cancelled, deferred or batched, with why."""
    if status not in _SETTLE:
        raise ValueError(f"cannot settle an unsent delivery as {status}")
    tx.conn.execute(
        f"""
        UPDATE notification_deliveries
        SET status = %(status)s, status_reason = %(reason)s, enqueued_at = NULL,
            send_after = coalesce(%(send_after)s, send_after), updated_at = now()
        WHERE id = %(id)s AND {_SETTLE[Status(status)]}
        """,
        {"id": delivery_id, "status": status, "reason": reason[:500], "send_after": send_after},
    )


def start_attempts(
    tx: TenantTx, delivery_ids: list[int], lease_seconds: int, portal_url: str = ""
) -> list[ClaimedEmail]:
    """The claim: one guarded UPDATE to sending, with a fresh token, a lease and the
    attempt counted, plus each attempt's history row, for every one of these deliveries.
    The rows must be locked by ``lock_due_deliveries`` in this transaction."""
    if not delivery_ids:
        return []
    rows = tx.conn.execute(
        f"""
        WITH claimed AS (
            UPDATE notification_deliveries
            SET status = 'sending', claim_token = gen_random_uuid(),
                lease_until = now() + make_interval(secs => %(lease)s),
                attempts = attempts + 1, status_reason = NULL, updated_at = now()
            WHERE id = ANY(%(ids)s) AND {_TO_SENDING} AND send_after <= now()
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
        ORDER BY c.id
        """,
        {"ids": sorted(delivery_ids), "lease": lease_seconds},
    ).fetchall()
    if len(rows) != len(set(delivery_ids)):
        missing = set(delivery_ids) - {int(str(r[0])) for r in rows}
        raise RuntimeError(f"deliveries {sorted(missing)} were not locked for their claim")
    claims = []
    for row in rows:
        token = row[1]
        assert isinstance(token, UUID)
        digest_id = None if row[9] is None else int(str(row[9]))
        title, body = str(row[6]), str(row[7])
        if digest_id is not None:
            title, body = digest_email(tx, digest_id, portal_url)
        claims.append(ClaimedEmail(
            int(str(row[0])), token, int(str(row[2])), int(str(row[3])), str(row[4]),
            None if row[5] is None else str(row[5]), title, body,
            None if row[8] is None else str(row[8]), digest_id,
        ))
    return claims


@dataclass(frozen=True)
class Settled:
    """A due delivery that was not claimed, and why."""

    delivery_id: int
    action: str  # cancelled, defer, batch
    reason: str


def claim_deliveries(
    tx: TenantTx, delivery_ids: list[int], lease_seconds: int, now: datetime | None = None,
    portal_url: str = "",
) -> list[ClaimedEmail | Settled]:
    """Lock, re-check and claim these deliveries of the tenant in one transaction,
    set-based (a handful of statements whatever their number): for each, the claim to send
    with; or, when it must not go now, what became of it (cancelled with the reason,
    deferred to the end of quiet hours, batched for a digest). Those not ours (sent, being
    sent, cancelled, not yet due) are left out. Commit before calling the provider."""
    due = lock_due_deliveries(tx, delivery_ids)
    # The recipient's preference as it is now: an opt-out, new quiet hours or a switch to
    # digests made after the claim is honoured here. The locked rows already name the
    # recipient, the category and whether the notice itself is critical; a digest (no
    # category) always goes.
    checks = email_send_checks(
        tx, sorted({(d.recipient_user_id, d.category, d.critical) for d in due
                    if d.verdict is None and d.category is not None}),
        now or utcnow())
    results: list[ClaimedEmail | Settled] = []
    to_send = []
    for d in due:
        if d.verdict is not None:
            settle_unsent(tx, d.delivery_id, "cancelled", d.verdict)
            results.append(Settled(d.delivery_id, "cancelled", d.verdict))
            continue
        check = None if d.category is None else checks[(d.recipient_user_id, d.category, d.critical)]
        if check is not None and check.action.value != "send":
            apply_send_check(tx, d.delivery_id, check)
            results.append(Settled(d.delivery_id, check.action.value,
                                   check.reason or check.action.value))
            continue
        to_send.append(d.delivery_id)
    return results + list(start_attempts(tx, to_send, lease_seconds, portal_url))


@dataclass(frozen=True)
class Answer:
    """The provider accepted one claim's call."""

    claim: ClaimedEmail
    provider_message_id: str
    request_id: str | None


@dataclass(frozen=True)
class Recorded:
    """What one ``record_step`` did."""

    accepted: set[int]  # the answer's delivery, moved to accepted by it
    late: set[int]  # the answer recorded on its attempt only: the delivery had moved on (resent)
    marked: set[int]  # the call's delivery, when it may go ahead (lease held, marked provider-called)


def record_step(tx: TenantTx, answer: Answer | None, call: ClaimedEmail | None) -> Recorded:
    """A sending thread's step between two provider calls: the answer it has just received
    recorded, and the call it is about to make marked provider-called (committed before it
    is made); either may be absent (the first call of a message, the last answer).
    Recording each answer as it comes, never after a message's last call, is what bounds a
    crash: the deliveries marked provider-called without an outcome are only the calls in
    flight, at most one per sending thread.

    An answer is the truth about its attempt whenever it arrives. Fenced by the claim
    token, it moves the delivery to accepted from sending, or from unknown when the sweeper
    took the delivery over while this worker was frozen or slow (the only move a stale
    token may make); its attempt records the acceptance even when the delivery has been
    resent since (both attempts then stand in the history, each with what it got). A
    delivery claimed again by another worker keeps that worker's claim untouched.

    A call is marked only where the delivery is still ours (token, sending) and its lease
    holds."""
    rows = tx.conn.execute(_step_in(tx.tenant.slug), _step_params(answer, call)).fetchall()
    recorded = _recorded([rows])
    if answer is not None and answer.claim.digest_id is not None and recorded.accepted:
        mark_digest_items_delivered(tx, answer.claim.digest_id)
    return recorded


def record_step_at_once(slug: str, answer: Answer | None, call: ClaimedEmail | None) -> Recorded:
    """``record_step`` as a transaction of its own, one statement sent alone
    (db/platform/tenancy.py tenant_statement_alone): a step is taken once per provider call,
    and costs no more than its statement. A digest's answer also marks the digest's items,
    so it takes a tenant_tx of its own."""
    if answer is not None and answer.claim.digest_id is not None:
        with tenant_tx(slug) as tx:
            return record_step(tx, answer, call)
    return _recorded([tenant_statement_alone(slug, _step_in(slug), _step_params(answer, call))])


# One statement with scalar parameters: a step is taken once per provider call, each
# statement's run opens and locks every table and index it names, and a plan kept for an
# array of ids may scan a whole table where one id reads one row by its key. The delivery of
# the call is read by its key alone (a scalar subquery): given the lease condition too, the
# planner may scan the index of every leased delivery. Its tables are named in the tenant's
# schema, so that it runs alone, as a transaction of its own (db/platform/tenancy.py
# tenant_statement_alone): one message each way.
_STEP = f"""
    WITH accepted AS (
        UPDATE {{schema}}.notification_deliveries d
        SET status = 'accepted', provider_message_id = coalesce(d.provider_message_id, %(message_id)s),
            accepted_at = now(), lease_until = NULL, unknown_since = NULL, last_error = NULL,
            last_error_class = NULL, status_reason = NULL, updated_at = now()
        WHERE d.id = %(id)s AND d.claim_token = %(token)s
          AND {_TO_ACCEPTED}
        RETURNING d.id, d.notification_id
    ), attempt AS (
        UPDATE {{schema}}.delivery_attempts a
        SET ended_at = now(), outcome = 'accepted', provider_message_id = %(message_id)s,
            provider_request_id = %(request_id)s, error = NULL, error_class = NULL
        WHERE a.delivery_id = %(id)s AND a.claim_token = %(token)s
          AND (a.ended_at IS NULL OR a.outcome = 'unknown')
        RETURNING a.delivery_id
    ), ledger AS (
        UPDATE {{schema}}.notification_ledger l SET delivered_at = now()
        FROM {{schema}}.notifications n, accepted a
        WHERE n.id = a.notification_id AND l.id = n.ledger_id AND l.delivered_at IS NULL
    ), marked AS (
        UPDATE {{schema}}.delivery_attempts a SET provider_called_at = now()
        WHERE a.delivery_id = %(call_id)s AND a.claim_token = %(call_token)s AND a.ended_at IS NULL
          AND (SELECT d.claim_token = %(call_token)s AND d.status = 'sending' AND d.lease_until > now()
               FROM {{schema}}.notification_deliveries d WHERE d.id = %(call_id)s)
        RETURNING a.delivery_id
    )
    SELECT 'accepted', id FROM accepted
    UNION ALL SELECT 'answered', delivery_id FROM attempt
    UNION ALL SELECT 'marked', delivery_id FROM marked
"""
# The part a step does not have names no row (ids start at 1) in its WHERE, rather than NULL:
# a custom plan can fold a NULL away and look cheaper than the generic plan, and PostgreSQL
# would then plan the statement afresh at every run (about as long as running it).
_NO_ID = Int8(0)
_NO_TOKEN = UUID(int=0)


@lru_cache(maxsize=1024)  # one per tenant a worker sends for: composed once, not per call
def _step_in(slug: str) -> sql.Composed:
    return in_schema(_STEP, slug)


def _step_params(answer: Answer | None, call: ClaimedEmail | None) -> dict[str, object]:
    return {
        "id": Int8(answer.claim.delivery_id) if answer else _NO_ID,
        "token": answer.claim.claim_token if answer else _NO_TOKEN,
        "message_id": answer.provider_message_id if answer else None,
        "request_id": answer.request_id if answer else None,
        "call_id": Int8(call.delivery_id) if call else _NO_ID,
        "call_token": call.claim_token if call else _NO_TOKEN,
    }


def _recorded(results: list[list[tuple[object, ...]]]) -> Recorded:
    found: dict[str, set[int]] = {"accepted": set(), "answered": set(), "marked": set()}
    for rows in results:
        for kind, delivery_id in rows:
            found[str(kind)].add(int(str(delivery_id)))
    return Recorded(found["accepted"], found["answered"] - found["accepted"], found["marked"])


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
        f"""
        WITH updated AS (
            UPDATE notification_deliveries
            SET status = CASE WHEN %(retry_at)s::timestamptz IS NULL THEN 'failed' ELSE 'pending' END,
                send_after = coalesce(%(retry_at)s, send_after), lease_until = NULL,
                enqueued_at = NULL, last_error = %(error)s, last_error_class = %(error_class)s,
                updated_at = now()
            WHERE id = %(id)s AND claim_token = %(token)s AND {_RETRY_OR_FAIL}
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
        f"""
        WITH updated AS (
            UPDATE notification_deliveries
            SET status = 'unknown', unknown_since = now(), lease_until = NULL,
                last_error = %(error)s, last_error_class = 'uncertain', updated_at = now()
            WHERE id = %(id)s AND claim_token = %(token)s AND {_TO_UNKNOWN}
            RETURNING id
        )
        UPDATE delivery_attempts
        SET ended_at = now(), outcome = 'unknown', unknown_at = now(), error_class = 'uncertain',
            error = %(error)s
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
    tx.after_commit(SendEmails(list(ids)))
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
    tx.after_commit(SendEmails(sorted(int(str(r[0])) for r in rows)))
