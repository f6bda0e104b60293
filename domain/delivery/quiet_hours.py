"""Quiet hours and digest times, in the recipient's own zone, DST-safe.

Every decision reads the *local* wall clock of one instant in one zone (never the UTC
weekday with the local hour). A local time that does not exist (the skipped hour of a
spring-forward day) resolves to the first instant after the jump; a local time that exists
twice (the repeated hour) resolves to the first occurrence that is still ahead, so one
deferral is one instant and one send. The SQL twin of `quiet_hours_end` and
`quiet_hours_contains` lives in tenant migration 0004; a test checks they agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from domain.errors import InvalidInput
from domain.messages import N_

__all__ = [
    "DEFAULT_DIGEST_TIME",
    "DEFAULT_WEEKLY_DAY",
    "WEEKDAYS",
    "DeliverySchedule",
    "DigestDue",
    "QuietHours",
    "due_digest",
    "first_instant_at_or_after",
    "in_window",
    "next_digest_instant",
    "parse_local_time",
    "period_dates",
    "quiet_hours_end",
    "valid_weekday",
    "valid_zone_name",
    "zone_names",
]

DEFAULT_DIGEST_TIME = time(8, 0)
DEFAULT_WEEKLY_DAY = 1  # ISO weekday: 1 = Monday ... 7 = Sunday
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SEARCH = timedelta(hours=6)  # farther than any offset change; tzdb has no two transitions closer


@dataclass(frozen=True)
class QuietHours:
    start: time
    end: time

    def __post_init__(self) -> None:
        if self.start == self.end:
            raise InvalidInput(N_("quiet hours must end at a different time than they start"))


@dataclass(frozen=True)
class DeliverySchedule:
    """One recipient's clock: zone, optional quiet hours, digest time, weekly digest day."""

    zone: str
    quiet: QuietHours | None = None
    digest_time: time = DEFAULT_DIGEST_TIME
    weekly_day: int = DEFAULT_WEEKLY_DAY


def _local(instant: datetime, zone: ZoneInfo) -> datetime:
    return instant.astimezone(zone).replace(tzinfo=None)


def first_instant_at_or_after(target: datetime, zone_name: str, after: datetime) -> datetime:
    """The first instant later than ``after`` whose local wall time in the zone is at or
    past the naive local ``target``: the target itself when it exists once, its first
    occurrence still ahead when it exists twice, the jump when it was skipped."""
    zone = ZoneInfo(zone_name)
    candidates = sorted(
        target.replace(tzinfo=zone, fold=fold).astimezone(UTC) for fold in (0, 1)
    )
    for instant in candidates:
        if _local(instant, zone) == target and instant > after:
            return instant
    # Skipped: the offset is monotonic around a spring-forward, so bisect to the second.
    lo, hi = candidates[0] - _SEARCH, candidates[-1] + _SEARCH
    while hi - lo > timedelta(seconds=1):
        mid = lo + (hi - lo) / 2
        mid = mid.replace(microsecond=0)
        if _local(mid, zone) >= target:
            hi = mid
        else:
            lo = mid
    return hi


def in_window(local: time, quiet: QuietHours) -> bool:
    """Is a local wall time inside the window [start, end)? Windows may cross midnight."""
    if quiet.start < quiet.end:
        return quiet.start <= local < quiet.end
    return local >= quiet.start or local < quiet.end


def quiet_hours_end(now: datetime, zone: str, quiet: QuietHours | None) -> datetime | None:
    """When the recipient's quiet window that contains ``now`` ends (aware UTC), or None
    if ``now`` is outside quiet hours."""
    if quiet is None:
        return None
    local = _local(now, ZoneInfo(zone))
    if not in_window(local.time(), quiet):
        return None
    end_day = local.date() if quiet.end > local.time() else local.date() + timedelta(days=1)
    return first_instant_at_or_after(datetime.combine(end_day, quiet.end), zone, now)


def _digest_instant(day: date, schedule: DeliverySchedule) -> datetime:
    """The instant of the digest for local date ``day``: digest time there, moved to the end
    of quiet hours when it falls inside them."""
    target = datetime.combine(day, schedule.digest_time)
    instant = first_instant_at_or_after(target, schedule.zone, _EPOCH)
    return quiet_hours_end(instant, schedule.zone, schedule.quiet) or instant


def period_dates(period: str, local_day: date, schedule: DeliverySchedule) -> list[date]:
    """Candidate period dates at or before ``local_day``, newest first."""
    if period == "daily":
        return [local_day - timedelta(days=n) for n in range(3)]
    if period == "weekly":
        back = (local_day.isoweekday() - schedule.weekly_day) % 7
        latest = local_day - timedelta(days=back)
        return [latest, latest - timedelta(days=7)]
    raise InvalidInput(N_("unknown digest period “{period}”"), period=period)


@dataclass(frozen=True)
class DigestDue:
    period_date: date  # the local date the digest belongs to (the ledger's due_on)
    cutoff: datetime  # items batched before this instant belong to it


def due_digest(period: str, as_of: datetime, schedule: DeliverySchedule) -> DigestDue | None:
    """The latest digest whose instant has come by ``as_of``. Re-running at any later tick
    of the same period names the same digest, so its claim is found taken."""
    today = _local(as_of, ZoneInfo(schedule.zone)).date()
    for day in period_dates(period, today, schedule):
        instant = _digest_instant(day, schedule)
        if instant <= as_of:
            return DigestDue(day, instant)
    return None


def next_digest_instant(period: str, as_of: datetime, schedule: DeliverySchedule) -> datetime:
    """The first digest instant after ``as_of`` (what the preference centre shows)."""
    today = _local(as_of, ZoneInfo(schedule.zone)).date()
    step = 1 if period == "daily" else 7
    first = period_dates(period, today, schedule)[0]
    for n in range(3):
        instant = _digest_instant(first + timedelta(days=step * n), schedule)
        if instant > as_of:
            return instant
    raise AssertionError("a digest instant exists within three periods")


def valid_zone_name(value: str) -> str:
    name = value.strip()
    if name not in _zones():
        raise InvalidInput(N_("unknown time zone “{value}”: pick one from the list, e.g. Europe/Berlin"),
                           value=value)
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidInput(N_("unknown time zone “{value}”"), value=value) from None
    return name


_ZONES: frozenset[str] | None = None


def _zones() -> frozenset[str]:
    global _ZONES
    if _ZONES is None:
        _ZONES = frozenset(available_timezones())
    return _ZONES


def zone_names() -> list[str]:
    return sorted(z for z in _zones() if "/" in z or z == "UTC")


def parse_local_time(value: str, what: str) -> time:
    try:
        parsed = time.fromisoformat(value.strip())
    except ValueError:
        raise InvalidInput(N_("{what} must be a time like 22:00"), what=what) from None
    return parsed.replace(second=0, microsecond=0, tzinfo=None)


def valid_weekday(value: int) -> int:
    if not 1 <= value <= 7:
        raise InvalidInput(N_("pick a weekday"))
    return value
