"""The demo's third product: legal metrology. Three sites in three zones (London, Kolkata,
Auckland), each with a site manager (the head of its unit) and a technician, and instrument
calibration certificates falling due within 40 days of each site's own today; a time rule
reminds the technician and the site manager 30, 7 and 1 day before and on the due date,
in the inbox and by email.

Some certificates sit inside a reminder's window on the day the demo is seeded, so the
clock's first scan claims their notices: the obligations page shows what is due and when
the next reminder goes out, and the inbox shows the reminders, on first start. The
certificates are recorded the way a host on the same PostgreSQL records them
(tocsin.shell.outbox.record_event, in its own transaction), like the fraud desk's cases.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import psycopg

from db.events.products import add_unit, create_product
from db.people.users import create_user
from db.platform.tenancy import tenant_tx
from db.rules.definitions import create_rule
from domain.people.identity import Role
from tocsin.core import runtime
from tocsin.core.clock import utcnow
from tocsin.shell.outbox import record_event

__all__ = [
    "CALIBRATION_RULE",
    "CERTIFICATES",
    "PRODUCT",
    "SITES",
    "SITE_LEVEL",
    "certificate_event",
    "demo_certificates",
    "seed_metrology",
    "set_up_metrology",
]

PRODUCT = "metrology"
SITE_LEVEL = "site"
# (unit code, site name, zone, site manager's email and name, technician's email and name)
SITES = (
    ("london", "London weighbridge", "Europe/London",
     "manager.london@demo.example", "Lena Marsh", "tech.london@demo.example", "Tom Reid"),
    ("kolkata", "Kolkata fuel depot", "Asia/Kolkata",
     "manager.kolkata@demo.example", "Kavya Rao", "tech.kolkata@demo.example", "Arjun Das"),
    ("auckland", "Auckland port scales", "Pacific/Auckland",
     "manager.auckland@demo.example", "Mere Ngata", "tech.auckland@demo.example", "Liam Hart"),
)
# (certificate, instrument, site, days from the site's today to the calibration due date):
# on the first day 0, 1, 3, 6, 12 and 25 are inside a window (on the day, -1, -7, -7, -30 and
# -30), -2 is overdue (its on-the-day notice is due), and 38 waits for its -30 window.
CERTIFICATES = (
    ("CAL-L-101", "Weighbridge WB-3 (60 t)", "london", 3),
    ("CAL-L-102", "Platform scale PS-12", "london", 25),
    ("CAL-L-103", "Axle weigher AW-1", "london", 38),
    ("CAL-K-201", "Fuel dispenser FD-7", "kolkata", 1),
    ("CAL-K-202", "Flow meter FM-22", "kolkata", 12),
    ("CAL-K-203", "Tank gauge TG-4", "kolkata", -2),
    ("CAL-A-301", "Crane scale CS-9", "auckland", 0),
    ("CAL-A-302", "Container weigher CW-2", "auckland", 6),
)

CALIBRATION_RULE: dict[str, Any] = {
    "name": "Calibration certificate due", "product": PRODUCT, "kind": "time",
    "trigger": {"subject_kind": "certificate",
                "due": {"fact": "field.calibration_due", "offsets": [-30, -7, -1, 0]}},
    "conditions": {"all": [{"fact": "subject.status", "op": "not_equals", "value": "closed"}]},
    "actions": {"channels": ["email", "in_app"], "category": "obligation_due",
                "recipients": [{"type": "assignees"}, {"type": "head", "level": SITE_LEVEL}],
                "template": {
                    "title": "Calibration of {{ field.instrument }} due {{ due.date }}",
                    "body": "Certificate {{ subject.external_id }} at {{ field.site }}: the "
                            "instrument's calibration is due on {{ due.date }} (site's local date). "
                            "Book the verification before then so it stays in legal use."}},
}


def certificate_event(external_id: str, instrument: str, site: str, site_name: str, zone: str,
                      due: date, assignee: str, status: str = "open") -> dict[str, Any]:
    """A certificate as a host product sends it: the site's zone, its unit, the due date."""
    return {"product": PRODUCT, "type": "created",
            "subject": {"kind": "certificate", "external_id": external_id,
                        "title": instrument, "time_zone": zone, "status": status,
                        "assignees": [assignee], "hierarchy": {SITE_LEVEL: site},
                        "fields": {"instrument": instrument, "site": site_name,
                                   "calibration_due": due.isoformat()}}}


def set_up_metrology(slug: str, password: str) -> None:
    """The product, its sites with their people, and the calibration rule."""
    with tenant_tx(slug) as tx:
        create_product(tx, PRODUCT, "Legal metrology", ("certificate",))
        for code, name, _zone, manager, manager_name, tech, tech_name in SITES:
            create_user(tx, manager, Role.MEMBER, password, display_name=manager_name)
            create_user(tx, tech, Role.MEMBER, password, display_name=tech_name)
            add_unit(tx, SITE_LEVEL, code, name, manager)
        create_rule(tx, CALIBRATION_RULE, by="demo")


def demo_certificates(now: datetime) -> list[dict[str, Any]]:
    """The demo's certificates as events, each due date counted from its site's own today."""
    sites = {code: (name, zone, tech) for code, name, zone, _m, _mn, tech, _tn in SITES}
    events = []
    for external_id, instrument, site, days in CERTIFICATES:
        name, zone, tech = sites[site]
        due = now.astimezone(ZoneInfo(zone)).date() + timedelta(days=days)
        events.append(certificate_event(external_id, instrument, site, name, zone, due, tech))
    return events


def seed_metrology(slug: str, password: str, now: datetime | None = None) -> Iterator[str]:
    set_up_metrology(slug, password)
    # The host's own connection and transaction: the certificates exist because it commits.
    with psycopg.connect(runtime.settings().database_url) as conn:
        for event in demo_certificates(now or utcnow()):
            record_event(conn, slug, event)
    yield (f"Legal metrology: {len(CERTIFICATES)} calibration certificates at sites in London, "
           f"Kolkata and Auckland, due within 40 days, and the rule '{CALIBRATION_RULE['name']}' "
           "(30, 7 and 1 day before, and on the day). The first scan reminds their technicians and "
           "site managers (manager.london@, tech.kolkata@demo.example, ...); see Obligations.")
