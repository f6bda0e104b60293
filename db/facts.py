"""A subject's facts, loaded by family: only the keys asked for, in at most one query per
family (targeted loading), or every fact of the subject (the benchmark's comparison)."""

from __future__ import annotations

from typing import Any

from db.tenancy import TenantTx
from domain.conditions import WantedFacts

_FIELDS = "SELECT name, value FROM subject_fields WHERE subject_id = %s AND name = ANY(%s)"
# The wanted (form, field) pairs as two parallel arrays, unnested together.
_FORMS = (
    "SELECT a.form, a.field, a.value FROM subject_form_answers a "
    "JOIN unnest(%s::text[], %s::text[]) AS w (form, field) "
    "  ON a.form = w.form AND a.field = w.field "
    "WHERE a.subject_id = %s"
)
_LEVELS = (
    "SELECT h.level, u.code FROM subject_hierarchy h JOIN hierarchy_units u ON u.id = h.unit_id "
    "WHERE h.subject_id = %s AND h.level = ANY(%s)"
)


def load_facts(tx: TenantTx, subject_id: int, wanted: WantedFacts) -> dict[str, object]:
    """The wanted facts the subject has, by fact name (a fact it lacks is absent). A family
    nobody asked for is not queried."""
    facts: dict[str, object] = {}
    if wanted.fields:
        for name, value in tx.conn.execute(_FIELDS, [subject_id, sorted(wanted.fields)]):
            facts[f"field.{name}"] = value
    if wanted.forms:
        pairs = sorted(wanted.forms)
        rows = tx.conn.execute(_FORMS, [[f for f, _ in pairs], [a for _, a in pairs], subject_id])
        for form, answer, value in rows:
            facts[f"form.{form}.{answer}"] = value
    if wanted.levels:
        for level, code in tx.conn.execute(_LEVELS, [subject_id, sorted(wanted.levels)]):
            facts[f"hierarchy.{level}"] = code
    return facts


def load_all_facts(tx: TenantTx, subject_id: int) -> dict[str, object]:
    """Every stored fact of the subject, whatever the rules reference (three queries)."""
    facts: dict[str, object] = {}
    for name, value in tx.conn.execute(
            "SELECT name, value FROM subject_fields WHERE subject_id = %s", [subject_id]):
        facts[f"field.{name}"] = value
    for form, answer, value in tx.conn.execute(
            "SELECT form, field, value FROM subject_form_answers WHERE subject_id = %s", [subject_id]):
        facts[f"form.{form}.{answer}"] = value
    for level, code in tx.conn.execute(
            "SELECT h.level, u.code FROM subject_hierarchy h "
            "JOIN hierarchy_units u ON u.id = h.unit_id WHERE h.subject_id = %s", [subject_id]):
        facts[f"hierarchy.{level}"] = code
    return facts


def load_subject_facts(tx: TenantTx, subject_id: int) -> dict[str, Any]:
    """The subject row's facts (always loaded with the event): subject.kind, status, title,
    external_id and the sorted emails of its assignees."""
    row = tx.conn.execute(
        "SELECT s.kind, s.status, s.title, s.external_id, "
        "  coalesce((SELECT array_agg(u.email ORDER BY u.email) FROM subject_assignees a "
        "            JOIN users u ON u.id = a.user_id WHERE a.subject_id = s.id), '{}') "
        "FROM subjects s WHERE s.id = %s", [subject_id]).fetchone()
    if row is None:
        return {}
    kind, status, title, external_id, assignees = row
    return {"subject.kind": kind, "subject.status": status, "subject.title": title,
            "subject.external_id": external_id, "subject.assignees": list(assignees)}  # type: ignore[call-overload]
