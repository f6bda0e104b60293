"""The licence cadence as windows over calendar dates, table-driven."""

import itertools
from datetime import date, timedelta

import pytest

from domain.notices.licence import (
    CADENCE,
    RENEWAL_WINDOW_DAYS,
    Outcome,
    RenewalRefused,
    Stage,
    check_client_renewal,
    milestone_outcomes,
    window_table,
    windows_for,
)
from domain.people.identity import Plan

EXPIRES = date(2027, 3, 31)


def at(offset: int) -> date:
    return EXPIRES + timedelta(days=offset)


@pytest.mark.parametrize(
    ("offset", "plan", "expected"),
    [
        (-200, Plan.ENTERPRISE, None),
        (-91, Plan.ENTERPRISE, None),
        (-90, Plan.ENTERPRISE, "d90"),
        (-61, Plan.ENTERPRISE, "d90"),
        (-60, Plan.ENTERPRISE, "d60"),
        (-90, Plan.STANDARD, None),
        (-60, Plan.STANDARD, None),
        (-31, Plan.STANDARD, None),
        (-30, Plan.STANDARD, "d30"),
        (-30, Plan.ENTERPRISE, "d30"),
        (-15, Plan.STANDARD, "d30"),
        (-14, Plan.STANDARD, "d14"),
        (-8, Plan.STANDARD, "d14"),
        (-7, Plan.STANDARD, "d7"),
        (-2, Plan.STANDARD, "d7"),
        (-1, Plan.STANDARD, "d1"),
        (0, Plan.STANDARD, "expiry"),
        (1, Plan.STANDARD, "grace1"),
        (2, Plan.STANDARD, "grace1"),
        (3, Plan.STANDARD, "grace3"),
        (6, Plan.STANDARD, "grace3"),
        (7, Plan.STANDARD, "grace7"),
        (13, Plan.STANDARD, "grace7"),
        (14, Plan.STANDARD, "closed"),
        (400, Plan.STANDARD, "closed"),
    ],
)
def test_the_milestone_due_is_the_window_that_contains_local_today(
    offset: int, plan: Plan, expected: str | None
) -> None:
    due = [m.threshold for m, outcome in milestone_outcomes(EXPIRES, plan, at(offset))
           if outcome is Outcome.DUE]
    assert due == ([] if expected is None else [expected])


@pytest.mark.parametrize(
    ("offset", "plan", "due", "skipped"),
    [
        (-31, Plan.STANDARD, [], []),
        (-30, Plan.STANDARD, ["d30"], []),
        (-7, Plan.STANDARD, ["d7"], ["d30", "d14"]),
        (-7, Plan.ENTERPRISE, ["d7"], ["d90", "d60", "d30", "d14"]),
        (0, Plan.STANDARD, ["expiry"], ["d30", "d14", "d7", "d1"]),
        (5, Plan.STANDARD, ["grace3"], ["d30", "d14", "d7", "d1", "expiry", "grace1"]),
    ],
)
def test_windows_that_have_passed_are_skipped_not_sent_late(
    offset: int, plan: Plan, due: list[str], skipped: list[str]
) -> None:
    outcomes = milestone_outcomes(EXPIRES, plan, at(offset))
    assert [m.threshold for m, o in outcomes if o is Outcome.DUE] == due
    assert [m.threshold for m, o in outcomes if o is Outcome.SKIPPED] == skipped


def test_at_most_one_milestone_is_due_on_any_day() -> None:
    for plan in Plan:
        for offset in range(-120, 60):
            outcomes = milestone_outcomes(EXPIRES, plan, at(offset))
            assert sum(1 for _, o in outcomes if o is Outcome.DUE) <= 1


def test_windows_tile_the_calendar_without_gaps_or_overlaps() -> None:
    for plan in Plan:
        windows = windows_for(plan)
        for earlier, later in itertools.pairwise(windows):
            assert earlier.ends == later.starts
        assert windows[-1].ends is None


def test_standard_plans_have_no_ninety_or_sixty_day_reminder() -> None:
    thresholds = [w.milestone.threshold for w in windows_for(Plan.STANDARD)]
    assert thresholds == ["d30", "d14", "d7", "d1", "expiry", "grace1", "grace3", "grace7", "closed"]


def test_the_flat_window_table_matches_both_plans() -> None:
    rows = {r.threshold: r for r in window_table()}
    assert list(rows) == [m.threshold for m in CADENCE]
    for plan in Plan:
        for w in windows_for(plan):
            row = rows[w.milestone.threshold]
            assert (row.starts, row.ends) == (w.starts, w.ends)
    assert rows["expiry"].stage is Stage.EXPIRY and rows["closed"].stage is Stage.CLOSE



def test_a_client_user_renews_only_within_the_window_or_once_expired_and_never_when_closed() -> None:
    expires = date(2027, 6, 30)
    assert RENEWAL_WINDOW_DAYS == 30  # from the d30 reminder on
    check_client_renewal("active", expires, expires - timedelta(days=30))
    check_client_renewal("expired", expires, expires + timedelta(days=3))
    with pytest.raises(RenewalRefused, match="renewal opens 30 days before, on 2027-05-31"):
        check_client_renewal("active", expires, expires - timedelta(days=31))
    with pytest.raises(RenewalRefused, match="only an administrator"):
        check_client_renewal("closed", expires, expires + timedelta(days=20))
