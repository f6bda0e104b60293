"""What the obligations page says about a due date: each milestone's state from the windows
and the ledger, and the next notice with the local date it goes out."""

from __future__ import annotations

from datetime import date

from domain.rules.obligation_dates import Calendar
from domain.rules.obligation_schedule import schedule

DUE = date(2026, 12, 14)  # a Monday
OFFSETS = (-30, -7, -1, 0)


def states(today: date, recorded: dict[str, str] | None = None) -> list[tuple[str, str]]:
    plan = schedule(DUE, OFFSETS, False, Calendar.default(), today, recorded or {})
    return [(s.milestone.threshold, s.state) for s in plan.steps]


def test_before_the_first_window_every_milestone_is_scheduled_and_the_first_is_next() -> None:
    plan = schedule(DUE, OFFSETS, False, Calendar.default(), date(2026, 11, 1), {})
    assert [s.state for s in plan.steps] == ["scheduled"] * 4
    assert plan.next is not None and plan.next.milestone.starts == date(2026, 11, 14)
    assert (plan.days_left, plan.overdue) == (43, False)


def test_a_window_holding_today_is_due_until_the_ledger_holds_it_then_the_next_is_next() -> None:
    today = date(2026, 12, 8)  # inside -7's window
    assert states(today) == [("offset:-30", "passed"), ("offset:-7", "due"),
                             ("offset:-1", "scheduled"), ("offset:0", "scheduled")]
    recorded = {"offset:-30": "skipped", "offset:-7": "claimed"}
    plan = schedule(DUE, OFFSETS, False, Calendar.default(), today, recorded)
    assert [s.state for s in plan.steps] == ["skipped", "claimed", "scheduled", "scheduled"]
    assert plan.next is not None and (plan.next.milestone.threshold, plan.next.milestone.starts) == \
        ("offset:-1", date(2026, 12, 13))
    assert plan.last_claimed is not None and plan.last_claimed.milestone.offset == -7


def test_after_the_due_date_it_is_overdue_and_once_the_last_is_claimed_nothing_is_next() -> None:
    plan = schedule(DUE, OFFSETS, False, Calendar.default(), date(2026, 12, 16),
                    {"offset:0": "claimed"})
    assert (plan.overdue, plan.days_left, plan.next) == (True, -2, None)


def test_a_cancelled_notice_stays_cancelled() -> None:
    assert states(date(2026, 12, 13), {"offset:-1": "cancelled"})[2] == ("offset:-1", "cancelled")


def test_business_days_move_the_dates_a_reminder_goes_out_on() -> None:
    friday_off = Calendar.of([1, 2, 3, 4, 5], [date(2026, 12, 11)])
    plan = schedule(DUE, (-1,), True, friday_off, date(2026, 12, 1), {})
    assert plan.next is not None and plan.next.milestone.starts == date(2026, 12, 10)  # Thursday
