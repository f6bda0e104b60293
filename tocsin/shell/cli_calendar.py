"""`tocsin calendar ...`: a tenant's working calendar, which business-day offsets of time
rules count against.

    tocsin calendar show --tenant T
    tocsin calendar set --tenant T [--working-days 1,2,3,4,5] [--holiday 2026-12-25 ...]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import date
from typing import Any

from domain.errors import InvalidInput
from domain.people.identity import valid_slug

__all__ = ["Command", "add_calendar_commands", "cmd_calendar_set", "cmd_calendar_show"]

Command = Callable[..., argparse.ArgumentParser]
_DAY_NAMES = {1: "Mon", 2: "Tue", 3: "Wed", 4: "Thu", 5: "Fri", 6: "Sat", 7: "Sun"}


def _working_days(text: str) -> list[int]:
    try:
        days = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: ISO weekdays separated by commas, 1 = Monday .. 7 = Sunday") from None
    return days


def _holiday(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date YYYY-MM-DD") from None


def _print(cal: Any) -> None:
    print("Working days: " + ", ".join(_DAY_NAMES[d] for d in sorted(cal.working_days)), flush=True)
    holidays = sorted(cal.holidays)
    print("Holidays: " + (", ".join(h.isoformat() for h in holidays) if holidays else "none"),
          flush=True)


def cmd_calendar_show(args: argparse.Namespace) -> None:
    from db.platform.tenancy import tenant_tx
    from db.rules.calendar import load_calendar

    with tenant_tx(valid_slug(args.tenant)) as tx:
        _print(load_calendar(tx))


def cmd_calendar_set(args: argparse.Namespace) -> None:
    from db.platform.tenancy import tenant_tx
    from db.rules.calendar import load_calendar, save_calendar
    from domain.rules.obligation_dates import Calendar

    if args.working_days is None and args.holiday is None:
        raise InvalidInput("nothing to set: give --working-days and/or --holiday")
    with tenant_tx(valid_slug(args.tenant)) as tx:
        current = load_calendar(tx)
        cal = Calendar.of(current.working_days if args.working_days is None else args.working_days,
                          current.holidays if args.holiday is None else args.holiday)
        save_calendar(tx, cal)
    _print(cal)


def add_calendar_commands(sub: argparse._SubParsersAction[Any], command: Command) -> None:
    """Register `tocsin calendar ...` on the top-level subparsers."""
    calendar = sub.add_parser("calendar", help="the tenant's working days and holidays (business-day "
                                               "offsets of time rules)")
    calendar_sub = calendar.add_subparsers(dest="calendar_command", required=True,
                                           parser_class=type(calendar))
    p = command("show", cmd_calendar_show, "print the tenant's working days and holidays", calendar_sub)
    p.add_argument("--tenant", required=True)
    p = command("set", cmd_calendar_set, "replace the working days and/or the holidays", calendar_sub)
    p.add_argument("--tenant", required=True)
    p.add_argument("--working-days", type=_working_days, metavar="1,2,3,4,5",
                   help="ISO weekdays, 1 = Monday .. 7 = Sunday")
    p.add_argument("--holiday", type=_holiday, nargs="+", metavar="YYYY-MM-DD",
                   help="every holiday date (replaces the list; give none-but-the-flag to keep)")
