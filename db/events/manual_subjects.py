"""Subjects of the built-in "manual" product, written by people in the portal. Each change
is an event in the outbox, recorded with the same intake as the events API (the subject
register is updated and the relay evaluates the rules after the commit), with its audit row
in the same transaction."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime

from db.events.outbox import Recorded, record_events
from db.evidence.audit import record_audit
from db.platform.tenancy import TenantTx
from domain.errors import Conflict, InvalidInput, NotFound
from domain.events.intake import EventIn
from domain.events.manual import (
    CLOSED,
    DUE_FIELD,
    MANUAL_PRODUCT,
    ManualSubject,
    close_event,
    field_names,
    manual_event,
)

__all__ = [
    "ListedSubject",
    "close_manual_subject",
    "create_manual_subject",
    "edit_manual_subject",
    "list_manual_subjects",
    "manual_subject_form",
    "manual_subject_forms",
]


@dataclass(frozen=True)
class ListedSubject:
    id: int
    kind: str
    external_id: str
    title: str
    status: str
    due_on: str | None
    assignees: list[str]
    updated_at: datetime


def _values(event: EventIn) -> dict[str, object]:
    s = event.subject
    return {"kind": s.kind, "external_id": s.external_id, "title": s.title, "status": s.status,
            "time_zone": s.time_zone, "assignees": list(s.assignees or ()),
            "hierarchy": dict(s.hierarchy), "fields": dict(s.fields)}


def _record(tx: TenantTx, event: EventIn, action: str, before: dict[str, object] | None) -> Recorded:
    recorded = record_events(tx, [event], "portal")[0]
    record_audit(tx, action, "subject", recorded.subject_id, before=before,
                 after=_values(event) | {"event_id": recorded.event_id})
    return recorded


def _exists(tx: TenantTx, kind: str, external_id: str) -> bool:
    return tx.conn.execute(
        "SELECT 1 FROM subjects WHERE product = %s AND kind = %s AND external_id = %s",
        [MANUAL_PRODUCT, kind, external_id]).fetchone() is not None


def create_manual_subject(tx: TenantTx, form: ManualSubject) -> Recorded:
    event = manual_event(form, creating=True)
    if _exists(tx, event.subject.kind, event.subject.external_id):
        raise Conflict(f"there is a {event.subject.kind} {event.subject.external_id!r} already")
    return _record(tx, event, "subject.create", None)


_FORMS = """
    SELECT s.id, s.kind, s.external_id, s.title, coalesce(s.time_zone, ''), s.status,
           coalesce((SELECT string_agg(u.email, ', ' ORDER BY u.email) FROM subject_assignees a
                     JOIN users u ON u.id = a.user_id WHERE a.subject_id = s.id), ''),
           coalesce((SELECT string_agg(h.level || ' = ' || u.code, E'\\n' ORDER BY h.level)
                     FROM subject_hierarchy h JOIN hierarchy_units u ON u.id = h.unit_id
                     WHERE h.subject_id = s.id), ''),
           coalesce((SELECT string_agg(f.name || ' = ' || (f.value #>> '{}'), E'\\n' ORDER BY f.name)
                     FROM subject_fields f WHERE f.subject_id = s.id AND f.name <> %(due)s), ''),
           (SELECT f.value #>> '{}' FROM subject_fields f WHERE f.subject_id = s.id AND f.name = %(due)s)
    FROM subjects s WHERE s.product = %(product)s AND """


def _form(row: tuple[object, ...]) -> ManualSubject:
    return ManualSubject(kind=str(row[1]), external_id=str(row[2]), title=str(row[3]),
                         due_on=str(row[9] or ""), time_zone=str(row[4]), status=str(row[5]),
                         assignees=str(row[6]), hierarchy=str(row[7]), fields=str(row[8]))


def manual_subject_form(tx: TenantTx, subject_id: int) -> ManualSubject:
    """The subject as its form shows it: what the register holds now."""
    row = tx.conn.execute(_FORMS + "s.id = %(id)s",
                          {"due": DUE_FIELD, "product": MANUAL_PRODUCT, "id": subject_id}).fetchone()
    if row is None:
        raise NotFound(f"there is no manual subject {subject_id}")
    return _form(row)


def manual_subject_forms(tx: TenantTx, keys: list[tuple[str, str]]) -> dict[tuple[str, str], ManualSubject]:
    """The manual subjects of these (kind, external id), as their forms show them."""
    rows = tx.conn.execute(
        _FORMS + "(s.kind, s.external_id) IN (SELECT * FROM unnest(%(kinds)s::text[], %(ids)s::text[]))",
        {"due": DUE_FIELD, "product": MANUAL_PRODUCT, "kinds": [k for k, _ in keys],
         "ids": [i for _, i in keys]}).fetchall()
    return {(str(r[1]), str(r[2])): _form(r) for r in rows}


def _before(tx: TenantTx, subject_id: int) -> ManualSubject:
    # Locks the subject: two people saving at once are taken in turn.
    if tx.conn.execute("SELECT 1 FROM subjects WHERE id = %s AND product = %s FOR UPDATE",
                       [subject_id, MANUAL_PRODUCT]).fetchone() is None:
        raise NotFound(f"there is no manual subject {subject_id}")
    return manual_subject_form(tx, subject_id)


def edit_manual_subject(tx: TenantTx, subject_id: int, form: ManualSubject) -> Recorded | None:
    """Save the form as an update of the subject (its kind and id stay); None when nothing
    changed. A field taken off the form is set to null (a hierarchy level stays: a unit is
    changed, never removed)."""
    before = _before(tx, subject_id)
    if before.status == CLOSED:
        raise InvalidInput("this subject is closed: it can no longer be changed")
    same_subject = ManualSubject(before.kind, before.external_id, form.title, form.due_on,
                                 form.time_zone, form.status, form.assignees, form.hierarchy,
                                 form.fields)
    if same_subject == before:
        return None
    event = manual_event(same_subject, creating=False,
                         cleared=field_names(before) - field_names(same_subject))
    return _record(tx, event, "subject.edit", {"form": asdict(before)})


def close_manual_subject(tx: TenantTx, subject_id: int) -> Recorded | None:
    before = _before(tx, subject_id)
    if before.status == CLOSED:
        return None
    return _record(tx, close_event(before.kind, before.external_id), "subject.close",
                   {"status": before.status})


def list_manual_subjects(tx: TenantTx, *, closed: bool = False) -> list[ListedSubject]:
    rows = tx.conn.execute(
        """
        SELECT s.id, s.kind, s.external_id, s.title, s.status,
               (SELECT f.value #>> '{}' FROM subject_fields f WHERE f.subject_id = s.id AND f.name = %s),
               coalesce((SELECT array_agg(coalesce(nullif(u.display_name, ''), u.email) ORDER BY u.email)
                         FROM subject_assignees a JOIN users u ON u.id = a.user_id
                         WHERE a.subject_id = s.id), '{}'),
               s.updated_at
        FROM subjects s WHERE s.product = %s AND (s.status = %s) = %s
        ORDER BY s.updated_at DESC, s.id DESC LIMIT 500
        """, [DUE_FIELD, MANUAL_PRODUCT, CLOSED, closed]).fetchall()
    return [ListedSubject(int(str(r[0])), str(r[1]), str(r[2]), str(r[3]), str(r[4]),
                          None if r[5] is None else str(r[5]), list(r[6]), r[7])  # type: ignore[call-overload, arg-type]
            for r in rows]
