"""What the intake tests share: a tenant with a fraud product, people to assign, regions,
and read-backs of the outbox and the register."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from db.events.products import add_unit, create_product
from db.people.users import create_user
from db.platform.tenancy import Tenant, tenant_tx
from domain.people.identity import Role

PASSWORD = "correct-horse-battery"


@dataclass(frozen=True)
class Desk:
    tenant: Tenant
    ana: str
    ben: str


def fraud_desk(tenant: Tenant) -> Desk:
    with tenant_tx(tenant.slug) as tx:
        create_product(tx, "fraud", "Fraud cases", ("case",))
        create_user(tx, "ana@example.com", Role.MEMBER, PASSWORD)
        create_user(tx, "ben@example.com", Role.MEMBER, PASSWORD)
        add_unit(tx, "region", "north", "North")
        add_unit(tx, "region", "south", "South")
    return Desk(tenant, "ana@example.com", "ben@example.com")


def case_event(external_id: str = "C-1042", event_type: str = "created", **subject: Any) -> dict[str, Any]:
    event: dict[str, Any] = {"product": "fraud", "type": event_type,
                             "subject": {"kind": "case", "external_id": external_id, **subject}}
    if event_type == "updated":
        event["trigger"] = "field_changed"
    return event


def events_of(tenant: Tenant) -> list[dict[str, Any]]:
    with tenant_tx(tenant.slug) as tx, tx.conn.cursor() as cur:
        cur.execute("SELECT e.id, e.event_type, e.trigger_type, e.changes, e.metadata, e.source, "
                    "e.status, s.external_id FROM events e JOIN subjects s ON s.id = e.subject_id "
                    "ORDER BY e.id")
        names = [d.name for d in cur.description or []]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

