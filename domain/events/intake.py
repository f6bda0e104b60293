"""Events coming in: the JSON a host sends (the events API's body, `record_event`'s
argument) read into values, every problem named by its path, and the subject register's
diff that gives an update event its changes.

Fact names are the shared vocabulary of the rules: ``field.<name>``, ``form.<form>.<field>``,
``hierarchy.<level>``, ``subject.status``, ``subject.title``, ``subject.assignees``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from domain.errors import InvalidInput
from domain.events.json_input import NUMBER_WORDS, is_finite_number
from domain.people.identity import parse_instant, valid_email, valid_zone

__all__ = [
    "ASSIGNEES_LIMIT",
    "BATCH_LIMIT",
    "CODE",
    "EVENT_TYPES",
    "FACTS_LIMIT",
    "NAME",
    "NUL",
    "NUL_REFUSED",
    "TEXT_LIMIT",
    "TRIGGER",
    "VALUE_DEPTH_LIMIT",
    "VALUE_LIMIT",
    "EventIn",
    "IdempotencyKeyReused",
    "InvalidEvents",
    "JsonValue",
    "Problem",
    "SubjectIn",
    "SubjectState",
    "apply_event",
    "parse_batch",
    "parse_event",
]

EVENT_TYPES = ("created", "updated")
BATCH_LIMIT = 500  # events in one batch request
ASSIGNEES_LIMIT = 100  # assignees of one subject
FACTS_LIMIT = 500  # fields, form answers or hierarchy levels set by one event
TEXT_LIMIT = 500  # characters of a title or a status
VALUE_LIMIT = 10_000  # characters of one fact value, encoded as JSON
VALUE_DEPTH_LIMIT = 16  # arrays and objects nested in one fact, change or metadata value

CODE = re.compile(r"^[a-z][a-z0-9_]{0,31}$")  # products, kinds, hierarchy levels (as the schema)
TRIGGER = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
# Field and form names become part of a fact name (form.<form>.<field>): no dots in them.
NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

_EVENT_KEYS = frozenset({"product", "type", "trigger", "occurred_at", "subject", "changes", "metadata"})
_SUBJECT_KEYS = frozenset({"kind", "external_id", "title", "time_zone", "status", "assignees",
                           "hierarchy", "fields", "forms"})

JsonValue = Any  # what json.loads returns
# PostgreSQL's text and jsonb cannot hold the NUL character: refused here, with its path,
# rather than failing the statement that would store it.
NUL = "\x00"
NUL_REFUSED = "must not contain the NUL character (\\u0000)"


@dataclass(frozen=True)
class Problem:
    path: str  # where in the body: "events[3].subject.assignees[0]"
    message: str

    def as_json(self) -> dict[str, str]:
        return {"path": self.path, "message": self.message}


class InvalidEvents(InvalidInput):
    """One or more events cannot be recorded; every problem is listed with its path, and
    nothing has been written."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        first = problems[0] if problems else Problem("", "invalid event")
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        super().__init__(f"{first.path}: {first.message}{more}")


class IdempotencyKeyReused(InvalidInput):
    """The Idempotency-Key answered a different request body before."""


@dataclass(frozen=True)
class SubjectIn:
    kind: str
    external_id: str
    title: str | None = None
    time_zone: str | None = None
    status: str | None = None
    assignees: tuple[str, ...] | None = None  # replaces the assignees when given
    hierarchy: Mapping[str, str] = field(default_factory=dict)  # level -> unit code
    fields: Mapping[str, JsonValue] = field(default_factory=dict)
    forms: Mapping[tuple[str, str], JsonValue] = field(default_factory=dict)  # (form, field)


@dataclass(frozen=True)
class EventIn:
    product: str
    event_type: str
    trigger_type: str | None
    occurred_at: datetime | None  # None: when it is recorded
    subject: SubjectIn
    changes: Mapping[str, Mapping[str, JsonValue]] = field(default_factory=dict)
    metadata: Mapping[str, JsonValue] = field(default_factory=dict)

    @property
    def subject_key(self) -> tuple[str, str, str]:
        return (self.product, self.subject.kind, self.subject.external_id)


# -- reading the JSON ----------------------------------------------------------------------


class _Reader:
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.problems: list[Problem] = []

    def fail(self, path: str, message: str) -> None:
        self.problems.append(Problem(f"{self.prefix}{path}", message))

    def failed_at(self, path: str) -> bool:
        return any(p.path == f"{self.prefix}{path}" for p in self.problems)

    def text(self, obj: Mapping[str, Any], key: str, path: str, *, pattern: re.Pattern[str] | None = None,
             limit: int = TEXT_LIMIT, required: bool = False) -> str | None:
        if key not in obj or obj[key] is None:
            if required:
                self.fail(f"{path}{key}", "is required")
            return None
        value = obj[key]
        if not isinstance(value, str):
            self.fail(f"{path}{key}", f"must be a string, not {_json_type(value)}")
            return None
        if NUL in value:
            self.fail(f"{path}{key}", NUL_REFUSED)
            return None
        if pattern is not None and not pattern.fullmatch(value):
            self.fail(f"{path}{key}", f"{value[:60]!r} must match {pattern.pattern}")
            return None
        if not value.strip() or len(value) > limit:
            self.fail(f"{path}{key}", f"must be 1 to {limit} characters")
            return None
        return value

    def mapping(self, obj: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any]:
        value = obj.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.fail(f"{path}{key}", f"must be an object, not {_json_type(value)}")
            return {}
        if len(value) > FACTS_LIMIT:
            self.fail(f"{path}{key}", f"may hold at most {FACTS_LIMIT} entries")
            return {}
        return value

    def unknown_keys(self, obj: Mapping[str, Any], allowed: frozenset[str], path: str) -> None:
        for key in sorted(set(obj) - allowed):
            self.fail(f"{path}{key}",
                      f"is not a known property (expected one of {', '.join(sorted(allowed))})")

    def value(self, value: JsonValue, path: str) -> JsonValue:
        # A host calling record_event may hand in any Python object: only what JSON holds is
        # stored (a Decimal or a date would be written as a string and compare unequal later).
        problem = _json_problem(value, path)
        if problem is not None:
            self.fail(*problem)
        elif len(repr(value)) > VALUE_LIMIT:
            self.fail(path, f"is larger than {VALUE_LIMIT} characters")
        return value


_NOT_JSON = ("must be a JSON value (string, number, boolean, null, array, object) "
             "without the NUL character, not {}")


def _json_problem(value: object, path: str) -> tuple[str, str] | None:
    """The first thing that keeps a value from being stored and compared, at its own path:
    a type JSON has not, the NUL character, a number no double holds (it would poison every
    comparison of the subject), nesting deeper than VALUE_DEPTH_LIMIT. Walked without
    recursion, so a value nested thousands deep costs no stack."""
    pending: list[tuple[object, str, int]] = [(value, path, 0)]
    while pending:
        item, at, depth = pending.pop()
        if isinstance(item, str):
            if NUL in item:
                return at, NUL_REFUSED
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int | float):
            if not is_finite_number(item):
                return at, NUMBER_WORDS
        elif isinstance(item, list | dict):
            if depth >= VALUE_DEPTH_LIMIT:
                return at, f"nests arrays and objects more than {VALUE_DEPTH_LIMIT} deep"
            if isinstance(item, list):
                pending.extend((v, f"{at}[{n}]", depth + 1) for n, v in enumerate(item))
                continue
            for key, v in item.items():
                if not isinstance(key, str) or NUL in key:
                    return at, _NOT_JSON.format("an object with a key that is not a string")
                pending.append((v, f"{at}.{key[:40]}", depth + 1))
        else:
            return at, _NOT_JSON.format(type(item).__name__)
    return None


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def parse_event(body: object, prefix: str = "") -> tuple[EventIn | None, list[Problem]]:
    """One event from its JSON, or every problem found in it (paths start with ``prefix``)."""
    r = _Reader(prefix)
    if not isinstance(body, dict):
        where = prefix.rstrip(".") or "$"
        return None, [Problem(where, f"an event must be a JSON object, not {_json_type(body)}")]
    r.unknown_keys(body, _EVENT_KEYS, "")
    product = r.text(body, "product", "", pattern=CODE, required=True)
    event_type = r.text(body, "type", "", required=True)
    if event_type is not None and event_type not in EVENT_TYPES:
        r.fail("type", f"must be one of {', '.join(EVENT_TYPES)}, not {event_type[:40]!r}")
    trigger = r.text(body, "trigger", "", pattern=TRIGGER)
    if event_type == "updated" and trigger is None and not r.failed_at("trigger"):
        r.fail("trigger", "is required for an update (e.g. field_changed, status_changed, assigned)")
    if event_type == "created" and "trigger" in body:
        r.fail("trigger", "is for updates only: a created event has no trigger")
    occurred_at = None
    raw_at = r.text(body, "occurred_at", "")
    if raw_at is not None:
        try:
            occurred_at = parse_instant(raw_at)
        except InvalidInput as error:
            r.fail("occurred_at", str(error))
    subject = _subject(r, body.get("subject"))
    changes = _changes(r, r.mapping(body, "changes", ""))
    metadata = {key: r.value(value, f"metadata.{key}")
                for key, value in r.mapping(body, "metadata", "").items()}
    for key in metadata:
        if NUL in key:
            r.fail(f"metadata.{key[:40]}", NUL_REFUSED)
    if r.problems or product is None or event_type is None or subject is None:
        return None, r.problems
    return EventIn(product, event_type, trigger if event_type == "updated" else None, occurred_at,
                   subject, changes, metadata), []


def _subject(r: _Reader, body: object) -> SubjectIn | None:
    if body is None:
        r.fail("subject", "is required")
        return None
    if not isinstance(body, dict):
        r.fail("subject", f"must be an object, not {_json_type(body)}")
        return None
    p = "subject."
    r.unknown_keys(body, _SUBJECT_KEYS, p)
    kind = r.text(body, "kind", p, pattern=CODE, required=True)
    external_id = r.text(body, "external_id", p, limit=200, required=True)
    title = r.text(body, "title", p)
    status = r.text(body, "status", p, limit=64)
    zone = r.text(body, "time_zone", p, limit=64)
    if zone is not None:
        try:
            zone = valid_zone(zone)
        except InvalidInput as error:
            r.fail("subject.time_zone", str(error))
    assignees = _assignees(r, body)
    hierarchy: dict[str, str] = {}
    for level, code in r.mapping(body, "hierarchy", p).items():
        if not CODE.fullmatch(level):
            r.fail(f"subject.hierarchy.{level[:40]}", f"a level must match {CODE.pattern}")
        elif not isinstance(code, str) or not code or len(code) > 200 or NUL in code:
            r.fail(f"subject.hierarchy.{level}", "must be the code of a unit of that level (a string)")
        else:
            hierarchy[level] = code
    fields: dict[str, JsonValue] = {}
    for name, value in r.mapping(body, "fields", p).items():
        if not NAME.fullmatch(name):
            r.fail(f"subject.fields.{name[:40]}", f"a field name must match {NAME.pattern}")
        else:
            fields[name] = r.value(value, f"subject.fields.{name}")
    forms: dict[tuple[str, str], JsonValue] = {}
    for form in r.mapping(body, "forms", p):
        if not NAME.fullmatch(form):
            r.fail(f"subject.forms.{form[:40]}", f"a form name must match {NAME.pattern}")
            continue
        for name, value in r.mapping(body["forms"], form, "subject.forms.").items():
            if not NAME.fullmatch(name):
                r.fail(f"subject.forms.{form}.{name[:40]}", f"a form field must match {NAME.pattern}")
            else:
                forms[(form, name)] = r.value(value, f"subject.forms.{form}.{name}")
    if kind is None or external_id is None:
        return None
    return SubjectIn(kind, external_id, title, zone, status, assignees, hierarchy, fields, forms)


def _assignees(r: _Reader, body: Mapping[str, Any]) -> tuple[str, ...] | None:
    raw = body.get("assignees")
    if raw is None:
        return None
    if not isinstance(raw, list):
        r.fail("subject.assignees", f"must be an array of email addresses, not {_json_type(raw)}")
        return None
    if len(raw) > ASSIGNEES_LIMIT:
        r.fail("subject.assignees", f"may hold at most {ASSIGNEES_LIMIT} addresses")
        return None
    emails: set[str] = set()
    for n, item in enumerate(raw):
        try:
            emails.add(valid_email(item) if isinstance(item, str) else valid_email(""))
        except InvalidInput:
            r.fail(f"subject.assignees[{n}]", f"{str(item)[:60]!r} is not an email address")
    return tuple(sorted(emails))


def _changes(r: _Reader, raw: Mapping[str, Any]) -> dict[str, dict[str, JsonValue]]:
    changes: dict[str, dict[str, JsonValue]] = {}
    for fact, change in raw.items():
        if not isinstance(change, dict) or not set(change) <= {"from", "to"} or not change:
            r.fail(f"changes.{fact[:60]}", 'must be an object {"from": ..., "to": ...}')
        elif len(fact) > 200 or NUL in fact:
            r.fail(f"changes.{fact[:60]}", "a fact name is 1 to 200 characters, without NUL")
        else:
            changes[fact] = {"from": r.value(change.get("from"), f"changes.{fact}.from"),
                             "to": r.value(change.get("to"), f"changes.{fact}.to")}
    return changes


def parse_batch(body: object) -> tuple[list[EventIn], list[Problem]]:
    """The events of a batch body ``{"events": [...]}``: all of them, or every problem of
    every event (so one answer lists each invalid index)."""
    if not isinstance(body, dict) or set(body) != {"events"}:
        return [], [Problem("$", 'a batch must be an object {"events": [...]} and nothing else')]
    raw = body["events"]
    if not isinstance(raw, list) or not raw:
        return [], [Problem("events", "must be a non-empty array of events")]
    if len(raw) > BATCH_LIMIT:
        return [], [Problem("events", f"may hold at most {BATCH_LIMIT} events, not {len(raw)}")]
    events: list[EventIn] = []
    problems: list[Problem] = []
    for index, item in enumerate(raw):
        event, found = parse_event(item, f"events[{index}].")
        problems += found
        if event is not None:
            events.append(event)
    return events, problems


# -- the register's diff -------------------------------------------------------------------


@dataclass(frozen=True)
class SubjectState:
    """What the register holds of one subject, for the facts a batch touches."""

    title: str = ""
    status: str = "open"
    time_zone: str | None = None
    assignees: tuple[str, ...] = ()  # sorted emails
    fields: Mapping[str, JsonValue] = field(default_factory=dict)
    forms: Mapping[tuple[str, str], JsonValue] = field(default_factory=dict)
    hierarchy: Mapping[str, str] = field(default_factory=dict)  # level -> unit code


def apply_event(state: SubjectState, event: EventIn) -> tuple[SubjectState, dict[str, dict[str, JsonValue]]]:
    """The subject after the event, and the event's changes: for an update, every fact the
    event sets whose value differs (explicit changes the host sent are kept, the register's
    diff wins where both name a fact); for a creation, what the host sent."""
    s = event.subject
    # Built directly, and a family merged only when the event sets some of it: this runs for
    # every event of every batch.
    fields = {**state.fields, **s.fields} if s.fields else state.fields
    forms = {**state.forms, **s.forms} if s.forms else state.forms
    hierarchy = {**state.hierarchy, **s.hierarchy} if s.hierarchy else state.hierarchy
    after = SubjectState(
        title=state.title if s.title is None else s.title,
        status=state.status if s.status is None else s.status,
        time_zone=state.time_zone if s.time_zone is None else s.time_zone,
        assignees=state.assignees if s.assignees is None else s.assignees,
        fields=fields, forms=forms, hierarchy=hierarchy,
    )
    changes = {fact: dict(change) for fact, change in event.changes.items()}
    if event.event_type != "updated":
        return after, changes
    diff: list[tuple[str, JsonValue, JsonValue]] = [
        ("subject.title", state.title, after.title),
        ("subject.status", state.status, after.status),
        ("subject.assignees", list(state.assignees), list(after.assignees)),
    ]
    diff += [(f"field.{name}", state.fields.get(name), fields[name]) for name in s.fields]
    diff += [(f"form.{form}.{name}", state.forms.get((form, name)), forms[(form, name)])
             for form, name in s.forms]
    diff += [(f"hierarchy.{level}", state.hierarchy.get(level), hierarchy[level]) for level in s.hierarchy]
    for fact, before, now in diff:
        if before != now or type(before) is not type(now):
            changes[fact] = {"from": before, "to": now}
    return after, changes
