"""Moved and removed due dates: the claims of due-date time rules still waiting (not
prepared yet, or with an email not yet sent) whose subject's due field no longer holds
their date are cancelled, with the reason, together with their waiting emails; their
unread inbox rows, which name a date that no longer holds, are archived.

One code path for two callers:
  - the subject register (db/events/subjects.py), in the transaction that writes a new value to
    (or removes) a watched field, for the subjects it changed: a notice for the old date
    can never be sent after the new date has committed;
  - the clock's scan (db/rules/time_rules.py), for every subject of the tenant: a host that
    writes subject_fields by the documented table contract, without the register.

Every statement names the tenant's schema (never search_path): the register runs on a
host application's own connection too (tocsin.shell.outbox). Rows are locked in ledger id order,
as every canceller locks them, so two cancellers wait for each other, never deadlock.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from typing import Any

import psycopg
from psycopg import sql

from domain.delivery.states import DELIVERY, NOT_SENT, Status
from domain.notices.claims import CLAIM, ClaimStatus

__all__ = ["REMOVED_REASON", "Cursor", "cancel_moved_due_dates", "moved_reason"]

Cursor = psycopg.Cursor[tuple[Any, ...]]


def _sql(schema: str, text: str) -> sql.Composed:
    return sql.SQL(text).format(s=sql.Identifier(schema))  # as db/events/subjects.py schema_sql

REMOVED_REASON = "due date removed"

# The statements below go through _sql alone: {s} names the schema, {{ }} is a brace.

# The enabled due-date rules and the field each watches (the rules table is small; the
# definition is the stored, validated one: trigger.due.fact is 'field.<name>').
_WATCHED = """
watched AS (
    SELECT r.id AS rule_id, 'rule:' || r.id AS rule,
           substr(r.definition #>> '{{trigger,due,fact}}', 7) AS field
    FROM {s}.rules r
    WHERE r.kind = 'time' AND r.enabled AND r.definition #>> '{{trigger,due,fact}}' LIKE 'field.%%'
      AND (%(fields)s::text[] IS NULL
           OR substr(r.definition #>> '{{trigger,due,fact}}', 7) = ANY(%(fields)s::text[]))
)"""

# Every waiting claim of the tenant (the scan): the unprepared ones (ledger_rule_unprepared)
# and those with an email still waiting (deliveries_waiting).
_WAITING_ALL = """
waiting AS (
    SELECT l.id FROM {s}.notification_ledger l JOIN watched w ON w.rule_id = l.rule_id
    WHERE l.status = 'claimed' AND l.prepared_at IS NULL AND l.prepare_failed_at IS NULL
    UNION
    SELECT n.ledger_id FROM {s}.notification_deliveries d
    JOIN {s}.notifications n ON n.id = d.notification_id
    WHERE d.status IN ('pending', 'deferred', 'batched') AND n.ledger_id IS NOT NULL
)"""

# The waiting claims of these subjects (the register): found by the ledger's key.
_WAITING_OF_SUBJECTS = """
waiting AS (
    SELECT l.id FROM {s}.notification_ledger l JOIN watched w ON l.rule = w.rule
    WHERE l.subject_kind = 'subject' AND l.subject_id = ANY(%(subjects)s::bigint[])
      AND l.status = 'claimed'
      AND ((l.prepared_at IS NULL AND l.prepare_failed_at IS NULL)
           OR EXISTS (SELECT 1 FROM {s}.notifications n
                      JOIN {s}.notification_deliveries d ON d.notification_id = n.id
                      WHERE n.ledger_id = l.id AND d.status IN ('pending', 'deferred', 'batched')))
)"""

# Of those, the claims whose date the field no longer holds (another date, or none: no
# row, not a string, not an ISO date), locked in id order.
_MOVED = """
SELECT l.id, l.due_on, cur.due
FROM waiting x
JOIN {s}.notification_ledger l ON l.id = x.id
JOIN watched w ON w.rule_id = l.rule_id
LEFT JOIN LATERAL (
    SELECT {s}.iso_date_or_null(f.value #>> '{{}}') AS due FROM {s}.subject_fields f
    WHERE f.subject_id = l.subject_id AND f.name = w.field AND jsonb_typeof(f.value) = 'string'
) cur ON true
WHERE l.status = 'claimed' AND l.subject_kind = 'subject' AND l.threshold LIKE 'offset:%%'
  AND l.delivered_at IS NULL AND cur.due IS DISTINCT FROM l.due_on
ORDER BY l.id
FOR UPDATE OF l
"""

# (f-strings: the guards come from the domain's machines; {{s}} is left for _sql.)
_CANCEL_DELIVERIES = f"""
UPDATE {{s}}.notification_deliveries d
SET status = 'cancelled', status_reason = m.reason, updated_at = now()
FROM {{s}}.notifications n, unnest(%(ids)s::bigint[], %(reasons)s::text[]) AS m(id, reason)
WHERE n.ledger_id = m.id AND d.notification_id = n.id
  AND {DELIVERY.where(to=Status.CANCELLED, from_=NOT_SENT, alias="d")}
"""

# The claim itself is cancelled once none of its emails is in flight or sent; its unread
# inbox rows are archived.
_CANCEL_CLAIMS = f"""
WITH cancelled AS (
    UPDATE {{s}}.notification_ledger l
    SET status = 'cancelled', status_reason = m.reason, cancelled_at = now()
    FROM unnest(%(ids)s::bigint[], %(reasons)s::text[]) AS m(id, reason)
    WHERE l.id = m.id AND {CLAIM.where(to=ClaimStatus.CANCELLED, alias="l")} AND l.delivered_at IS NULL
      AND NOT EXISTS (
          SELECT 1 FROM {{s}}.notifications n JOIN {{s}}.notification_deliveries d ON d.notification_id = n.id
          WHERE n.ledger_id = l.id AND d.status <> 'cancelled')
    RETURNING l.id
), archived AS (
    UPDATE {{s}}.notifications n SET archived_at = now()
    FROM cancelled c
    WHERE n.ledger_id = c.id AND n.read_at IS NULL AND n.archived_at IS NULL
)
SELECT count(*) FROM cancelled
"""


def moved_reason(old: date | object, new: date | object | None) -> str:
    """Why a claim was cancelled: its date moved to another, or the field holds none."""
    return REMOVED_REASON if new is None else f"due date moved from {old} to {new}"


def cancel_moved_due_dates(cur: Cursor, schema: str, subjects: Sequence[int] | None = None,
                           fields: Sequence[str] | None = None) -> int:
    """Cancel the waiting claims of the tenant's enabled due-date rules whose due date has
    moved or been removed; returns how many claims were cancelled. ``subjects``: only
    these subjects' claims (None: every subject, the scan); ``fields``: only the rules
    watching one of these fields (None: every due-date rule)."""
    if subjects is not None and not subjects:
        return 0
    waiting = _WAITING_ALL if subjects is None else _WAITING_OF_SUBJECTS
    cur.execute(_sql(schema, f"WITH {_WATCHED}, {waiting} {_MOVED}"), {
        "subjects": None if subjects is None else sorted(set(subjects)),
        "fields": None if fields is None else sorted(set(fields))})
    moved = cur.fetchall()
    if not moved:
        return 0
    params = {"ids": [int(m[0]) for m in moved], "reasons": [moved_reason(m[1], m[2]) for m in moved]}
    cur.execute(_sql(schema, _CANCEL_DELIVERIES), params)
    cur.execute(_sql(schema, _CANCEL_CLAIMS), params)
    row = cur.fetchone()
    return int(row[0]) if row else 0
