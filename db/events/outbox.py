"""The events outbox: event rows written in the transaction of the write that caused them
(the relay's side, the claim and the backlog, is db/events/relay.py).

`record_events` is the one way an event is recorded, whoever sends it (the events API, a
host application through tocsin.shell.outbox, the demo, the CLI). The rows are the durable
intent; the relay's wake-up after commit only makes it sooner.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from psycopg.rows import tuple_row

from db.events.subjects import Cursor, json_rows, schema_sql, update_register
from db.platform.effects import WakeRelay
from db.platform.tenancy import TenantTx
from domain.events.intake import EventIn

__all__ = ["SOURCES", "Recorded", "record_events", "record_events_in"]

SOURCES = ("api", "host", "demo", "cli", "portal")


@dataclass(frozen=True)
class Recorded:
    event_id: int
    subject_id: int

    def as_json(self) -> dict[str, int]:
        return {"event_id": self.event_id, "subject_id": self.subject_id}


def record_events_in(cur: Cursor, schema: str, events: Sequence[EventIn], source: str,
                     prefixes: Sequence[str] | None = None) -> list[Recorded]:
    """Update the subject register and write one outbox row per event, in the caller's
    transaction, in a fixed number of statements whatever the batch's size. Raises
    InvalidEvents (nothing written by this call) for unknown products, users or units."""
    if source not in SOURCES:
        raise ValueError(f"unknown event source {source!r}")
    if not events:
        return []
    # Pipelined: the register's writes and the insert go to the server together, in one
    # round trip, instead of one round trip per statement.
    with cur.connection.pipeline():
        return _record(cur, schema, events, source, prefixes or [""] * len(events))


def _record(cur: Cursor, schema: str, events: Sequence[EventIn], source: str,
            prefixes: Sequence[str]) -> list[Recorded]:
    placed = update_register(cur, schema, events, prefixes)
    cur.execute(schema_sql(schema, """
        INSERT INTO {s}.events (product, subject_id, event_type, trigger_type, changes, metadata,
                                occurred_at, source)
        SELECT w.product, w.subject_id, w.event_type, w.trigger_type, w.changes, w.metadata,
               coalesce(w.occurred_at, now()), %s
        FROM json_to_recordset(%s::json)
             AS w (n integer, product text, subject_id bigint, event_type text, trigger_type text,
                   changes jsonb, metadata jsonb, occurred_at timestamptz)
        ORDER BY w.n
        RETURNING id
        """), [source, json_rows([
            {"n": n, "product": e.product, "subject_id": p.subject_id, "event_type": e.event_type,
             "trigger_type": e.trigger_type, "changes": p.changes, "metadata": dict(e.metadata),
             "occurred_at": e.occurred_at}
            for n, (e, p) in enumerate(zip(events, placed, strict=True))])])
    # The rows are inserted in the batch's order, and an identity column hands its values
    # out in increasing order within one statement: sorted ids are the events in order.
    ids = sorted(int(r[0]) for r in cur.fetchall())
    return [Recorded(i, p.subject_id) for i, p in zip(ids, placed, strict=True)]


def record_events(tx: TenantTx, events: Sequence[EventIn], source: str,
                  prefixes: Sequence[str] | None = None) -> list[Recorded]:
    """record_events_in for a tenant transaction; the relay is woken once it commits."""
    with tx.conn.cursor(row_factory=tuple_row) as cur:
        recorded = record_events_in(cur, tx.tenant.schema, events, source, prefixes)
    tx.after_commit(WakeRelay([r.event_id for r in recorded]))
    return recorded

