"""A dry run: one rule against one subject or event, with nothing claimed. Every step the
engine takes (the rule's state, phase 1's event kind and trigger type, phase 2's subject
kind and metadata, phase 3's conditions, phase 4's filters; for time rules the due date,
each milestone's date and the window today is in) with what it saw and whether it passed,
and the reasons the rule would not fire, in the order the engine meets them. The
conditions are evaluated by domain.rules.conditions.evaluate, the same code the engine runs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from zoneinfo import ZoneInfo

from domain.rules.conditions import Facts, LeafTrace, evaluate
from domain.rules.definitions import RuleDefinition
from domain.rules.evaluation import EventFacts, metadata_mismatch
from domain.rules.obligation_dates import (
    Calendar,
    DueDate,
    Turnaround,
    breach_at,
    milestones,
    next_milestone,
    threshold_of,
    turnaround_threshold,
)

__all__ = [
    "Check",
    "DryRun",
    "MilestoneDate",
    "SubjectClock",
    "dry_run_event",
    "dry_run_time",
    "product_check",
]


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
    references, as db.events.facts loads them)."""
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


@dataclass(frozen=True)
class SubjectClock:
    """What a time rule reads of the subject besides its facts: its local today (in the
    subject's zone, else the tenant's), and its system timestamps (TAT starts)."""

    zone: str
    today: date
    as_of: datetime
    created_at: datetime
    assigned_at: datetime | None
    status_changed_at: datetime


def _due_checks(due: DueDate, value: object, clock: SubjectClock, cal: Calendar,
                claimed: Mapping[str, str]) -> tuple[list[Check], list[MilestoneDate]]:
    if value is None:
        return [Check("Due date", False, f"the subject has no {due.fact}")], []
    day = _iso(value)
    if day is None:
        return [Check("Due date", False, f"{due.fact} holds {value!r}, not a date YYYY-MM-DD")], []
    counting = "working days" if due.business_days else "days"
    checks = [Check("Due date", True, f"{due.fact} is {day.isoformat()}; offsets "
                    f"{', '.join(threshold_of(o).removeprefix('offset:') for o in due.offsets)} "
                    f"{counting}")]
    current = next_milestone(day, due.offsets, due.business_days, cal, clock.today)
    plan = milestones(day, due.offsets, due.business_days, cal)
    dates = [MilestoneDate(m.offset, m.threshold, m.starts.isoformat(),
                           None if m.ends is None else m.ends.isoformat(),
                           current is not None and m == current and m.starts <= clock.today)
             for m in plan]
    today = f"today is {clock.today.isoformat()} in {clock.zone}"
    if current is None or current.starts > clock.today:
        first = current or plan[0]
        checks.append(Check("Window", False, f"{today}: no window has begun; the next, offset "
                            f"{first.threshold.removeprefix('offset:')}, begins "
                            f"{first.starts.isoformat()}"))
        return checks, dates
    label = current.threshold.removeprefix("offset:")
    span = f"{current.starts.isoformat()} to " + \
        (f"{current.ends.isoformat()} (exclusive)" if current.ends else "open-ended")
    checks.append(Check("Window", True, f"{today}: inside the window of offset {label}, {span}"))
    status = claimed.get(current.threshold)
    if status is not None:
        checks.append(Check("Ledger", False, f"offset {label} of due date {day.isoformat()} is "
                            f"claimed already ({status}): each is sent once"))
    return checks, dates


def _turnaround_checks(tat: Turnaround, clock: SubjectClock, cal: Calendar,
                       claimed: Mapping[str, str]) -> list[Check]:
    start = {"created": clock.created_at, "assigned": clock.assigned_at,
             "status_changed": clock.status_changed_at}[tat.after]
    if start is None:
        return [Check("Turnaround", False, f"the subject has no {tat.after.replace('_', ' ')} "
                      "time (never assigned)")]
    breach = breach_at(start, tat, cal, clock.zone)
    amount = f"{tat.hours} hours" if tat.hours is not None else \
        f"{tat.days} {'working ' if tat.business_days else ''}days"
    local = breach.astimezone(ZoneInfo(clock.zone))
    if clock.as_of < breach:
        return [Check("Turnaround", False, f"{amount} after {tat.after.replace('_', ' ')} "
                      f"({start.astimezone(ZoneInfo(clock.zone)):%Y-%m-%d %H:%M}): breached at "
                      f"{local:%Y-%m-%d %H:%M} {clock.zone}, not yet")]
    checks = [Check("Turnaround", True, f"breached at {local:%Y-%m-%d %H:%M} {clock.zone}, "
                    f"{amount} after {tat.after.replace('_', ' ')}")]
    status = claimed.get(turnaround_threshold(tat.after, start))
    if status is not None:
        checks.append(Check("Ledger", False, f"this breach is claimed already ({status}): "
                            "each occurrence is sent once"))
    return checks


def _iso(value: object) -> date | None:
    if not isinstance(value, str) or len(value) != 10:
        return None
    try:
        return date.fromisoformat(value)
    except ValueError:
        return None


def dry_run_time(rule: RuleDefinition, subject: Mapping[str, object],
                 stored: Mapping[str, object], *, clock: SubjectClock, calendar: Calendar,
                 against: str, product: str, claimed: Mapping[str, str] | None = None,
                 enabled: bool | None = None, version: int | None = None) -> DryRun:
    """A time rule against a subject, as the clock's scan would judge it at
    ``clock.as_of``: the due date's milestones (domain.rules.obligation_dates) and the window today is
    in, or the turnaround's breach, then the conditions ("while this still holds") and the
    filters. ``claimed``: this rule's ledger claims for the subject, threshold -> status."""
    checks = [c for c in (_state(enabled), product_check(rule, product)) if c is not None]
    kind, wanted = subject.get("subject.kind"), rule.trigger.subject_kind
    checks.append(Check("Subject kind", wanted is None or kind == wanted,
                        f"{kind}" + ("" if wanted is None or kind == wanted else
                                     f", the rule wants {wanted}")))
    dates: list[MilestoneDate] = []
    if rule.trigger.due is not None:
        due_checks, dates = _due_checks(rule.trigger.due, stored.get(rule.trigger.due.fact),
                                        clock, calendar, claimed or {})
        checks += due_checks
    elif rule.trigger.turnaround is not None:
        checks += _turnaround_checks(rule.trigger.turnaround, clock, calendar, claimed or {})
    tree_checks, conditions, filters = _trees(rule, {**subject, **stored}, {})
    return DryRun(rule.name, version, against, checks + tree_checks, conditions, filters, dates)
