"""POST /renew as an attacker tries it: a client user renews only once the licence is expired
or within the renewal window (from the d30 reminder on), once per cycle, never a closed
account; every refusal is a clear 403 that writes nothing. Administrators keep their powers."""

from __future__ import annotations

from datetime import date, timedelta

from db.platform.tenancy import Tenant, tenant_tx
from tests.integration.portal_support import (
    People,
    PortalClient,
    csrf_token,
    local_today,
    sign_in,
)


def _trace(tenant: Tenant, client_id: int) -> tuple[object, ...]:
    """Everything a renewal writes: the client row, its licence events, its ledger rows."""
    with tenant_tx(tenant.slug) as tx:
        row = tx.conn.execute(
            "SELECT status, access_expires_on, "
            "(SELECT count(*) FROM license_events WHERE client_id = c.id), "
            "(SELECT count(*) FROM notification_ledger WHERE subject_id = c.id), "
            "(SELECT count(*) FROM notification_ledger WHERE subject_id = c.id AND status = 'cancelled') "
            "FROM clients c WHERE c.id = %s", [client_id]).fetchone()
    assert row is not None
    return tuple(row)


def _set_client(tenant: Tenant, client_id: int, status: str, expires_on: date) -> None:
    with tenant_tx(tenant.slug) as tx:  # put as a seed would: the licence machine's trigger off
        tx.conn.execute("SET LOCAL session_replication_role = replica")
        tx.conn.execute("UPDATE clients SET status = %s, access_expires_on = %s WHERE id = %s",
                        [status, expires_on, client_id])


def _renew(portal: PortalClient, expires_on: date, path: str = "/renew") -> tuple[int, str]:
    token = csrf_token(portal.get("/login").text)
    response = portal.post(path, follow_redirects=False, data={
        "_csrf_token": token, "expires_on": expires_on.isoformat(), "next": "/licence"})
    return response.status_code, response.text


def test_a_client_user_cannot_renew_an_active_licence_far_from_expiry(
    portal: PortalClient, people: People
) -> None:
    sign_in(portal, people.tenant.slug, people.other_client_user.email)
    before = _trace(people.tenant, people.other_client.id)

    status, page = _renew(portal, people.other_client.access_expires_on)

    assert status == 403 and "renewal opens 30 days before" in page
    assert _trace(people.tenant, people.other_client.id) == before


def test_a_client_user_renews_within_the_window_once_per_cycle(
    portal: PortalClient, people: People
) -> None:
    sign_in(portal, people.tenant.slug, people.client_user.email)  # expires in 7 days

    first, _ = _renew(portal, people.client.access_expires_on)
    renewed = _trace(people.tenant, people.client.id)
    new_expiry = renewed[1]
    assert first == 303 and isinstance(new_expiry, date)
    assert new_expiry > people.client.access_expires_on + timedelta(days=360)
    # A second renewal in the same cycle, naming the new date: refused, nothing written.
    second, page = _renew(portal, new_expiry)
    # The same form posted again (a double click) changes nothing either, quietly.
    replay, _ = _renew(portal, people.client.access_expires_on)

    assert second == 403 and "renewal opens 30 days before" in page
    assert replay == 303
    assert _trace(people.tenant, people.client.id) == renewed


def test_a_client_user_renews_at_the_first_day_of_the_window_and_after_expiry(
    portal: PortalClient, people: People
) -> None:
    today = local_today(people.tenant)
    sign_in(portal, people.tenant.slug, people.other_client_user.email)
    _set_client(people.tenant, people.other_client.id, "active", today + timedelta(days=31))
    assert _renew(portal, today + timedelta(days=31))[0] == 403
    _set_client(people.tenant, people.other_client.id, "active", today + timedelta(days=30))
    assert _renew(portal, today + timedelta(days=30))[0] == 303

    _set_client(people.tenant, people.other_client.id, "expired", today - timedelta(days=3))
    assert _renew(portal, today - timedelta(days=3))[0] == 303
    assert _trace(people.tenant, people.other_client.id)[:2] == (
        "active", today.replace(year=today.year + 1))


def test_a_client_user_cannot_reopen_a_closed_account_but_an_administrator_can(
    portal: PortalClient, people: People
) -> None:
    lapsed = local_today(people.tenant) - timedelta(days=20)
    _set_client(people.tenant, people.client.id, "closed", lapsed)
    sign_in(portal, people.tenant.slug, people.client_user.email)
    before = _trace(people.tenant, people.client.id)
    wall = portal.get("/")
    assert wall.status_code == 402 and "Only an administrator can reactivate" in wall.text
    assert 'action="/renew"' not in wall.text  # the page offers no button it would refuse

    status, page = _renew(portal, lapsed)

    assert status == 403 and "only an administrator can reactivate it" in page
    assert _trace(people.tenant, people.client.id) == before

    portal.cookies.clear()
    sign_in(portal, people.tenant.slug, people.admin.email)
    assert _renew(portal, lapsed, f"/clients/{people.client.id}/renew")[0] == 303
    assert _trace(people.tenant, people.client.id)[0] == "active"


def test_an_administrator_may_still_renew_an_active_licence_far_from_expiry(
    portal: PortalClient, people: People
) -> None:
    sign_in(portal, people.tenant.slug, people.admin.email)
    expires = people.other_client.access_expires_on

    status, _ = _renew(portal, expires, f"/clients/{people.other_client.id}/renew")

    assert status == 303
    assert _trace(people.tenant, people.other_client.id)[1] == expires.replace(year=expires.year + 1)
