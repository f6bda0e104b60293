"""How the relay hands over what it evaluated, on real PostgreSQL and the suite's broker
with no worker running: with Redis, a product whose preparation queue is idle has its
claims prepared by the relay itself, and a product with messages waiting, or whose
preparation just failed there, gets them through its queue; with RabbitMQ (whose queues
cannot be looked at cheaply) every claim takes its product's queue. A relay that finds its
tenant locked leaves the event to the holder, who is told to claim once more."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from actors.prepare import send_preparation
from actors.relay import coordination, relay_tenant
from db.platform.tenancy import Tenant, tenant_tx
from db.rules.definitions import create_rule
from tests.integration.intake_support import case_event, fraud_desk
from tocsin.core import runtime
from tocsin.messaging.broker import current_broker
from tocsin.messaging.queues import RabbitmqQueueDepths, RedisQueueDepths
from tocsin.shell.outbox import record_event

QUEUE = "prepare_fraud"
ON_RABBITMQ = bool(os.environ.get("BROKER_URL"))
# What the relay does only with the Redis broker (actors/prepare.py prepare_or_send).
redis_broker_only = pytest.mark.skipif(ON_RABBITMQ, reason="the relay prepares inline only on Redis")


def _rule(title: str = "Large case {{ subject.external_id }}") -> dict[str, Any]:
    return {"name": "Large case created", "product": "fraud", "kind": "created", "trigger": {},
            "conditions": {"all": [{"fact": "field.amount", "op": "greater", "value": 1_000}]},
            "actions": {"channels": ["in_app"], "category": "case_alert",
                        "recipients": [{"type": "assignees"}],
                        "template": {"title": title, "body": "Amount {{ field.amount }}"}}}


def _desk(tenant: Tenant, rule: dict[str, Any]) -> None:
    fraud_desk(tenant)
    with tenant_tx(tenant.slug) as tx:
        create_rule(tx, rule, by="test")


def _host_event(tenant: Tenant, external_id: str) -> int:
    with psycopg.connect(runtime.settings().database_url) as conn:
        return record_event(conn, tenant.slug, case_event(
            external_id, assignees=["ana@example.com"], fields={"amount": 5_000}))


def _one(tenant: Tenant, query: str) -> Any:
    with tenant_tx(tenant.slug) as tx:
        row = tx.conn.execute(query).fetchone()
    assert row is not None
    return row[0]


def _waiting() -> int:
    """Messages waiting in the product's queue, from the broker the suite runs on."""
    broker_url = runtime.settings().broker_url
    if broker_url:
        return RabbitmqQueueDepths(broker_url).depth(QUEUE).ready
    broker = current_broker()
    return RedisQueueDepths(broker.client, broker.namespace).waiting(QUEUE)  # type: ignore[attr-defined]


@pytest.fixture
def empty_queue() -> Iterator[None]:
    """The product's queue starts and ends empty (no worker runs in these tests)."""
    current_broker().flush(QUEUE)
    yield
    current_broker().flush(QUEUE)


@redis_broker_only
def test_claims_of_a_product_whose_queue_is_idle_are_prepared_by_the_relay_itself(
        tenant: Tenant, empty_queue: None) -> None:
    _desk(tenant, _rule())
    _host_event(tenant, "C-1")

    relay_tenant.fn(tenant.slug)  # no worker runs: nothing else could have prepared it

    assert _one(tenant, "SELECT count(*) FROM notifications WHERE category = 'case_alert'") == 1
    assert _one(tenant, "SELECT title FROM notifications") == "Large case C-1"
    assert _one(tenant, "SELECT count(*) FROM notification_ledger WHERE prepared_at IS NULL") == 0
    assert _waiting() == 0


def test_claims_of_a_product_with_messages_waiting_take_its_queue(
        tenant: Tenant, empty_queue: None) -> None:
    _desk(tenant, _rule())
    send_preparation(tenant.slug, "fraud", [])  # a backlog: one message waits already
    _host_event(tenant, "C-2")

    relay_tenant.fn(tenant.slug)

    assert _one(tenant, "SELECT count(*) FROM events WHERE status = 'evaluated'") == 1
    assert _one(tenant, "SELECT count(*) FROM notifications") == 0
    assert _one(tenant, "SELECT count(*) FROM notification_ledger WHERE prepared_at IS NULL") == 1
    assert _waiting() == 2  # behind the backlog, in order


@pytest.mark.skipif(not ON_RABBITMQ, reason="the RabbitMQ broker's hand-over")
def test_on_rabbitmq_every_claim_takes_its_products_queue(tenant: Tenant, empty_queue: None) -> None:
    _desk(tenant, _rule())
    _host_event(tenant, "C-6")

    relay_tenant.fn(tenant.slug)

    assert _one(tenant, "SELECT count(*) FROM events WHERE status = 'evaluated'") == 1
    assert _one(tenant, "SELECT count(*) FROM notifications") == 0
    assert _one(tenant, "SELECT count(*) FROM notification_ledger WHERE prepared_at IS NULL") == 1
    assert _waiting() == 1


@redis_broker_only
def test_a_preparation_that_fails_in_the_relay_is_counted_and_its_product_takes_the_queue(
        tenant: Tenant, empty_queue: None) -> None:
    _desk(tenant, _rule())
    with tenant_tx(tenant.slug) as tx:  # a recipient preparation cannot resolve (saved before validation)
        tx.conn.execute("UPDATE rule_versions SET definition = jsonb_set(definition, "
                        "'{actions,recipients}', '[{\"type\": \"nobody\"}]')")
    _host_event(tenant, "C-3")

    relay_tenant.fn(tenant.slug)

    attempts, error = _one(tenant, "SELECT array[prepare_attempts::text, prepare_error] "
                                   "FROM notification_ledger")
    assert int(attempts) == 1 and "unknown recipient type" in error  # as the actor records it
    assert _waiting() == 1  # retried from the queue, within PREPARE_MAX_ATTEMPTS

    _host_event(tenant, "C-4")
    relay_tenant.fn(tenant.slug)

    # Paused for this product: the next claim is not tried in the relay at all.
    assert _one(tenant, "SELECT count(*) FROM notification_ledger WHERE prepare_attempts = 0") == 1
    assert _waiting() == 2
    assert _one(tenant, "SELECT count(*) FROM notifications") == 0


def test_a_relay_that_finds_its_tenant_locked_leaves_the_event_to_the_holders_next_pass(
        tenant: Tenant, empty_queue: None) -> None:
    _desk(tenant, _rule())
    coord = coordination()
    holder = coord.acquire(tenant.slug, 60)  # another relay is between its claim and commit
    assert holder is not None
    _host_event(tenant, "C-5")

    relay_tenant.fn(tenant.slug)  # finds the lock taken: leaves at once

    assert _one(tenant, "SELECT count(*) FROM events WHERE status = 'pending'") == 1
    assert coord.release(tenant.slug, holder) is True  # the holder is asked for one more pass
    relay_tenant.fn(tenant.slug)  # that pass
    assert _one(tenant, "SELECT count(*) FROM events WHERE status = 'evaluated'") == 1
    assert _one(tenant, "SELECT count(*) FROM notification_ledger") == 1

    unasked = coord.acquire(tenant.slug, 60)
    assert unasked is not None
    assert coord.release(tenant.slug, unasked) is False
