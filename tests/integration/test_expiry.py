"""The expiry is a guarded state change: the notice exists only for the pass whose UPDATE
returned the row, and a client renewed in time is never expired."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from db.notices.scan import run_scan
from db.people.clients import get_client, license_events, renew_licence
from db.platform.tenancy import Tenant, tenant_tx
from tests.integration.builders import add_admin, add_client, claimed, ledger, scan_concurrently
from tests.integration.conftest import RunningWorker, SesOutbox

EXPIRES = date(2027, 8, 1)
EXPIRY_MORNING = datetime(2027, 8, 1, 8, 0, tzinfo=UTC)


def test_two_concurrent_expiry_passes_give_one_expired_notice(
    tenant: Tenant, worker: RunningWorker, ses: SesOutbox
) -> None:
    client, _ = add_client(tenant, EXPIRES, users=1)
    add_admin(tenant)
    errors = scan_concurrently(tenant, EXPIRY_MORNING, 2)
    worker.drain()

    assert errors == []
    with tenant_tx(tenant.slug) as tx:
        assert get_client(tx, client.id).status == "expired"
        events = [e[0] for e in license_events(tx, client.id)]
    assert events.count("expired") == 1
    assert claimed(tenant) == {(client.id, "expiry")}
    notices = [e for e in ses.sent() if "annual licence expired" in e.subject]
    assert len(notices) == 2  # the client user and the admin, once each


def test_a_client_renewed_before_its_expiry_date_is_not_expired(tenant: Tenant) -> None:
    client, _ = add_client(tenant, EXPIRES, users=0)
    with tenant_tx(tenant.slug) as tx:
        renewed = renew_licence(tx, client.id, today=EXPIRES - timedelta(days=3), actor="test")
    assert renewed is not None and renewed.client.access_expires_on == date(2028, 8, 1)

    run_scan(tenant.slug, EXPIRY_MORNING)
    run_scan(tenant.slug, EXPIRY_MORNING + timedelta(days=2))

    with tenant_tx(tenant.slug) as tx:
        assert get_client(tx, client.id).status == "active"
    assert [r for r in ledger(tenant) if r["threshold"] in ("expiry", "grace1")] == []


def test_a_client_past_grace_is_closed_once_and_its_data_kept(tenant: Tenant) -> None:
    client, _ = add_client(tenant, EXPIRES, users=0)
    run_scan(tenant.slug, EXPIRY_MORNING)
    for day in (14, 15, 40):
        run_scan(tenant.slug, EXPIRY_MORNING + timedelta(days=day))
    with tenant_tx(tenant.slug) as tx:
        assert get_client(tx, client.id).status == "closed"
        events = [e[0] for e in license_events(tx, client.id)]
    assert events == ["created", "expired", "closed"]
    assert (client.id, "closed") in claimed(tenant)
