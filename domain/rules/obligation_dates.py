"""Obligations: due dates watched by time-trigger rules, as windows of local calendar dates.

A time rule names a date fact (the due date) and offsets in days around it, e.g.
-30, -7, -1, 0. Offset i's window is ``[date(o_i), date(o_{i+1}))`` of the subject's local
calendar dates; the last window is open-ended. ``date(o)`` is the due date plus ``o`` days,
or ``o`` working days of the tenant's calendar when the rule counts business days (0 is the
due date itself, whatever day it falls on). A milestone is *due* while the subject's local
today is inside its window, so a missed scan heals on the next one; once the next window has
begun it is *skipped*: recorded, never sent late. Windows are whole days, so a
daylight-saving change cannot make one fire twice (the licence cadence works the same way,
domain/notices/licence.py).

Turnaround (TAT) rules instead watch a system timestamp (created, assigned, last status
change) and breach N hours, N days or N working days after it, once per occurrence.

The scan asks the windows the other way round (``latest_due_begun``): for a local today and
an offset, the latest due date whose window has begun. That turns every window test into a
comparison of the due date with a bound computed here once per scan, so the SQL stays
set-based whatever the calendar.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Literal
from zoneinfo import ZoneInfo

from domain.errors import InvalidInput

__all__ = [
    "DEFAULT_WORKING_DAYS",
    "ISO_DAYS",
    "MAX_HOLIDAYS",
    "MAX_OFFSET",
    "MAX_OFFSETS",
    "MAX_TURNAROUND_DAYS",
    "MAX_TURNAROUND_HOURS",
    "SKIPPED_REASON",
    "TURNAROUND_AFTER",
    "Calendar",
    "DueDate",
    "Milestone",
    "Outcome",
    "Turnaround",
    "WindowBound",
    "breach_at",
    "due_context",
    "latest_due_begun",
    "local_date",
    "milestones",
    "next_milestone",
    "offset_of",
    "outcomes_on",
    "possible_todays",
    "shift",
    "threshold_of",
    "turnaround_threshold",
    "window_bounds",
]

ISO_DAYS = frozenset(range(1, 8))  # ISO weekdays: 1 = Monday .. 7 = Sunday
DEFAULT_WORKING_DAYS = frozenset({1, 2, 3, 4, 5})
MAX_HOLIDAYS = 1000  # holiday dates one tenant calendar may hold
MAX_OFFSET = 365  # days (or working days) before or after a due date
MAX_OFFSETS = 12  # offsets of one rule
MAX_TURNAROUND_HOURS = 365 * 24  # hours
MAX_TURNAROUND_DAYS = 365  # days
TURNAROUND_AFTER = ("created", "assigned", "status_changed")
SKIPPED_REASON = "a later milestone's window had begun"

Outcome = Literal["due", "skipped"]


@dataclass(frozen=True)
class Calendar:
    """A tenant's working week and holiday dates (business-day offsets count against it)."""

    working_days: frozenset[int] = DEFAULT_WORKING_DAYS
    holidays: frozenset[date] = frozenset()

    def __post_init__(self) -> None:
        if not self.working_days or not self.working_days <= ISO_DAYS:
            raise InvalidInput("working days are ISO weekdays 1 (Monday) to 7 (Sunday), at least one")
        if len(self.holidays) > MAX_HOLIDAYS:
            raise InvalidInput(f"a calendar holds at most {MAX_HOLIDAYS} holidays")

    @staticmethod
    def default() -> Calendar:
        return Calendar()

    @staticmethod
    def of(working_days: Iterable[int], holidays: Iterable[date]) -> Calendar:
        return Calendar(frozenset(int(d) for d in working_days), frozenset(holidays))

    def is_working(self, day: date) -> bool:
        return day.isoweekday() in self.working_days and day not in self.holidays


def shift(due: date, offset: int, business_days: bool, cal: Calendar) -> date:
    """The date ``offset`` days (or working days) from ``due``; 0 is ``due`` itself."""
    if not business_days or offset == 0:
        return due + timedelta(days=offset)
    step = timedelta(days=1 if offset > 0 else -1)
    day, left = due, abs(offset)
    while left:
        day += step
        if cal.is_working(day):
            left -= 1
    return day


def threshold_of(offset: int) -> str:
    """The ledger threshold of an offset: 'offset:-30', 'offset:0', 'offset:+7'."""
    return f"offset:{offset:+d}" if offset else "offset:0"


def offset_of(threshold: str) -> int | None:
    """The offset a ledger threshold names, or None when it is not an offset's."""
    if not threshold.startswith("offset:"):
        return None
    try:
        return int(threshold.removeprefix("offset:"))
    except ValueError:
        return None


@dataclass(frozen=True)
class Milestone:
    offset: int
    threshold: str
    starts: date  # first local date of the window
    ends: date | None  # first local date after it; None for the last (open-ended)


def milestones(due: date, offsets: Sequence[int], business_days: bool, cal: Calendar) -> list[Milestone]:
    """The windows of every offset, in ascending order."""
    ordered = sorted(set(offsets))
    starts = [shift(due, o, business_days, cal) for o in ordered]
    ends: list[date | None] = [*starts[1:], None]
    return [Milestone(o, threshold_of(o), s, e) for o, s, e in zip(ordered, starts, ends, strict=True)]


def outcomes_on(due: date, offsets: Sequence[int], business_days: bool, cal: Calendar,
                today: date) -> list[tuple[Milestone, Outcome]]:
    """Every milestone whose window has begun by ``today``: due if today is inside it,
    skipped if the next window has begun."""
    out: list[tuple[Milestone, Outcome]] = []
    for m in milestones(due, offsets, business_days, cal):
        if m.starts <= today:
            out.append((m, "skipped" if m.ends is not None and today >= m.ends else "due"))
    return out


def next_milestone(due: date, offsets: Sequence[int], business_days: bool, cal: Calendar,
                   today: date) -> Milestone | None:
    """The milestone whose window holds ``today``, else the next to begin (None: none left,
    which cannot happen while the last window is open-ended and offsets exist)."""
    for m in milestones(due, offsets, business_days, cal):
        if m.ends is None or today < m.ends:
            return m
    return None


def due_context(due: date, offset: int, business_days: bool, cal: Calendar) -> dict[str, object]:
    """What a time rule's templates see of one milestone: {{ due.date }}, {{ due.offset_days }}
    and {{ due.milestone_date }}. ("offset" is a keyword of Liquid's grammar: {{ due.offset }}
    does not parse, {{ due["offset"] }} does, so the value is given under both names.)"""
    return {"date": due.isoformat(), "offset": offset, "offset_days": offset,
            "milestone_date": shift(due, offset, business_days, cal).isoformat()}


def latest_due_begun(today: date, offset: int, business_days: bool, cal: Calendar) -> date:
    """The latest due date whose ``offset`` window has begun by ``today``: the window of
    ``due`` has begun exactly when ``due <= latest_due_begun(today, ...)`` (shift is
    non-decreasing in the due date, so the set of such due dates is a half-line)."""
    if not business_days or offset == 0:
        return today - timedelta(days=offset)
    # Any span of 7 days holds a working weekday, less the holidays in it.
    span = 7 * (abs(offset) + len(cal.holidays) + 2)
    lo, hi = today - timedelta(days=span), today + timedelta(days=span)
    assert shift(lo, offset, True, cal) <= today < shift(hi, offset, True, cal)
    while (hi - lo).days > 1:  # invariant: shift(lo) <= today < shift(hi)
        mid = lo + timedelta(days=(hi - lo).days // 2)
        if shift(mid, offset, True, cal) <= today:
            lo = mid
        else:
            hi = mid
    return lo


def local_date(instant: datetime, zone: str) -> date:
    """The calendar date at ``instant`` where the subject is."""
    return instant.astimezone(ZoneInfo(zone)).date()


def possible_todays(as_of: datetime) -> list[date]:
    """Every local date some zone can have at ``as_of``: zones run from UTC-12 to UTC+14,
    so the UTC date, the day before and the day after."""
    utc = as_of.astimezone(ZoneInfo("UTC")).date()
    return [utc - timedelta(days=1), utc, utc + timedelta(days=1)]


@dataclass(frozen=True)
class WindowBound:
    """One window in the flat form the set-based claim takes: for subjects whose local
    today is ``today``, the offset's window has begun iff due <= begun_max, and has passed
    (the next one has begun) iff due <= passed_max (never, when None)."""

    today: date
    offset: int
    threshold: str
    begun_max: date
    passed_max: date | None


def window_bounds(todays: Iterable[date], offsets: Sequence[int], business_days: bool,
                  cal: Calendar) -> list[WindowBound]:
    ordered = sorted(set(offsets))
    out: list[WindowBound] = []
    for today in sorted(set(todays)):
        begun = [latest_due_begun(today, o, business_days, cal) for o in ordered]
        passed: list[date | None] = [*begun[1:], None]
        out.extend(WindowBound(today, o, threshold_of(o), b, p)
                   for o, b, p in zip(ordered, begun, passed, strict=True))
    return out


# --- turnaround time ---------------------------------------------------------------------


@dataclass(frozen=True)
class Turnaround:
    """N hours, N days or N working days after a system timestamp of the subject."""

    after: str  # created | assigned | status_changed
    hours: int | None = None
    days: int | None = None
    business_days: bool = False

    def __post_init__(self) -> None:
        if self.after not in TURNAROUND_AFTER:
            raise InvalidInput(f"a turnaround runs after {', '.join(TURNAROUND_AFTER)}")
        if (self.hours is None) == (self.days is None):
            raise InvalidInput("a turnaround has hours or days, not both")
        if self.business_days and self.days is None:
            raise InvalidInput("business days count days, not hours")

    def minimum(self) -> timedelta:
        """A lower bound of the time from start to breach (working days are at least days)."""
        return timedelta(hours=self.hours) if self.hours is not None else timedelta(days=self.days or 0)


def breach_at(start: datetime, spec: Turnaround, cal: Calendar, zone: str) -> datetime:
    """The instant the turnaround is breached: hours are elapsed time; days are local
    calendar days in ``zone`` (the same wall-clock time N days later, across a DST change);
    working days shift the local date by N working days and keep the local time."""
    if start.tzinfo is None:
        raise ValueError("start must be an aware datetime (an instant)")
    if spec.hours is not None:
        return start + timedelta(hours=spec.hours)
    tz = ZoneInfo(zone)
    local = start.astimezone(tz)
    days = spec.days or 0
    day = shift(local.date(), days, spec.business_days, cal)
    wall = datetime.combine(day, time(local.hour, local.minute, local.second, local.microsecond))
    return wall.replace(tzinfo=tz).astimezone(start.tzinfo)


def turnaround_threshold(after: str, start: datetime) -> str:
    """The ledger threshold of one occurrence: 'tat:<after>:<start epoch seconds>'."""
    return f"tat:{after}:{int(start.timestamp())}"


@dataclass(frozen=True)
class DueDate:
    """A time rule's due date: the date fact watched and the offsets around it."""

    fact: str  # field.<name>, holding an ISO date YYYY-MM-DD
    offsets: tuple[int, ...]  # distinct, ascending
    business_days: bool = False

    @property
    def field(self) -> str:
        return self.fact.removeprefix("field.")
