"""Members: an administrator invites by email (an inbox notice and an email whose signed link
works once and expires), changes roles and deactivates; a deactivated person can neither sign
in nor receive anything."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from db.notices.licence_scan import claim_due_milestones
from db.people.users import create_user
from db.platform.tenancy import tenant_tx
from domain.people.identity import Role
from domain.tokens import sign
from portal.sessions import SESSION_COOKIE
from tests.integration.builders import delivery_statuses, scalar
from tests.integration.conftest import RunningWorker, SesOutbox
from tests.integration.portal_support import (
    GENERIC_ERROR,
    PASSWORD,
    People,
    PortalClient,
    csrf_token,
    sign_in,
    signed_in,
)
from tocsin.core.keys import signing_keys
from tocsin.core.settings import load_settings

NEW_PASSWORD = "a brand new passphrase"


def invite(portal: PortalClient, people: People, email: str, role: str = "member",
           client_id: int | None = None) -> str:
    """Invite as the admin; return the invitation link's path."""
    html = signed_in(portal, people, people.admin)
    response = portal.post("/members/invite", follow_redirects=False, data={
        "_csrf_token": csrf_token(html), "email": email, "role": role,
        "client_id": "" if client_id is None else str(client_id), "display_name": "New Person"})
    assert response.status_code == 303 and response.headers["location"] == "/members?done=invited"
    href = scalar(people.tenant, "SELECT n.data ->> 'href' FROM notifications n JOIN users u "
                  "ON u.id = n.recipient_user_id WHERE u.email = lower(%s) AND n.category = 'member_invite' "
                  "ORDER BY n.id DESC LIMIT 1", email)
    assert isinstance(href, str) and href.startswith("/invitations/")
    portal.cookies.clear()
    return href


def accept(portal: PortalClient, link: str, password: str = NEW_PASSWORD) -> int:
    portal.get(link)
    token = csrf_token(portal.get("/login").text)  # the page has no form once the link is spent
    return portal.post(link + "/join", data={"_csrf_token": token, "password": password,
                                   "confirm": password}, follow_redirects=False).status_code


def test_an_invitation_is_emailed_and_its_link_signs_the_new_member_in(
    portal: PortalClient, people: People, worker: RunningWorker, ses: SesOutbox
) -> None:
    link = invite(portal, people, "New.Person@Example.com")
    worker.drain()

    [mail] = [m for m in ses.sent() if m.to == "new.person@example.com"]
    assert "invited" in mail.subject and link in mail.body
    page = portal.get(link)
    assert page.status_code == 200 and "Join Test Tenant" in page.text
    assert "new.person@example.com" in page.text

    assert accept(portal, link) == 303
    inbox = portal.get("/")
    assert inbox.status_code == 200 and "You are invited to Test Tenant" in inbox.text
    portal.cookies.clear()
    assert sign_in(portal, people.tenant.slug, "new.person@example.com", NEW_PASSWORD).status_code == 303


def test_an_invitation_link_works_once(portal: PortalClient, people: People) -> None:
    link = invite(portal, people, "once@example.com")

    assert accept(portal, link) == 303
    portal.cookies.clear()
    again = portal.get(link)
    replay = portal.post(link + "/join", data={"_csrf_token": csrf_token(portal.get("/login").text),
                                               "password": "another password",
                                     "confirm": "another password"})

    assert "This invitation can't be used" in again.text
    assert replay.status_code == 400 and "used already" in replay.text
    assert sign_in(portal, people.tenant.slug, "once@example.com", "another password").status_code == 400
    assert sign_in(portal, people.tenant.slug, "once@example.com", NEW_PASSWORD).status_code == 303


def test_an_expired_or_tampered_link_is_refused(portal: PortalClient, people: People) -> None:
    link = invite(portal, people, "late@example.com")
    invitation = scalar(people.tenant, "SELECT max(id) FROM invitations")
    keys = signing_keys(load_settings())
    claims: dict[str, str | int] = {"tenant": people.tenant.slug, "invitation": invitation}
    stale = sign(keys.invitation.current, "invite", claims, datetime.now(UTC) - timedelta(seconds=1))
    forged = link[:-3] + ("AAA" if not link.endswith("AAA") else "BBB")
    # The right purpose label, signed with another purpose's key.
    other_purpose = sign(keys.unsubscribe.current, "invite", claims, datetime.now(UTC) + timedelta(days=1))

    expired = portal.get(f"/invitations/{stale}")
    tampered = portal.get(forged)
    wrong = portal.get(f"/invitations/{other_purpose}")

    assert expired.status_code == 400 and "This link has expired" in expired.text
    assert tampered.status_code == wrong.status_code == 400 and "This link is not valid" in wrong.text
    # An invitation past its stored expiry is refused even with a well-signed link.
    with tenant_tx(people.tenant.slug) as tx:
        tx.conn.execute("UPDATE invitations SET expires_at = now() - interval '1 second' WHERE id = %s",
                        [invitation])
    assert accept(portal, link) == 400


def test_inviting_again_replaces_the_earlier_link(portal: PortalClient, people: People) -> None:
    first = invite(portal, people, "twice@example.com")
    second = invite(portal, people, "twice@example.com")

    assert first != second
    assert accept(portal, first) == 400
    assert accept(portal, second) == 303


def test_inviting_an_existing_member_is_a_conflict(portal: PortalClient, people: People) -> None:
    html = signed_in(portal, people, people.admin)

    response = portal.post("/members/invite", data={"_csrf_token": csrf_token(html),
                                                    "email": people.client_user.email, "role": "member"})

    assert response.status_code == 409 and "already has an account" in response.text


def test_a_client_user_invitation_needs_a_client(portal: PortalClient, people: People) -> None:
    html = signed_in(portal, people, people.admin)

    response = portal.post("/members/invite", data={"_csrf_token": csrf_token(html),
                                                    "email": "c@example.com", "role": "client_user"})
    link = invite(portal, people, "c@example.com", "client_user", people.client.id)

    assert response.status_code == 400 and "client organisation" in response.text
    assert accept(portal, link) == 303
    assert "Northwind Analytics" in portal.get("/licence").text


def test_an_admin_changes_a_team_members_role(portal: PortalClient, people: People) -> None:
    with tenant_tx(people.tenant.slug) as tx:
        member = create_user(tx, "member@tenant.example", Role.MEMBER, PASSWORD)
    sign_in(portal, people.tenant.slug, member.email)
    assert portal.get("/members").status_code == 404
    portal.cookies.clear()
    html = signed_in(portal, people, people.admin)
    token = csrf_token(html)

    promoted = portal.post(f"/members/{member.id}/role", data={"_csrf_token": token, "role": "admin"},
                           follow_redirects=False)
    client_user = portal.post(f"/members/{people.client_user.id}/role",
                              data={"_csrf_token": token, "role": "admin"})
    own = portal.post(f"/members/{people.admin.id}/role", data={"_csrf_token": token, "role": "member"})

    assert promoted.status_code == 303
    assert client_user.status_code == own.status_code == 400
    portal.cookies.clear()
    sign_in(portal, people.tenant.slug, member.email)
    assert portal.get("/members").status_code == 200


def test_a_deactivated_person_cannot_sign_in_and_receives_nothing(
    portal: PortalClient, people: People
) -> None:
    assert delivery_statuses(people.tenant) == {"pending": 2}  # d7: client user and admin
    signed_in(portal, people, people.client_user)
    their_session = portal.cookies[SESSION_COOKIE]
    portal.cookies.clear()
    html = signed_in(portal, people, people.admin)

    members = portal.get("/members")
    assert "ops@northwind.example" in members.text and "Deactivate" in members.text
    response = portal.post(f"/members/{people.client_user.id}/deactivate",
                           data={"_csrf_token": csrf_token(html)}, follow_redirects=False)

    assert response.status_code == 303
    assert "Deactivated" in portal.get("/members?done=deactivated").text
    # Their waiting email is cancelled; the admin's copy is not.
    assert delivery_statuses(people.tenant) == {"pending": 1, "cancelled": 1}
    # Their open session ends at its next request, and signing in again fails.
    portal.cookies.clear()
    portal.cookies.set(SESSION_COOKIE, their_session, domain="testserver.local")
    assert portal.get("/", follow_redirects=False).status_code == 303
    refused = sign_in(portal, people.tenant.slug, people.client_user.email)
    assert refused.status_code == 400 and GENERIC_ERROR in refused.text
    # The next licence notice for their client reaches the admin only.
    with tenant_tx(people.tenant.slug) as tx:
        tx.conn.execute("UPDATE clients SET access_expires_on = access_expires_on - 6 WHERE id = %s",
                        [people.client.id])
        claim_due_milestones(tx, datetime.now(UTC))
    recipients = scalar(people.tenant, "SELECT array_agg(recipient_user_id ORDER BY recipient_user_id) "
                        "FROM notifications n JOIN notification_ledger l ON l.id = n.ledger_id "
                        "WHERE l.threshold = 'd1'")
    assert recipients == [people.admin.id]


def test_an_admin_cannot_deactivate_themselves(portal: PortalClient, people: People) -> None:
    html = signed_in(portal, people, people.admin)

    response = portal.post(f"/members/{people.admin.id}/deactivate", data={"_csrf_token": csrf_token(html)})

    assert response.status_code == 400 and "your own account" in response.text
    assert portal.get("/").status_code == 200


def test_members_is_for_administrators_only(portal: PortalClient, people: People) -> None:
    signed_in(portal, people, people.client_user)

    assert portal.get("/members").status_code == 404
    assert re.search(r'href="/members"', portal.get("/").text) is None
