"""The subject register: what incoming events write about their subjects, set-based for a
whole batch, and the diff that gives each update its changes.

Every statement names the tenant's schema (never search_path): the same code runs in a
tenant transaction and on a host application's own connection (tocsin.shell.outbox), whose
search_path is none of our business. A batch costs a fixed number of statements, not a
statement per event or per fact.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import msgspec
import psycopg
from psycopg import sql
from psycopg.rows import tuple_row

from db.rules.moved_due_dates import cancel_moved_due_dates
from domain.events.intake import EventIn, InvalidEvents, JsonValue, Problem, SubjectState, apply_event

__all__ = ["Cursor", "Placed", "SubjectKey", "check_events", "json_rows", "schema_sql", "update_register"]

Cursor = psycopg.Cursor[tuple[Any, ...]]
SubjectKey = tuple[str, str, str]  # (product, kind, external_id)


@dataclass(frozen=True)
class Placed:
    """One event's subject in the register and the event's changes."""

    subject_id: int
    changes: dict[str, dict[str, JsonValue]]


def schema_sql(schema: str, text: str) -> sql.Composed:
    """``text`` with ``{s}`` naming the tenant's schema, quoted."""
    return sql.SQL(text).format(s=sql.Identifier(schema))


@dataclass(frozen=True)
class _Known:
    products: dict[str, tuple[list[str], list[str]]]  # code -> (subject kinds, trigger types)
    users: dict[str, int]  # lower(email) -> id of an active user
    units: dict[tuple[str, str], int]  # (level, code) -> unit id


def _look_up(cur: Cursor, schema: str, events: Sequence[EventIn]) -> _Known:
    products = sorted({e.product for e in events})
    emails = sorted({a for e in events for a in (e.subject.assignees or ())})
    units = sorted({(level, code) for e in events for level, code in e.subject.hierarchy.items()})
    conn = cur.connection
    # Each lookup on its own cursor, all sent before any is read: in the caller's pipeline
    # they cost one round trip.
    with conn.cursor(row_factory=tuple_row) as p_cur, conn.cursor(row_factory=tuple_row) as u_cur, \
            conn.cursor(row_factory=tuple_row) as h_cur:
        p_cur.execute(schema_sql(schema, "SELECT code, subject_kinds, trigger_types FROM {s}.products "
                                         "WHERE code = ANY(%s)"), [products])
        if emails:
            u_cur.execute(schema_sql(schema, "SELECT lower(email), id FROM {s}.users WHERE lower(email) "
                                             "= ANY(%s) AND deactivated_at IS NULL"), [emails])
        if units:
            h_cur.execute(schema_sql(schema, "SELECT u.level, u.code, u.id FROM {s}.hierarchy_units u "
                                             "JOIN unnest(%s::text[], %s::text[]) AS w (level, code) "
                                             "USING (level, code)"),
                          [[u[0] for u in units], [u[1] for u in units]])
        known_products = {str(r[0]): (list(r[1]), list(r[2])) for r in p_cur.fetchall()}
        known_users = {str(r[0]): int(r[1]) for r in u_cur.fetchall()} if emails else {}
        known_units = {(str(r[0]), str(r[1])): int(r[2]) for r in h_cur.fetchall()} if units else {}
    return _Known(known_products, known_users, known_units)


def _check(events: Sequence[EventIn], prefixes: Sequence[str], known: _Known) -> None:
    problems: list[Problem] = []
    for event, p in zip(events, prefixes, strict=True):
        vocabulary = known.products.get(event.product)
        if vocabulary is None:
            problems.append(Problem(f"{p}product", f"unknown product {event.product!r}: create it "
                                                   "with `tocsin product create`"))
            continue
        kinds, triggers = vocabulary
        if kinds and event.subject.kind not in kinds:
            problems.append(Problem(f"{p}subject.kind", f"{event.subject.kind!r} is not a subject kind of "
                                                        f"{event.product!r} (one of {', '.join(kinds)})"))
        if event.trigger_type is not None and event.trigger_type not in triggers:
            problems.append(Problem(f"{p}trigger", f"{event.trigger_type!r} is not a trigger of "
                                                   f"{event.product!r} (one of {', '.join(triggers)})"))
        for n, email in enumerate(event.subject.assignees or ()):
            if email not in known.users:
                problems.append(Problem(f"{p}subject.assignees[{n}]",
                                        f"no active user {email!r} in this tenant"))
        for level, code in event.subject.hierarchy.items():
            if (level, code) not in known.units:
                problems.append(Problem(f"{p}subject.hierarchy.{level}",
                                        f"no {level} unit with code {code!r} in this tenant"))
    if problems:
        raise InvalidEvents(problems)


def check_events(cur: Cursor, schema: str, events: Sequence[EventIn], prefixes: Sequence[str]) -> None:
    """The register's checks of update_register alone (unknown products, kinds, triggers,
    assignees, hierarchy units), nothing written: InvalidEvents naming each path."""
    _check(events, prefixes, _look_up(cur, schema, events))


def json_rows(rows: Sequence[Mapping[str, Any]]) -> str:
    """Rows for ``json_to_recordset``: one parameter, encoded in C, that the server reads in
    C. Binding one array per column instead cost more Python time than the statements
    themselves (each text element escaped one by one), and jsonb values went through it
    encoded twice."""
    return msgspec.json.encode(rows).decode()


@dataclass(frozen=True)
class _Registered:
    subject_id: int
    before: SubjectState | None  # what the register held; None: registered by this batch


def _register_subjects(cur: Cursor, schema: str,
                       fresh: dict[SubjectKey, SubjectState]) -> dict[SubjectKey, _Registered]:
    """Insert the subjects not yet registered, already as the batch leaves them (``fresh``:
    each subject's state after its events, starting from nothing), and lock every one the
    batch touches, in one order so two batches never deadlock. A subject registered before
    keeps its row here (the lock is all) and is rewritten by _write from its real state."""
    keys = sorted(fresh)
    cur.execute(schema_sql(schema, """
        INSERT INTO {s}.subjects AS s (product, kind, external_id, title, status, time_zone, assigned_at)
        SELECT w.product, w.kind, w.external_id, w.title, w.status, w.time_zone,
               CASE WHEN w.assigned THEN now() END
        FROM json_to_recordset(%s::json) AS w (n integer, product text, kind text, external_id text,
                                               title text, status text, time_zone text, assigned boolean)
        ORDER BY w.n
        ON CONFLICT (product, kind, external_id) DO UPDATE SET title = s.title
        RETURNING s.product, s.kind, s.external_id, s.id, s.xmax = 0, s.title, s.status, s.time_zone
        """), [json_rows([{"n": n, "product": k[0], "kind": k[1], "external_id": k[2],
                           "title": fresh[k].title, "status": fresh[k].status,
                           "time_zone": fresh[k].time_zone, "assigned": bool(fresh[k].assignees)}
                          for n, k in enumerate(keys)])])
    return {(str(r[0]), str(r[1]), str(r[2])):
            _Registered(int(r[3]), None if r[4] else SubjectState(str(r[5]), str(r[6]), r[7]))
            for r in cur.fetchall()}


def _load_facts(cur: Cursor, schema: str, events: Sequence[EventIn],
                subjects: dict[SubjectKey, _Registered]) -> dict[int, SubjectState]:
    """What the register holds of the facts this batch sets, for the subjects that existed
    before it: one statement for every family, only for the keys the batch names."""
    states = {r.subject_id: r.before for r in subjects.values() if r.before is not None}
    wanted: set[tuple[str, int, str, str]] = set()  # (family, subject id, name, field)
    for e in events:
        sid = subjects[e.subject_key].subject_id
        if sid not in states:
            continue
        if e.subject.assignees is not None:
            wanted.add(("assignees", sid, "", ""))
        wanted.update(("field", sid, name, "") for name in e.subject.fields)
        wanted.update(("form", sid, form, name) for form, name in e.subject.forms)
        wanted.update(("level", sid, level, "") for level in e.subject.hierarchy)
    if not wanted:
        return states
    cur.execute(schema_sql(schema, """
        WITH w AS (SELECT * FROM json_to_recordset(%s::json)
                                 AS w (family text, subject_id bigint, a text, b text))
        SELECT 'assignees', a.subject_id, lower(u.email), NULL, NULL::jsonb
        FROM {s}.subject_assignees a JOIN {s}.users u ON u.id = a.user_id
        WHERE a.subject_id IN (SELECT subject_id FROM w WHERE family = 'assignees')
        UNION ALL
        SELECT 'field', f.subject_id, f.name, NULL, f.value FROM {s}.subject_fields f
        JOIN w ON w.family = 'field' AND w.subject_id = f.subject_id AND w.a = f.name
        UNION ALL
        SELECT 'form', f.subject_id, f.form, f.field, f.value FROM {s}.subject_form_answers f
        JOIN w ON w.family = 'form' AND w.subject_id = f.subject_id AND w.a = f.form AND w.b = f.field
        UNION ALL
        SELECT 'level', h.subject_id, h.level, u.code, NULL FROM {s}.subject_hierarchy h
        JOIN {s}.hierarchy_units u ON u.id = h.unit_id
        JOIN w ON w.family = 'level' AND w.subject_id = h.subject_id AND w.a = h.level
        """), [json_rows([{"family": f, "subject_id": sid, "a": a, "b": b} for f, sid, a, b in wanted])])
    assignees: dict[int, list[str]] = {}
    fields: dict[int, dict[str, JsonValue]] = {}
    forms: dict[int, dict[tuple[str, str], JsonValue]] = {}
    levels: dict[int, dict[str, str]] = {}
    for family, sid, a, b, value in cur.fetchall():
        if family == "assignees":
            assignees.setdefault(sid, []).append(a)
        elif family == "field":
            fields.setdefault(sid, {})[a] = value
        elif family == "form":
            forms.setdefault(sid, {})[(a, b)] = value
        else:
            levels.setdefault(sid, {})[a] = b
    for sid, state in states.items():
        states[sid] = replace(state, assignees=tuple(sorted(assignees.get(sid, ()))),
                              fields=fields.get(sid, {}), forms=forms.get(sid, {}),
                              hierarchy=levels.get(sid, {}))
    return states


def _apply_all(events: Sequence[EventIn], subject_of: Sequence[int],
               states: dict[int, SubjectState]) -> list[dict[str, dict[str, JsonValue]]]:
    """Apply the events in order to ``states`` (subject id -> state, updated in place):
    a later event of a subject sees the earlier one. Returns each event's changes."""
    changes = []
    for event, sid in zip(events, subject_of, strict=True):
        states[sid], found = apply_event(states[sid], event)
        changes.append(found)
    return changes


def update_register(cur: Cursor, schema: str, events: Sequence[EventIn],
                    prefixes: Sequence[str]) -> list[Placed]:
    """Write what ``events`` say about their subjects (in order: a later event of the same
    subject sees the earlier one) and return, per event, its subject and its changes.
    Unknown products, assignees or hierarchy units raise InvalidEvents naming each path
    (``prefixes[i]`` starts event i's paths); nothing is written then."""
    known = _look_up(cur, schema, events)
    _check(events, prefixes, known)
    # Each subject as if the batch registers it: true of most subjects of a batch of
    # creations, which are then written by their INSERT alone.
    keys = sorted({e.subject_key for e in events})
    number = {key: n for n, key in enumerate(keys)}
    fresh = {n: SubjectState() for n in range(len(keys))}
    fresh_changes = _apply_all(events, [number[e.subject_key] for e in events], fresh)
    subjects = _register_subjects(cur, schema, {key: fresh[number[key]] for key in keys})
    subject_of = [subjects[e.subject_key].subject_id for e in events]
    before = _load_facts(cur, schema, events, subjects)
    after = {subjects[key].subject_id: fresh[number[key]] for key in keys}
    if before:  # subjects registered before this batch: their events' changes from their real state
        existing = [(e, sid) for e, sid in zip(events, subject_of, strict=True) if sid in before]
        states = dict(before)
        real_changes = iter(_apply_all([e for e, _ in existing], [sid for _, sid in existing], states))
        after.update(states)
        changes = [next(real_changes) if sid in before else found
                   for sid, found in zip(subject_of, fresh_changes, strict=True)]
    else:
        changes = fresh_changes
    _write(cur, schema, events, subject_of, before, after, known)
    _cancel_moved_due_dates(cur, schema, events, subject_of, before, after)
    return [Placed(sid, found) for sid, found in zip(subject_of, changes, strict=True)]


_MISSING = object()


def _cancel_moved_due_dates(cur: Cursor, schema: str, events: Sequence[EventIn], subject_of: Sequence[int],
                            before: dict[int, SubjectState], after: dict[int, SubjectState]) -> int:
    """In the transaction that writes them: the fields this batch gave a new value (or
    removed, as a null does) on subjects registered before it may be the due date of a
    time rule, whose notices still waiting for the old date are cancelled now, before any
    of them can be sent (db/rules/moved_due_dates.py). One statement when nothing was waiting."""
    changed: set[tuple[int, str]] = set()
    for e, sid in zip(events, subject_of, strict=True):
        if sid not in before:  # registered by this batch: no notice claimed yet
            continue
        for name in e.subject.fields:
            old, new = before[sid].fields.get(name, _MISSING), after[sid].fields[name]
            if old != new or type(old) is not type(new):
                changed.add((sid, name))
    if not changed:
        return 0
    return cancel_moved_due_dates(cur, schema, sorted({sid for sid, _ in changed}),
                                  sorted({name for _, name in changed}))


def _write(cur: Cursor, schema: str, events: Sequence[EventIn], subject_of: Sequence[int],
           before: dict[int, SubjectState], after: dict[int, SubjectState], known: _Known) -> None:
    """Write the subjects' facts as ``after`` holds them. ``before`` holds the subjects
    registered before this batch: only their rows need an UPDATE (the others were inserted
    as they are), and only their assignees may need deleting."""
    existing = sorted(before)
    if existing:
        cur.execute(schema_sql(schema, """
            UPDATE {s}.subjects s SET title = w.title, status = w.status, time_zone = w.time_zone,
                   updated_at = now(),
                   status_changed_at = CASE WHEN w.status_changed THEN now() ELSE s.status_changed_at END,
                   assigned_at = CASE WHEN w.assigned THEN now() ELSE s.assigned_at END
            FROM json_to_recordset(%s::json)
                 AS w (id bigint, title text, status text, time_zone text, status_changed boolean,
                       assigned boolean)
            WHERE s.id = w.id
            """), [json_rows([{"id": i, "title": after[i].title, "status": after[i].status,
                               "time_zone": after[i].time_zone,
                               "status_changed": after[i].status != before[i].status,
                               "assigned": after[i].assignees != before[i].assignees} for i in existing])])
    fields: set[tuple[int, str]] = set()
    forms: set[tuple[int, str, str]] = set()
    levels: set[tuple[int, str]] = set()
    for e, sid in zip(events, subject_of, strict=True):
        fields.update((sid, name) for name in e.subject.fields)
        forms.update((sid, form, name) for form, name in e.subject.forms)
        levels.update((sid, level) for level in e.subject.hierarchy)
    _insert_facts(cur, schema, _FIELDS, before, [
        {"subject_id": sid, "name": name, "value": after[sid].fields[name]} for sid, name in fields])
    _insert_facts(cur, schema, _FORMS, before, [
        {"subject_id": sid, "form": form, "field": name, "value": after[sid].forms[(form, name)]}
        for sid, form, name in forms])
    _insert_facts(cur, schema, _LEVELS, before, [
        {"subject_id": sid, "level": level, "unit_id": known.units[(level, after[sid].hierarchy[level])]}
        for sid, level in levels])
    reassigned = sorted(sid for sid, state in after.items()
                        if state.assignees != (before[sid].assignees if sid in before else ()))
    if not reassigned:
        return
    pairs = [{"subject_id": sid, "user_id": known.users[email]}
             for sid in reassigned for email in after[sid].assignees]
    gone = [sid for sid in reassigned if sid in before]
    if gone:
        cur.execute(schema_sql(schema, """
            DELETE FROM {s}.subject_assignees a
            WHERE a.subject_id = ANY(%s)
              AND (a.subject_id, a.user_id) NOT IN (
                  SELECT w.subject_id, w.user_id
                  FROM json_to_recordset(%s::json) AS w (subject_id bigint, user_id bigint))
            """), [gone, json_rows(pairs)])
    _insert_facts(cur, schema, _ASSIGNEES, before, pairs)


@dataclass(frozen=True)
class _FactTable:
    name: str
    columns: str  # the row's columns and types, as json_to_recordset takes them
    key: str  # the primary key's columns
    on_conflict: str  # what an upsert sets; empty: nothing (the row is the fact)

    @property
    def column_names(self) -> str:
        return ", ".join(c.split()[0] for c in self.columns.split(", "))

    @property
    def selected(self) -> str:
        # json_to_recordset reads a JSON null as SQL NULL, even into a jsonb column: a fact
        # whose value is null is stored as JSON null.
        return ", ".join("coalesce(w.value, 'null')" if c == "value" else f"w.{c}"
                         for c in self.column_names.split(", "))


_FIELDS = _FactTable("subject_fields", "subject_id bigint, name text, value jsonb", "subject_id, name",
                     "value = EXCLUDED.value")
_FORMS = _FactTable("subject_form_answers", "subject_id bigint, form text, field text, value jsonb",
                    "subject_id, form, field", "value = EXCLUDED.value, submitted_at = now()")
_LEVELS = _FactTable("subject_hierarchy", "subject_id bigint, level text, unit_id bigint",
                     "subject_id, level", "unit_id = EXCLUDED.unit_id")
_ASSIGNEES = _FactTable("subject_assignees", "subject_id bigint, user_id bigint", "subject_id, user_id", "")


def _insert_facts(cur: Cursor, schema: str, table: _FactTable, before: dict[int, SubjectState],
                  rows: list[dict[str, Any]]) -> None:
    """Write fact rows: a plain INSERT for the subjects this batch registered, which have
    none yet, an upsert for the subjects in ``before``. ON CONFLICT probes the key once more
    for every row (a quarter of the cost of a batch of creations), so only rows that may
    meet a stored one pay for it."""
    new = [r for r in rows if r["subject_id"] not in before]
    stored = [r for r in rows if r["subject_id"] in before]
    insert = (f"INSERT INTO {{s}}.{table.name} ({table.column_names}) SELECT {table.selected} "
              f"FROM json_to_recordset(%s::json) AS w ({table.columns})")
    if new:
        cur.execute(schema_sql(schema, insert), [json_rows(new)])
    if stored:
        # In key order: two batches upserting the same rows lock them in one order.
        on_conflict = f"DO UPDATE SET {table.on_conflict}" if table.on_conflict else "DO NOTHING"
        upsert = f"{insert} ORDER BY {table.key} ON CONFLICT ({table.key}) {on_conflict}"
        cur.execute(schema_sql(schema, upsert), [json_rows(stored)])
