"""The demo tenant: clients whose licences sit at different points of the cadence, so the
first tick produces reminders, an expiry and a grace nudge; one person in quiet hours that
end a minute or two after the first start, so a deferred email is seen released by the
sweeper; a fraud-case desk with two rules and a few events (tocsin/shell/demo_fraud.py); and
legal-metrology sites in three zones whose calibration certificates fall due within 40 days,
watched by a time rule (tocsin/shell/demo_metrology.py). Idempotent."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from db.people.clients import create_client
from db.people.preferences import save_schedule
from db.people.users import create_user
from db.platform.tenancy import create_tenant, list_tenants, tenant_tx
from domain.delivery.quiet_hours import DEFAULT_DIGEST_TIME, DEFAULT_WEEKLY_DAY, QuietHours
from domain.people.identity import Plan, Role
from tocsin.core.clock import utcnow
from tocsin.shell.demo_fraud import seed_fraud_desk
from tocsin.shell.demo_metrology import seed_metrology

__all__ = [
    "DEMO_CLIENTS",
    "DEMO_PASSWORD",
    "DEMO_SLUG",
    "DEMO_STAFF",
    "DEMO_ZONE",
    "QUIET_FOR",
    "QUIET_USER",
    "seed_demo",
]

DEMO_SLUG = "demo"
DEMO_ZONE = "Europe/London"
DEMO_PASSWORD = "tocsin-demo"

# (client name, days until access expires, plan, zone, client user's email)
DEMO_CLIENTS = (
    ("Northwind Analytics", 7, Plan.STANDARD, None, "ops@northwind.example"),
    ("Harbour Freight Ltd", 30, Plan.STANDARD, None, "compliance@harbour.example"),
    ("Aurora Health", 90, Plan.ENTERPRISE, "America/New_York", "it@aurora.example"),
    ("Kestrel Labs", 1, Plan.STANDARD, "Europe/Berlin", "lab@kestrel.example"),
    ("Meridian Legal", -1, Plan.STANDARD, None, "office@meridian.example"),
    ("Summit Energy", 200, Plan.ENTERPRISE, None, "grid@summit.example"),
)
DEMO_STAFF = (("admin@demo.example", Role.ADMIN), ("member@demo.example", Role.MEMBER))
QUIET_USER = "lab@kestrel.example"  # in quiet hours at the first start, for a short while
QUIET_FOR = 60  # seconds at least between the seeding and the end of those quiet hours


def _quiet_hours_ending_soon(now: datetime, zone: str) -> QuietHours:
    """Quiet hours that began two hours ago and end on the first whole minute at least
    QUIET_FOR seconds from now, local time: the day's reminder is deferred, then sent."""
    local = now.astimezone(ZoneInfo(zone))
    end = local + timedelta(seconds=QUIET_FOR)
    end = end.replace(second=0, microsecond=0) + timedelta(minutes=math.ceil(end.second / 60))
    start = local - timedelta(hours=2)
    return QuietHours(time(start.hour, start.minute), time(end.hour, end.minute))


def seed_demo(today: date | None = None) -> Iterator[str]:
    if any(t.slug == DEMO_SLUG for t in list_tenants()):
        yield from _logins("Demo tenant already seeded; reusing it.")
        return
    create_tenant(DEMO_SLUG, "Demo Compliance Co", DEMO_ZONE)
    now = utcnow()
    today = today or now.astimezone(ZoneInfo(DEMO_ZONE)).date()
    quiet: QuietHours | None = None
    with tenant_tx(DEMO_SLUG) as tx:
        for email, role in DEMO_STAFF:
            create_user(tx, email, role, DEMO_PASSWORD)
        for name, days, plan, zone, email in DEMO_CLIENTS:
            client = create_client(tx, name, today + timedelta(days=days), plan, zone, actor="demo")
            user = create_user(tx, email, Role.CLIENT_USER, DEMO_PASSWORD, client_id=client.id)
            if email == QUIET_USER:
                user_zone = zone or DEMO_ZONE
                quiet = _quiet_hours_ending_soon(now, user_zone)
                save_schedule(tx, user.id, quiet=quiet, digest_time=DEFAULT_DIGEST_TIME,
                              weekly_day=DEFAULT_WEEKLY_DAY, zone=user_zone)
    yield from _logins("Seeded the demo tenant.")
    yield from seed_fraud_desk(DEMO_SLUG, DEMO_PASSWORD)
    yield from seed_metrology(DEMO_SLUG, DEMO_PASSWORD, now)
    if quiet is not None:
        yield (f"{QUIET_USER} is in quiet hours until {quiet.end:%H:%M} (her local time): her "
               "reminder email waits, and the sweeper sends it once they end.")


def _logins(first: str) -> Iterator[str]:
    yield first
    yield f"Demo logins (organisation '{DEMO_SLUG}', password '{DEMO_PASSWORD}'):"
    for email, role in DEMO_STAFF:
        yield f"    {email:<28} {role.value}"
    for name, days, *_, email in DEMO_CLIENTS:
        when = ("access lapsed" if days < 0 else
                f"expires in {days} day{'s' if days != 1 else ''}")
        yield f"    {email:<28} client user at {name} ({when})"
