"""A dry run: one rule against one subject or event, with nothing claimed. Every step the
engine takes (the rule's state, phase 1's event kind and trigger type, phase 2's subject
kind and metadata, phase 3's conditions, phase 4's filters; for time rules the due date,
each milestone's date and the window today is in) with what it saw and whether it passed,
and the reasons the rule would not fire, in the order the engine meets them. The
conditions are evaluated by domain.conditions.evaluate, the same code the engine runs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from domain.conditions import Facts, LeafTrace, evaluate
from domain.evaluation import EventFacts, metadata_mismatch
from domain.rules import RuleDefinition


@dataclass(frozen=True)
class Check:
    """One step of the engine as the dry run took it."""

    step: str  # what was checked, e.g. "Trigger type"
    passed: bool
    detail: str  # what was seen, in words


@dataclass(frozen=True)
class MilestoneDate:
    """A time rule's milestone: its offset, the local date its window starts and ends (None:
    open-ended), and whether today falls in it."""

    offset: int
    threshold: str
    starts: str
    ends: str | None
    current: bool


@dataclass(frozen=True)
class DryRun:
    rule_name: str
    rule_version: int | None  # None: a definition not saved yet
    against: str  # what it ran against, in words
    checks: list[Check]
    conditions: list[LeafTrace]
    filters: list[LeafTrace]
    milestones: list[MilestoneDate] = field(default_factory=list)

    @property
    def fires(self) -> bool:
        return all(c.passed for c in self.checks)

    @property
    def why_not(self) -> list[str]:
        """Each failed step, in the engine's order: the first one decides."""
        return [f"{c.step}: {c.detail}" for c in self.checks if not c.passed]


def _state(enabled: bool | None) -> Check | None:
    if enabled is None:
        return None
    return Check("Rule state", enabled, "enabled" if enabled else
                 "disabled: a disabled rule is never a candidate; enable it to have it fire")


def _trees(rule: RuleDefinition, values: Mapping[str, object],
           changes: Mapping[str, object]) -> tuple[list[Check], list[LeafTrace], list[LeafTrace]]:
    held, conditions = evaluate(rule.conditions, Facts(values, changes), "conditions")
    passed, filters = evaluate(rule.filters, Facts(values, changes), "filters")
    failed_c = sum(1 for t in conditions if not t.result)
    failed_f = sum(1 for t in filters if not t.result)
    checks = [
        Check("Conditions", held, "hold" if held else
              f"do not hold ({failed_c} of {len(conditions)} false, see below)"),
        Check("Filters", passed, "hold" if passed else
              f"do not hold ({failed_f} of {len(filters)} false, see below)"),
    ]
    return checks, conditions, filters


def product_check(rule: RuleDefinition, product: str) -> Check | None:
    if product == rule.product:
        return None
    return Check("Product", False, f"the subject belongs to {product!r}, the rule watches "
                 f"{rule.product!r}")


def dry_run_event(rule: RuleDefinition, event: EventFacts, stored: Mapping[str, object], *,
                  against: str, product: str, enabled: bool | None = None,
                  version: int | None = None) -> DryRun:
    """An event rule against an event (``stored``: the subject's stored facts the rule
    references, as db.facts loads them)."""
    checks = [c for c in (_state(enabled), product_check(rule, product)) if c is not None]
    if rule.kind == "time":
        checks.append(Check("Rule kind", False, "a time rule is run by the clock's scan on "
                            "dates, never by an event: dry-run it against the event's subject"))
    elif rule.kind != event.event_type:
        checks.append(Check("Event kind", False, f"the event is a {event.event_type} event, the "
                            f"rule answers {rule.kind} events"))
    else:
        checks.append(Check("Event kind", True, event.event_type))
    if rule.kind == "updated" and event.event_type == "updated":
        ok = event.trigger_type in rule.trigger.types
        checks.append(Check("Trigger type", ok, f"{event.trigger_type}" + (
            "" if ok else f", the rule answers {', '.join(rule.trigger.types)}")))
    mismatch = metadata_mismatch(rule, event)
    checks.append(Check("Subject kind and metadata", mismatch is None,
                        mismatch or f"subject kind {event.subject_kind}"
                        + ("" if not rule.trigger.metadata else ", metadata matches")))
    values = {**event.known(), **stored}
    tree_checks, conditions, filters = _trees(rule, values, event.changes)
    return DryRun(rule.name, version, against, checks + tree_checks, conditions, filters)
