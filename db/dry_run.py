"""The dry-run use case, shared by the rules console and `tocsin rules dry-run`: a saved
rule (its current version) against a subject or an event of the tenant, read in one
transaction and written nowhere: nothing is claimed, no trace is stored."""

from __future__ import annotations

from datetime import datetime

from db.facts import load_facts, load_subject_facts
from db.rules import get_rule
from db.tenancy import TenantTx
from domain.dry_run import DryRun, dry_run_event
from domain.errors import InvalidInput, NotFound
from domain.evaluation import EventFacts
from domain.rules import RuleDefinition

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
                              as_of=as_of, enabled=rule.enabled, version=rule.version)


def dry_run_definition(tx: TenantTx, definition: RuleDefinition, *, subject_id: int | None,
                       event_id: int | None, as_of: datetime, enabled: bool | None = None,
                       version: int | None = None) -> DryRun:
    del as_of  # judged by time rules only
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
