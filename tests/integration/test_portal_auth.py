"""Signing in under attack, and the tenant boundary: the login rate limit per account and per
address, CSRF on every state change, other tenants' and other users' object ids, unknown
query parameters and over-long input."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from db.delivery.inbox import add_to_inbox
from db.platform.tenancy import Tenant, tenant_tx
from portal.ratelimit import ACCOUNT_FAILURES, ADDRESS_FAILURES
from portal.sessions import SESSION_COOKIE
from tests.integration.builders import add_admin, add_client
from tests.integration.portal_support import (
    GENERIC_ERROR,
    HTMX,
    PASSWORD,
    People,
    PortalClient,
    csrf_token,
    notification_ids,
    sign_in,
    signed_in,
    unread_of,
)

PAUSED = "Too many failed sign-in attempts"


def test_an_account_is_paused_after_repeated_wrong_passwords_even_for_the_right_one(
    portal: PortalClient, people: People
) -> None:
    email = people.client_user.email
    for _ in range(ACCOUNT_FAILURES):
        assert sign_in(portal, people.tenant.slug, email, "wrong password").status_code == 400

    refused = sign_in(portal, people.tenant.slug, email)  # the right password, too late

    assert refused.status_code == 429
    assert PAUSED in refused.text and "try again in 15 minutes" in refused.text
    assert SESSION_COOKIE not in portal.cookies
    # Another account from the same address is not paused by this account's failures.
    assert sign_in(portal, people.tenant.slug, people.admin.email).status_code == 303


def test_a_correct_password_clears_the_accounts_failures(portal: PortalClient, people: People) -> None:
    email = people.client_user.email
    for _ in range(ACCOUNT_FAILURES - 1):
        sign_in(portal, people.tenant.slug, email, "wrong password")
    assert sign_in(portal, people.tenant.slug, email).status_code == 303
    portal.cookies.clear()

    for _ in range(ACCOUNT_FAILURES - 1):
        assert sign_in(portal, people.tenant.slug, email, "wrong password").status_code == 400
    assert sign_in(portal, people.tenant.slug, email).status_code == 303


def test_one_address_spraying_many_accounts_is_paused(portal: PortalClient, people: People) -> None:
    for n in range(ADDRESS_FAILURES):
        response = sign_in(portal, people.tenant.slug, f"guess{n}@example.com", "wrong password")
        assert response.status_code == 400 and GENERIC_ERROR in response.text

    refused = sign_in(portal, people.tenant.slug, people.admin.email)

    assert refused.status_code == 429 and PAUSED in refused.text


@pytest.mark.parametrize(
    "action", ["read", "unread", "archive", "acknowledge"],
)
def test_every_inbox_action_without_a_valid_csrf_token_is_refused_and_changes_nothing(
    portal: PortalClient, people: People, action: str
) -> None:
    signed_in(portal, people, people.client_user)
    [notification] = notification_ids(people.tenant, people.client_user)

    missing = portal.post(f"/notifications/{notification}/{action}", headers=HTMX)
    forged = portal.post(f"/notifications/{notification}/{action}", data={"_csrf_token": "forged"})

    assert missing.status_code == forged.status_code == 403
    with tenant_tx(people.tenant.slug) as tx:
        row = tx.conn.execute(
            "SELECT n.read_at, n.archived_at, l.acknowledged_at FROM notifications n "
            "JOIN notification_ledger l ON l.id = n.ledger_id WHERE n.id = %s", [notification]
        ).fetchone()
    assert row == (None, None, None)


def test_renewal_invitation_and_member_changes_need_the_csrf_token(
    portal: PortalClient, people: People
) -> None:
    signed_in(portal, people, people.admin)
    expires = people.client.access_expires_on.isoformat()

    for path, data in (
        (f"/clients/{people.client.id}/renew", {"expires_on": expires}),
        ("/members/invite", {"email": "new@example.com", "role": "member"}),
        (f"/members/{people.client_user.id}/deactivate", {}),
        ("/inbox/read-all", {}),
    ):
        assert portal.post(path, data=data).status_code == 403, path

    with tenant_tx(people.tenant.slug) as tx:
        users = tx.conn.execute("SELECT count(*) FROM users WHERE deactivated_at IS NULL").fetchone()
        client = tx.conn.execute("SELECT access_expires_on FROM clients WHERE id = %s",
                                 [people.client.id]).fetchone()
    assert users == (3,) and client == (people.client.access_expires_on,)
    assert unread_of(people.tenant, people.admin) == 1


def test_another_tenants_object_ids_are_not_found(
    portal: PortalClient, people: People, make_tenant: Callable[..., Tenant]
) -> None:
    elsewhere = make_tenant()
    their_client, [their_user] = add_client(elsewhere, people.client.access_expires_on,
                                            name="Elsewhere Ltd")
    their_admin = add_admin(elsewhere, "admin@elsewhere.example")
    with tenant_tx(elsewhere.slug) as tx:
        item = add_to_inbox(tx, their_admin.id, "report_ready", "Their report", "Private",
                            idempotency_key="theirs")
    assert item is not None
    html = signed_in(portal, people, people.admin)
    token = csrf_token(html)

    # Ids that exist only in the other tenant's schema; the session's tenant is ours.
    probes = [
        portal.get(f"/clients/{their_client.id + 1000}"),
        portal.post(f"/notifications/{item.id + 1000}/read", data={"_csrf_token": token}),
        portal.post(f"/members/{their_user.id + 1000}/deactivate", data={"_csrf_token": token}),
        portal.get(f"/ledger?subject={their_client.id + 1000}"),
    ]
    assert [p.status_code for p in probes[:3]] == [404, 404, 404]
    assert "Elsewhere Ltd" not in probes[3].text
    # The same numeric ids in our tenant name our rows, never theirs.
    same_id = portal.get(f"/clients/{their_client.id}")
    assert "Elsewhere Ltd" not in same_id.text
    with tenant_tx(elsewhere.slug) as tx:
        untouched = tx.conn.execute(
            "SELECT read_at, (SELECT count(*) FROM users WHERE deactivated_at IS NOT NULL) "
            "FROM notifications WHERE id = %s", [item.id]
        ).fetchone()
    assert untouched == (None, 0)


def test_a_session_cannot_be_pointed_at_another_tenant_by_the_url_or_a_form(
    portal: PortalClient, people: People, make_tenant: Callable[..., Tenant]
) -> None:
    elsewhere = make_tenant()
    add_admin(elsewhere, "admin@elsewhere.example")
    signed_in(portal, people, people.admin)

    for response in (
        portal.get(f"/?tenant={elsewhere.slug}"),
        portal.get(f"/{elsewhere.slug}/clients"),
    ):
        assert response.status_code in (400, 404)
        assert elsewhere.slug not in response.text or "option" in response.text


def test_another_users_notification_cannot_be_archived_or_acknowledged(
    portal: PortalClient, people: People
) -> None:
    html = signed_in(portal, people, people.client_user)
    [admins] = notification_ids(people.tenant, people.admin)

    for action in ("archive", "acknowledge", "unread"):
        response = portal.post(f"/notifications/{admins}/{action}",
                               data={"_csrf_token": csrf_token(html)})
        assert response.status_code == 404

    assert notification_ids(people.tenant, people.admin) == [admins]
    assert unread_of(people.tenant, people.admin) == 1


def test_an_unknown_query_parameter_gets_a_clear_400(portal: PortalClient, people: People) -> None:
    signed_in(portal, people, people.admin)

    for path in ("/?colour=blue", "/inbox/badge?x=1", "/ledger?sort=desc", "/login?debug=1"):
        response = portal.get(path)
        assert response.status_code == 400, path
        assert "doesn\u2019t take the option" in response.text
    assert portal.get("/ledger?rule=licence").status_code == 200


def test_over_long_input_gets_a_clear_4xx_and_writes_nothing(portal: PortalClient, people: People) -> None:
    html = signed_in(portal, people, people.admin)
    token = csrf_token(html)
    huge = "x" * 5000

    login = portal.post("/login", data={"organisation": huge, "email": huge, "password": huge,
                                        "_csrf_token": token})
    invite = portal.post("/members/invite", data={"email": huge + "@example.com", "role": "member",
                                                  "_csrf_token": token})
    ledger = portal.get("/ledger", params={"rule": huge})
    inbox = portal.get("/", params={"created_at": huge, "id": "1"})

    assert login.status_code == 400 and "Enter your organisation" in login.text
    assert invite.status_code == 400 and "longer than" in invite.text
    assert ledger.status_code == 400 and inbox.status_code == 400
    with tenant_tx(people.tenant.slug) as tx:
        assert tx.conn.execute("SELECT count(*) FROM users").fetchone() == (3,)


def test_wrong_password_and_logout_round_trip(portal: PortalClient, people: People) -> None:
    assert sign_in(portal, people.tenant.slug, people.admin.email, "nope").status_code == 400
    html = signed_in(portal, people, people.admin)
    assert portal.post("/logout", data={"_csrf_token": csrf_token(html)},
                       follow_redirects=False).status_code == 303
    assert portal.get("/", follow_redirects=False).status_code == 303
    assert sign_in(portal, people.tenant.slug, people.admin.email, PASSWORD).status_code == 303
