"""Subjects written by a person in the portal, for organisations with no host product: the
built-in "manual" product. A person's form becomes the same event JSON a host sends to the
events API, checked by the same parser (domain/events/intake.py), so rules fire the same way
whatever wrote the change.

The form's text fields are read here: assignees as emails separated by commas or lines,
hierarchy and extra fields as ``name = value`` lines; the due date is the field ``due_on``
(a calendar date, as time rules read date facts).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date
from typing import Any

from domain.events.intake import EventIn, InvalidEvents, Problem, parse_event

__all__ = [
    "CLOSED",
    "DUE_FIELD",
    "MANUAL_PRODUCT",
    "ManualSubject",
    "close_event",
    "field_names",
    "manual_event",
    "parse_pairs",
]

MANUAL_PRODUCT = "manual"  # every tenant has it (tenant migration 0042)
DUE_FIELD = "due_on"
CLOSED = "closed"
_SEPARATORS = re.compile(r"[,;\s]+")


@dataclass(frozen=True)
class ManualSubject:
    """What the portal's subject form holds (all text, as typed)."""

    kind: str
    external_id: str
    title: str = ""
    due_on: str = ""
    time_zone: str = ""
    status: str = "open"
    assignees: str = ""
    hierarchy: str = ""
    fields: str = ""


def field_names(form: ManualSubject) -> frozenset[str]:
    """The fields a form sets (the due date included)."""
    try:
        names = set(parse_pairs(form.fields, "fields"))
    except InvalidEvents:
        names = set()
    return frozenset(names | ({DUE_FIELD} if form.due_on.strip() else set()))


def parse_pairs(text: str, what: str) -> dict[str, str]:
    """``name = value`` lines (blank lines ignored)."""
    pairs: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        name, equals, value = line.partition("=")
        if not equals or not name.strip():
            raise InvalidEvents([Problem(f"{what} line {number}", "write each as name = value")])
        pairs[name.strip()] = value.strip()
    return pairs


def manual_event(form: ManualSubject, *, creating: bool, cleared: frozenset[str] = frozenset()) -> EventIn:
    """The form as an event of the manual product: ``created`` for a new subject, otherwise
    ``updated`` (field_changed), where the fields named in ``cleared`` (on the subject, gone
    from the form) are set to null. Every problem is reported at once, as the API does."""
    problems: list[Problem] = []
    fields: dict[str, Any] = {}
    try:
        fields = dict(parse_pairs(form.fields, "fields"))
    except InvalidEvents as error:
        problems += error.problems
    if form.due_on.strip():
        try:
            fields[DUE_FIELD] = date.fromisoformat(form.due_on.strip()).isoformat()
        except ValueError:
            problems.append(Problem(f"subject.fields.{DUE_FIELD}", "must be a date, YYYY-MM-DD"))
    for name in cleared - set(fields):
        fields[name] = None
    hierarchy: dict[str, str] = {}
    try:
        hierarchy = parse_pairs(form.hierarchy, "hierarchy")
    except InvalidEvents as error:
        problems += error.problems
    subject: dict[str, Any] = {
        "kind": form.kind.strip(), "external_id": form.external_id.strip(),
        "status": form.status.strip() or "open",
        "assignees": [a for a in _SEPARATORS.split(form.assignees) if a],
        "hierarchy": hierarchy, "fields": fields,
    }
    if form.title.strip():  # optional, as in the API: an empty one is not sent
        subject["title"] = form.title.strip()
    if form.time_zone.strip():
        subject["time_zone"] = form.time_zone.strip()
    body: dict[str, Any] = {"product": MANUAL_PRODUCT, "type": "created" if creating else "updated",
                            "subject": subject}
    if not creating:
        body["trigger"] = "field_changed"
    event, found = parse_event(body)
    problems += found
    if problems or event is None:
        raise InvalidEvents(problems)
    return event


def close_event(kind: str, external_id: str) -> EventIn:
    event, problems = parse_event({
        "product": MANUAL_PRODUCT, "type": "updated", "trigger": "status_changed",
        "subject": {"kind": kind, "external_id": external_id, "status": CLOSED}})
    if event is None:
        raise InvalidEvents(problems)
    return event
