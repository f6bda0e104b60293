"""Clients administered in the portal: an administrator adds a client, edits its details,
corrects its licence date with a reason (reminders waiting for the old date are cancelled),
archives and restores it, and invites and deactivates its users. A change based on an old
version is refused with who changed it and when; members and client users are refused
(403) with nothing changed; another tenant's clients do not exist here (404)."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta

import pytest
import redis
from litestar.testing import TestClient

from db.notices.licence_scan import claim_due_milestones
from db.people.clients import get_client, license_events
from db.people.users import create_user
from db.platform.tenancy import Tenant, tenant_tx
from domain.people.identity import Role
from portal.sessions import SESSION_COOKIE
from tests.integration.builders import delivery_statuses, scalar
from tests.integration.conftest import new_tenant, remove_tenant
from tests.integration.portal_support import (
    PASSWORD,
    People,
    PortalClient,
    csrf_token,
    local_today,
    sign_in,
    signed_in,
)
from tests.integration.test_session_hardening import _key as session_key
from tocsin.boot.web import build_app
from tocsin.core.settings import load_settings


def version(people: People, client_id: int | None = None) -> str:
    return str(scalar(people.tenant, "SELECT version FROM clients WHERE id = %s",
                      client_id or people.client.id))


def post(portal: PortalClient, html: str, path: str, **data: str) -> tuple[int, str]:
    answer = portal.post(path, data={"_csrf_token": csrf_token(html), **data}, follow_redirects=False)
    if answer.status_code == 303:
        return 303, portal.get(answer.headers["location"]).text
    return answer.status_code, answer.text


def footprint(tenant: Tenant) -> tuple[object, ...]:
    """What any change to a client would move."""
    with tenant_tx(tenant.slug) as tx:
        row = tx.conn.execute(
            "SELECT (SELECT count(*) FROM clients), (SELECT sum(version) FROM clients), "
            "(SELECT count(*) FROM license_events), (SELECT count(*) FROM users), "
            "(SELECT count(*) FROM users WHERE deactivated_at IS NOT NULL), "
            "(SELECT count(*) FROM audit_log WHERE action NOT LIKE 'sign%%')").fetchone()
    assert row is not None
    return tuple(row)


def test_an_administrator_adds_a_client_with_its_contact(portal: PortalClient, people: People) -> None:
    html = signed_in(portal, people, people.admin)
    form = portal.get("/clients/new").text
    assert 'name="expires_on"' in form
    status, page = post(portal, form, "/clients/new", name="Acme Assurance", expires_on="2031-06-30",
                        plan="enterprise", time_zone="Europe/Paris", contact_name="Inès Martin",
                        contact_email="ines@acme.example", contact_phone="+33 1 23 45 67 89")
    assert status == 303 and "Client added." in page and "Acme Assurance" in page
    client_id = int(scalar(people.tenant, "SELECT id FROM clients WHERE name = 'Acme Assurance'"))
    with tenant_tx(people.tenant.slug) as tx:
        client = get_client(tx, client_id)
        assert license_events(tx, client_id)[0][0] == "created"
    assert (client.plan, client.time_zone, client.access_expires_on, client.contact_email,
            client.contact_phone) == ("enterprise", "Europe/Paris", date(2031, 6, 30),
                                      "ines@acme.example", "+33 1 23 45 67 89")
    assert "Acme Assurance" in portal.get("/clients").text
    # Bad input: the form again, with what is wrong and what was typed; nothing written.
    before = footprint(people.tenant)
    status, page = post(portal, html, "/clients/new", name="Badly Zoned", expires_on="2031-01-01",
                        time_zone="Mars/Olympus")
    assert status == 400 and "Badly Zoned" in page and "time zone" in page.lower()
    assert footprint(people.tenant) == before


def test_an_edit_saves_a_new_version_and_a_stale_one_is_refused_with_the_current_values(
    portal: PortalClient, people: People
) -> None:
    signed_in(portal, people, people.admin)
    page = portal.get(f"/clients/{people.client.id}/manage").text
    seen = version(people)
    status, after = post(portal, page, f"/clients/{people.client.id}/details", name="Northwind Group",
                         plan="enterprise", contact_name="Ops desk", version=seen)
    assert status == 303 and "Details saved." in after and "Northwind Group" in after
    assert version(people) == str(int(seen) + 1)
    # A second tab, loaded before that save, now saves its own change.
    before = footprint(people.tenant)
    status, refused = post(portal, page, f"/clients/{people.client.id}/details", name="Northwind PLC",
                           plan="standard", version=seen)
    assert status == 409
    assert re.search(r"Changed by admin@tenant\.example at \d{4}-\d\d-\d\d \d\d:\d\d UTC", refused)
    assert 'value="Northwind Group"' in refused and "Northwind PLC" not in refused
    assert footprint(people.tenant) == before


def test_correcting_the_expiry_cancels_reminders_waiting_for_the_old_date(
    portal: PortalClient, people: People
) -> None:
    waiting = delivery_statuses(people.tenant)
    assert waiting.get("pending", 0) >= 1  # the d7 reminder for the old date, not sent yet
    html = signed_in(portal, people, people.admin)
    new_date = local_today(people.tenant) + timedelta(days=400)
    status, page = post(portal, html, f"/clients/{people.client.id}/expiry",
                        expires_on=new_date.isoformat(), reason="", version=version(people))
    assert status == 400 and "say why" in page.lower()
    status, page = post(portal, html, f"/clients/{people.client.id}/expiry",
                        expires_on=new_date.isoformat(), reason="Signed a two-year contract",
                        version=version(people))
    assert status == 303 and "Expiry date changed." in page
    assert delivery_statuses(people.tenant).get("pending", 0) == 0
    reason = scalar(people.tenant, "SELECT status_reason FROM notification_ledger WHERE subject_id = %s "
                    "AND threshold = 'd7'", people.client.id)
    assert reason == "licence date corrected before delivery"
    assert scalar(people.tenant, "SELECT reason FROM license_events WHERE event = 'corrected'") == \
        "Signed a two-year contract"
    with tenant_tx(people.tenant.slug) as tx:  # the new date's cadence: nothing due for a year
        assert get_client(tx, people.client.id).access_expires_on == new_date
        assert claim_due_milestones(tx, datetime.now(UTC)).claimed == 0


def test_an_expired_client_corrected_to_a_later_date_is_active_again(
    portal: PortalClient, people: People
) -> None:
    with tenant_tx(people.tenant.slug) as tx:
        tx.conn.execute("UPDATE clients SET access_expires_on = %s WHERE id = %s",
                        [local_today(people.tenant) - timedelta(days=2), people.client.id])
        claim_due_milestones(tx, datetime.now(UTC))
        assert get_client(tx, people.client.id).status == "expired"
    html = signed_in(portal, people, people.admin)
    status, _ = post(portal, html, f"/clients/{people.client.id}/expiry",
                     expires_on=(local_today(people.tenant) + timedelta(days=30)).isoformat(),
                     reason="Payment arrived late", version=version(people))
    assert status == 303
    with tenant_tx(people.tenant.slug) as tx:
        assert get_client(tx, people.client.id).status == "active"


def test_an_archived_client_leaves_the_list_and_the_scan_until_restored(
    portal: PortalClient, people: People
) -> None:
    html = signed_in(portal, people, people.admin)
    status, page = post(portal, html, f"/clients/{people.client.id}/archive", version=version(people))
    assert status == 303 and "Client archived" in page
    assert "Northwind Analytics" not in portal.get("/clients").text
    assert "Northwind Analytics" in portal.get("/clients", params={"archived": "true"}).text
    with tenant_tx(people.tenant.slug) as tx:  # moved to its last day: still no reminder
        tx.conn.execute("UPDATE clients SET access_expires_on = %s WHERE id = %s",
                        [local_today(people.tenant) + timedelta(days=1), people.client.id])
        assert claim_due_milestones(tx, datetime.now(UTC)).claimed == 0
    status, page = post(portal, html, f"/clients/{people.client.id}/restore", version=version(people))
    assert status == 303 and "Client restored" in page
    with tenant_tx(people.tenant.slug) as tx:
        assert claim_due_milestones(tx, datetime.now(UTC)).claimed == 1  # its d1 reminder
    assert "Northwind Analytics" in portal.get("/clients").text


def test_an_archived_clients_users_are_signed_out_and_refused_until_it_is_restored(
    portal: PortalClient, people: People
) -> None:
    store = redis.Redis.from_url(load_settings().redis_url)
    try:
        with TestClient(app=build_app()) as theirs:
            assert sign_in(theirs, people.tenant.slug, people.client_user.email).status_code == 303
            their_key = session_key(theirs)
            assert theirs.get("/", follow_redirects=False).status_code == 200
            html = signed_in(portal, people, people.admin)

            status, _ = post(portal, html, f"/clients/{people.client.id}/archive", version=version(people))
            assert status == 303
            assert not store.exists(their_key)  # ended at once, on every device
            assert theirs.get("/", follow_redirects=False).status_code == 303  # to the sign-in page
            refused = sign_in(theirs, people.tenant.slug, people.client_user.email)
            assert refused.status_code == 403 and "has been archived" in refused.text.replace("&#39;", "'")
            assert SESSION_COOKIE not in theirs.cookies
            # A wrong password still says only that the credentials are wrong.
            wrong = sign_in(theirs, people.tenant.slug, people.client_user.email, "not the password")
            assert wrong.status_code == 400 and "archived" not in wrong.text
            assert scalar(people.tenant, "SELECT count(*) FROM audit_log WHERE action = 'sign_in.refused' "
                          "AND after ->> 'reason' = 'client archived'") == 1
            # Another client's user is not concerned.
            assert sign_in(theirs, people.tenant.slug, people.other_client_user.email).status_code == 303
            theirs.cookies.clear()

            status, _ = post(portal, html, f"/clients/{people.client.id}/restore", version=version(people))
            assert status == 303
            assert sign_in(theirs, people.tenant.slug, people.client_user.email).status_code == 303
            assert theirs.get("/", follow_redirects=False).status_code == 200
    finally:
        store.close()


def test_an_administrator_invites_and_deactivates_a_clients_user(
    portal: PortalClient, people: People
) -> None:
    html = signed_in(portal, people, people.admin)
    status, page = post(portal, html, f"/clients/{people.client.id}/users/invite",
                        email="Finance@Northwind.example", display_name="Finance team")
    assert status == 303 and "Invitation sent." in page and "finance@northwind.example" in page
    assert scalar(people.tenant, "SELECT client_id FROM users WHERE email = 'finance@northwind.example'") \
        == people.client.id
    status, page = post(portal, html, f"/clients/{people.client.id}/users/invite",
                        email="ops@northwind.example")
    assert status == 409 and "already has an account" in page
    # Another client's user is not this client's to deactivate.
    status, _ = post(portal, html,
                     f"/clients/{people.client.id}/users/{people.other_client_user.id}/deactivate")
    assert status == 404
    status, page = post(portal, html,
                        f"/clients/{people.client.id}/users/{people.client_user.id}/deactivate")
    assert status == 303 and "Account deactivated" in page
    assert scalar(people.tenant, "SELECT deactivated_at IS NOT NULL FROM users WHERE id = %s",
                  people.client_user.id) is True


ADMIN_ACTIONS = [
    ("get", "/clients/new", {}), ("post", "/clients/new", {"name": "X", "expires_on": "2031-01-01"}),
    ("get", "/clients/{id}/manage", {}),
    ("post", "/clients/{id}/details", {"name": "X", "plan": "standard", "version": "1"}),
    ("post", "/clients/{id}/expiry", {"expires_on": "2031-01-01", "reason": "r", "version": "1"}),
    ("post", "/clients/{id}/archive", {"version": "1"}),
    ("post", "/clients/{id}/restore", {"version": "1"}),
    ("post", "/clients/{id}/users/invite", {"email": "x@northwind.example"}),
    ("post", "/clients/{id}/users/{user}/deactivate", {}),
]


@pytest.mark.parametrize("who", ["member", "client_user"])
def test_members_and_client_users_are_refused_every_client_administration_with_403(
    portal: PortalClient, people: People, who: str
) -> None:
    if who == "member":
        with tenant_tx(people.tenant.slug) as tx:
            user = create_user(tx, "member@tenant.example", Role.MEMBER, PASSWORD)
    else:
        user = people.client_user
    html = signed_in(portal, people, user)
    before = footprint(people.tenant)
    for method, path, data in ADMIN_ACTIONS:
        url = path.format(id=people.client.id, user=people.client_user.id)
        if method == "get":
            status = portal.get(url).status_code
        else:
            status = portal.post(url, data={"_csrf_token": csrf_token(html), **data},
                                 follow_redirects=False).status_code
        assert status == 403, (who, url, status)
    assert footprint(people.tenant) == before


def test_another_tenants_clients_are_not_found(portal: PortalClient, people: People) -> None:
    other = new_tenant()
    try:
        with tenant_tx(other.slug) as tx:
            from db.people.clients import create_client

            theirs = create_client(tx, "Their Client", date(2031, 1, 1))
            their_user = create_user(tx, "user@their.example", Role.CLIENT_USER, PASSWORD,
                                     client_id=theirs.id)
        html = signed_in(portal, people, people.admin)
        before = footprint(other)
        # Ids that do not exist here (the other tenant's are far beyond this tenant's).
        missing = int(scalar(people.tenant, "SELECT max(id) FROM clients")) + 1000 + theirs.id
        assert portal.get(f"/clients/{missing}/manage").status_code == 404
        for method, path, data in ADMIN_ACTIONS:
            if method == "post" and "{id}" in path:
                url = path.format(id=missing, user=their_user.id)
                status = portal.post(url, data={"_csrf_token": csrf_token(html), **data},
                                     follow_redirects=False).status_code
                assert status == 404, (url, status)
        assert footprint(other) == before
    finally:
        remove_tenant(other)


def test_two_administrators_saving_at_once_from_the_same_version_one_wins_the_other_is_told(
    people: People
) -> None:
    from db.people.client_admin import ClientDetails, StaleEdit, edit_client
    from domain.people.contacts import NO_CONTACTS
    from domain.people.identity import Plan
    from tests.integration.builders import run_concurrently

    seen = int(version(people))

    def save(name: str) -> None:
        with tenant_tx(people.tenant.slug) as tx:
            edit_client(tx, people.client.id, seen, ClientDetails(name, Plan.STANDARD, None, NO_CONTACTS))

    errors = run_concurrently(*(lambda n=n: save(f"Northwind {n}") for n in range(4)))
    assert len(errors) == 3 and all(isinstance(e, StaleEdit) for e in errors), errors
    assert int(version(people)) == seen + 1
    assert scalar(people.tenant, "SELECT count(*) FROM audit_log WHERE action = 'client.edit'") == 1
