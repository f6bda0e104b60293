"""A subject's facts, loaded by family: only the keys asked for, in at most one query per
family (targeted loading), or every fact of the subject (the benchmark's comparison)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from db.platform.tenancy import TenantTx
from domain.rules.conditions import WantedFacts

__all__ = [
    "BatchLoader",
    "load_all_facts",
    "load_all_facts_of_subjects",
    "load_facts",
    "load_facts_of_subjects",
    "load_subject_facts",
    "load_subjects_and_all_facts",
]

# How a batch's evaluation loads stored facts: given the facts each subject's events want,
# their values by subject and fact name. Targeted (load_facts_of_subjects) in production;
# the benchmark swaps in load-everything.
BatchLoader = Callable[[TenantTx, Mapping[int, WantedFacts]], Mapping[int, Mapping[str, object]]]

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


# The same three families for many subjects at once: the wanted (subject, key) pairs as
# parallel lists, unnested together, each pair looked up by its primary key (LATERAL with
# OFFSET 0 keeps it a nested loop of index probes: on a small table the planner would
# otherwise hash the pairs and read every row of the family). Each list is sent as one
# comma-separated text, split by PostgreSQL: psycopg dumps a Python list element by element
# in Python, which cost more than the lookups (fact names cannot hold a comma: their
# grammar is domain/rules/conditions.py NAME and LEVEL, checked again below).
_FIELDS_OF = (
    "SELECT w.subject_id, w.name, f.value "
    "FROM unnest(string_to_array(%s::text, ',')::bigint[], string_to_array(%s::text, ',')) "
    "  AS w (subject_id, name) "
    "CROSS JOIN LATERAL (SELECT f.value FROM subject_fields f "
    "  WHERE f.subject_id = w.subject_id AND f.name = w.name OFFSET 0) f"
)
_FORMS_OF = (
    "SELECT w.subject_id, w.form, w.field, a.value "
    "FROM unnest(string_to_array(%s::text, ',')::bigint[], string_to_array(%s::text, ','), "
    "            string_to_array(%s::text, ',')) AS w (subject_id, form, field) "
    "CROSS JOIN LATERAL (SELECT a.value FROM subject_form_answers a "
    "  WHERE a.subject_id = w.subject_id AND a.form = w.form AND a.field = w.field OFFSET 0) a"
)
_LEVELS_OF = (
    "SELECT w.subject_id, w.level, u.code "
    "FROM unnest(string_to_array(%s::text, ',')::bigint[], string_to_array(%s::text, ',')) "
    "  AS w (subject_id, level) "
    "CROSS JOIN LATERAL (SELECT h.unit_id FROM subject_hierarchy h "
    "  WHERE h.subject_id = w.subject_id AND h.level = w.level OFFSET 0) h "
    "JOIN hierarchy_units u ON u.id = h.unit_id"
)


def _joined(values: list[str]) -> str:
    """Names as one comma-separated text (see _FIELDS_OF)."""
    text = ",".join(values)
    if text.count(",") != len(values) - 1:
        raise ValueError("a fact name holds a comma")  # never: the grammar has none
    return text


def load_facts_of_subjects(tx: TenantTx,
                           wanted: Mapping[int, WantedFacts]) -> dict[int, dict[str, object]]:
    """load_facts for many subjects at once (a batch of events): by subject, the wanted
    facts it has. At most one query per family for all of them, sent together in one round
    trip; a family nobody asked for is not queried."""
    facts: dict[int, dict[str, object]] = {s: {} for s in wanted}
    field_ids: list[str] = []
    field_names: list[str] = []
    form_ids: list[str] = []
    form_forms: list[str] = []
    form_fields: list[str] = []
    level_ids: list[str] = []
    level_names: list[str] = []
    for s, w in wanted.items():
        sid = str(int(s))
        if w.fields:
            field_ids.extend([sid] * len(w.fields))
            field_names.extend(w.fields)
        if w.forms:
            form_ids.extend([sid] * len(w.forms))
            for f, a in w.forms:
                form_forms.append(f)
                form_fields.append(a)
        if w.levels:
            level_ids.extend([sid] * len(w.levels))
            level_names.extend(w.levels)
    with tx.conn.pipeline():
        field_rows = tx.conn.execute(_FIELDS_OF, [",".join(field_ids), _joined(field_names)]) \
            if field_ids else None
        form_rows = tx.conn.execute(_FORMS_OF, [",".join(form_ids), _joined(form_forms),
                                                _joined(form_fields)]) if form_ids else None
        level_rows = tx.conn.execute(_LEVELS_OF, [",".join(level_ids), _joined(level_names)]) \
            if level_ids else None
    if field_rows is not None:
        for subject, name, value in field_rows.fetchall():
            facts[subject][f"field.{name}"] = value  # type: ignore[index]
    if form_rows is not None:
        for subject, form, answer, value in form_rows.fetchall():
            facts[subject][f"form.{form}.{answer}"] = value  # type: ignore[index]
    if level_rows is not None:
        for subject, level, code in level_rows.fetchall():
            facts[subject][f"hierarchy.{level}"] = code  # type: ignore[index]
    return facts


def load_all_facts(tx: TenantTx, subject_id: int) -> dict[str, object]:
    """Every stored fact of the subject, whatever the rules reference (three queries)."""
    facts: dict[str, object] = {}
    for name, value in tx.conn.execute(
            "SELECT name, value FROM subject_fields WHERE subject_id = %s", [subject_id]).fetchall():
        facts[f"field.{name}"] = value
    for form, answer, value in tx.conn.execute(
            "SELECT form, field, value FROM subject_form_answers WHERE subject_id = %s", [subject_id]
    ).fetchall():
        facts[f"form.{form}.{answer}"] = value
    for level, code in tx.conn.execute(
            "SELECT h.level, u.code FROM subject_hierarchy h "
            "JOIN hierarchy_units u ON u.id = h.unit_id WHERE h.subject_id = %s", [subject_id]
    ).fetchall():
        facts[f"hierarchy.{level}"] = code
    return facts


def load_all_facts_of_subjects(tx: TenantTx, subject_ids: list[int]) -> dict[int, dict[str, object]]:
    """load_all_facts for many subjects at once (three queries, one round trip)."""
    facts: dict[int, dict[str, object]] = {s: {} for s in subject_ids}
    with tx.conn.pipeline():
        fields = tx.conn.execute(
            "SELECT subject_id, name, value FROM subject_fields WHERE subject_id = ANY(%s)", [subject_ids])
        forms = tx.conn.execute(
            "SELECT subject_id, form, field, value FROM subject_form_answers WHERE subject_id = ANY(%s)",
            [subject_ids])
        levels = tx.conn.execute(
            "SELECT h.subject_id, h.level, u.code FROM subject_hierarchy h "
            "JOIN hierarchy_units u ON u.id = h.unit_id WHERE h.subject_id = ANY(%s)", [subject_ids])
    for subject, name, value in fields.fetchall():
        facts[int(str(subject))][f"field.{name}"] = value
    for subject, form, answer, value in forms.fetchall():
        facts[int(str(subject))][f"form.{form}.{answer}"] = value
    for subject, level, code in levels.fetchall():
        facts[int(str(subject))][f"hierarchy.{level}"] = code
    return facts


_SUBJECTS = (
    "SELECT s.id, s.kind, s.status, s.title, s.external_id, "
    "  coalesce((SELECT array_agg(u.email ORDER BY u.email) FROM subject_assignees a "
    "            JOIN users u ON u.id = a.user_id WHERE a.subject_id = s.id), '{}') "
    "FROM subjects s WHERE s.id = ANY(%s)"
)


def load_subjects_and_all_facts(tx: TenantTx, subject_ids: list[int]) -> dict[int, dict[str, object]]:
    """load_subject_facts and load_all_facts together, for many subjects at once (what a
    notice's template may show): four queries in one round trip. A subject that is gone is
    absent."""
    facts: dict[int, dict[str, object]] = {}
    with tx.conn.pipeline():
        subjects = tx.conn.execute(_SUBJECTS, [subject_ids])
        stored = load_all_facts_of_subjects(tx, subject_ids)
    for sid, kind, status, title, external_id, assignees in subjects:
        facts[int(str(sid))] = {
            "subject.kind": kind, "subject.status": status, "subject.title": title,
            "subject.external_id": external_id, "subject.assignees": list(assignees),  # type: ignore[call-overload]
            **stored[int(str(sid))]}
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
