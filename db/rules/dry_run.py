"""The dry-run use case, shared by the rules console and `tocsin rules dry-run`: a saved
rule (its current version) against a subject or an event of the tenant, read in one
transaction and written nowhere: nothing is claimed, no trace is stored."""

from __future__ import annotations

from datetime import date, datetime

from db.events.facts import load_facts, load_subject_facts
from db.platform.tenancy import TenantTx
from db.rules.calendar import load_calendar
from db.rules.definitions import get_rule
from domain.errors import InvalidInput, NotFound
from domain.rules.conditions import WantedFacts
from domain.rules.definitions import RuleDefinition
from domain.rules.dry_run import DryRun, SubjectClock, dry_run_event, dry_run_time
from domain.rules.evaluation import EventFacts
from domain.rules.obligation_dates import local_date

__all__ = ["dry_run_definition", "dry_run_rule"]

_EVENT = """
SELECT e.subject_id, e.event_type, e.trigger_type, e.changes, e.metadata, e.product
FROM events e WHERE e.id = %s
"""


def _subject(tx: TenantTx, subject_id: int) -> tuple[str, dict[str, object]]:
    """The subject's product and its row's facts (subject.kind, status, ...)."""
    row = tx.conn.execute("SELECT product FROM subjects WHERE id = %s", [subject_id]).fetchone()
    if row is None:
        raise NotFound(f"no subject {subject_id}")
    return str(row[0]), load_subject_facts(tx, subject_id)


def _label(facts: dict[str, object], subject_id: int) -> str:
    title = facts.get("subject.title")
    return f"{facts.get('subject.kind')} {facts.get('subject.external_id')}" + \
        (f" · {title}" if title else "") + f" (subject {subject_id})"


def dry_run_rule(tx: TenantTx, rule_id: int, *, subject_id: int | None = None,
                 event_id: int | None = None, as_of: datetime) -> DryRun:
    """Rule ``rule_id`` against an event, or against a subject: for an event rule, as if an
    event of the rule's own kind (and first trigger type) had happened to it, with no
    changes and no metadata. ``as_of`` is the moment a time rule's windows are judged at."""
    if (subject_id is None) == (event_id is None):
        raise InvalidInput("choose a subject or an event to dry-run the rule against")
    rule = get_rule(tx, rule_id)
    return dry_run_definition(tx, rule.definition, subject_id=subject_id, event_id=event_id,
                              as_of=as_of, rule_id=rule.id, enabled=rule.enabled,
                              version=rule.version)


_CLOCK = """
SELECT coalesce(s.time_zone, %s), s.created_at, s.assigned_at, s.status_changed_at
FROM subjects s WHERE s.id = %s
"""

# This rule's claims for the subject: for a due date, those of the date it has now (a moved
# date is a new cycle); for a turnaround, every occurrence (each threshold names its start).
_CLAIMED = """
SELECT threshold, status FROM notification_ledger
WHERE rule = %(rule)s AND subject_kind = 'subject' AND subject_id = %(subject)s
  AND (%(due)s::date IS NULL OR due_on = %(due)s::date)
"""


def _time_dry_run(tx: TenantTx, definition: RuleDefinition, subject_id: int, *,
                  as_of: datetime, rule_id: int | None, enabled: bool | None,
                  version: int | None) -> DryRun:
    product, subject_facts = _subject(tx, subject_id)
    row = tx.conn.execute(_CLOCK, [tx.tenant.time_zone, subject_id]).fetchone()
    assert row is not None
    zone, created_at, assigned_at, status_changed_at = row
    clock = SubjectClock(str(zone), local_date(as_of, str(zone)), as_of, created_at,  # type: ignore[arg-type]
                         assigned_at, status_changed_at)  # type: ignore[arg-type]
    wanted = definition.condition_facts().union(definition.filter_facts())
    if definition.trigger.due is not None:
        wanted = wanted.union(WantedFacts.of({definition.trigger.due.fact}))
    stored = load_facts(tx, subject_id, wanted)
    claimed: dict[str, str] = {}
    if rule_id is not None:
        due = stored.get(definition.trigger.due.fact) if definition.trigger.due else None
        if definition.trigger.due is None or _is_date(due):
            claimed = {str(t): str(s) for t, s in tx.conn.execute(
                _CLAIMED, {"rule": f"rule:{rule_id}", "subject": subject_id, "due": due})}
    return dry_run_time(definition, subject_facts, stored, clock=clock,
                        calendar=load_calendar(tx), against=_label(subject_facts, subject_id),
                        product=product, claimed=claimed, enabled=enabled, version=version)


def _is_date(value: object) -> bool:
    try:
        return isinstance(value, str) and len(value) == 10 and bool(date.fromisoformat(value))
    except ValueError:
        return False


def dry_run_definition(tx: TenantTx, definition: RuleDefinition, *, subject_id: int | None,
                       event_id: int | None, as_of: datetime, rule_id: int | None = None,
                       enabled: bool | None = None, version: int | None = None) -> DryRun:
    if definition.kind == "time":
        if event_id is not None:  # a time rule watches the event's subject, not the event
            row = tx.conn.execute(_EVENT, [event_id]).fetchone()
            if row is None:
                raise NotFound(f"no event {event_id}")
            subject_id = int(str(row[0]))
        assert subject_id is not None
        return _time_dry_run(tx, definition, subject_id, as_of=as_of, rule_id=rule_id,
                             enabled=enabled, version=version)
    if event_id is not None:
        row = tx.conn.execute(_EVENT, [event_id]).fetchone()
        if row is None:
            raise NotFound(f"no event {event_id}")
        sid, event_type, trigger_type, changes, metadata, product = row
        subject_id = int(str(sid))
        _, subject_facts = _subject(tx, subject_id)
        event = EventFacts(str(event_type), None if trigger_type is None else str(trigger_type),
                           str(subject_facts.get("subject.kind")),
                           dict(metadata or {}), dict(changes or {}),  # type: ignore[call-overload]
                           subject_facts)
        against = f"event {event_id} ({(trigger_type or event_type)}) of " \
                  f"{_label(subject_facts, subject_id)}"
    else:
        assert subject_id is not None
        product, subject_facts = _subject(tx, subject_id)
        kind = definition.kind if definition.kind in ("created", "updated") else "created"
        trigger = definition.trigger.types[0] if kind == "updated" and definition.trigger.types \
            else None
        event = EventFacts(kind, trigger, str(subject_facts.get("subject.kind")), {}, {},
                           subject_facts)
        against = f"{_label(subject_facts, subject_id)}, as if it had just been " \
                  f"{'created' if kind == 'created' else 'updated (' + str(trigger) + ')'}"
    stored = load_facts(tx, subject_id, definition.condition_facts().union(definition.filter_facts()))
    return dry_run_event(definition, event, stored, against=against, product=str(product),
                         enabled=enabled, version=version)
