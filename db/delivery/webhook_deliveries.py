"""Webhook deliveries: queued with the claim they announce, claimed under a lease and a
token, each call marked called in a commit made before it leaves, every answer written only
where the row still carries that token, and every attempt kept.

A message's calls take (actors/webhooks.py):
  1. claim: pending, due rows of enabled endpoints whose circuit is closed move to
     `sending` with a fresh claim_token, a lease and attempts + 1, plus an attempt row;
  2. per group of calls (domain/delivery/channels.py calls_per_commit), one commit that marks
     the group's calls called, refused for a claim whose lease has run out (from here on a
     lost answer means "unknown"), and records the previous group's successes;
  3. anything but a success at once (record_answer): the attempt's outcome, the delivery's
     next state (a retry at its backoff, failed) and the endpoint's health (circuit breaker,
     disabling).
A worker killed between 2 and the next commit leaves its group's deliveries `sending` with
attempts marked called: when the lease runs out the sweeper records those attempts as unknown
and puts the deliveries back to pending, and they are sent again with the same webhook-ids,
which the receiver drops if it had them. Nothing is lost, and a repeat is recognisable.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

from db.delivery.webhook_endpoints import disable_endpoint, signing_secrets
from db.evidence.audit import record_audit
from db.platform.effects import AnnounceInbox, SendWebhooks
from db.platform.tenancy import Statement, TenantTx, tenant_statements, tenant_tx
from domain.delivery.states import ErrorClass
from domain.delivery.webhooks import (
    MAX_ATTEMPTS,
    TEST_EVENT,
    WEBHOOK,
    CallAnswer,
    EndpointHealth,
    WebhookStatus,
    after_failure,
    payload,
    retry_delay,
)
from domain.errors import InvalidInput, NotFound
from tocsin.core.clock import utcnow

__all__ = [
    "ClaimedWebhook",
    "LogEntry",
    "Marked",
    "Recorded",
    "SweptWebhooks",
    "claim_webhooks",
    "delivery_log",
    "end_marked_unsent",
    "mark_called",
    "queue_notice_webhooks",
    "queue_test_event",
    "record_answer",
    "record_successes_and_mark",
    "redeliver",
    "release_unsent",
    "sweep_webhooks",
]

log = logging.getLogger("tocsin.webhooks")

REENQUEUE_AFTER_SECONDS = 60  # a due delivery enqueued longer ago than this is enqueued again
SWEEP_BATCH = 1_000  # due deliveries one sweep enqueues per tenant

_TO_SENDING = WEBHOOK.where(to=WebhookStatus.SENDING, alias="d")
_CANCELLED_UNSENT = WEBHOOK.where(to=WebhookStatus.CANCELLED, from_=[WebhookStatus.SENDING])
_ANSWERED = WEBHOOK.where(to=(WebhookStatus.DELIVERED, WebhookStatus.PENDING, WebhookStatus.FAILED),
                          from_=[WebhookStatus.SENDING])
_LEASE_OVER = WEBHOOK.where(to=(WebhookStatus.PENDING, WebhookStatus.FAILED),
                            from_=[WebhookStatus.SENDING], alias="d")
_REDELIVER = WEBHOOK.where(to=WebhookStatus.PENDING,
                           within=[WebhookStatus.DELIVERED, WebhookStatus.FAILED, WebhookStatus.CANCELLED])


@dataclass(frozen=True)
class ClaimedWebhook:
    delivery_id: int
    claim_token: UUID
    attempt: int
    endpoint_id: int
    url: str
    body: str  # signed with the secrets the call's mark reads (a rotation committed before it counts)
    created_at: datetime


# --- queueing ----------------------------------------------------------------------------

_QUEUE_NOTICES = """
INSERT INTO webhook_deliveries (endpoint_id, event_kind, ledger_id, payload)
SELECT e.id, 'notice.created', l.id,
       jsonb_build_object('type', 'notice.created', 'timestamp', l.claimed_at,
                          'data', jsonb_build_object(
                              'claim_id', l.id, 'rule', l.rule, 'rule_id', l.rule_id,
                              'subject_kind', l.subject_kind, 'subject_id', l.subject_id,
                              'threshold', l.threshold, 'due_on', l.due_on))
FROM notification_ledger l CROSS JOIN webhook_endpoints e
WHERE l.id = ANY(%(ledger_ids)s) AND e.enabled AND 'notice.created' = ANY(e.event_kinds)
ORDER BY e.id, l.id
ON CONFLICT (endpoint_id, event_kind, ledger_id) WHERE ledger_id IS NOT NULL DO NOTHING
RETURNING id
"""


def queue_notice_webhooks(tx: TenantTx, ledger_ids: list[int]) -> list[int]:
    """One `notice.created` delivery per (claim, subscribed endpoint), in the transaction
    that writes the claim's notices; a claim prepared twice queues nothing more."""
    if not ledger_ids:
        return []
    if tx.conn.execute("SELECT 1 FROM webhook_endpoints WHERE enabled LIMIT 1").fetchone() is None:
        return []
    ids = [int(str(r[0])) for r in tx.conn.execute(_QUEUE_NOTICES, {"ledger_ids": ledger_ids})]
    _enqueue_after_commit(tx, ids)
    return ids


def queue_test_event(tx: TenantTx, endpoint_id: int, sent_by: str) -> int:
    """A `webhook.test` delivery to one endpoint (enabled or not: testing a disabled one is
    how an administrator checks it before enabling it again... but it is sent only when
    enabled, so a disabled endpoint's test waits, visibly pending)."""
    row = tx.conn.execute("SELECT enabled FROM webhook_endpoints WHERE id = %s", [endpoint_id]).fetchone()
    if row is None:
        raise NotFound(f"no webhook endpoint {endpoint_id}")
    if not row[0]:
        raise InvalidInput("the endpoint is disabled: enable it first")
    body = json.loads(payload(TEST_EVENT, utcnow(), {"message": "A test event from Tocsin",
                                                     "sent_by": sent_by}))
    created = tx.conn.execute(
        "INSERT INTO webhook_deliveries (endpoint_id, event_kind, payload) VALUES (%s, %s, %s) "
        "RETURNING id", [endpoint_id, TEST_EVENT, json.dumps(body)]).fetchone()
    assert created is not None
    delivery_id = int(str(created[0]))
    _enqueue_after_commit(tx, [delivery_id])
    record_audit(tx, "webhook.test", "webhook_endpoint", endpoint_id, after={"delivery": delivery_id})
    return delivery_id


def redeliver(tx: TenantTx, delivery_id: int) -> None:
    """Send a finished delivery once more, with the same webhook-id (an administrator's
    choice: the receiver lost it, or was fixed). Refused while it is still on its way."""
    row = tx.conn.execute(
        f"UPDATE webhook_deliveries SET status = 'pending', status_reason = 'redelivery asked for', "
        f"send_after = now(), updated_at = now() WHERE id = %s AND {_REDELIVER} "
        f"AND EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.id = endpoint_id AND e.enabled) "
        f"RETURNING id", [delivery_id]).fetchone()
    if row is None:
        found = tx.conn.execute(
            "SELECT d.status, e.enabled FROM webhook_deliveries d "
            "JOIN webhook_endpoints e ON e.id = d.endpoint_id WHERE d.id = %s", [delivery_id]).fetchone()
        if found is None:
            raise NotFound(f"no webhook delivery {delivery_id}")
        if not found[1]:
            raise InvalidInput("the endpoint is disabled: enable it first")
        raise InvalidInput(f"the delivery is {found[0]}: it is already on its way")
    _enqueue_after_commit(tx, [delivery_id])
    record_audit(tx, "webhook.redeliver", "webhook_delivery", delivery_id)


def _enqueue_after_commit(tx: TenantTx, ids: list[int]) -> None:
    if ids:
        tx.conn.execute("UPDATE webhook_deliveries SET enqueued_at = now() WHERE id = ANY(%s)", [ids])
        tx.after_commit(SendWebhooks(list(ids)))


# --- one call: claim, mark called, record the answer -------------------------------------

_CLAIM = f"""
WITH due AS (
    SELECT d.id FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id
    WHERE d.id = ANY(%(ids)s) AND d.status = 'pending' AND d.send_after <= now() AND e.enabled
      AND (e.circuit_open_until IS NULL OR e.circuit_open_until <= now())
    ORDER BY d.id
    FOR UPDATE OF d SKIP LOCKED
), claimed AS (
    UPDATE webhook_deliveries d
    SET status = 'sending', claim_token = gen_random_uuid(), attempts = d.attempts + 1,
        lease_until = now() + make_interval(secs => %(lease)s), updated_at = now()
    FROM due WHERE d.id = due.id AND {_TO_SENDING}
    RETURNING d.id, d.claim_token, d.attempts, d.endpoint_id, d.payload, d.created_at
), attempted AS (
    INSERT INTO webhook_attempts (delivery_id, attempt_no, claim_token)
    SELECT id, attempts, claim_token FROM claimed
)
SELECT c.id, c.claim_token, c.attempts, c.endpoint_id, e.url, c.payload::text, c.created_at, now()
FROM claimed c JOIN webhook_endpoints e ON e.id = c.endpoint_id
ORDER BY c.id
"""

# Deliveries due for an endpoint whose circuit is open wait until it closes, without an attempt.
_WAIT_FOR_CIRCUIT = """
UPDATE webhook_deliveries d SET send_after = e.circuit_open_until, updated_at = now()
FROM webhook_endpoints e
WHERE d.id = ANY(%(ids)s) AND e.id = d.endpoint_id AND d.status = 'pending'
  AND e.circuit_open_until > now() AND d.send_after < e.circuit_open_until
"""


def claim_webhooks(slug: str, delivery_ids: list[int], lease_seconds: float) -> list[ClaimedWebhook]:
    """Claim the due ones among ``delivery_ids`` (committed): only the caller whose claim
    moved a delivery to sending calls its endpoint."""
    # One round trip: BEGIN, scope, both statements and COMMIT pipelined.
    _, rows = tenant_statements(slug, [(_WAIT_FOR_CIRCUIT, {"ids": delivery_ids}),
                                       (_CLAIM, {"ids": delivery_ids, "lease": lease_seconds})])
    claimed = []
    for r in rows:
        now = r[7] if isinstance(r[7], datetime) else utcnow()
        claimed.append(ClaimedWebhook(
            delivery_id=int(str(r[0])), claim_token=UUID(str(r[1])), attempt=int(str(r[2])),
            endpoint_id=int(str(r[3])), url=str(r[4]), body=str(r[5]),
            created_at=r[6] if isinstance(r[6], datetime) else now))
    return claimed


_MARK_CALLED = """
UPDATE webhook_attempts a SET called_at = now()
FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id
WHERE a.delivery_id = %(id)s AND a.claim_token = %(token)s AND d.id = a.delivery_id
  AND d.claim_token = %(token)s AND d.status = 'sending' AND d.lease_until > now()
  AND e.enabled AND (e.circuit_open_until IS NULL OR e.circuit_open_until <= now())
RETURNING e.secret, e.previous_secret, e.previous_secret_until, now()
"""

_WHY_NOT = """
SELECT e.enabled, d.claim_token = %(token)s AND d.status = 'sending' AND d.lease_until > now()
FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id WHERE d.id = %(id)s
"""

_CANCEL_CLAIMED = f"""
WITH cancelled AS (
    UPDATE webhook_deliveries SET status = 'cancelled', status_reason = 'endpoint disabled before the call',
           claim_token = NULL, lease_until = NULL, updated_at = now()
    WHERE id = %(id)s AND claim_token = %(token)s AND {_CANCELLED_UNSENT}
    RETURNING id
)
DELETE FROM webhook_attempts a USING cancelled c
WHERE a.delivery_id = c.id AND a.claim_token = %(token)s AND a.called_at IS NULL
"""


@dataclass(frozen=True)
class Marked:
    secrets: list[str] | None  # sign the call with these (read as it was marked); None: no call
    refused: str | None = None  # why no request may be made


def mark_called(slug: str, claim: ClaimedWebhook) -> Marked:
    """Committed right before the request leaves, with the secrets to sign it with (a
    rotation committed before this is in them). Otherwise why not, and no request may be
    made: a claim whose lease ran out is the sweeper's; one whose endpoint was disabled
    meanwhile (an earlier call of the same batch answered 410) is cancelled; one whose
    endpoint's circuit opened goes back to wait for it. One claim's part of
    record_successes_and_mark."""
    return record_successes_and_mark(slug, [], [claim])[1][claim.delivery_id]


def _mark_statement(claim: ClaimedWebhook) -> Statement:
    return _MARK_CALLED, {"id": claim.delivery_id, "token": claim.claim_token}


def _marked(slug: str, claim: ClaimedWebhook, rows: list[tuple[object, ...]]) -> Marked:
    if rows:
        m = rows[0]
        now = m[3] if isinstance(m[3], datetime) else utcnow()
        return Marked(signing_secrets(str(m[0]), None if m[1] is None else str(m[1]),
                                      m[2] if isinstance(m[2], datetime) else None, now))
    params = {"id": claim.delivery_id, "token": claim.claim_token}
    with tenant_tx(slug) as tx:
        row = tx.conn.execute(_WHY_NOT, params).fetchone()
        if row is None or not row[1]:
            return Marked(None, "the lease ran out before the call")
        if not row[0]:
            tx.conn.execute(_CANCEL_CLAIMED, params)
            return Marked(None, "the endpoint was disabled before the call")
    release_unsent(slug, [claim], "the endpoint's circuit opened before the call")
    return Marked(None, "the endpoint's circuit opened before the call")


_ATTEMPT_ENDED = """
UPDATE webhook_attempts SET ended_at = now(), outcome = %(outcome)s, status_code = %(code)s,
       latency_ms = %(latency)s, response = %(response)s, error = %(error)s
WHERE delivery_id = %(id)s AND claim_token = %(token)s AND ended_at IS NULL
"""

_DELIVERY_ANSWERED = f"""
UPDATE webhook_deliveries SET status = %(status)s, status_reason = %(reason)s,
       send_after = CASE WHEN %(status)s = 'pending' THEN now() + make_interval(secs => %(delay)s)
                         ELSE send_after END,
       claim_token = NULL, lease_until = NULL, enqueued_at = NULL,
       last_status_code = %(code)s, last_error = %(error)s, updated_at = now(),
       delivered_at = CASE WHEN %(status)s = 'delivered' THEN now() ELSE delivered_at END
WHERE id = %(id)s AND claim_token = %(token)s AND {_ANSWERED}
RETURNING send_after
"""

_ENDPOINT_SUCCEEDED = """
UPDATE webhook_endpoints SET consecutive_failures = 0, failing_since = NULL,
       circuit_open_until = NULL, updated_at = now()
WHERE id = %(id)s AND (consecutive_failures > 0 OR failing_since IS NOT NULL)
"""

_ENDPOINT_FAILED = """
UPDATE webhook_endpoints SET consecutive_failures = %(failures)s, failing_since = %(since)s,
       circuit_open_until = %(open_until)s, updated_at = now()
WHERE id = %(id)s
"""


@dataclass(frozen=True)
class Recorded:
    status: WebhookStatus | None  # None: the claim was no longer ours (only the attempt recorded)
    retry_in: timedelta | None  # when a retry was scheduled
    disabled: bool  # this answer disabled the endpoint
    circuit_opened: bool = False  # this answer opened the endpoint's circuit


def record_answer(slug: str, claim: ClaimedWebhook, answer: CallAnswer, *, jitter: float,
                  retry_base: timedelta) -> Recorded:
    """Write one call's answer: the attempt (always, even when the claim has been taken
    back: every attempt is kept), the delivery where it still carries our token, and the
    endpoint's health. A late success after a takeover is recorded on its attempt; the
    delivery goes out again with the same webhook-id, which the receiver drops."""
    return _record(slug, claim, answer, jitter=jitter, retry_base=retry_base)


def record_successes_and_mark(slug: str, done: list[tuple[ClaimedWebhook, CallAnswer]],
                              next_claims: list[ClaimedWebhook],
                              ) -> tuple[list[Recorded], dict[int, Marked]]:
    """The successes of a group of calls recorded together with the next group's marks, in
    one round trip and one commit: a group of calls costs one commit, not one per call. A
    crash before it loses those answers only: the sweeper makes their attempts unknown and
    the deliveries are sent again with the same webhook-ids. Each success's Recorded, in
    order, and each next claim's Marked, by delivery id."""
    if any(answer.error_class is not None for _, answer in done):
        raise ValueError("only successes travel with the next marks")
    statements: list[Statement] = []
    for claim, answer in done:
        statements.extend(_success_statements(claim, answer))
    for endpoint_id in sorted({claim.endpoint_id for claim, _ in done}):
        statements.append((_ENDPOINT_SUCCEEDED, {"id": endpoint_id}))
    marks_from = len(statements)
    statements.extend(_mark_statement(claim) for claim in next_claims)
    if not statements:
        return [], {}
    results = tenant_statements(slug, statements)
    recorded = [Recorded(WebhookStatus.DELIVERED if results[2 * n + 1] else None, None, False)
                for n in range(len(done))]
    marked = {claim.delivery_id: _marked(slug, claim, results[marks_from + n])
              for n, claim in enumerate(next_claims)}
    return recorded, marked


def _success_statements(claim: ClaimedWebhook, answer: CallAnswer) -> list[Statement]:
    """A success: its attempt ended delivered, and the delivery delivered where it still
    carries our token (the second statement returns a row then)."""
    return [
        (_ATTEMPT_ENDED, {"outcome": "delivered", "code": answer.status_code,
                          "latency": answer.latency_ms, "response": answer.response,
                          "error": answer.error, "id": claim.delivery_id,
                          "token": claim.claim_token}),
        (_DELIVERY_ANSWERED, {"status": str(WebhookStatus.DELIVERED), "reason": None, "delay": 0.0,
                              "code": answer.status_code, "error": answer.error,
                              "id": claim.delivery_id, "token": claim.claim_token}),
    ]


def _record(slug: str, claim: ClaimedWebhook, answer: CallAnswer, *, jitter: float,
            retry_base: timedelta) -> Recorded:
    now = utcnow()
    if answer.error_class is None:
        status, outcome, delay = WebhookStatus.DELIVERED, "delivered", timedelta(0)
    elif answer.error_class is ErrorClass.PERMANENT or claim.attempt >= MAX_ATTEMPTS:
        status, outcome, delay = WebhookStatus.FAILED, "failed", timedelta(0)
    else:
        status, delay = WebhookStatus.PENDING, retry_delay(claim.attempt, jitter, retry_base)
        outcome = "refused" if answer.refused else ("unknown" if answer.error_class is ErrorClass.UNCERTAIN
                                                     else "retry")
    if answer.refused and status is not WebhookStatus.PENDING:
        outcome = "refused"
    reason = None
    if status is WebhookStatus.FAILED:
        reason = ("the endpoint refused it for good" if answer.error_class is ErrorClass.PERMANENT
                  else f"no success in {MAX_ATTEMPTS} attempts")
    ended: Statement = (_ATTEMPT_ENDED, {
        "outcome": outcome, "code": answer.status_code, "latency": answer.latency_ms,
        "response": answer.response, "error": answer.error,
        "id": claim.delivery_id, "token": claim.claim_token})
    answered: Statement = (_DELIVERY_ANSWERED, {
        "status": str(status), "reason": reason, "delay": delay.total_seconds(),
        "code": answer.status_code, "error": answer.error,
        "id": claim.delivery_id, "token": claim.claim_token})
    if answer.error_class is None:
        # A success, the usual case, in one round trip: no decision to take on the endpoint.
        return record_successes_and_mark(slug, [(claim, answer)], [])[0][0]
    with tenant_tx(slug) as tx:
        tx.conn.execute(*ended)
        moved = tx.conn.execute(*answered).fetchone()
        disabled, opened = _endpoint_health(tx, claim.endpoint_id, answer, now)
    if moved is None:
        return Recorded(None, None, disabled, opened)
    return Recorded(status, delay if status is WebhookStatus.PENDING else None, disabled, opened)


def _endpoint_health(tx: TenantTx, endpoint_id: int, answer: CallAnswer, now: datetime
                     ) -> tuple[bool, bool]:
    """(the endpoint was disabled by this answer, its circuit was opened by it)."""
    if answer.error_class is None:
        tx.conn.execute(_ENDPOINT_SUCCEEDED, {"id": endpoint_id})
        return False, False
    row = tx.conn.execute(
        "SELECT consecutive_failures, failing_since FROM webhook_endpoints WHERE id = %s FOR UPDATE",
        [endpoint_id]).fetchone()
    if row is None:
        return False, False
    verdict = after_failure(
        EndpointHealth(int(str(row[0])), row[1] if isinstance(row[1], datetime) else None), now,
        gone=answer.status_code == 410)
    tx.conn.execute(_ENDPOINT_FAILED, {"failures": verdict.consecutive_failures,
                                       "since": verdict.failing_since,
                                       "open_until": verdict.circuit_open_until, "id": endpoint_id})
    opened = verdict.circuit_open_until is not None and verdict.circuit_open_until > now
    if verdict.disable_reason is None or not disable_endpoint(tx, endpoint_id, verdict.disable_reason):
        return False, opened
    _tell_admins(tx, endpoint_id, verdict.disable_reason)
    return True, opened


_TELL_ADMINS = """
INSERT INTO notifications (recipient_user_id, category, title, body, data, idempotency_key)
SELECT u.id, 'webhook_disabled', 'A webhook endpoint was disabled',
       'Tocsin stopped calling ' || e.url || ': ' || %(reason)s
       || '. Check the receiver, then enable the endpoint again on the Webhooks page.',
       jsonb_build_object('href', '/webhooks', 'endpoint_id', e.id),
       'webhook:' || e.id || ':disabled:' || e.disabled_count || ':user:' || u.id
FROM webhook_endpoints e CROSS JOIN users u
WHERE e.id = %(endpoint)s AND u.role = 'admin' AND u.deactivated_at IS NULL
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING recipient_user_id
"""


def _tell_admins(tx: TenantTx, endpoint_id: int, reason: str) -> None:
    """One inbox notice per active admin for each disabling (keyed by the endpoint's
    disabling count, so a repeat of this transaction adds none)."""
    users = {int(str(r[0])) for r in tx.conn.execute(_TELL_ADMINS, {"endpoint": endpoint_id,
                                                                     "reason": reason})}
    if users:
        tx.after_commit(AnnounceInbox(users))


_UNSENT = WEBHOOK.where(to=WebhookStatus.PENDING, from_=[WebhookStatus.SENDING])
_RELEASE = f"""
WITH released AS (
    UPDATE webhook_deliveries SET status = 'pending', attempts = attempts - 1, claim_token = NULL,
           lease_until = NULL, updated_at = now()
    WHERE id = %(id)s AND claim_token = %(token)s AND {_UNSENT}
    RETURNING id
)
DELETE FROM webhook_attempts a USING released r
WHERE a.delivery_id = r.id AND a.claim_token = %(token)s AND a.called_at IS NULL
"""


def release_unsent(slug: str, claims: list[ClaimedWebhook], why: str) -> None:
    """Give back claimed deliveries whose call was never made (the worker is stopping, or
    the lease is running out): pending again, as if never claimed. The attempt row goes
    with the claim, since no request was made under it."""
    if not claims:
        return
    with tenant_tx(slug) as tx:
        for claim in claims:
            tx.conn.execute(_RELEASE, {"id": claim.delivery_id, "token": claim.claim_token})
    log.info("webhooks tenant=%s released=%d unsent: %s", slug, len(claims), why)


_NOT_SENT = WEBHOOK.where(to=(WebhookStatus.CANCELLED, WebhookStatus.PENDING),
                          from_=[WebhookStatus.SENDING])
_END_UNSENT = f"""
WITH ended AS (
    UPDATE webhook_attempts SET ended_at = now(), outcome = 'refused', error = %(why)s
    WHERE delivery_id = %(id)s AND claim_token = %(token)s AND ended_at IS NULL
    RETURNING delivery_id
)
UPDATE webhook_deliveries SET status = %(status)s, status_reason = %(why)s, claim_token = NULL,
       lease_until = NULL, enqueued_at = NULL, send_after = now(), updated_at = now()
WHERE id = %(id)s AND claim_token = %(token)s AND {_NOT_SENT}
"""


def end_marked_unsent(slug: str, claims: list[ClaimedWebhook], why: str, *, cancel: bool) -> None:
    """Calls marked with their group but not made, because an earlier answer of the group
    disabled their endpoint (``cancel``: the delivery is cancelled, as the disabling cancels
    what waits) or opened its circuit (pending again, to wait for it). Their attempts are
    evidence already (marked called), so each ends as refused, saying why no request left."""
    if not claims:
        return
    status = WebhookStatus.CANCELLED if cancel else WebhookStatus.PENDING
    with tenant_tx(slug) as tx:
        for claim in claims:
            tx.conn.execute(_END_UNSENT, {"id": claim.delivery_id, "token": claim.claim_token,
                                          "why": why[:500], "status": str(status)})
    log.info("webhooks tenant=%s not sent=%d: %s", slug, len(claims), why)


# --- the sweeper's part ------------------------------------------------------------------

@dataclass(frozen=True)
class SweptWebhooks:
    retried: int  # leases that ran out: back to pending (unknown when the call had been made)
    failed: int  # leases that ran out on the last attempt
    enqueued: int


_EXPIRED = f"""
WITH expired AS (
    SELECT d.id, d.claim_token, d.attempts FROM webhook_deliveries d
    WHERE d.status = 'sending' AND d.lease_until < now()
    ORDER BY d.id LIMIT %(limit)s FOR UPDATE SKIP LOCKED
), attempts AS (
    UPDATE webhook_attempts a
    SET ended_at = now(),
        outcome = CASE WHEN a.called_at IS NULL THEN 'retry' ELSE 'unknown' END,
        error = CASE WHEN a.called_at IS NULL
                     THEN 'the lease ran out before the call: never sent'
                     ELSE 'the lease ran out after the call: the answer was lost; sent again '
                          'with the same webhook-id' END
    FROM expired x WHERE a.delivery_id = x.id AND a.claim_token = x.claim_token AND a.ended_at IS NULL
)
UPDATE webhook_deliveries d
SET status = CASE WHEN x.attempts >= %(max_attempts)s THEN 'failed' ELSE 'pending' END,
    status_reason = CASE WHEN x.attempts >= %(max_attempts)s
                         THEN 'no success in ' || %(max_attempts)s || ' attempts' END,
    claim_token = NULL, lease_until = NULL, enqueued_at = NULL, send_after = now(), updated_at = now()
FROM expired x WHERE d.id = x.id AND {_LEASE_OVER}
RETURNING d.status
"""

_DUE = """
UPDATE webhook_deliveries SET enqueued_at = now()
WHERE id IN (
    SELECT d.id FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id
    WHERE d.status = 'pending' AND d.send_after <= now() AND e.enabled
      AND (d.enqueued_at IS NULL OR d.enqueued_at < now() - make_interval(secs => %(stale)s))
    ORDER BY d.send_after, d.id LIMIT %(limit)s FOR UPDATE OF d SKIP LOCKED)
RETURNING id
"""


def sweep_webhooks(slug: str, *, everything_due: bool = False) -> SweptWebhooks:
    """Expired leases back to pending (or failed on the last attempt), their attempts
    recorded as never sent or unknown; then every due delivery whose wake-up may be lost
    is enqueued again (all of them when the broker lost what it held)."""
    with tenant_tx(slug) as tx:
        moved = [str(r[0]) for r in tx.conn.execute(
            _EXPIRED, {"limit": SWEEP_BATCH, "max_attempts": MAX_ATTEMPTS})]
        due = [int(str(r[0])) for r in tx.conn.execute(
            _DUE, {"stale": 0 if everything_due else REENQUEUE_AFTER_SECONDS, "limit": SWEEP_BATCH})]
        if due:
            tx.after_commit(SendWebhooks(due))
    return SweptWebhooks(moved.count("pending"), moved.count("failed"), len(due))


# --- the delivery log --------------------------------------------------------------------

@dataclass(frozen=True)
class LogEntry:
    delivery_id: int
    event_kind: str
    status: str
    status_reason: str | None
    attempts: int
    last_status_code: int | None
    last_latency_ms: int | None
    last_error: str | None
    created_at: datetime
    send_after: datetime

    @property
    def can_redeliver(self) -> bool:
        return self.status in ("delivered", "failed", "cancelled")


def delivery_log(tx: TenantTx, endpoint_id: int, limit: int = 50) -> list[LogEntry]:
    """An endpoint's latest deliveries, newest first, each with its last attempt's figures."""
    rows = tx.conn.execute(
        """SELECT d.id, d.event_kind, d.status, d.status_reason, d.attempts, d.last_status_code,
                  (SELECT a.latency_ms FROM webhook_attempts a WHERE a.delivery_id = d.id
                   ORDER BY a.attempt_no DESC LIMIT 1),
                  d.last_error, d.created_at, d.send_after
           FROM webhook_deliveries d WHERE d.endpoint_id = %s ORDER BY d.id DESC LIMIT %s""",
        [endpoint_id, limit]).fetchall()
    return [LogEntry(int(str(r[0])), str(r[1]), str(r[2]), None if r[3] is None else str(r[3]),
                     int(str(r[4])), None if r[5] is None else int(str(r[5])),
                     None if r[6] is None else int(str(r[6])), None if r[7] is None else str(r[7]),
                     r[8] if isinstance(r[8], datetime) else utcnow(),
                     r[9] if isinstance(r[9], datetime) else utcnow())
            for r in rows]
