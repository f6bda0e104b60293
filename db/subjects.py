"""The subject register: what incoming events write about their subjects, set-based for a
whole batch, and the diff that gives each update its changes.

Every statement names the tenant's schema (never search_path): the same code runs in a
tenant transaction and on a host application's own connection (tocsin.outbox), whose
search_path is none of our business. A batch costs a fixed number of statements, not a
statement per event or per fact.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import tuple_row

from domain.events import EventIn, InvalidEvents, JsonValue, Problem, SubjectState, apply_event

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


Registered = dict[SubjectKey, tuple[int, bool, SubjectState]]  # key -> (id, created now, state)


def _lock_subjects(cur: Cursor, schema: str, keys: list[SubjectKey]) -> Registered:
    """Create the subjects not yet registered and lock every one the batch touches (in one
    order, so two batches never deadlock), with what the register holds of them."""
    cur.execute(schema_sql(schema, """
        INSERT INTO {s}.subjects AS s (product, kind, external_id)
        SELECT * FROM unnest(%s::text[], %s::text[], %s::text[])
        ON CONFLICT (product, kind, external_id) DO UPDATE SET title = s.title
        RETURNING s.product, s.kind, s.external_id, s.id, s.xmax = 0, s.title, s.status, s.time_zone
        """), [[k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys]])
    return {(str(r[0]), str(r[1]), str(r[2])):
            (int(r[3]), bool(r[4]), SubjectState(str(r[5]), str(r[6]), r[7])) for r in cur.fetchall()}


def _load_facts(cur: Cursor, schema: str, events: Sequence[EventIn],
                subjects: Registered) -> dict[int, SubjectState]:
    """What the register holds of the facts this batch sets, for the subjects that existed
    before it (one query per family, only for the keys the batch names)."""
    states = {sid: state for sid, _, state in subjects.values()}
    assignees_of: set[int] = set()
    fields: set[tuple[int, str]] = set()
    forms: set[tuple[int, str, str]] = set()
    levels: set[tuple[int, str]] = set()
    for e in events:
        sid, created, _ = subjects[e.subject_key]
        if created:
            continue
        if e.subject.assignees is not None:
            assignees_of.add(sid)
        fields.update((sid, name) for name in e.subject.fields)
        forms.update((sid, form, name) for form, name in e.subject.forms)
        levels.update((sid, level) for level in e.subject.hierarchy)
    found_assignees: dict[int, list[str]] = {}
    found_fields: dict[int, dict[str, JsonValue]] = {}
    found_forms: dict[int, dict[tuple[str, str], JsonValue]] = {}
    found_levels: dict[int, dict[str, str]] = {}
    if assignees_of:
        cur.execute(schema_sql(schema, "SELECT a.subject_id, lower(u.email) FROM {s}.subject_assignees a "
                               "JOIN {s}.users u ON u.id = a.user_id WHERE a.subject_id = ANY(%s)"),
                    [sorted(assignees_of)])
        for sid, email in cur.fetchall():
            found_assignees.setdefault(int(sid), []).append(str(email))
    if fields:
        cur.execute(schema_sql(schema, "SELECT f.subject_id, f.name, f.value FROM {s}.subject_fields f "
                               "JOIN unnest(%s::bigint[], %s::text[]) AS w (subject_id, name) "
                               "USING (subject_id, name)"),
                    [[f[0] for f in fields], [f[1] for f in fields]])
        for sid, name, value in cur.fetchall():
            found_fields.setdefault(int(sid), {})[str(name)] = value
    if forms:
        cur.execute(schema_sql(schema, "SELECT f.subject_id, f.form, f.field, f.value "
                               "FROM {s}.subject_form_answers f JOIN unnest(%s::bigint[], %s::text[], "
                               "%s::text[]) AS w (subject_id, form, field) USING (subject_id, form, field)"),
                    [[f[0] for f in forms], [f[1] for f in forms], [f[2] for f in forms]])
        for sid, form, name, value in cur.fetchall():
            found_forms.setdefault(int(sid), {})[(str(form), str(name))] = value
    if levels:
        cur.execute(schema_sql(schema, "SELECT h.subject_id, h.level, u.code FROM {s}.subject_hierarchy h "
                               "JOIN {s}.hierarchy_units u ON u.id = h.unit_id "
                               "JOIN unnest(%s::bigint[], %s::text[]) AS w (subject_id, level) "
                               "ON w.subject_id = h.subject_id AND w.level = h.level"),
                    [[x[0] for x in levels], [x[1] for x in levels]])
        for sid, level, code in cur.fetchall():
            found_levels.setdefault(int(sid), {})[str(level)] = str(code)
    for sid, state in states.items():
        states[sid] = replace(state, assignees=tuple(sorted(found_assignees.get(sid, ()))),
                              fields=found_fields.get(sid, {}), forms=found_forms.get(sid, {}),
                              hierarchy=found_levels.get(sid, {}))
    return states


def update_register(cur: Cursor, schema: str, events: Sequence[EventIn],
                    prefixes: Sequence[str]) -> list[Placed]:
    """Write what ``events`` say about their subjects (in order: a later event of the same
    subject sees the earlier one) and return, per event, its subject and its changes.
    Unknown products, assignees or hierarchy units raise InvalidEvents naming each path
    (``prefixes[i]`` starts event i's paths); nothing is written then."""
    known = _look_up(cur, schema, events)
    _check(events, prefixes, known)
    subjects = _lock_subjects(cur, schema, sorted({e.subject_key for e in events}))
    before = _load_facts(cur, schema, events, subjects)
    states = dict(before)
    placed: list[Placed] = []
    touched: dict[int, tuple[EventIn, ...]] = {}
    for event in events:
        sid = subjects[event.subject_key][0]
        states[sid], changes = apply_event(states[sid], event)
        touched[sid] = (*touched.get(sid, ()), event)
        placed.append(Placed(sid, changes))
    _write(cur, schema, before, states, touched, known)
    return placed


def _write(cur: Cursor, schema: str, before: dict[int, SubjectState], after: dict[int, SubjectState],
           touched: dict[int, tuple[EventIn, ...]], known: _Known) -> None:
    ids = sorted(touched)
    cur.execute(schema_sql(schema, """
        UPDATE {s}.subjects s SET title = w.title, status = w.status, time_zone = w.time_zone,
               updated_at = now(),
               status_changed_at = CASE WHEN w.status_changed THEN now() ELSE s.status_changed_at END,
               assigned_at = CASE WHEN w.assigned THEN now() ELSE s.assigned_at END
        FROM unnest(%s::bigint[], %s::text[], %s::text[], %s::text[], %s::bool[], %s::bool[])
             AS w (id, title, status, time_zone, status_changed, assigned)
        WHERE s.id = w.id
        """), [ids, [after[i].title for i in ids], [after[i].status for i in ids],
               [after[i].time_zone for i in ids], [after[i].status != before[i].status for i in ids],
               [after[i].assignees != before[i].assignees for i in ids]])
    fields = sorted({(sid, name) for sid, evs in touched.items() for e in evs for name in e.subject.fields})
    if fields:
        cur.execute(schema_sql(schema, """
            INSERT INTO {s}.subject_fields (subject_id, name, value)
            SELECT w.subject_id, w.name, w.value::jsonb
            FROM unnest(%s::bigint[], %s::text[], %s::text[]) AS w (subject_id, name, value)
            ON CONFLICT (subject_id, name) DO UPDATE SET value = EXCLUDED.value
            """), [[f[0] for f in fields], [f[1] for f in fields],
                   [json.dumps(after[sid].fields[name]) for sid, name in fields]])
    forms = sorted({(sid, form, name) for sid, evs in touched.items() for e in evs
                    for form, name in e.subject.forms})
    if forms:
        cur.execute(schema_sql(schema, """
            INSERT INTO {s}.subject_form_answers (subject_id, form, field, value)
            SELECT w.subject_id, w.form, w.field, w.value::jsonb
            FROM unnest(%s::bigint[], %s::text[], %s::text[], %s::text[])
                 AS w (subject_id, form, field, value)
            ON CONFLICT (subject_id, form, field) DO UPDATE SET value = EXCLUDED.value, submitted_at = now()
            """), [[f[0] for f in forms], [f[1] for f in forms], [f[2] for f in forms],
                   [json.dumps(after[sid].forms[(form, name)]) for sid, form, name in forms]])
    levels = sorted({(sid, level) for sid, evs in touched.items() for e in evs
                     for level in e.subject.hierarchy})
    if levels:
        cur.execute(schema_sql(schema, """
            INSERT INTO {s}.subject_hierarchy (subject_id, level, unit_id)
            SELECT * FROM unnest(%s::bigint[], %s::text[], %s::bigint[])
            ON CONFLICT (subject_id, level) DO UPDATE SET unit_id = EXCLUDED.unit_id
            """), [[x[0] for x in levels], [x[1] for x in levels],
                   [known.units[(level, after[sid].hierarchy[level])] for sid, level in levels]])
    reassigned = [sid for sid in ids if after[sid].assignees != before[sid].assignees]
    if reassigned:
        pairs = [(sid, known.users[email]) for sid in reassigned for email in after[sid].assignees]
        cur.execute(schema_sql(schema, """
            DELETE FROM {s}.subject_assignees a
            WHERE a.subject_id = ANY(%s)
              AND (a.subject_id, a.user_id) NOT IN (SELECT * FROM unnest(%s::bigint[], %s::bigint[]))
            """), [reassigned, [p[0] for p in pairs], [p[1] for p in pairs]])
        if pairs:
            cur.execute(schema_sql(schema, """
                INSERT INTO {s}.subject_assignees (subject_id, user_id)
                SELECT * FROM unnest(%s::bigint[], %s::bigint[])
                ON CONFLICT DO NOTHING
                """), [[p[0] for p in pairs], [p[1] for p in pairs]])
