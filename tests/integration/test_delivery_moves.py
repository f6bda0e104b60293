"""One source of truth for delivery moves: the state machine in domain/delivery/states.py is the
table PostgreSQL checks every status change against, so no SQL anywhere (a guarded UPDATE,
a provider event, the sweeper) can make a move the domain forbids. Every other test in the
suite runs with that check in place: each status change they cause is a move the domain
allows, or the test fails with the trigger's error."""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest

from db.delivery.provider_events import ProviderEvent, apply_event
from db.platform.pool import connection
from db.platform.tenancy import Tenant, tenant_tx
from domain.delivery.states import DELIVERY, TRANSITIONS, Status, provider_event_move
from tests.integration.builders import add_admin, add_client
from tocsin.core.clock import utcnow


def _one_delivery(tenant: Tenant, status: str) -> int:
    """A real delivery (claimed licence reminder to a real user), put in ``status`` as the
    migration's seed would, with the check bypassed for this one write only."""
    from db.notices.scan import run_scan

    add_admin(tenant)
    add_client(tenant, utcnow().date() + timedelta(days=7))
    run_scan(tenant.slug, utcnow())
    with tenant_tx(tenant.slug) as tx:
        row = tx.conn.execute("SELECT min(id) FROM notification_deliveries").fetchone()
        assert row is not None and row[0] is not None
        delivery_id = int(str(row[0]))
        tx.conn.execute("SET LOCAL session_replication_role = replica")  # triggers off here
        tx.conn.execute(
            "UPDATE notification_deliveries SET status = %s, batch_period = 'daily', batched_at = now() "
            "WHERE id = %s", [status, delivery_id])
    return delivery_id


def test_the_database_knows_exactly_the_moves_of_the_domain_state_machine() -> None:
    with connection() as conn:
        rows = conn.execute("SELECT from_status, to_status FROM control.state_moves "
                            "WHERE machine = 'delivery'").fetchall()
    in_database = {(str(a), str(b)) for a, b in rows}
    in_domain = {(a.value, b.value) for a, targets in TRANSITIONS.items() for b in targets}
    assert in_database == in_domain


def test_every_tenant_schema_checks_delivery_moves_with_the_trigger(tenant: Tenant) -> None:
    with connection() as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE t.tgname = 'delivery_moves_allowed' AND c.relname = 'notification_deliveries' "
            "AND n.nspname = %s", [tenant.schema]).fetchone()
    assert row == (1,)


@pytest.mark.parametrize(("source", "target"), [
    (Status.ACCEPTED, Status.PENDING),  # a sent email can never be sent again by a guard slip
    (Status.CANCELLED, Status.SENDING),
    (Status.BOUNCED, Status.DELIVERED),
    (Status.PENDING, Status.ACCEPTED),  # accepted only through a claim
])
def test_a_move_the_domain_forbids_is_refused_by_the_database(
    tenant: Tenant, source: Status, target: Status
) -> None:
    assert (source, target) not in DELIVERY.moves
    delivery_id = _one_delivery(tenant, source.value)
    with pytest.raises(psycopg.errors.CheckViolation, match=f"from {source} to {target}"), \
            tenant_tx(tenant.slug) as tx:
        tx.conn.execute("UPDATE notification_deliveries SET status = %s WHERE id = %s",
                        [target.value, delivery_id])
    with tenant_tx(tenant.slug) as tx:
        row = tx.conn.execute("SELECT status FROM notification_deliveries WHERE id = %s",
                              [delivery_id]).fetchone()
    assert row == (source.value,)  # nothing written


@pytest.mark.parametrize("event_type", ["send", "delivery", "bounce", "complaint", "reject"])
@pytest.mark.parametrize("source", list(Status))
def test_a_provider_event_moves_a_delivery_exactly_when_the_domain_allows_it(
    tenant: Tenant, event_type: str, source: Status
) -> None:
    """The SES event SQL takes its guard from the domain: from each status, an event either
    makes the domain's move or changes nothing (before, a Reject moved accepted and unknown
    deliveries to failed, which the domain's table did not allow)."""
    delivery_id = _one_delivery(tenant, source.value)
    move = provider_event_move(event_type)
    assert move is not None
    target, sources = move
    with tenant_tx(tenant.slug) as tx:
        after = apply_event(tx, ProviderEvent(delivery_id, event_type, f"ses-{delivery_id}",
                                              utcnow(), permanent_bounce=False, detail=None))
    if source in sources:
        assert ((source, target) in DELIVERY.moves)
        assert after == target.value
    else:
        assert after == source.value
    with tenant_tx(tenant.slug) as tx:
        row = tx.conn.execute("SELECT status FROM notification_deliveries WHERE id = %s",
                              [delivery_id]).fetchone()
    assert row == (after,)
