"""The Annual License Expired wall and one-click renewal: every protected route answers with
the wall for a client user whose access lapsed, renewal is one guarded transition however
many clicks or tabs, and the renewal notice is claimed once."""

from __future__ import annotations

import threading
from datetime import UTC, date, datetime, timedelta

import pytest

from db.notices.licence_scan import claim_due_milestones
from db.people.clients import Renewal, get_client, license_events, renew_licence
from db.people.users import create_user
from db.platform.tenancy import tenant_tx
from domain.people.identity import Role
from tests.integration.builders import delivery_statuses, scalar
from tests.integration.portal_support import (
    HTMX,
    PASSWORD,
    People,
    PortalClient,
    csrf_token,
    local_today,
    notification_ids,
    sign_in,
)

PROTECTED_PAGES = ["/", "/licence", "/inbox/feed", "/clients", "/ledger", "/members"]


def expire(people: People, days_ago: int = 3) -> date:
    """Move the client's expiry into the past and let the real scan expire it."""
    lapsed = local_today(people.tenant) - timedelta(days=days_ago)
    with tenant_tx(people.tenant.slug) as tx:
        tx.conn.execute("UPDATE clients SET access_expires_on = %s WHERE id = %s",
                        [lapsed, people.client.id])
        claim_due_milestones(tx, datetime.now(UTC))
        assert get_client(tx, people.client.id).status == "expired"
    return lapsed


def walled_user(portal: PortalClient, people: People) -> str:
    """Sign the expired client's user in; the redirect after sign-in already meets the wall."""
    response = sign_in(portal, people.tenant.slug, people.client_user.email)
    assert response.status_code == 303
    wall = portal.get("/")
    assert wall.status_code == 402
    return wall.text


def test_every_protected_route_answers_with_the_wall(portal: PortalClient, people: People) -> None:
    lapsed = expire(people)
    html = walled_user(portal, people)
    token = csrf_token(html)
    [notice] = notification_ids(people.tenant, people.client_user)[:1]

    for path in [*PROTECTED_PAGES, f"/clients/{people.client.id}"]:
        page = portal.get(path)
        assert page.status_code == 402, path
        assert "Your annual licence has expired" in page.text
        assert f"{lapsed.day} {lapsed:%B %Y}" in page.text and "Nothing has been deleted" in page.text
        assert 'value="' + path + '"' in page.text  # renewal comes back here
    for path in ("/inbox/badge", "/inbox/feed"):
        fragment = portal.get(path, headers=HTMX | {"HX-Current-URL": "http://testserver.local/licence"})
        assert fragment.status_code == 402, path
        assert fragment.headers["HX-Redirect"] == "/renew?next=%2Flicence"
    for path in (f"/notifications/{notice}/read", "/inbox/read-all"):
        post = portal.post(path, data={"_csrf_token": token})
        assert post.status_code == 402, path
    assert scalar(people.tenant, "SELECT read_at FROM notifications WHERE id = %s", notice) is None

    # Beyond the wall: the wall itself, static files, the health check, signing out.
    assert portal.get("/renew").status_code == 200
    assert portal.get("/static/tocsin.css").status_code == 200
    assert portal.get("/readyz").status_code == 200
    assert portal.post("/logout", data={"_csrf_token": token},
                       follow_redirects=False).status_code == 303


def test_staff_and_other_clients_users_never_meet_the_wall(portal: PortalClient, people: People) -> None:
    expire(people)
    for user in (people.admin, people.other_client_user):
        portal.cookies.clear()
        assert sign_in(portal, people.tenant.slug, user.email).status_code == 303
        assert portal.get("/").status_code == 200


def test_one_click_renews_and_lands_on_the_page_asked_for(portal: PortalClient, people: People) -> None:
    lapsed = expire(people)
    walled_user(portal, people)
    wall = portal.get("/licence")

    response = portal.post("/renew", data={"_csrf_token": csrf_token(wall.text),
                                           "expires_on": lapsed.isoformat(), "next": "/licence"},
                           follow_redirects=False)

    assert response.status_code == 303 and response.headers["location"] == "/licence"
    licence = portal.get("/licence")
    assert licence.status_code == 200 and "Active" in licence.text
    today = local_today(people.tenant)
    with tenant_tx(people.tenant.slug) as tx:
        client = get_client(tx, people.client.id)
        events = license_events(tx, people.client.id)
    # One year after the later of the old date and today: the lapsed days are not charged.
    assert client.status == "active" and client.access_expires_on == today.replace(year=today.year + 1)
    assert events[-1][0] == "renewed" and events[-1][3] == "user"
    assert scalar(people.tenant, "SELECT actor_user_id FROM license_events "
                  "WHERE client_id = %s ORDER BY id DESC LIMIT 1", people.client.id) == people.client_user.id
    renewed_notices = scalar(
        people.tenant,
        "SELECT count(*) FROM notifications n JOIN notification_ledger l ON l.id = n.ledger_id "
        "WHERE l.threshold = 'renewed' AND l.due_on = %s", client.access_expires_on)
    assert renewed_notices == 2  # the client's user and the admin, once each
    assert "access renewed until" in portal.get("/").text


def test_a_double_click_and_a_second_tab_renew_once(portal: PortalClient, people: People) -> None:
    lapsed = expire(people)
    html = walled_user(portal, people)
    form = {"_csrf_token": csrf_token(html), "expires_on": lapsed.isoformat(), "next": "/"}

    first = portal.post("/renew", data=form, follow_redirects=False)
    second = portal.post("/renew", data=form, follow_redirects=False)  # the same, stale form

    assert first.status_code == second.status_code == 303
    assert second.headers["location"] == "/"
    with tenant_tx(people.tenant.slug) as tx:
        events = [e[0] for e in license_events(tx, people.client.id)]
        expires = get_client(tx, people.client.id).access_expires_on
    assert events.count("renewed") == 1
    today = local_today(people.tenant)
    assert expires == today.replace(year=today.year + 1)  # not two years
    assert scalar(people.tenant, "SELECT count(*) FROM notification_ledger WHERE threshold = 'renewed'") == 1


def test_concurrent_renewals_of_one_client_let_exactly_one_through(people: People) -> None:
    lapsed = expire(people)
    today = local_today(people.tenant)
    barrier = threading.Barrier(4)
    results: list[Renewal | None] = []

    def renew() -> None:
        barrier.wait()
        with tenant_tx(people.tenant.slug) as tx:
            results.append(renew_licence(tx, people.client.id, today, actor="user",
                                         actor_user_id=people.client_user.id,
                                         expected_expires_on=lapsed))

    threads = [threading.Thread(target=renew) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert sum(r is not None for r in results) == 1
    assert scalar(people.tenant, "SELECT count(*) FROM license_events WHERE event = 'renewed'") == 1


def test_renewing_early_cancels_reminders_still_waiting_for_the_old_date(
    portal: PortalClient, people: People
) -> None:
    assert delivery_statuses(people.tenant) == {"pending": 2}  # the d7 reminder, two recipients
    sign_in(portal, people.tenant.slug, people.client_user.email)
    licence = portal.get("/licence")
    assert "Renew for one year" in licence.text

    portal.post("/renew", data={"_csrf_token": csrf_token(licence.text), "next": "/licence",
                                "expires_on": people.client.access_expires_on.isoformat()})

    statuses = delivery_statuses(people.tenant)
    assert statuses.get("cancelled") == 2 and statuses.get("pending") == 2  # the renewal notices
    d7 = scalar(people.tenant, "SELECT status FROM notification_ledger WHERE threshold = 'd7'")
    assert d7 == "cancelled"
    assert scalar(people.tenant, "SELECT status_reason FROM notification_deliveries WHERE status = "
                  "'cancelled' LIMIT 1") == "licence renewed before delivery"


def test_an_admin_sees_every_licence_and_reactivates_a_closed_client(
    portal: PortalClient, people: People
) -> None:
    lapsed = local_today(people.tenant) - timedelta(days=20)
    with tenant_tx(people.tenant.slug) as tx:
        tx.conn.execute("UPDATE clients SET access_expires_on = %s WHERE id = %s", [lapsed, people.client.id])
        claim_due_milestones(tx, datetime.now(UTC))
        claim_due_milestones(tx, datetime.now(UTC))  # expire, then close past grace
        assert get_client(tx, people.client.id).status == "closed"
    sign_in(portal, people.tenant.slug, people.admin.email)
    listing = portal.get("/clients")
    assert "Closed" in listing.text and "Summit Energy" in listing.text
    page = portal.get(f"/clients/{people.client.id}")
    assert "Reactivate for one year" in page.text

    done = portal.post(f"/clients/{people.client.id}/renew", follow_redirects=False,
                       data={"_csrf_token": csrf_token(page.text), "expires_on": lapsed.isoformat()})

    assert done.status_code == 303 and done.headers["location"] == f"/clients/{people.client.id}"
    with tenant_tx(people.tenant.slug) as tx:
        assert get_client(tx, people.client.id).status == "active"
        assert license_events(tx, people.client.id)[-1][0] == "reactivated"


@pytest.mark.parametrize("role", ["member", "client_user"])
def test_only_admins_renew_other_organisations(portal: PortalClient, people: People, role: str) -> None:
    user = people.other_client_user
    if role == "member":
        with tenant_tx(people.tenant.slug) as tx:
            user = create_user(tx, "member@tenant.example", Role.MEMBER, PASSWORD)
    sign_in(portal, people.tenant.slug, user.email)
    token = csrf_token(portal.get("/").text)

    response = portal.post(f"/clients/{people.client.id}/renew", data={
        "_csrf_token": token, "expires_on": people.client.access_expires_on.isoformat()})

    assert response.status_code == 404
    with tenant_tx(people.tenant.slug) as tx:
        assert get_client(tx, people.client.id).access_expires_on == people.client.access_expires_on


def test_the_wall_page_for_an_active_client_goes_straight_on(portal: PortalClient, people: People) -> None:
    sign_in(portal, people.tenant.slug, people.client_user.email)

    response = portal.get("/renew?next=/licence", follow_redirects=False)

    assert response.status_code == 303 and response.headers["location"] == "/licence"
