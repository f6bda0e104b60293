"""Per-tenant retention of message bodies and addresses (Settings, Evidence; db/evidence/settings.py).

Each pass blanks, in what is older than the organisation's retention, the text a person could
be named in: the inbox notifications' titles, bodies and data, the chat messages' text, the
providers' and the receivers' answers and error texts, the payloads sent to webhooks, the
phone number a text went to, and the address a checkpoint was emailed to. It keeps every date,
status, id and outcome: what happened, when, to which user id, stays provable.

None of the blanked columns is chained (db/evidence/verify.py SOURCES; erasure uses the same
list), so the chain verifies after a pass exactly as before. A person's address is never in a
message row: it is read from their user row at send time, and leaves with them on erasure
(db/evidence/erasure.py).

Each statement blanks at most BATCH_ROWS rows in a transaction of its own, so a first pass
over years of history never holds long locks; a row blanked once is not rewritten again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from db.evidence.audit import record_audit_alone
from db.evidence.settings import evidence_settings
from db.platform.tenancy import tenant_tx
from tocsin.core.clock import utcnow

__all__ = ["BATCH_ROWS", "RETAINED_MARK", "Retention", "apply_retention"]

BATCH_ROWS = 5_000  # rows blanked per statement (and per transaction)
RETAINED_MARK = "[removed after the retention period]"  # what a blanked title reads

# (table, the time that dates a row, SET clause, WHERE a row still holds something to blank)
_BLANKING: tuple[tuple[str, str, str, str], ...] = (
    ("notifications", "created_at", "title = %(mark)s, body = '', data = '{}'",
     "title <> %(mark)s OR body <> '' OR data <> '{}'"),
    ("notification_deliveries", "created_at", "last_error = NULL", "last_error IS NOT NULL"),
    ("delivery_attempts", "started_at", "error = NULL", "error IS NOT NULL"),
    ("delivery_events", "received_at", "detail = NULL", "detail IS NOT NULL"),
    ("webhook_deliveries", "created_at", "payload = '{}', last_error = NULL",
     "payload <> '{}' OR last_error IS NOT NULL"),
    ("webhook_attempts", "started_at", "response = NULL, error = NULL",
     "response IS NOT NULL OR error IS NOT NULL"),
    ("sms_attempts", "started_at", "phone = NULL, error = NULL", "phone IS NOT NULL OR error IS NOT NULL"),
    ("chat_deliveries", "created_at", "title = %(mark)s, text = '', last_error = NULL",
     "title <> %(mark)s OR text <> '' OR last_error IS NOT NULL"),
    ("chat_attempts", "started_at", "response = NULL, error = NULL",
     "response IS NOT NULL OR error IS NOT NULL"),
    ("evidence_checkpoint_emails", "created_at", "address = %(mark)s, error = NULL",
     "address <> %(mark)s OR error IS NOT NULL"),
)


@dataclass(frozen=True)
class Retention:
    retention_days: int | None  # None: kept for ever, nothing done
    cutoff: datetime | None
    blanked: dict[str, int]  # table -> rows blanked in this pass

    @property
    def rows(self) -> int:
        return sum(self.blanked.values())


def apply_retention(slug: str, now: datetime | None = None) -> Retention:
    """Blank what is older than the tenant's retention; recorded in the audit log when a pass
    blanked anything."""
    with tenant_tx(slug) as tx:
        days = evidence_settings(tx).retention_days
    if days is None:
        return Retention(None, None, {})
    cutoff = (now or utcnow()) - timedelta(days=days)
    blanked: dict[str, int] = {}
    for table, dated_by, assignments, holds in _BLANKING:
        key = "checkpoint_id" if table == "evidence_checkpoint_emails" else "id"
        total = 0
        while True:
            with tenant_tx(slug) as tx:
                done = tx.conn.execute(
                    f"UPDATE {table} SET {assignments} WHERE {key} IN (SELECT {key} FROM {table} "
                    f"WHERE {dated_by} < %(cutoff)s AND ({holds}) LIMIT %(batch)s)",
                    {"mark": RETAINED_MARK, "cutoff": cutoff, "batch": BATCH_ROWS}).rowcount
            total += done
            if done < BATCH_ROWS:
                break
        if total:
            blanked[table] = total
    if blanked:
        record_audit_alone(slug, "evidence.retention", "tenant", slug,
                           after={"retention_days": days, "older_than": cutoff.isoformat(), **blanked})
    return Retention(days, cutoff, blanked)
