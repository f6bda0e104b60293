"""The audit log: who changed what, when, from where, with the values before and after.

Other features record a change with ONE call, inside the transaction that makes it:

    from db.evidence.audit import record_audit
    record_audit(tx, "branding.save", "branding", None, before=old, after=new)

The row commits or rolls back with the change. The actor is whoever the current request or
command acts for (``acting_as``: the portal's guard sets the signed-in user and their client
address, the events API its key, the CLI the operating-system user; otherwise SYSTEM); pass
``actor=`` only to name someone else (a refused sign-in names the email typed). Actions are
``<object>.<verb>`` (``client.create``, ``member.role``, ``sign_in.refused``): the page
filters on their prefix. Rows are append-only (tenant migration 0040's triggers refuse an
UPDATE, a DELETE or a TRUNCATE), and their ids order them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar, Token
from dataclasses import dataclass
from datetime import datetime

from db.platform.tenancy import TenantTx, tenant_tx
from domain.audit import (
    AUDIT_CSV_HEADER,
    SYSTEM,
    Actor,
    ActorKind,
    AuditFilter,
    snapshot,
)
from domain.csv_export import csv_rows

__all__ = [
    "AUDIT_PAGE_SIZE",
    "OBJECT_ID_MAX_LENGTH",
    "AuditEntry",
    "acting_as",
    "audit_csv_lines",
    "audit_page",
    "current_actor",
    "record_audit",
    "record_audit_alone",
    "set_actor",
]

AUDIT_PAGE_SIZE = 50  # rows per page of the audit log
OBJECT_ID_MAX_LENGTH = 200  # characters of an object id kept

# Per request or command: asyncio tasks and the worker threads Litestar hands sync handlers
# to each see their own copy, so one request's actor never reaches another's.
_ACTOR: ContextVar[Actor] = ContextVar("tocsin_audit_actor", default=SYSTEM)


def current_actor() -> Actor:
    return _ACTOR.get()


def set_actor(actor: Actor) -> Token[Actor]:
    """Make ``actor`` the one recorded from here on in this request or command."""
    return _ACTOR.set(actor)


@contextmanager
def acting_as(actor: Actor) -> Iterator[Actor]:
    token = _ACTOR.set(actor)
    try:
        yield actor
    finally:
        _ACTOR.reset(token)


def _json(values: Mapping[str, object] | None) -> str | None:
    plain = snapshot(values)
    return None if plain is None else json.dumps(plain, sort_keys=True)


def record_audit(
    tx: TenantTx,
    action: str,
    object_kind: str,
    object_id: object = None,
    *,
    before: Mapping[str, object] | None = None,
    after: Mapping[str, object] | None = None,
    actor: Actor | None = None,
) -> int:
    """Record one action in ``tx`` (it commits with the change, or not at all): its id."""
    who = actor or _ACTOR.get()
    row = tx.conn.execute(
        "INSERT INTO audit_log (actor_kind, actor_user_id, actor_label, client_address, action, "
        "object_kind, object_id, before, after) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) "
        "RETURNING id",
        [who.kind.value, who.user_id, who.label, who.address, action, object_kind,
         None if object_id is None else str(object_id)[:OBJECT_ID_MAX_LENGTH],
         _json(before), _json(after)],
    ).fetchone()
    assert row is not None
    return int(str(row[0]))


def record_audit_alone(
    tenant_slug: str, action: str, object_kind: str, object_id: object = None, *,
    before: Mapping[str, object] | None = None, after: Mapping[str, object] | None = None,
    actor: Actor | None = None,
) -> int:
    """For what has no transaction of its own to join: a sign-in, a refusal, an export
    (which reads on a read-only connection). One short transaction for the row."""
    with tenant_tx(tenant_slug) as tx:
        return record_audit(tx, action, object_kind, object_id, before=before, after=after,
                            actor=actor)


@dataclass(frozen=True)
class AuditEntry:
    id: int
    occurred_at: datetime
    actor_kind: ActorKind
    actor_label: str
    actor_user_id: int | None
    client_address: str | None
    action: str
    object_kind: str
    object_id: str | None
    before: dict[str, object] | None
    after: dict[str, object] | None

    @property
    def changes(self) -> list[tuple[str, object, object]]:
        """(field, before, after) for each field whose value differs."""
        old, new = self.before or {}, self.after or {}
        names = sorted(set(old) | set(new))
        return [(n, old.get(n), new.get(n)) for n in names if old.get(n) != new.get(n)]


_COLUMNS = ("id, occurred_at, actor_kind, actor_label, actor_user_id, client_address, action, "
            "object_kind, object_id, before, after")


def _where(tx: TenantTx, f: AuditFilter) -> tuple[str, dict[str, object]]:
    clauses: list[str] = ["true"]
    params: dict[str, object] = {"tz": tx.tenant.time_zone}
    if f.action:
        clauses.append("(action = %(action)s OR action LIKE %(action_prefix)s)")
        params |= {"action": f.action, "action_prefix": _like(f.action) + ".%"}
    if f.actor:
        clauses.append("actor_label ILIKE %(actor)s")
        params["actor"] = "%" + _like(f.actor) + "%"
    if f.object_kind:
        clauses.append("object_kind = %(object_kind)s")
        params["object_kind"] = f.object_kind
    if f.object_id:
        clauses.append("object_id = %(object_id)s")
        params["object_id"] = f.object_id
    if f.since:
        clauses.append("occurred_at >= (%(since)s::date)::timestamp AT TIME ZONE %(tz)s")
        params["since"] = f.since
    if f.until:
        clauses.append("occurred_at < (%(until)s::date + 1)::timestamp AT TIME ZONE %(tz)s")
        params["until"] = f.until
    return " AND ".join(clauses), params


def _like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _entry(row: tuple[object, ...]) -> AuditEntry:
    occurred = row[1]
    assert isinstance(occurred, datetime)
    return AuditEntry(
        int(str(row[0])), occurred, ActorKind(str(row[2])), str(row[3]),
        None if row[4] is None else int(str(row[4])), None if row[5] is None else str(row[5]),
        str(row[6]), str(row[7]), None if row[8] is None else str(row[8]),
        row[9] if isinstance(row[9], dict) else None, row[10] if isinstance(row[10], dict) else None,
    )


def audit_page(tx: TenantTx, f: AuditFilter, *, before_id: int | None = None,
               limit: int = AUDIT_PAGE_SIZE) -> tuple[list[AuditEntry], int | None]:
    """The newest entries matching ``f`` (older than ``before_id``), and the cursor of the
    next page (None on the last)."""
    where, params = _where(tx, f)
    if before_id is not None:
        where += " AND id < %(before_id)s"
        params["before_id"] = before_id
    rows = tx.conn.execute(
        f"SELECT {_COLUMNS} FROM audit_log WHERE {where} ORDER BY id DESC LIMIT %(limit)s",
        params | {"limit": limit + 1},
    ).fetchall()
    entries = [_entry(r) for r in rows[:limit]]
    return entries, (entries[-1].id if len(rows) > limit else None)


def audit_csv_lines(tx: TenantTx, f: AuditFilter) -> Iterator[str]:
    """Every matching entry as CSV, oldest first, streamed from a server-side cursor; values
    a person typed pass through domain.csv_export (no formula reaches a spreadsheet)."""
    where, params = _where(tx, f)

    def rows() -> Iterator[tuple[object, ...]]:
        with tx.conn.cursor(name="audit_export") as cursor:
            cursor.itersize = 1000
            cursor.execute(f"SELECT {_COLUMNS} FROM audit_log WHERE {where} ORDER BY id", params)
            for row in cursor:
                e = _entry(row)
                yield (e.id, e.occurred_at, e.actor_kind.value, e.actor_label, e.client_address,
                       e.action, e.object_kind, e.object_id,
                       None if e.before is None else json.dumps(e.before, sort_keys=True),
                       None if e.after is None else json.dumps(e.after, sort_keys=True))

    return csv_rows(AUDIT_CSV_HEADER, rows())
