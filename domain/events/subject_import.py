"""The subjects' kind of CSV import, for the built-in "manual" product (domain/csv_import.py
reads the file). A row is the subject form of domain/events/manual.py in one line, read into
the same event JSON and checked by the same parser as the events API: a row is valid here
exactly when the form with its values would be.

Assignees are emails separated by commas, semicolons or spaces; ``hierarchy`` and ``fields``
hold ``name = value`` pairs separated by semicolons (or line breaks inside the quoted cell).
A subject is matched by its kind and external id: the row says everything about it, so a
field left out of a row that the subject has is cleared, as on the subject's form.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from domain.csv_import import (
    ImportKind,
    ParsedImport,
    RowProblem,
    check_external_id,
    parse_csv,
)
from domain.events.intake import InvalidEvents, Problem
from domain.events.manual import ManualSubject, manual_event, parse_pairs

__all__ = [
    "COLUMNS",
    "REQUIRED",
    "SUBJECTS",
    "SubjectRow",
    "column_of",
    "merged_row",
    "parse_subject_csv",
    "same_subject",
    "subject_key",
    "template_csv",
]

COLUMNS = ("kind", "external_id", "title", "due_on", "time_zone", "status", "assignees",
           "hierarchy", "fields")
REQUIRED = ("kind", "external_id")


@dataclass(frozen=True)
class SubjectRow:
    line: int
    subject: ManualSubject


def subject_key(kind: str, external_id: str) -> str:
    return f"{kind}/{external_id}"


def template_csv() -> str:
    return (",".join(COLUMNS) + "\r\n"
            + "permit,PERMIT-001,Operating permit,2031-06-30,Europe/Paris,open,,,"
              "\"authority = Prefecture; reference = 75-001\"\r\n")


def column_of(problem: Problem) -> tuple[str, str]:
    """The CSV column an intake problem is about, and what to say about it."""
    path = problem.path.removeprefix("subject.")
    for column in ("fields", "hierarchy"):
        if path.startswith(f"{column} line"):
            return column, problem.message
    if path == "fields.due_on":
        return "due_on", problem.message
    head = path.split(".", 1)[0].split("[", 1)[0]
    if head in COLUMNS:
        rest = path[len(head):].lstrip(".")
        if re.fullmatch(r"\[\d+\]", rest):  # the n-th assignee: the message names it
            rest = ""
        return head, f"{rest}: {problem.message}" if rest else problem.message
    return "", problem.message


def _pairs(text: str) -> str:
    return "\n".join(part.strip() for part in text.replace(";", "\n").splitlines() if part.strip())


def _row(line: int, get: Mapping[str, str]) -> SubjectRow | list[RowProblem]:
    found = check_external_id(line, get["external_id"])
    subject = ManualSubject(kind=get["kind"], external_id=get["external_id"], title=get["title"],
                            due_on=get["due_on"], time_zone=get["time_zone"],
                            status=get["status"], assignees=get["assignees"],
                            hierarchy=_pairs(get["hierarchy"]), fields=_pairs(get["fields"]))
    try:
        manual_event(subject, creating=True)
    except InvalidEvents as error:
        for problem in error.problems:
            column, reason = column_of(problem)
            if column != "external_id" or not found:
                found.append(RowProblem(line, column, reason))
    return found or SubjectRow(line, subject)


def merged_row(current: ManualSubject, row: ManualSubject) -> ManualSubject:
    """A row for an existing subject as the subject's form: what the row leaves empty and an
    update cannot take away (the title, time zone, status and hierarchy levels) stays."""
    hierarchy = parse_pairs(current.hierarchy, "hierarchy") | parse_pairs(row.hierarchy, "hierarchy")
    return replace(row, title=row.title or current.title, time_zone=row.time_zone or current.time_zone,
                   status=row.status or current.status,
                   hierarchy="\n".join(f"{k} = {v}" for k, v in sorted(hierarchy.items())))


def _facts(form: ManualSubject) -> tuple[object, ...]:
    s = manual_event(form, creating=True).subject
    return (s.title, s.status, s.time_zone, sorted(s.assignees or ()), dict(s.hierarchy), dict(s.fields))


def same_subject(current: ManualSubject, merged: ManualSubject) -> bool:
    """The row (merged_row) says what the subject holds already: importing it changes nothing."""
    return _facts(current) == _facts(merged)


def _plain(row: SubjectRow) -> dict[str, Any]:
    return {"line": row.line} | asdict(row.subject)


SUBJECTS: ImportKind[SubjectRow] = ImportKind(
    name="subjects", columns=COLUMNS, required=REQUIRED, read=_row,
    key=lambda row: subject_key(row.subject.kind, row.subject.external_id), plain=_plain,
    template=template_csv())


def parse_subject_csv(data: bytes) -> ParsedImport[SubjectRow]:
    return parse_csv(SUBJECTS, data)
