"""The demo tenant: clients whose licences sit at different points of the cadence, so the
first tick produces reminders, an expiry and a grace nudge. Idempotent."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

from db.clients import create_client
from db.tenancy import create_tenant, list_tenants, tenant_tx
from db.users import create_user
from domain.identity import Plan, Role

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


def seed_demo(today: date | None = None) -> Iterator[str]:
    if any(t.slug == DEMO_SLUG for t in list_tenants()):
        yield from _logins("Demo tenant already seeded; reusing it.")
        return
    create_tenant(DEMO_SLUG, "Demo Compliance Co", DEMO_ZONE)
    today = today or datetime.now(UTC).astimezone(ZoneInfo(DEMO_ZONE)).date()
    with tenant_tx(DEMO_SLUG) as tx:
        for email, role in DEMO_STAFF:
            create_user(tx, email, role, DEMO_PASSWORD)
        for name, days, plan, zone, email in DEMO_CLIENTS:
            client = create_client(tx, name, today + timedelta(days=days), plan, zone, actor="demo")
            create_user(tx, email, Role.CLIENT_USER, DEMO_PASSWORD, client_id=client.id)
    yield from _logins("Seeded the demo tenant.")


def _logins(first: str) -> Iterator[str]:
    yield first
    yield f"Demo logins (organisation '{DEMO_SLUG}', password '{DEMO_PASSWORD}'):"
    for email, role in DEMO_STAFF:
        yield f"    {email:<28} {role.value}"
    for name, days, *_, email in DEMO_CLIENTS:
        when = ("access lapsed" if days < 0 else
                f"expires in {days} day{'s' if days != 1 else ''}")
        yield f"    {email:<28} client user at {name} ({when})"
