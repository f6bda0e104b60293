"""Slack and Teams deliveries: queued with the claim's notices, claimed under a lease and a
token, the call marked in its own commit right before it leaves, every answer written only
where the row still carries that token, and every attempt kept (domain/delivery/chat.py).

One call is three short transactions (actors/chat.py), as for webhooks:
  1. claim: due rows (pending, or deferred past the end of quiet hours) of an enabled
     channel whose URL's circuit is closed move to `sending` with a fresh claim_token, a
     lease and attempts + 1, plus an attempt row;
  2. mark_called, committed right before the request leaves, refused once the lease has
     run out: from here on a lost answer means "unknown";
  3. record_answer: the attempt's outcome, the delivery's next state (delivered, a retry at
     its backoff, failed) and the URL's health (the circuit breaker).
A worker killed between 2 and 3 leaves its delivery `sending`: when the lease runs out the
sweeper records the attempt as unknown (or never sent) and puts the delivery back to
pending; it is sent again and may show twice in the channel (chat receivers do not
deduplicate), which beats losing it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

from db.platform.effects import SendChats
from db.platform.tenancy import TenantTx, tenant_statements, tenant_tx
from domain.delivery.chat import CHAT, CHAT_CHANNELS, MAX_ATTEMPTS, ChatStatus
from domain.delivery.preferences import CHAT_OPTED_OUT
from domain.delivery.states import ErrorClass
from domain.delivery.webhooks import CallAnswer, EndpointHealth, after_failure, retry_delay
from tocsin.core.clock import utcnow

__all__ = [
    "NO_URL",
    "ClaimedChat",
    "Recorded",
    "SweptChats",
    "claim_chats",
    "mark_called",
    "queue_chat_deliveries",
    "record_answer",
    "release_unsent",
    "sweep_chats",
]

log = logging.getLogger("tocsin.chat")

REENQUEUE_AFTER_SECONDS = 60  # a due delivery enqueued longer ago than this is enqueued again
SWEEP_BATCH = 1_000  # due deliveries one sweep enqueues per tenant

_TO_SENDING = CHAT.where(to=ChatStatus.SENDING, alias="d")
_TO_CANCELLED = CHAT.where(to=ChatStatus.CANCELLED, from_=[ChatStatus.PENDING, ChatStatus.DEFERRED],
                           alias="d")
_ANSWERED = CHAT.where(to=(ChatStatus.DELIVERED, ChatStatus.PENDING, ChatStatus.FAILED),
                       from_=[ChatStatus.SENDING])
_UNSENT = CHAT.where(to=ChatStatus.PENDING, from_=[ChatStatus.SENDING])
_LEASE_OVER = CHAT.where(to=(ChatStatus.PENDING, ChatStatus.FAILED), from_=[ChatStatus.SENDING], alias="d")


# --- queueing ----------------------------------------------------------------------------

def _wanted(user: str, category: str, channel: str, locked: str) -> str:
    """The SQL twin of domain resolve_channel_choice, for a person, a category and a channel
    given as SQL expressions (a test checks the two agree on every combination)."""
    tenant = (f"(SELECT tc.enabled FROM chat_category_defaults tc "
              f"WHERE tc.category = {category} AND tc.channel = {channel})")
    own = (f"(SELECT uc.enabled FROM chat_preferences uc WHERE uc.user_id = {user} "
           f"AND uc.category = {category} AND uc.channel = {channel})")
    return (f"CASE WHEN coalesce({locked}, false) THEN coalesce({tenant}, true) "
            f"ELSE coalesce({own}, {tenant}, true) END")


# The chat twin of notify_statement's email decision (domain chat_decision, with the choice
# resolved as domain resolve_channel_choice): per person with a URL of their own, one per
# claim to the tenant's channel when it has a URL. Only channels the rule names and the
# tenant enabled; only claims whose notices exist (written just before, same transaction).
_QUEUE = f"""
WITH enabled AS (
    SELECT c.channel, c.webhook_url FROM chat_channels c
    WHERE c.enabled AND c.channel = ANY(%(channels)s)
), notes AS (
    SELECT n.ledger_id, n.recipient_user_id AS user_id, n.title, n.body,
           coalesce(n.data ->> 'href', '/inbox') AS href
    FROM notifications n
    WHERE n.ledger_id = ANY(%(ledger_ids)s) AND n.category = %(category)s
), personal AS (
    SELECT nt.ledger_id, nt.user_id, e.channel, a.webhook_url, nt.title, nt.body, nt.href,
           {_wanted("nt.user_id", "%(category)s", "e.channel", "td.locked")} AS wanted,
           quiet_hours_end(%(now)s, coalesce(u.time_zone, %(tenant_zone)s),
                           s.quiet_start, s.quiet_end) AS quiet_end,
           coalesce(td.critical, false) OR %(critical)s AS critical
    FROM notes nt
    JOIN users u ON u.id = nt.user_id AND u.deactivated_at IS NULL
    CROSS JOIN enabled e
    JOIN chat_addresses a ON a.user_id = nt.user_id AND a.channel = e.channel
    LEFT JOIN category_defaults td ON td.category = %(category)s
    LEFT JOIN delivery_schedules s ON s.user_id = nt.user_id
), shared AS (
    SELECT DISTINCT ON (nt.ledger_id, e.channel)
           nt.ledger_id, e.channel, e.webhook_url, nt.title, nt.body, nt.href
    FROM notes nt JOIN enabled e ON e.webhook_url IS NOT NULL
    ORDER BY nt.ledger_id, e.channel, nt.user_id
)
INSERT INTO chat_deliveries (ledger_id, recipient_user_id, channel, webhook_url, title, text, href,
                             status, status_reason, critical, send_after)
SELECT ledger_id, user_id, channel, webhook_url, title, body, href,
       CASE WHEN NOT wanted THEN 'cancelled'
            WHEN quiet_end IS NOT NULL AND NOT critical THEN 'deferred' ELSE 'pending' END,
       CASE WHEN NOT wanted THEN %(opted_out)s END,
       critical,
       CASE WHEN wanted AND quiet_end IS NOT NULL AND NOT critical THEN quiet_end ELSE now() END
FROM personal
UNION ALL
SELECT ledger_id, NULL, channel, webhook_url, title, body, href, 'pending', NULL, %(critical)s, now()
FROM shared
ORDER BY 1, 2, 3
ON CONFLICT (ledger_id, coalesce(recipient_user_id, 0), channel) DO NOTHING
RETURNING id, status
"""


def queue_chat_deliveries(tx: TenantTx, ledger_ids: list[int], channels: list[str], *,
                          category: str, critical: bool, now: datetime | None = None) -> list[int]:
    """The Slack and Teams messages of claims whose notices ``tx`` has just written: one per
    (claim, recipient, channel), idempotent (a claim prepared twice queues nothing more).
    The ones due now are handed to the chat workers once ``tx`` commits."""
    chat = [str(c) for c in CHAT_CHANNELS if str(c) in channels]
    if not ledger_ids or not chat:
        return []
    rows = tx.conn.execute(_QUEUE, {
        "channels": chat, "ledger_ids": ledger_ids, "category": category, "critical": critical,
        "now": now or utcnow(), "tenant_zone": tx.tenant.time_zone, "opted_out": CHAT_OPTED_OUT,
    }).fetchall()
    due = [int(str(r[0])) for r in rows if r[1] == "pending"]
    _enqueue_after_commit(tx, due)
    return due


def _enqueue_after_commit(tx: TenantTx, ids: list[int]) -> None:
    if ids:
        tx.conn.execute("UPDATE chat_deliveries SET enqueued_at = now() WHERE id = ANY(%s)", [ids])
        tx.after_commit(SendChats(list(ids)))


# --- one call: claim, mark called, record the answer -------------------------------------

@dataclass(frozen=True)
class ClaimedChat:
    delivery_id: int
    claim_token: UUID
    attempt: int
    channel: str
    url: str
    title: str
    text: str
    href: str
    critical: bool


# At send time, as for email: a person who since turned the channel off for the category, or
# took their URL away, is not sent the message (cancelled with why).
_NO_URL = ("NOT EXISTS (SELECT 1 FROM chat_addresses a "
           "WHERE a.user_id = d.recipient_user_id AND a.channel = d.channel)")
_CANCEL_UNWANTED = f"""
UPDATE chat_deliveries d
SET status = 'cancelled', updated_at = now(),
    status_reason = CASE WHEN {_NO_URL} THEN %(no_url)s ELSE %(opted_out)s END
FROM notifications n
LEFT JOIN category_defaults td ON td.category = n.category
WHERE d.id = ANY(%(ids)s) AND d.recipient_user_id IS NOT NULL AND d.status IN ('pending', 'deferred')
  AND n.ledger_id = d.ledger_id AND n.recipient_user_id = d.recipient_user_id
  AND ({_NO_URL} OR NOT {_wanted("d.recipient_user_id", "n.category", "d.channel", "td.locked")})
  AND {_TO_CANCELLED}
"""
NO_URL = "recipient removed their URL for this channel"

# Deliveries due for a URL whose circuit is open wait until it closes, without an attempt.
_WAIT_FOR_CIRCUIT = """
UPDATE chat_deliveries d SET send_after = h.circuit_open_until, updated_at = now()
FROM chat_url_health h
WHERE d.id = ANY(%(ids)s) AND h.webhook_url = d.webhook_url AND d.status IN ('pending', 'deferred')
  AND h.circuit_open_until > now() AND d.send_after < h.circuit_open_until
"""

_CLAIM = f"""
WITH due AS (
    SELECT d.id FROM chat_deliveries d JOIN chat_channels c ON c.channel = d.channel AND c.enabled
    LEFT JOIN chat_url_health h ON h.webhook_url = d.webhook_url
    WHERE d.id = ANY(%(ids)s) AND d.status IN ('pending', 'deferred') AND d.send_after <= now()
      AND (h.circuit_open_until IS NULL OR h.circuit_open_until <= now())
    ORDER BY d.id
    FOR UPDATE OF d SKIP LOCKED
), claimed AS (
    UPDATE chat_deliveries d
    SET status = 'sending', claim_token = gen_random_uuid(), attempts = d.attempts + 1,
        lease_until = now() + make_interval(secs => %(lease)s), updated_at = now()
    FROM due WHERE d.id = due.id AND {_TO_SENDING}
    RETURNING d.id, d.claim_token, d.attempts, d.channel, d.webhook_url, d.title, d.text, d.href,
              d.critical
), attempted AS (
    INSERT INTO chat_attempts (delivery_id, attempt_no, claim_token)
    SELECT id, attempts, claim_token FROM claimed
)
SELECT * FROM claimed ORDER BY id
"""


def claim_chats(slug: str, delivery_ids: list[int], lease_seconds: float) -> list[ClaimedChat]:
    """Claim the due ones among ``delivery_ids`` (committed): only the caller whose claim
    moved a delivery to sending posts it."""
    _, _, rows = tenant_statements(slug, [
        (_CANCEL_UNWANTED, {"ids": delivery_ids, "opted_out": CHAT_OPTED_OUT, "no_url": NO_URL}),
        (_WAIT_FOR_CIRCUIT, {"ids": delivery_ids}),
        (_CLAIM, {"ids": delivery_ids, "lease": lease_seconds})])
    return [ClaimedChat(int(str(r[0])), UUID(str(r[1])), int(str(r[2])), str(r[3]), str(r[4]),
                        str(r[5]), str(r[6]), str(r[7]), bool(r[8])) for r in rows]


_MARK_CALLED = """
UPDATE chat_attempts a SET called_at = now()
FROM chat_deliveries d
WHERE a.delivery_id = %(id)s AND a.claim_token = %(token)s AND d.id = a.delivery_id
  AND d.claim_token = %(token)s AND d.status = 'sending' AND d.lease_until > now()
RETURNING a.id
"""


def mark_called(slug: str, claim: ClaimedChat) -> bool:
    """Committed right before the request leaves; False when the lease ran out (the claim is
    the sweeper's now: no request may be made)."""
    [rows] = tenant_statements(slug, [(_MARK_CALLED, {"id": claim.delivery_id, "token": claim.claim_token})])
    return bool(rows)


_ATTEMPT_ENDED = """
UPDATE chat_attempts SET ended_at = now(), outcome = %(outcome)s, status_code = %(code)s,
       latency_ms = %(latency)s, response = %(response)s, error = %(error)s
WHERE delivery_id = %(id)s AND claim_token = %(token)s AND ended_at IS NULL
"""

_DELIVERY_ANSWERED = f"""
UPDATE chat_deliveries SET status = %(status)s, status_reason = %(reason)s,
       send_after = CASE WHEN %(status)s = 'pending' THEN now() + make_interval(secs => %(delay)s)
                         ELSE send_after END,
       claim_token = NULL, lease_until = NULL, enqueued_at = NULL,
       last_status_code = %(code)s, last_error = %(error)s, updated_at = now(),
       delivered_at = CASE WHEN %(status)s = 'delivered' THEN now() ELSE delivered_at END
WHERE id = %(id)s AND claim_token = %(token)s AND {_ANSWERED}
RETURNING id
"""

_URL_SUCCEEDED = """
INSERT INTO chat_url_health (webhook_url, channel, last_success_at) VALUES (%(url)s, %(channel)s, now())
ON CONFLICT (webhook_url) DO UPDATE SET consecutive_failures = 0, circuit_open_until = NULL,
       last_success_at = now()
"""

_URL_FAILURES = """
INSERT INTO chat_url_health (webhook_url, channel) VALUES (%(url)s, %(channel)s)
ON CONFLICT (webhook_url) DO UPDATE SET channel = excluded.channel
RETURNING consecutive_failures
"""

_URL_FAILED = """
UPDATE chat_url_health SET consecutive_failures = %(failures)s, circuit_open_until = %(open_until)s,
       last_failure_at = now(), last_error = %(error)s
WHERE webhook_url = %(url)s
"""


@dataclass(frozen=True)
class Recorded:
    status: ChatStatus | None  # None: the claim was no longer ours (only the attempt recorded)
    retry_in: timedelta | None  # when a retry was scheduled


def record_answer(slug: str, claim: ClaimedChat, answer: CallAnswer, *, jitter: float,
                  retry_base: timedelta) -> Recorded:
    """Write one call's answer: the attempt (always: every attempt is kept), the delivery
    where it still carries our token, and the URL's health."""
    if answer.error_class is None:
        status, outcome, delay = ChatStatus.DELIVERED, "delivered", timedelta(0)
    elif answer.error_class is ErrorClass.PERMANENT or claim.attempt >= MAX_ATTEMPTS:
        status, outcome, delay = ChatStatus.FAILED, "failed", timedelta(0)
    else:
        status, delay = ChatStatus.PENDING, retry_delay(claim.attempt, jitter, retry_base)
        outcome = "unknown" if answer.error_class is ErrorClass.UNCERTAIN else "retry"
    if answer.refused:
        outcome = "refused"
    reason = None
    if status is ChatStatus.FAILED:
        reason = ("the receiver refused it for good" if answer.error_class is ErrorClass.PERMANENT
                  else f"no success in {MAX_ATTEMPTS} attempts")
    key = {"id": claim.delivery_id, "token": claim.claim_token}
    url = {"url": claim.url, "channel": claim.channel}
    with tenant_tx(slug) as tx:
        tx.conn.execute(_ATTEMPT_ENDED, {**key, "outcome": outcome, "code": answer.status_code,
                                         "latency": answer.latency_ms, "response": answer.response,
                                         "error": answer.error})
        moved = tx.conn.execute(_DELIVERY_ANSWERED, {
            **key, "status": str(status), "reason": reason, "delay": delay.total_seconds(),
            "code": answer.status_code, "error": answer.error}).fetchone()
        if answer.error_class is None:
            tx.conn.execute(_URL_SUCCEEDED, url)
        elif not answer.refused:
            row = tx.conn.execute(_URL_FAILURES, url).fetchone()
            verdict = after_failure(EndpointHealth(int(str(row[0])) if row else 0, None), utcnow())
            tx.conn.execute(_URL_FAILED, {**url, "failures": verdict.consecutive_failures,
                                          "open_until": verdict.circuit_open_until,
                                          "error": (answer.error or "")[:500]})
    if moved is None:
        return Recorded(None, None)
    return Recorded(status, delay if status is ChatStatus.PENDING else None)


_RELEASE = f"""
WITH released AS (
    UPDATE chat_deliveries SET status = 'pending', attempts = attempts - 1, claim_token = NULL,
           lease_until = NULL, send_after = greatest(send_after, now() + make_interval(secs => %(after)s)),
           updated_at = now()
    WHERE id = %(id)s AND claim_token = %(token)s AND {_UNSENT}
    RETURNING id
)
DELETE FROM chat_attempts a USING released r
WHERE a.delivery_id = r.id AND a.claim_token = %(token)s AND a.called_at IS NULL
"""


def release_unsent(slug: str, claims: list[ClaimedChat], why: str, *, after_seconds: float = 0.0) -> None:
    """Give back claimed deliveries whose call was never made (the worker is stopping, the
    lease is running out, the URL's rate limit has no slot soon): pending again, due in
    ``after_seconds``, as if never claimed. The attempt row goes with the claim."""
    if not claims:
        return
    with tenant_tx(slug) as tx:
        for claim in claims:
            tx.conn.execute(_RELEASE, {"id": claim.delivery_id, "token": claim.claim_token,
                                       "after": after_seconds})
    log.info("chat tenant=%s released=%d unsent: %s", slug, len(claims), why)


# --- the sweeper's part ------------------------------------------------------------------

@dataclass(frozen=True)
class SweptChats:
    retried: int  # leases that ran out: back to pending (unknown when the call had been made)
    failed: int  # leases that ran out on the last attempt
    enqueued: int


_EXPIRED = f"""
WITH expired AS (
    SELECT d.id, d.claim_token, d.attempts FROM chat_deliveries d
    WHERE d.status = 'sending' AND d.lease_until < now()
    ORDER BY d.id LIMIT %(limit)s FOR UPDATE SKIP LOCKED
), attempts AS (
    UPDATE chat_attempts a
    SET ended_at = now(),
        outcome = CASE WHEN a.called_at IS NULL THEN 'retry' ELSE 'unknown' END,
        error = CASE WHEN a.called_at IS NULL
                     THEN 'the lease ran out before the call: never sent'
                     ELSE 'the lease ran out after the call: the answer was lost; sent again' END
    FROM expired x WHERE a.delivery_id = x.id AND a.claim_token = x.claim_token AND a.ended_at IS NULL
)
UPDATE chat_deliveries d
SET status = CASE WHEN x.attempts >= %(max_attempts)s THEN 'failed' ELSE 'pending' END,
    status_reason = CASE WHEN x.attempts >= %(max_attempts)s
                         THEN 'no success in ' || %(max_attempts)s || ' attempts' END,
    claim_token = NULL, lease_until = NULL, enqueued_at = NULL, send_after = now(), updated_at = now()
FROM expired x WHERE d.id = x.id AND {_LEASE_OVER}
RETURNING d.status
"""

_DUE = """
UPDATE chat_deliveries SET enqueued_at = now()
WHERE id IN (
    SELECT d.id FROM chat_deliveries d JOIN chat_channels c ON c.channel = d.channel AND c.enabled
    WHERE d.status IN ('pending', 'deferred') AND d.send_after <= now()
      AND (d.enqueued_at IS NULL OR d.enqueued_at < now() - make_interval(secs => %(stale)s))
    ORDER BY d.send_after, d.id LIMIT %(limit)s FOR UPDATE OF d SKIP LOCKED)
RETURNING id
"""


def sweep_chats(slug: str, *, everything_due: bool = False) -> SweptChats:
    """Expired leases back to pending (or failed on the last attempt), their attempts
    recorded as never sent or unknown; then every due delivery (quiet hours over, a retry
    due, a wake-up lost) is enqueued again."""
    with tenant_tx(slug) as tx:
        moved = [str(r[0]) for r in tx.conn.execute(
            _EXPIRED, {"limit": SWEEP_BATCH, "max_attempts": MAX_ATTEMPTS})]
        due = [int(str(r[0])) for r in tx.conn.execute(
            _DUE, {"stale": 0 if everything_due else REENQUEUE_AFTER_SECONDS, "limit": SWEEP_BATCH})]
        if due:
            tx.after_commit(SendChats(due))
    return SweptChats(moved.count("pending"), moved.count("failed"), len(due))
