"""Quiet hours and digest instants in the recipient's zone, on DST transition days and in a
UTC+14 zone. Expected instants are written in UTC, worked out by hand from the tz rules."""

from __future__ import annotations

from datetime import UTC, date, datetime, time
from zoneinfo import ZoneInfo

import pytest

from domain.delivery.quiet_hours import (
    DeliverySchedule,
    QuietHours,
    due_digest,
    first_instant_at_or_after,
    in_window,
    next_digest_instant,
    parse_local_time,
    quiet_hours_end,
    valid_zone_name,
)
from domain.errors import InvalidInput


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def local(zone: str, *args: int, fold: int = 0) -> datetime:
    return datetime(*args, tzinfo=ZoneInfo(zone), fold=fold).astimezone(UTC)


NIGHT = QuietHours(time(22, 0), time(7, 0))


@pytest.mark.parametrize(("now", "expected"), [
    (local("Europe/Berlin", 2027, 1, 10, 23, 30), utc(2027, 1, 11, 6, 0)),  # before midnight
    (local("Europe/Berlin", 2027, 1, 11, 3, 0), utc(2027, 1, 11, 6, 0)),  # after midnight
    (local("Europe/Berlin", 2027, 1, 10, 22, 0), utc(2027, 1, 11, 6, 0)),  # start is inside
    (local("Europe/Berlin", 2027, 1, 11, 7, 0), None),  # end is outside
    (local("Europe/Berlin", 2027, 1, 11, 12, 0), None),
])
def test_a_window_that_crosses_midnight_ends_the_next_local_morning(
    now: datetime, expected: datetime | None
) -> None:
    assert quiet_hours_end(now, "Europe/Berlin", NIGHT) == expected


def test_a_daytime_window_ends_the_same_day() -> None:
    lunch = QuietHours(time(12, 0), time(14, 0))
    assert quiet_hours_end(utc(2027, 6, 1, 11, 0), "Europe/Berlin", lunch) == utc(2027, 6, 1, 12, 0)
    assert quiet_hours_end(utc(2027, 6, 1, 13, 0), "Europe/Berlin", lunch) is None


@pytest.mark.parametrize(("zone", "now", "window", "expected"), [
    # Berlin springs forward 2027-03-28 02:00 CET -> 03:00 CEST: an end at 02:30 does not
    # exist, the first valid instant is 03:00 CEST = 01:00 UTC.
    ("Europe/Berlin", utc(2027, 3, 27, 22, 0), (22, 0, 2, 30), utc(2027, 3, 28, 1, 0)),
    # Berlin falls back 2027-10-31 03:00 CEST -> 02:00 CET: 02:30 happens twice; the first
    # (CEST, 00:30 UTC) is the end.
    ("Europe/Berlin", utc(2027, 10, 30, 21, 0), (22, 0, 2, 30), utc(2027, 10, 31, 0, 30)),
    # ... and someone entering quiet hours during the repeated hour (02:10 CET) waits for
    # the 02:30 still ahead, once.
    ("Europe/Berlin", utc(2027, 10, 31, 1, 10), (22, 0, 2, 30), utc(2027, 10, 31, 1, 30)),
    # Chicago springs forward 2027-03-14 02:00 CST -> 03:00 CDT.
    ("America/Chicago", utc(2027, 3, 14, 5, 0), (23, 0, 2, 15), utc(2027, 3, 14, 8, 0)),
    # Chicago falls back 2027-11-07 02:00 CDT -> 01:00 CST: 01:30 CDT = 06:30 UTC.
    ("America/Chicago", utc(2027, 11, 7, 4, 0), (22, 0, 1, 30), utc(2027, 11, 7, 6, 30)),
    # Sydney springs forward 2027-10-03 02:00 AEST -> 03:00 AEDT = 16:00 UTC the day before.
    ("Australia/Sydney", utc(2027, 10, 2, 12, 0), (21, 0, 2, 30), utc(2027, 10, 2, 16, 0)),
    # Sydney falls back 2027-04-04 03:00 AEDT -> 02:00 AEST: first 02:30 is AEDT = 15:30 UTC.
    ("Australia/Sydney", utc(2027, 4, 3, 11, 0), (21, 0, 2, 30), utc(2027, 4, 3, 15, 30)),
    # UTC+14: 23:30 on 1 January in Kiritimati is 09:30 UTC; 07:00 on 2 January is 17:00 UTC
    # on 1 January.
    ("Pacific/Kiritimati", utc(2027, 1, 1, 9, 30), (22, 0, 7, 0), utc(2027, 1, 1, 17, 0)),
])
def test_deferral_ends_at_the_right_instant_on_transition_days(
    zone: str, now: datetime, window: tuple[int, int, int, int], expected: datetime
) -> None:
    quiet = QuietHours(time(window[0], window[1]), time(window[2], window[3]))
    end = quiet_hours_end(now, zone, quiet)
    assert end == expected
    assert end is not None and end > now
    # At its end the window is over: the send goes ahead instead of deferring again.
    assert quiet_hours_end(end, zone, quiet) is None


def test_a_skipped_local_time_resolves_to_the_jump_and_a_repeated_one_to_the_next_occurrence() -> None:
    from datetime import datetime as dt

    target = dt(2027, 3, 28, 2, 30)
    assert first_instant_at_or_after(target, "Europe/Berlin", utc(2027, 3, 27)) == utc(2027, 3, 28, 1, 0)
    repeated = dt(2027, 10, 31, 2, 30)
    first = first_instant_at_or_after(repeated, "Europe/Berlin", utc(2027, 10, 30))
    second = first_instant_at_or_after(repeated, "Europe/Berlin", first)
    assert (first, second) == (utc(2027, 10, 31, 0, 30), utc(2027, 10, 31, 1, 30))


def test_windows_may_cross_midnight_and_must_not_be_empty() -> None:
    assert in_window(time(23, 59), NIGHT) and in_window(time(0, 0), NIGHT)
    assert not in_window(time(7, 0), NIGHT) and not in_window(time(21, 59), NIGHT)
    with pytest.raises(InvalidInput):
        QuietHours(time(7, 0), time(7, 0))


def test_the_daily_digest_is_at_eight_local_and_names_the_local_date() -> None:
    schedule = DeliverySchedule("Australia/Sydney")
    # 08:00 AEDT on 10 Jan 2027 is 21:00 UTC on 9 Jan.
    assert due_digest("daily", utc(2027, 1, 9, 20, 59), schedule) is not None
    due = due_digest("daily", utc(2027, 1, 9, 21, 0), schedule)
    assert due is not None and (due.period_date, due.cutoff) == (date(2027, 1, 10), utc(2027, 1, 9, 21, 0))
    before = due_digest("daily", utc(2027, 1, 9, 20, 59), schedule)
    assert before is not None and before.period_date == date(2027, 1, 9)
    assert next_digest_instant("daily", utc(2027, 1, 9, 20, 59), schedule) == utc(2027, 1, 9, 21, 0)


def test_a_digest_time_inside_quiet_hours_waits_for_their_end() -> None:
    schedule = DeliverySchedule("Europe/Berlin", QuietHours(time(22, 0), time(9, 30)), time(8, 0))
    due = due_digest("daily", utc(2027, 1, 11, 12, 0), schedule)
    assert due is not None and due.cutoff == utc(2027, 1, 11, 8, 30)  # 09:30 CET


def test_a_digest_time_in_the_skipped_hour_moves_to_the_jump() -> None:
    schedule = DeliverySchedule("Europe/Berlin", digest_time=time(2, 30))
    due = due_digest("daily", utc(2027, 3, 28, 3, 0), schedule)
    assert due is not None and (due.period_date, due.cutoff) == (date(2027, 3, 28), utc(2027, 3, 28, 1, 0))


def test_a_weekly_digest_follows_the_local_weekday_not_utcs() -> None:
    # Monday 08:00 in Kiritimati (UTC+14) is Sunday 18:00 UTC.
    schedule = DeliverySchedule("Pacific/Kiritimati", weekly_day=1)
    assert utc(2027, 1, 10, 18, 0).isoweekday() == 7
    due = due_digest("weekly", utc(2027, 1, 10, 18, 0), schedule)
    assert due is not None and (due.period_date, due.cutoff) == (date(2027, 1, 11), utc(2027, 1, 10, 18, 0))
    earlier = due_digest("weekly", utc(2027, 1, 10, 17, 59), schedule)
    assert earlier is not None and earlier.period_date == date(2027, 1, 4)
    assert next_digest_instant("weekly", utc(2027, 1, 10, 17, 59), schedule) == utc(2027, 1, 10, 18, 0)


def test_zone_and_time_inputs_are_validated() -> None:
    assert valid_zone_name(" Pacific/Kiritimati ") == "Pacific/Kiritimati"
    assert parse_local_time("22:15", "start") == time(22, 15)
    with pytest.raises(InvalidInput):
        valid_zone_name("Mars/Olympus_Mons")
    with pytest.raises(InvalidInput):
        parse_local_time("25:00", "start")
