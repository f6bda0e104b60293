"""The tenant's working calendar (working weekdays and holiday dates), which business-day
offsets of time rules count against (domain/rules/obligation_dates.py Calendar)."""

from __future__ import annotations

from datetime import date

from db.evidence.audit import record_audit
from db.platform.tenancy import TenantTx
from domain.rules.obligation_dates import Calendar

__all__ = ["load_calendar", "save_calendar"]


def load_calendar(tx: TenantTx) -> Calendar:
    row = tx.conn.execute("SELECT working_days, holidays FROM working_calendar").fetchone()
    if row is None:  # the migration writes the row; a tenant without one has the default
        return Calendar.default()
    days: list[int] = list(row[0])  # type: ignore[call-overload]
    holidays: list[date] = list(row[1])  # type: ignore[call-overload]
    return Calendar.of(days, holidays)


def save_calendar(tx: TenantTx, cal: Calendar) -> Calendar:
    """Replace the tenant's calendar; the next scan counts business days against it."""
    tx.conn.execute(
        "INSERT INTO working_calendar (id, working_days, holidays, updated_at) "
        "VALUES (true, %s::smallint[], %s::date[], now()) "
        "ON CONFLICT (id) DO UPDATE SET working_days = excluded.working_days, "
        "  holidays = excluded.holidays, updated_at = now()",
        [sorted(cal.working_days), sorted(cal.holidays)])
    record_audit(tx, "settings.calendar", "calendar", None,
                 after={"working_days": sorted(cal.working_days), "holidays": sorted(cal.holidays)})
    return cal
