"""Importing subjects of the built-in "manual" product from a CSV file (the engine:
db/platform/imports.py). Every row goes through the same intake as the events API, as a
subject saved on its form does (db/events/manual_subjects.py): a new subject is a ``created``
event, a changed one an ``updated`` event, recorded in the outbox, so rules fire the same way
whatever wrote the change. A row that says what the subject holds already records nothing:
the same file again changes nothing.

A closed subject can no longer be changed: a row that would change one is reported."""

from __future__ import annotations

from typing import Any

from psycopg.rows import tuple_row

from db.events.manual_subjects import manual_subject_forms
from db.events.outbox import record_events
from db.events.subjects import check_events
from db.platform.imports import ImportWriter
from db.platform.tenancy import TenantTx
from domain.csv_import import RowProblem
from domain.errors import InvalidInput
from domain.events.intake import EventIn, InvalidEvents, Problem
from domain.events.manual import CLOSED, ManualSubject, field_names, manual_event
from domain.events.subject_import import SUBJECTS, SubjectRow, column_of, merged_row, same_subject

__all__ = ["SUBJECT_IMPORT"]


def _check(tx: TenantTx, rows: list[SubjectRow]) -> list[RowProblem]:
    """Rows that would change a closed subject, and the register's own checks (assignees
    and hierarchy units unknown to the tenant), before anything is written."""
    current = manual_subject_forms(tx, [(r.subject.kind, r.subject.external_id) for r in rows])
    problems: list[RowProblem] = []
    events: list[EventIn] = []
    lines: list[int] = []
    for row in rows:
        found = current.get((row.subject.kind, row.subject.external_id))
        if found is not None and found.status == CLOSED \
                and not same_subject(found, merged_row(found, row.subject)):
            problems.append(RowProblem(row.line, "external_id",
                                       f"{row.subject.kind} {row.subject.external_id} is closed: it "
                                       "can no longer be changed"))
            continue
        events.append(manual_event(row.subject, creating=True))
        lines.append(row.line)
    try:
        with tx.conn.cursor(row_factory=tuple_row) as cur:
            check_events(cur, tx.tenant.schema, events, [f"{n}:" for n in range(len(events))])
    except InvalidEvents as error:
        for problem in error.problems:
            n, _, path = problem.path.partition(":")
            column, reason = column_of(Problem(path, problem.message))
            problems.append(RowProblem(lines[int(n)], column, reason))
    return problems


def _write(tx: TenantTx, chunk: list[dict[str, Any]], by: str) -> tuple[int, int]:
    del by  # the events' source is the portal; the run's actor is on its audit row
    forms = [ManualSubject(**{k: str(v) for k, v in row.items() if k != "line"}) for row in chunk]
    current = manual_subject_forms(tx, [(f.kind, f.external_id) for f in forms])
    events: list[EventIn] = []
    created = updated = 0
    for form in forms:
        found = current.get((form.kind, form.external_id))
        if found is None:
            events.append(manual_event(form, creating=True))
            created += 1
            continue
        merged = merged_row(found, form)
        if same_subject(found, merged):
            continue
        if found.status == CLOSED:
            raise InvalidInput(f"{form.kind} {form.external_id} was closed since the upload was "
                               "checked: upload the file again")
        events.append(manual_event(merged, creating=False,
                                   cleared=field_names(found) - field_names(merged)))
        updated += 1
    record_events(tx, events, "portal")
    return created, updated


SUBJECT_IMPORT: ImportWriter[SubjectRow] = ImportWriter(
    kind=SUBJECTS, upload_action="subject_import.upload", run_action="subject.import",
    check=_check, write=_write)
