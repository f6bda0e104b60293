"""The portal over real PostgreSQL and Redis: signing in, the inbox, marking read, licence
pages, CSRF and error pages. Notifications come from the real licence scan (claim, then
prepare) or, where a test needs particular text, from db.delivery.inbox.add_to_inbox."""

from __future__ import annotations

import logging
import re
from urllib.parse import parse_qs, urlsplit

import pytest
from litestar.testing import TestClient

from db.delivery.inbox import add_to_inbox
from db.people.members import deactivate
from db.platform.tenancy import tenant_tx
from portal.sessions import SESSION_COOKIE
from portal.settings import load_portal_settings
from tests.integration.portal_support import (
    GENERIC_ERROR,
    HTMX,
    People,
    PortalClient,
    badge_count,
    csrf_token,
    notification_ids,
    sign_in,
    signed_in,
    unread_of,
)
from tocsin.boot.web import build_app
from tocsin.core.settings import ConfigError, load_settings


def test_the_login_page_asks_for_organisation_email_and_password(portal: PortalClient) -> None:
    page = portal.get("/login")

    assert page.status_code == 200
    for label, field in (("Organisation", "organisation"), ("Email", "email"),
                         ("Password", "password")):
        assert f'<label for="{field}">{label}</label>' in page.text
        assert f'id="{field}" name="{field}"' in page.text
    assert csrf_token(page.text)
    assert "/static/htmx.min.js" in page.text and "/static/tocsin.css" in page.text


def test_a_wrong_password_gets_the_generic_message_and_no_session(
    portal: PortalClient, people: People
) -> None:
    response = sign_in(portal, people.tenant.slug, people.client_user.email, "not the password")

    assert response.status_code == 400
    assert GENERIC_ERROR in response.text
    assert SESSION_COOKIE not in portal.cookies
    assert portal.get("/", follow_redirects=False).status_code == 303


@pytest.mark.parametrize("organisation", ["no-such-organisation", "Not a slug!", "x"])
def test_an_unknown_organisation_gets_the_same_generic_message_and_no_session(
    portal: PortalClient, people: People, organisation: str
) -> None:
    response = sign_in(portal, organisation, people.client_user.email)

    assert response.status_code == 400
    text = response.text
    assert GENERIC_ERROR in text
    assert "Traceback" not in text and "tenant" not in text.lower()
    assert SESSION_COOKIE not in portal.cookies


def test_signing_in_shows_the_users_notifications_and_unread_count(
    portal: PortalClient, people: People
) -> None:
    html = signed_in(portal, people, people.client_user)

    assert "Northwind Analytics: one week until access pauses" in html
    assert 'href="/licence"' in html
    assert people.client_user.email in html and "Client user" in html
    assert badge_count(html) == unread_of(people.tenant, people.client_user) == 1
    assert 'hx-trigger="every 30s"' in html
    assert "Summit Energy" not in html  # the other client's user got nothing, nor do we see it


def test_the_inbox_lists_newest_first_and_pages_older_notifications_by_cursor(
    portal: PortalClient, people: People
) -> None:
    with tenant_tx(people.tenant.slug) as tx:
        for n in range(25):
            add_to_inbox(tx, people.admin.id, "report_ready", f"Report number {n:02d}",
                         "Your report is ready.", {"href": "/"}, idempotency_key=f"report:{n}")
    first = signed_in(portal, people, people.admin)
    titles = re.findall(r"Report number (\d\d)", first)
    assert titles[:3] == ["24", "23", "22"]
    older = re.search(r'href="(/\?created_at=[^"]+)"', first)
    assert older, "no link to older notifications"

    second = portal.get(older.group(1).replace("&amp;", "&"))
    fragment = portal.get("/inbox/feed?" + urlsplit(older.group(1).replace("&amp;", "&")).query,
                          headers=HTMX)

    assert second.status_code == fragment.status_code == 200
    rest = re.findall(r"Report number (\d\d)|one week until access pauses", second.text)
    assert len(rest) == 26 - 20  # 25 reports + the licence reminder, 20 per page
    assert "Back to the newest notifications" in second.text
    assert fragment.text.lstrip().startswith("<li")  # list items only, no page around them
    assert "<html" not in fragment.text


def test_a_cursor_missing_its_id_is_a_friendly_400(portal: PortalClient, people: People) -> None:
    signed_in(portal, people, people.admin)

    page = portal.get("/", params={"created_at": "2026-01-01T00:00:00+00:00"})

    assert page.status_code == 400
    assert "start again from the newest" in page.text


def test_pages_send_a_visitor_to_login_and_back_after_signing_in(
    portal: PortalClient, people: People
) -> None:
    redirect = portal.get("/licence", follow_redirects=False)
    assert redirect.status_code == 303
    assert parse_qs(urlsplit(redirect.headers["location"]).query) == {"next": ["/licence"]}

    response = sign_in(portal, people.tenant.slug, people.client_user.email, next_path="/licence")

    assert response.headers["location"] == "/licence"


def test_a_sign_in_never_redirects_to_another_site(portal: PortalClient, people: People) -> None:
    response = sign_in(portal, people.tenant.slug, people.client_user.email,
                       next_path="//evil.example/")

    assert response.headers["location"] == "/"


def test_htmx_requests_without_a_session_get_401_and_a_way_to_login(portal: PortalClient) -> None:
    portal.get("/login")

    badge = portal.get("/inbox/badge", headers=HTMX)

    assert badge.status_code == 401
    assert badge.headers["HX-Redirect"].startswith("/login")


def test_a_post_without_the_csrf_token_is_refused_and_changes_nothing(
    portal: PortalClient, people: People
) -> None:
    signed_in(portal, people, people.client_user)
    [notification] = notification_ids(people.tenant, people.client_user)

    response = portal.post(f"/notifications/{notification}/read")
    forged = portal.post(f"/notifications/{notification}/read", data={"_csrf_token": "forged"})

    assert response.status_code == forged.status_code == 403
    assert "This page has expired" in response.text
    assert unread_of(people.tenant, people.client_user) == 1


def test_marking_a_notification_read_swaps_the_item_and_updates_the_badge(
    portal: PortalClient, people: People
) -> None:
    html = signed_in(portal, people, people.client_user)
    [notification] = notification_ids(people.tenant, people.client_user)
    assert badge_count(html) == 1

    response = portal.post(f"/notifications/{notification}/read", headers=HTMX,
                           data={"_csrf_token": csrf_token(html)})

    assert response.status_code == 200
    assert f'id="notification-{notification}"' in response.text
    assert "Mark as read" not in response.text and "Read just now" in response.text
    assert 'hx-swap-oob="true"' in response.text and badge_count(response.text) == 0
    assert badge_count(portal.get("/inbox/badge", headers=HTMX).text) == 0
    assert unread_of(people.tenant, people.client_user) == 0


def test_reading_a_claimed_notice_does_not_acknowledge_it_in_the_ledger(
    portal: PortalClient, people: People
) -> None:
    html = signed_in(portal, people, people.client_user)
    [notification] = notification_ids(people.tenant, people.client_user)

    portal.post(f"/notifications/{notification}/read", data={"_csrf_token": csrf_token(html)},
                follow_redirects=False)

    with tenant_tx(people.tenant.slug) as tx:
        row = tx.conn.execute(
            "SELECT l.acknowledged_by, l.acknowledged_at, n.read_at IS NOT NULL FROM notifications n "
            "JOIN notification_ledger l ON l.id = n.ledger_id WHERE n.id = %s",
            [notification],
        ).fetchone()
    assert row == (None, None, True)


def test_a_plain_form_post_marks_read_and_returns_to_the_inbox(
    portal: PortalClient, people: People
) -> None:
    html = signed_in(portal, people, people.client_user)
    [notification] = notification_ids(people.tenant, people.client_user)

    response = portal.post(f"/notifications/{notification}/read",
                           data={"_csrf_token": csrf_token(html)}, follow_redirects=False)

    assert response.status_code == 303 and response.headers["location"] == "/"
    assert badge_count(portal.get("/").text) == 0


def test_another_users_notification_id_gives_404_and_stays_unread(
    portal: PortalClient, people: People
) -> None:
    html = signed_in(portal, people, people.client_user)
    [admins] = notification_ids(people.tenant, people.admin)

    response = portal.post(f"/notifications/{admins}/read", data={"_csrf_token": csrf_token(html)})
    htmx = portal.post(f"/notifications/{admins}/read", headers=HTMX,
                       data={"_csrf_token": csrf_token(html)})

    assert response.status_code == htmx.status_code == 404
    assert "We couldn't find that page" in response.text  # the catalog's words, apostrophe as written
    assert htmx.headers["HX-Retarget"] == "#flash"
    assert unread_of(people.tenant, people.admin) == 1


def test_logging_out_ends_the_session_for_good(portal: PortalClient, people: People) -> None:
    html = signed_in(portal, people, people.client_user)
    session_id = portal.cookies[SESSION_COOKIE]

    response = portal.post("/logout", data={"_csrf_token": csrf_token(html)},
                           follow_redirects=False)

    assert response.status_code == 303
    assert "You have signed out" in portal.get(response.headers["location"]).text
    assert portal.get("/", follow_redirects=False).status_code == 303
    # Replaying the old cookie does not help: its Redis key is gone.
    portal.cookies.set(SESSION_COOKIE, session_id, domain="testserver.local")
    assert portal.get("/", follow_redirects=False).status_code == 303


def test_signing_in_mints_a_new_session_id(portal: PortalClient, people: People) -> None:
    portal.cookies.set(SESSION_COOKIE, "planted-by-someone-else", domain="testserver.local")

    sign_in(portal, people.tenant.slug, people.client_user.email)

    assert portal.cookies[SESSION_COOKIE] != "planted-by-someone-else"
    assert portal.get("/", follow_redirects=False).status_code == 200


def test_a_deactivated_user_is_signed_out_at_their_next_request(
    portal: PortalClient, people: People
) -> None:
    signed_in(portal, people, people.client_user)
    with tenant_tx(people.tenant.slug) as tx:
        deactivate(tx, people.admin.id, people.client_user.id)

    response = portal.get("/", follow_redirects=False)

    assert response.status_code == 303 and response.headers["location"].startswith("/login")
    assert SESSION_COOKIE not in portal.cookies


def test_html_in_a_title_renders_as_text(portal: PortalClient, people: People) -> None:
    with tenant_tx(people.tenant.slug) as tx:
        add_to_inbox(tx, people.admin.id, "report_ready", "<script>alert('x')</script> Q3",
                     "<b>bold</b> & more", {"href": "javascript:alert(1)"},
                     idempotency_key="escape-test")

    html = signed_in(portal, people, people.admin)

    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; Q3" in html
    assert "&lt;b&gt;bold&lt;/b&gt; &amp; more" in html
    assert "<script>alert" not in html and "javascript:" not in html


def test_a_client_user_sees_their_own_licence_and_no_other_client(
    portal: PortalClient, people: People
) -> None:
    signed_in(portal, people, people.client_user)
    expires = people.client.access_expires_on

    licence = portal.get("/licence")

    assert licence.status_code == 200
    assert "Northwind Analytics" in licence.text and "Standard" in licence.text
    assert f"{expires.day} {expires:%B %Y}" in licence.text and "7 days left" in licence.text
    assert portal.get(f"/clients/{people.client.id}").status_code == 200
    assert portal.get(f"/clients/{people.other_client.id}").status_code == 404
    assert portal.get("/clients").status_code == 404


def test_staff_see_every_clients_licence(portal: PortalClient, people: People) -> None:
    signed_in(portal, people, people.admin)

    listing = portal.get("/clients")
    other = portal.get(f"/clients/{people.other_client.id}")

    assert "Northwind Analytics" in listing.text and "Summit Energy" in listing.text
    assert other.status_code == 200 and "Summit Energy" in other.text
    assert portal.get("/licence").status_code == 404
    assert portal.get("/clients/999999").status_code == 404


def test_an_unexpected_failure_shows_a_friendly_page_with_a_logged_reference(
    portal: PortalClient, people: People, caplog: pytest.LogCaptureFixture
) -> None:
    signed_in(portal, people, people.client_user)
    with tenant_tx(people.tenant.slug) as tx:  # a real fault: the feed's table vanishes
        tx.conn.execute("ALTER TABLE notifications RENAME TO notifications_gone")
    try:
        with caplog.at_level(logging.ERROR, logger="tocsin.portal"):
            page = portal.get("/")
    finally:
        with tenant_tx(people.tenant.slug) as tx:
            tx.conn.execute("ALTER TABLE notifications_gone RENAME TO notifications")

    assert page.status_code == 500
    reference = re.search(r"Reference: <code>([0-9A-F]{8})</code>", page.text)
    assert reference, "no reference on the error page"
    for leak in ("Traceback", "psycopg", "UndefinedTable", "notifications_gone", 'relation "'):
        assert leak not in page.text
    [record] = [r for r in caplog.records if reference.group(1) in r.getMessage()]
    assert record.exc_info is not None


def test_unknown_pages_get_a_friendly_404(portal: PortalClient) -> None:
    page = portal.get("/no/such/page")

    assert page.status_code == 404
    assert "We couldn't find that page" in page.text


def test_readyz_answers_ok_without_a_session(portal: PortalClient) -> None:
    response = portal.get("/readyz")

    assert response.status_code == 200 and response.text == "ok"
    assert "set-cookie" not in response.headers


def test_the_badge_polls_as_often_as_inbox_poll_seconds_says(people: People) -> None:
    settings = load_settings()
    polling = load_portal_settings(settings.portal_url, {"INBOX_POLL_SECONDS": "45"})
    with TestClient(app=build_app(settings, polling)) as portal:
        html = signed_in(portal, people, people.client_user)

    assert 'hx-trigger="every 45s"' in html
    for bad in ("soon", "1"):
        with pytest.raises(ConfigError, match="INBOX_POLL_SECONDS"):
            load_portal_settings(settings.portal_url, {"INBOX_POLL_SECONDS": bad})
