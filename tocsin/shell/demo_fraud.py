"""The demo's second product: a fraud-case desk whose rules fire within seconds of start-up.

Two regions with their heads, two investigators, two rules a tenant admin could have written
("a case over 1,000,000 is created → the head of its region, email and inbox"; "a case is
reassigned → its new assignee"), a published API key for trying the events API with curl,
and a few events recorded the way a host application on the same PostgreSQL records them
(tocsin.shell.outbox.record_event, in the host's own transaction). No wake-up comes from a host's
process: the relay's polling finds them at its first tick. `tocsin demo-events` sends more
through the HTTP API with the Python client (tocsin/shell/client.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg

from db.events.api_keys import create_api_key
from db.events.products import add_unit, create_product
from db.people.users import create_user
from db.platform.tenancy import tenant_tx
from db.rules.definitions import create_rule
from domain.people.identity import Role
from tocsin.core import runtime
from tocsin.shell.outbox import record_event

__all__ = [
    "DEMO_API_KEY",
    "DEMO_EVENTS",
    "INVESTIGATORS",
    "LARGE_CASE_RULE",
    "REASSIGNED_RULE",
    "REGION_HEADS",
    "seed_fraud_desk",
    "send_demo_events",
]

# Published like the demo password: the demo tenant only, never a real one.
DEMO_API_KEY = "tsk_demo_0123456789abcdefghijklmnopqrstuvwxyz"
INVESTIGATORS = (("sam@demo.example", "Sam Okafor"), ("rui@demo.example", "Rui Costa"))
REGION_HEADS = (("north", "North", "head.north@demo.example", "Nadia North"),
                ("south", "South", "head.south@demo.example", "Sol South"))

LARGE_CASE_RULE: dict[str, Any] = {
    "name": "Large case created", "product": "fraud", "kind": "created",
    "trigger": {"subject_kind": "case"},
    "conditions": {"all": [{"fact": "field.amount", "op": "greater", "value": 1_000_000}]},
    "actions": {"channels": ["email", "in_app"], "category": "case_alert",
                "recipients": [{"type": "head", "level": "region"}],
                "template": {
                    "title": "Large case {{ subject.external_id }} in {{ hierarchy.region }}",
                    "body": "{{ subject.title }}: {{ field.amount }} {{ field.currency }} reported. "
                            "As head of the region you are told of every case over 1,000,000."}},
}
REASSIGNED_RULE: dict[str, Any] = {
    "name": "Case reassigned", "product": "fraud", "kind": "updated",
    "trigger": {"types": ["assigned"], "subject_kind": "case"},
    "conditions": {"all": [{"fact": "subject.assignees", "op": "changed"}]},
    "actions": {"channels": ["email", "in_app"], "category": "case_update",
                "recipients": [{"type": "assignees"}],
                "template": {"title": "Case {{ subject.external_id }} is now yours",
                             "body": "{{ subject.title }} was reassigned to you."}},
}


def _case(external_id: str, title: str, region: str, amount: int, assignee: str) -> dict[str, Any]:
    return {"product": "fraud", "type": "created",
            "subject": {"kind": "case", "external_id": external_id, "title": title,
                        "assignees": [assignee], "hierarchy": {"region": region},
                        "fields": {"amount": amount, "currency": "EUR"}}}


DEMO_EVENTS: tuple[dict[str, Any], ...] = (
    _case("FC-1001", "Card-not-present ring, Leeds", "north", 2_400_000, "sam@demo.example"),
    _case("FC-1002", "Refund abuse, Bristol", "south", 18_500, "rui@demo.example"),
    _case("FC-1003", "Invoice redirection, Plymouth", "south", 1_250_000, "rui@demo.example"),
    {"product": "fraud", "type": "updated", "trigger": "assigned",
     "subject": {"kind": "case", "external_id": "FC-1002", "assignees": ["sam@demo.example"]}},
)


def seed_fraud_desk(slug: str, password: str) -> Iterator[str]:
    with tenant_tx(slug) as tx:
        create_product(tx, "fraud", "Fraud cases", ("case",))
        for email, name in INVESTIGATORS:
            create_user(tx, email, Role.MEMBER, password, display_name=name)
        for code, name, email, head in REGION_HEADS:
            create_user(tx, email, Role.MEMBER, password, display_name=head)
            add_unit(tx, "region", code, name, email)
        create_rule(tx, LARGE_CASE_RULE, by="demo")
        create_rule(tx, REASSIGNED_RULE, by="demo")
    create_api_key(slug, "demo (published key)", published=DEMO_API_KEY)
    # The host's own connection and transaction: the events exist because it commits.
    with psycopg.connect(runtime.settings().database_url) as conn:
        for event in DEMO_EVENTS:
            record_event(conn, slug, event)
    yield (f"Fraud desk: product 'fraud', rules '{LARGE_CASE_RULE['name']}' and "
           f"'{REASSIGNED_RULE['name']}', {len(DEMO_EVENTS)} events recorded; their notices "
           "reach head.north@, head.south@ and sam@demo.example within seconds.")
    yield f"Demo API key (events API): {DEMO_API_KEY}"


def send_demo_events(base_url: str, api_key: str = DEMO_API_KEY) -> Iterator[str]:
    """A few more cases through the HTTP events API, as an integrating product sends them."""
    import secrets

    from tocsin.shell.client import TocsinClient

    tag = secrets.token_hex(2).upper()
    batch = [
        _case(f"FC-{tag}-1", "Account takeover, Newcastle", "north", 3_100_000, "rui@demo.example"),
        _case(f"FC-{tag}-2", "Chargeback spike, Exeter", "south", 42_000, "sam@demo.example"),
    ]
    with TocsinClient(base_url, api_key) as client:
        answer = client.send_batch(batch, idempotency_key=f"demo-{tag}")
    for event, result in zip(batch, answer["results"], strict=True):
        yield (f"sent {event['subject']['external_id']} (amount {event['subject']['fields']['amount']:,}): "
               f"event {result['event_id']}")
    yield "The large case's head of region is told within seconds (inbox and email)."
