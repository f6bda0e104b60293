"""What the obligations page says about one due date: each milestone's state, read from
the windows (domain/rules/obligation_dates.py) and what the ledger recorded for that due date, and the
next notice to be sent with the local date it will be sent on.

A milestone the ledger holds is what the ledger says (claimed, skipped, cancelled). One it
does not hold is *due* while today is in its window (the next scan claims it), *scheduled*
when its window is still to begin, and *passed* when its window ended before any scan saw it
(the scan records such a one as skipped; this only shows before it has run).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Literal

from domain.rules.obligation_dates import Calendar, Milestone, milestones

__all__ = ["RECORDED", "Schedule", "State", "Step", "schedule"]

State = Literal["claimed", "skipped", "cancelled", "due", "scheduled", "passed"]
RECORDED: tuple[State, ...] = ("claimed", "skipped", "cancelled")


@dataclass(frozen=True)
class Step:
    milestone: Milestone
    state: State


@dataclass(frozen=True)
class Schedule:
    due: date
    today: date  # the subject's local date
    steps: tuple[Step, ...]

    @property
    def next(self) -> Step | None:
        """The next notice to be sent: due now (the next scan claims it), or scheduled."""
        return next((s for s in self.steps if s.state in ("due", "scheduled")), None)

    @property
    def last_claimed(self) -> Step | None:
        claimed = [s for s in self.steps if s.state == "claimed"]
        return claimed[-1] if claimed else None

    @property
    def overdue(self) -> bool:
        return self.today > self.due

    @property
    def days_left(self) -> int:
        """Days from the subject's today to the due date (negative once it has passed)."""
        return (self.due - self.today).days


def schedule(due: date, offsets: Sequence[int], business_days: bool, cal: Calendar,
             today: date, recorded: Mapping[str, str]) -> Schedule:
    """Every milestone of ``due`` with its state; ``recorded`` maps the ledger thresholds
    of this (rule, subject, due date) to their status."""
    steps = []
    for m in milestones(due, offsets, business_days, cal):
        status = recorded.get(m.threshold)
        state: State
        if status in RECORDED:
            state = status
        elif m.starts > today:
            state = "scheduled"
        elif m.ends is None or today < m.ends:
            state = "due"
        else:
            state = "passed"
        steps.append(Step(m, state))
    return Schedule(due, today, tuple(steps))
