"""Recording an event from a host application on the same PostgreSQL, in the host's own
transaction: the event exists if and only if the host's write commits.

    import psycopg
    from tocsin.shell.outbox import record_event

    with psycopg.connect(DSN) as conn:          # the host's connection, its transaction
        conn.execute("UPDATE cases SET status = 'escalated' WHERE id = %s", [case_id])
        record_event(conn, "acme", {
            "product": "fraud", "type": "updated", "trigger": "status_changed",
            "subject": {"kind": "case", "external_id": "C-1042", "status": "escalated"},
        })
    # leaving the block commits both, or neither

The event is the same JSON the events API takes (see README, "Sending events"). It also
sends a PostgreSQL notification in the same transaction (db/events/ready_events.py), which the
clock's listener turns into a relay wake-up the moment the host commits; a host that
rolls back sends none, and a wake-up lost on the way leaves the event to the relay's
polling fallback, which finds every pending row.

The table contract, for a host that cannot call Python: within its transaction, a host may
instead insert into ``"t_<slug>".events`` (the slug's hyphens as underscores; product,
subject_id, event_type, trigger_type, changes, metadata, occurred_at, source='host') for a
subject it has placed in ``subjects`` itself; rows start ``pending`` and the relay claims
them by status and lease (found by the polling fallback, or at once when the transaction
also runs ``SELECT pg_notify('tocsin_events_ready', '<slug>')``). Calling record_event is
preferred: it also keeps the subject register and the changes of an update (the
register's diff) right.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import tuple_row

from db.events.outbox import record_events_in
from db.events.ready_events import announce_ready
from domain.errors import InvalidInput, NotFound
from domain.events.intake import InvalidEvents, parse_event
from domain.people.identity import valid_slug

__all__ = ["record_event"]


def record_event(conn: psycopg.Connection[Any], tenant_slug: str, event: dict[str, Any]) -> int:
    """Record ``event`` for tenant ``tenant_slug`` in the transaction open on ``conn`` (a
    psycopg 3 connection) and return the event's id. Never commits, never changes the
    connection's search_path or settings; every statement names the tenant's schema.

    Raises InvalidEvents (an InvalidInput, with ``.problems`` naming each path) for a
    malformed event or an unknown product, assignee or hierarchy unit, NotFound for an
    unknown tenant, and InvalidInput when ``conn`` is in autocommit mode outside a
    transaction block (the event would be committed on its own, whatever the host's write
    did). A database error leaves the host's transaction aborted, as any failed statement
    does: the host rolls back."""
    if conn.autocommit and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
        raise InvalidInput("record_event needs the host's open transaction: call it inside "
                           "`with conn.transaction():` (the connection is in autocommit mode)")
    parsed, problems = parse_event(event)
    if parsed is None:
        raise InvalidEvents(problems)
    slug = valid_slug(tenant_slug)
    with conn.cursor(row_factory=tuple_row) as cur:
        cur.execute("SELECT schema_name FROM control.tenants WHERE slug = %s AND status = 'active'",
                    [slug])
        row = cur.fetchone()
        if row is None:
            raise NotFound(f"no active tenant {tenant_slug!r}")
        recorded = record_events_in(cur, str(row[0]), [parsed], "host")
        announce_ready(cur, slug)
    return recorded[0].event_id
