"""Obligation windows: offsets around a due date as windows of local calendar dates,
skip-not-late, business days across weekends and holidays, and turnaround breaches."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from domain.errors import InvalidInput
from domain.rules.obligation_dates import (
    Calendar,
    Turnaround,
    breach_at,
    latest_due_begun,
    milestones,
    next_milestone,
    offset_of,
    outcomes_on,
    shift,
    threshold_of,
    window_bounds,
)

OFFSETS = [-30, -7, -1, 0]
DUE = date(2026, 6, 15)  # a Monday
CAL = Calendar.default()
# Christmas 2026 is a Friday: with it a holiday, the week around it has four working days.
XMAS = Calendar.of([1, 2, 3, 4, 5], [date(2026, 12, 25)])


def test_thresholds_name_the_offset_with_its_sign() -> None:
    assert [threshold_of(o) for o in (-30, 0, 7)] == ["offset:-30", "offset:0", "offset:+7"]
    assert [offset_of(t) for t in ("offset:-30", "offset:0", "offset:+7", "event:3")] == [-30, 0, 7, None]


def test_each_window_runs_until_the_next_begins_and_the_last_is_open() -> None:
    ms = milestones(DUE, [0, -1, -30, -7], False, CAL)
    assert [(m.offset, m.starts, m.ends) for m in ms] == [
        (-30, date(2026, 5, 16), date(2026, 6, 8)),
        (-7, date(2026, 6, 8), date(2026, 6, 14)),
        (-1, date(2026, 6, 14), date(2026, 6, 15)),
        (0, date(2026, 6, 15), None),
    ]


def test_nothing_is_due_before_the_first_window() -> None:
    assert outcomes_on(DUE, OFFSETS, False, CAL, date(2026, 5, 15)) == []


def test_the_window_holding_today_is_due_and_earlier_ones_are_skipped() -> None:
    outcomes = outcomes_on(DUE, OFFSETS, False, CAL, date(2026, 6, 10))
    assert [(m.threshold, o) for m, o in outcomes] == [("offset:-30", "skipped"), ("offset:-7", "due")]


def test_a_missed_day_heals_inside_the_window() -> None:
    # The scan did not run on 8 June (the -7 window's first day); on the 9th it is still due.
    outcomes = dict((m.threshold, o) for m, o in outcomes_on(DUE, OFFSETS, False, CAL, date(2026, 6, 9)))
    assert outcomes["offset:-7"] == "due"


def test_a_late_observation_is_skipped_never_sent_late() -> None:
    # First seen on the due date: every earlier reminder's window has passed.
    outcomes = outcomes_on(DUE, OFFSETS, False, CAL, DUE)
    assert [o for _, o in outcomes] == ["skipped", "skipped", "skipped", "due"]
    # Long after: the last window never closes.
    assert outcomes_on(DUE, OFFSETS, False, CAL, DUE + timedelta(days=400))[-1][1] == "due"


def test_next_milestone_is_the_current_window_or_the_next_to_begin() -> None:
    assert next_milestone(DUE, OFFSETS, False, CAL, date(2026, 1, 1)).offset == -30  # type: ignore[union-attr]
    assert next_milestone(DUE, OFFSETS, False, CAL, date(2026, 6, 13)).offset == -7  # type: ignore[union-attr]
    assert next_milestone(DUE, OFFSETS, False, CAL, date(2030, 1, 1)).offset == 0  # type: ignore[union-attr]


def test_business_days_skip_the_weekend() -> None:
    friday, monday = date(2026, 6, 12), date(2026, 6, 15)
    assert shift(monday, -1, True, CAL) == friday
    assert shift(friday, 1, True, CAL) == monday
    assert shift(monday, -5, True, CAL) == date(2026, 6, 8)
    assert shift(date(2026, 6, 13), 0, True, CAL) == date(2026, 6, 13)  # 0 is the date itself


def test_business_days_skip_a_holiday_and_the_weekend_after_it() -> None:
    # Due Monday 28 Dec 2026; -1 working day is Thursday 24 (Friday 25 is a holiday).
    due = date(2026, 12, 28)
    assert shift(due, -1, True, XMAS) == date(2026, 12, 24)
    assert shift(due, -1, True, CAL) == date(2026, 12, 25)
    assert shift(date(2026, 12, 24), 1, True, XMAS) == date(2026, 12, 28)
    ms = milestones(due, [-2, -1, 0], True, XMAS)
    assert [(m.starts, m.ends) for m in ms] == [
        (date(2026, 12, 23), date(2026, 12, 24)), (date(2026, 12, 24), date(2026, 12, 28)),
        (date(2026, 12, 28), None)]
    # Over the weekend and the holiday, the -1 reminder is still the one due.
    for day in (date(2026, 12, 25), date(2026, 12, 26), date(2026, 12, 27)):
        assert [o for _, o in outcomes_on(due, [-2, -1, 0], True, XMAS, day)] == ["skipped", "due"]


def test_a_tenant_working_week_can_differ() -> None:
    sun_to_thu = Calendar.of([7, 1, 2, 3, 4], [])
    assert shift(date(2026, 6, 14), -1, True, sun_to_thu) == date(2026, 6, 11)  # Sunday -> Thursday


@pytest.mark.parametrize("business_days", [False, True])
@pytest.mark.parametrize("offset", [-30, -7, -1, 0, 1, 7])
def test_the_bound_the_scan_uses_agrees_with_the_windows(offset: int, business_days: bool) -> None:
    """latest_due_begun is exactly the inverse of shift: the SQL's comparison of a due date
    with it says what milestones() says."""
    for today in (date(2026, 12, 20) + timedelta(days=n) for n in range(14)):
        bound = latest_due_begun(today, offset, business_days, XMAS)
        for due in (today + timedelta(days=n) for n in range(-60, 60)):
            assert (shift(due, offset, business_days, XMAS) <= today) == (due <= bound)


def test_window_bounds_say_due_and_skipped_as_outcomes_on_does() -> None:
    today = date(2026, 12, 27)
    bounds = window_bounds([today], [-2, -1, 0, 3], True, XMAS)
    for due in (today + timedelta(days=n) for n in range(-20, 20)):
        expected = {m.threshold: o for m, o in outcomes_on(due, [-2, -1, 0, 3], True, XMAS, today)}
        seen = {b.threshold: ("skipped" if b.passed_max is not None and due <= b.passed_max else "due")
                for b in bounds if due <= b.begun_max}
        assert seen == expected


def test_a_calendar_needs_a_working_day() -> None:
    with pytest.raises(InvalidInput):
        Calendar.of([], [])
    with pytest.raises(InvalidInput):
        Calendar.of([0, 8], [])


def test_a_turnaround_in_hours_is_elapsed_time() -> None:
    start = datetime(2026, 3, 28, 10, 0, tzinfo=UTC)
    assert breach_at(start, Turnaround("created", hours=48), CAL, "Europe/London") == \
        start + timedelta(hours=48)


def test_a_turnaround_in_days_keeps_the_local_wall_clock_across_dst() -> None:
    # 10:00 in London on Saturday 28 March 2026; the clocks go forward on the 29th.
    start = datetime(2026, 3, 28, 10, 0, tzinfo=UTC)  # 10:00 GMT
    breach = breach_at(start, Turnaround("created", days=2), CAL, "Europe/London")
    assert breach == datetime(2026, 3, 30, 9, 0, tzinfo=UTC)  # 10:00 BST


def test_a_turnaround_in_working_days_skips_the_weekend_and_holiday() -> None:
    start = datetime(2026, 12, 24, 15, 30, tzinfo=UTC)  # Thursday afternoon in UTC
    breach = breach_at(start, Turnaround("assigned", days=1, business_days=True), XMAS, "UTC")
    assert breach == datetime(2026, 12, 28, 15, 30, tzinfo=UTC)


def test_a_turnaround_has_hours_or_days() -> None:
    with pytest.raises(InvalidInput):
        Turnaround("created", hours=1, days=1)
    with pytest.raises(InvalidInput):
        Turnaround("created", hours=4, business_days=True)
    with pytest.raises(InvalidInput):
        Turnaround("closed", days=1)


@pytest.mark.parametrize("hour", range(0, 24, 3))
def test_every_zone_s_local_date_is_among_the_scan_s_possible_todays(hour: int) -> None:
    from domain.rules.obligation_dates import local_date, possible_todays

    as_of = datetime(2026, 6, 14, hour, 30, tzinfo=UTC)
    zones = ("Pacific/Pago_Pago", "America/New_York", "UTC", "Asia/Kolkata", "Pacific/Auckland",
             "Pacific/Kiritimati")
    assert {local_date(as_of, z) for z in zones} <= set(possible_todays(as_of))


def test_the_same_instant_is_two_dates_apart_from_utc_minus_11_to_utc_plus_14() -> None:
    from domain.rules.obligation_dates import local_date

    as_of = datetime(2026, 6, 14, 12, 0, tzinfo=UTC)
    assert local_date(as_of, "Pacific/Pago_Pago") == date(2026, 6, 14)  # 01:00
    assert local_date(as_of, "Pacific/Kiritimati") == date(2026, 6, 15)  # 02:00 next day
    early = datetime(2026, 6, 14, 9, 0, tzinfo=UTC)
    assert local_date(early, "Pacific/Pago_Pago") == date(2026, 6, 13)  # 22:00 the day before
    assert local_date(early, "Pacific/Kiritimati") == date(2026, 6, 14)  # 23:00
    # So a reminder at -1 for a due date of 15 June is due in Kiritimati and not yet in Pago Pago.
    kiritimati = outcomes_on(date(2026, 6, 15), [-1], False, CAL, local_date(early, "Pacific/Kiritimati"))
    pago = outcomes_on(date(2026, 6, 15), [-1], False, CAL, local_date(early, "Pacific/Pago_Pago"))
    assert [o for _, o in kiritimati] == ["due"] and pago == []
