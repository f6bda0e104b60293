"""The evidence an inspector reads: the notification ledger filtered and paged, every
delivery attempt behind a claim, why a rule claim fired (its event's stored trace), the CSV
export (streamed from a server-side cursor, never built in memory), claims stuck without a
delivery, and deliveries that need a person.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, fields
from datetime import date, datetime, timedelta
from enum import StrEnum
from typing import Any

from psycopg.rows import class_row

from db.delivery.recovery import HELD_REASON
from db.platform.tenancy import TenantTx
from db.rules.evaluations import stored_traces
from domain.csv_export import csv_rows
from domain.errors import InvalidInput

__all__ = [
    "FILTER_MAX_LENGTH",
    "LEDGER_FIELDS",
    "PAGE_SIZE",
    "STUCK_AFTER",
    "Attempt",
    "DefaultedNotice",
    "FailedPreparation",
    "LedgerCursor",
    "LedgerFilter",
    "LedgerRow",
    "LedgerStatus",
    "StuckClaim",
    "TroubledDelivery",
    "attempts_for",
    "csv_lines",
    "defaulted_notices",
    "failed_preparations",
    "iter_ledger",
    "ledger_page",
    "stuck_claims",
    "troubled_deliveries",
    "why_fired",
]

PAGE_SIZE = 50  # ledger rows per page
STUCK_AFTER = timedelta(minutes=30)  # a claim with no delivery for this long needs a person
FILTER_MAX_LENGTH = 100  # characters of a rule or threshold filter


class LedgerStatus(StrEnum):
    CLAIMED = "claimed"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"
    DELIVERED = "delivered"  # claimed, and a delivery was accepted
    UNDELIVERED = "undelivered"  # claimed, nothing accepted yet
    ACKNOWLEDGED = "acknowledged"


_STATUS_SQL = {
    LedgerStatus.CLAIMED: "l.status = 'claimed'",
    LedgerStatus.SKIPPED: "l.status = 'skipped'",
    LedgerStatus.CANCELLED: "l.status = 'cancelled'",
    LedgerStatus.DELIVERED: "l.delivered_at IS NOT NULL",
    LedgerStatus.UNDELIVERED: "l.status = 'claimed' AND l.delivered_at IS NULL",
    LedgerStatus.ACKNOWLEDGED: "l.acknowledged_at IS NOT NULL",
}


@dataclass(frozen=True)
class LedgerFilter:
    """What an admin narrowed the ledger to. Dates are claim dates in the tenant's zone,
    both ends included."""

    rule: str | None = None
    subject_id: int | None = None
    threshold: str | None = None
    claimed_from: date | None = None
    claimed_to: date | None = None
    status: LedgerStatus | None = None

    def __post_init__(self) -> None:
        for name in ("rule", "threshold"):
            value = getattr(self, name)
            if value is not None and len(value) > FILTER_MAX_LENGTH:
                raise InvalidInput(f"the {name} filter is longer than {FILTER_MAX_LENGTH} characters")
        if self.claimed_from and self.claimed_to and self.claimed_from > self.claimed_to:
            raise InvalidInput("the 'from' date is after the 'to' date")

    def where(self, zone: str) -> tuple[str, dict[str, object]]:
        clauses, params = ["TRUE"], dict[str, object](zone=zone)
        if self.rule:
            clauses.append("l.rule = %(rule)s")
            params["rule"] = self.rule
        if self.subject_id is not None:
            clauses.append("l.subject_id = %(subject_id)s")
            params["subject_id"] = self.subject_id
        if self.threshold:
            clauses.append("l.threshold = %(threshold)s")
            params["threshold"] = self.threshold
        if self.claimed_from:  # local midnight in the tenant's zone, as an instant
            clauses.append("l.claimed_at >= (%(claimed_from)s::date::timestamp AT TIME ZONE %(zone)s)")
            params["claimed_from"] = self.claimed_from
        if self.claimed_to:
            clauses.append("l.claimed_at < ((%(claimed_to)s::date + 1)::timestamp AT TIME ZONE %(zone)s)")
            params["claimed_to"] = self.claimed_to
        if self.status is not None:
            clauses.append(_STATUS_SQL[self.status])
        return " AND ".join(clauses), params


@dataclass(frozen=True)
class LedgerRow:
    id: int
    rule: str
    subject_kind: str
    subject_id: int
    subject_name: str | None
    threshold: str
    due_on: date
    status: str
    status_reason: str | None
    local_date: date
    claimed_at: datetime
    delivered_at: datetime | None
    acknowledged_at: datetime | None
    acknowledged_by: str | None
    deliveries: int
    emails_accepted: int
    # A tenant rule's claim: the rule's name and the version that fired, and the event.
    rule_name: str | None = None
    rule_version: int | None = None
    event_id: int | None = None


LEDGER_FIELDS = tuple(f.name for f in fields(LedgerRow))

_LEDGER_SELECT = """
SELECT l.id, l.rule, l.subject_kind, l.subject_id,
       coalesce(c.name, sj.external_id || CASE WHEN sj.title <> '' THEN ' · ' || sj.title ELSE '' END)
           AS subject_name,
       l.threshold, l.due_on,
       l.status, l.status_reason, l.local_date, l.claimed_at, l.delivered_at,
       l.acknowledged_at, ack.email AS acknowledged_by,
       coalesce(d.deliveries, 0) AS deliveries, coalesce(d.accepted, 0) AS emails_accepted,
       r.name AS rule_name, l.rule_version, l.event_id
FROM notification_ledger l
LEFT JOIN clients c ON l.subject_kind = 'client' AND c.id = l.subject_id
LEFT JOIN subjects sj ON l.subject_kind = 'subject' AND sj.id = l.subject_id
LEFT JOIN rules r ON r.id = l.rule_id
LEFT JOIN users ack ON ack.id = l.acknowledged_by
LEFT JOIN LATERAL (
    SELECT count(*) AS deliveries,
           count(*) FILTER (WHERE nd.status IN ('accepted', 'delivered')) AS accepted
    FROM notifications n JOIN notification_deliveries nd ON nd.notification_id = n.id
    WHERE n.ledger_id = l.id
) d ON TRUE
"""


@dataclass(frozen=True)
class LedgerCursor:
    claimed_at: datetime
    id: int


def ledger_page(
    tx: TenantTx, filters: LedgerFilter, after: LedgerCursor | None = None, limit: int = PAGE_SIZE
) -> tuple[list[LedgerRow], LedgerCursor | None]:
    """One page of the filtered ledger, newest claim first (keyset on claimed_at, id)."""
    where, params = filters.where(tx.tenant.time_zone)
    if after is not None:
        where += " AND (l.claimed_at, l.id) < (%(after_at)s, %(after_id)s)"
        params |= {"after_at": after.claimed_at, "after_id": after.id}
    params["limit"] = limit + 1
    with tx.conn.cursor(row_factory=class_row(LedgerRow)) as cursor:
        rows = cursor.execute(
            f"{_LEDGER_SELECT} WHERE {where} ORDER BY l.claimed_at DESC, l.id DESC LIMIT %(limit)s",
            params,
        ).fetchall()
    page = rows[:limit]
    more = LedgerCursor(page[-1].claimed_at, page[-1].id) if len(rows) > limit else None
    return page, more


def iter_ledger(
    tx: TenantTx, filters: LedgerFilter | None = None, batch_size: int = 1000
) -> Iterator[LedgerRow]:
    """Every (filtered) ledger row, oldest claim first, streamed with a server-side cursor:
    memory stays at one batch whatever the ledger's size."""
    where, params = (filters or LedgerFilter()).where(tx.tenant.time_zone)
    with tx.conn.cursor(name="ledger_export", row_factory=class_row(LedgerRow)) as cursor:
        cursor.itersize = batch_size
        cursor.execute(f"{_LEDGER_SELECT} WHERE {where} ORDER BY l.claimed_at, l.id", params)
        yield from cursor


def csv_lines(rows: Iterable[LedgerRow]) -> Iterator[str]:
    """The ledger's header, then one CSV line per row (domain/csv_export.py: safe cells)."""
    return csv_rows(LEDGER_FIELDS, ((getattr(row, name) for name in LEDGER_FIELDS) for row in rows))


def why_fired(tx: TenantTx, rows: Sequence[LedgerRow]) -> dict[int, dict[str, Any]]:
    """For each claim of an event rule among ``rows``, by ledger id, its rule's entry in the
    event's stored trace: each condition and filter with the value the evaluation saw and
    whether it held. Read in one query (two when a trace names a shared part)."""
    claims = {r.id: (r.event_id, int(r.rule.removeprefix("rule:"))) for r in rows
              if r.event_id is not None and r.rule.startswith("rule:")}
    if not claims:
        return {}
    traces = stored_traces(tx, sorted({event_id for event_id, _ in claims.values()}))
    found = {}
    for ledger_id, (event_id, rule_id) in claims.items():
        entry = next((e for e in traces.get(event_id, []) if e.get("rule_id") == rule_id), None)
        if entry is not None:
            found[ledger_id] = entry
    return found


@dataclass(frozen=True)
class Attempt:
    ledger_id: int
    delivery_id: int
    recipient: str
    channel: str
    delivery_status: str
    attempt_no: int | None
    started_at: datetime | None
    ended_at: datetime | None
    outcome: str | None
    error: str | None
    unknown_at: datetime | None  # its outcome was unknown from then (accepted later: a late answer)
    decision: str | None  # a person's decision after its unknown outcome: send_again, mark_delivered
    decided_by: str | None
    decided_at: datetime | None
    template_fallback: str | None = None  # sent with the shipped copy: why the tenant's template failed


def attempts_for(tx: TenantTx, ledger_ids: list[int]) -> dict[int, list[Attempt]]:
    """Every delivery of the given claims with every attempt of each, in one query."""
    if not ledger_ids:
        return {}
    with tx.conn.cursor(row_factory=class_row(Attempt)) as cursor:
        rows = cursor.execute(
            """
            SELECT n.ledger_id, d.id AS delivery_id, u.email AS recipient, d.channel,
                   d.status AS delivery_status, a.attempt_no, a.started_at, a.ended_at,
                   a.outcome, coalesce(a.error, CASE WHEN a.id IS NULL THEN d.last_error END) AS error,
                   a.unknown_at, r.decision, r.decided_by, r.decided_at, d.template_fallback
            FROM notifications n
            JOIN notification_deliveries d ON d.notification_id = n.id
            JOIN users u ON u.id = n.recipient_user_id
            LEFT JOIN delivery_attempts a ON a.delivery_id = d.id
            LEFT JOIN LATERAL (
                SELECT r.decision, who.email AS decided_by,
                       r.decided_at
                FROM delivery_reviews r JOIN users who ON who.id = r.decided_by
                WHERE r.delivery_id = d.id AND r.attempt_no = a.attempt_no
                ORDER BY r.id DESC LIMIT 1
            ) r ON true
            WHERE n.ledger_id = ANY(%s)
            ORDER BY n.ledger_id, d.id, a.attempt_no
            """,
            [ledger_ids],
        ).fetchall()
    grouped: dict[int, list[Attempt]] = {}
    for row in rows:
        grouped.setdefault(row.ledger_id, []).append(row)
    return grouped


@dataclass(frozen=True)
class StuckClaim:
    ledger_id: int
    rule: str
    subject_kind: str
    subject_id: int
    subject_name: str | None
    threshold: str
    due_on: date
    claimed_at: datetime
    deliveries: int  # delivery rows written for it (0: nobody was ever going to be told)
    waiting: int  # of those, still pending or being sent


def stuck_claims(tx: TenantTx, older_than: timedelta = STUCK_AFTER) -> list[StuckClaim]:
    """Claims older than ``older_than`` that nothing has delivered and nothing is legitimately
    holding back: no delivery row at all (every recipient gone, a crash before preparing), or
    only rows still pending or sending (no worker, a lost message). Deferred or batched ones
    are waiting on purpose; failed and unknown ones are listed by troubled_deliveries."""
    with tx.conn.cursor(row_factory=class_row(StuckClaim)) as cursor:
        return cursor.execute(
            """
            SELECT l.id AS ledger_id, l.rule, l.subject_kind, l.subject_id,
                   coalesce(c.name, sj.title) AS subject_name,
                   l.threshold, l.due_on, l.claimed_at,
                   coalesce(d.total, 0) AS deliveries, coalesce(d.waiting, 0) AS waiting
            FROM notification_ledger l
            LEFT JOIN clients c ON l.subject_kind = 'client' AND c.id = l.subject_id
            LEFT JOIN subjects sj ON l.subject_kind = 'subject' AND sj.id = l.subject_id
            LEFT JOIN LATERAL (
                SELECT count(*) AS total,
                       count(*) FILTER (WHERE nd.status IN ('pending', 'sending')) AS waiting
                FROM notifications n JOIN notification_deliveries nd ON nd.notification_id = n.id
                WHERE n.ledger_id = l.id
            ) d ON TRUE
            WHERE l.status = 'claimed' AND l.delivered_at IS NULL
              AND l.prepare_failed_at IS NULL  -- listed by failed_preparations
              AND l.claimed_at < now() - %s
              AND coalesce(d.total, 0) = coalesce(d.waiting, 0)
            ORDER BY l.claimed_at, l.id
            """,
            [older_than],
        ).fetchall()


@dataclass(frozen=True)
class TroubledDelivery:
    delivery_id: int
    ledger_id: int | None
    title: str
    recipient: str
    channel: str
    status: str
    attempts: int
    last_error: str | None
    updated_at: datetime
    held: bool  # unknown and waiting for a person's decision (the tenant's policy is hold)


def troubled_deliveries(tx: TenantTx, limit: int = 200) -> list[TroubledDelivery]:
    """Deliveries that ended badly (failed, bounced, complained) or whose outcome is unknown,
    those held for a person's decision first, then newest first, with the last error. A
    digest is listed under its own title."""
    with tx.conn.cursor(row_factory=class_row(TroubledDelivery)) as cursor:
        return cursor.execute(
            """
            SELECT d.id AS delivery_id, coalesce(n.ledger_id, g.ledger_id) AS ledger_id,
                   coalesce(n.title, initcap(g.period) || ' digest of '
                                     || to_char(g.period_date, 'YYYY-MM-DD')) AS title,
                   u.email AS recipient, d.channel, d.status, d.attempts, d.last_error, d.updated_at,
                   d.status = 'unknown' AND d.status_reason = %s AS held
            FROM notification_deliveries d
            LEFT JOIN notifications n ON n.id = d.notification_id
            LEFT JOIN digests g ON g.id = d.digest_id
            JOIN users u ON u.id = coalesce(n.recipient_user_id, g.user_id)
            WHERE d.status IN ('failed', 'unknown', 'bounced', 'complained')
            ORDER BY held DESC, d.updated_at DESC, d.id DESC
            LIMIT %s
            """,
            [HELD_REASON, limit],
        ).fetchall()


@dataclass(frozen=True)
class FailedPreparation:
    ledger_id: int
    rule_id: int
    rule_name: str
    rule_version: int
    subject_id: int
    subject_title: str
    subject_ref: str  # product · kind external_id
    error: str | None
    attempts: int
    failed_at: datetime


def failed_preparations(tx: TenantTx, limit: int = 200) -> list[FailedPreparation]:
    """Rule notices whose preparation failed every allowed attempt (a recipient that could
    not be resolved, malformed actions), newest first, with the last error: nobody was
    told, and nothing will try again until an admin fixes the rule."""
    with tx.conn.cursor(row_factory=class_row(FailedPreparation)) as cursor:
        return cursor.execute(
            """
            SELECT l.id AS ledger_id, l.rule_id, r.name AS rule_name, l.rule_version,
                   l.subject_id, s.title AS subject_title,
                   s.product || ' · ' || s.kind || ' ' || s.external_id AS subject_ref,
                   l.prepare_error AS error, l.prepare_attempts AS attempts,
                   l.prepare_failed_at AS failed_at
            FROM notification_ledger l
            JOIN rules r ON r.id = l.rule_id
            JOIN subjects s ON s.id = l.subject_id
            WHERE l.prepare_failed_at IS NOT NULL AND l.prepared_at IS NULL
            ORDER BY l.prepare_failed_at DESC, l.id DESC
            LIMIT %s
            """,
            [limit],
        ).fetchall()


@dataclass(frozen=True)
class DefaultedNotice:
    ledger_id: int
    rule_id: int
    rule_name: str
    rule_version: int
    subject_id: int
    subject_title: str
    subject_ref: str  # product · kind external_id
    error: str  # which template was refused, and why
    prepared_at: datetime


def defaulted_notices(tx: TenantTx, limit: int = 200) -> list[DefaultedNotice]:
    """Rule notices sent with the default template because the rule's own was refused for
    them (a sandbox limit reached, a render error), newest first, while the rule is still at
    the version that failed: editing the rule is the fix, and takes them off the list."""
    with tx.conn.cursor(row_factory=class_row(DefaultedNotice)) as cursor:
        return cursor.execute(
            """
            SELECT l.id AS ledger_id, l.rule_id, r.name AS rule_name, l.rule_version,
                   l.subject_id, s.title AS subject_title,
                   s.product || ' · ' || s.kind || ' ' || s.external_id AS subject_ref,
                   l.prepare_error AS error, l.prepared_at
            FROM notification_ledger l
            JOIN rules r ON r.id = l.rule_id AND r.version = l.rule_version
            JOIN subjects s ON s.id = l.subject_id
            WHERE l.prepare_error IS NOT NULL AND l.prepared_at IS NOT NULL
            ORDER BY l.prepared_at DESC, l.id DESC
            LIMIT %s
            """,
            [limit],
        ).fetchall()
