"""The inbox's actions over HTTP: read, unread, archive, acknowledge, mark all read; the
badge kept in step out of band; the empty state; and keyset pages that neither repeat nor
skip a notification while new ones arrive."""

from __future__ import annotations

import re

from db.delivery.inbox import add_to_inbox
from db.platform.tenancy import tenant_tx
from portal.sessions import SESSION_COOKIE
from tests.integration.builders import scalar
from tests.integration.portal_support import (
    HTMX,
    People,
    PortalClient,
    badge_count,
    csrf_token,
    notification_ids,
    signed_in,
    unread_of,
)


def add_reports(people: People, count: int, start: int = 0) -> None:
    """``count`` notices in one transaction: they share created_at, so only the id orders them."""
    with tenant_tx(people.tenant.slug) as tx:
        for n in range(start, start + count):
            add_to_inbox(tx, people.admin.id, "report_ready", f"Report {n:03d}", "Ready.",
                         {"href": "/ledger"}, idempotency_key=f"report:{people.admin.id}:{n}")


def feed_ids(html: str) -> list[int]:
    return [int(i) for i in re.findall(r'<li class="item[^"]*" id="notification-(\d+)"', html)]


def older_link(html: str) -> str | None:
    match = re.search(r'hx-get="(/inbox/feed\?[^"]+)"', html)
    return match.group(1).replace("&amp;", "&") if match else None


def test_pages_neither_repeat_nor_skip_while_new_notifications_arrive(
    portal: PortalClient, people: People
) -> None:
    add_reports(people, 45)
    before = notification_ids(people.tenant, people.admin)  # the first 20 of 46
    first = signed_in(portal, people, people.admin)
    seen = feed_ids(first)
    assert seen == before and len(seen) == 20
    link = older_link(first)

    add_reports(people, 10, start=100)  # arrive while the reader is on page one
    pages = 1
    while link is not None:
        fragment = portal.get(link, headers=HTMX)
        assert fragment.status_code == 200
        seen += feed_ids(fragment.text)
        link = older_link(fragment.text)
        pages += 1
        if pages == 2:
            add_reports(people, 5, start=200)  # and again between older pages

    assert pages == 3
    assert len(seen) == len(set(seen)) == 46  # 45 reports and the licence reminder, once each
    assert seen == sorted(seen, reverse=True)  # same created_at within a batch: id breaks ties
    newest = feed_ids(portal.get("/").text)
    assert len(newest) == 20 and max(newest) > max(seen)  # the newcomers head the first page


def test_read_unread_archive_and_acknowledge_each_keep_the_badge_in_step(
    portal: PortalClient, people: People
) -> None:
    html = signed_in(portal, people, people.client_user)
    [notice] = notification_ids(people.tenant, people.client_user)
    token = {"_csrf_token": csrf_token(html)}
    assert badge_count(html) == 1 and "I have seen this" in html

    read = portal.post(f"/notifications/{notice}/read", headers=HTMX, data=token)
    assert read.status_code == 200 and badge_count(read.text) == 0
    assert 'hx-swap-oob="true"' in read.text and "Mark as unread" in read.text

    unread = portal.post(f"/notifications/{notice}/unread", headers=HTMX, data=token)
    assert badge_count(unread.text) == 1 and "Mark as read" in unread.text
    assert unread_of(people.tenant, people.client_user) == 1

    acknowledged = portal.post(f"/notifications/{notice}/acknowledge", headers=HTMX, data=token)
    assert acknowledged.status_code == 200
    assert "Acknowledged just now" in acknowledged.text and "I have seen this" not in acknowledged.text
    assert badge_count(acknowledged.text) == 0  # acknowledging reads it too
    assert scalar(people.tenant,
                  "SELECT l.acknowledged_by FROM notifications n JOIN notification_ledger l "
                  "ON l.id = n.ledger_id WHERE n.id = %s", notice) == people.client_user.id

    portal.post(f"/notifications/{notice}/unread", headers=HTMX, data=token)
    archived = portal.post(f"/notifications/{notice}/archive", headers=HTMX, data=token)
    assert archived.status_code == 200
    assert f'id="notification-{notice}"' not in archived.text  # the item leaves the feed
    assert badge_count(archived.text) == 0  # an archived notice is not counted as unread
    page = portal.get("/").text
    assert f'id="notification-{notice}"' not in page and "Nothing here yet" in page
    # Archiving keeps the evidence: the row and the ledger's acknowledgement stay.
    assert scalar(people.tenant, "SELECT archived_at IS NOT NULL FROM notifications WHERE id = %s",
                  notice) is True


def test_the_first_acknowledgement_stands(portal: PortalClient, people: People) -> None:
    html = signed_in(portal, people, people.admin)
    [notice] = notification_ids(people.tenant, people.admin)
    token = {"_csrf_token": csrf_token(html)}

    portal.post(f"/notifications/{notice}/acknowledge", data=token)
    first = scalar(people.tenant, "SELECT acknowledged_at FROM notification_ledger WHERE id = "
                   "(SELECT ledger_id FROM notifications WHERE id = %s)", notice)
    again = portal.post(f"/notifications/{notice}/acknowledge", data=token, follow_redirects=False)

    assert again.status_code == 303
    assert scalar(people.tenant, "SELECT acknowledged_at FROM notification_ledger WHERE id = "
                  "(SELECT ledger_id FROM notifications WHERE id = %s)", notice) == first


def test_a_notice_outside_the_ledger_has_nothing_to_acknowledge(
    portal: PortalClient, people: People
) -> None:
    add_reports(people, 1)
    html = signed_in(portal, people, people.admin)
    report = notification_ids(people.tenant, people.admin)[0]

    response = portal.post(f"/notifications/{report}/acknowledge",
                           data={"_csrf_token": csrf_token(html)})

    assert response.status_code == 400 and "needs no acknowledgement" in response.text
    assert unread_of(people.tenant, people.admin) == 2  # the refused action changed nothing


def test_mark_all_read_empties_the_badge_and_re_renders_the_feed(
    portal: PortalClient, people: People
) -> None:
    add_reports(people, 3)
    html = signed_in(portal, people, people.admin)
    assert badge_count(html) == 4 and "Mark all as read" in html

    response = portal.post("/inbox/read-all", headers=HTMX, data={"_csrf_token": csrf_token(html)})

    assert response.status_code == 200
    assert badge_count(response.text) == 0 and 'hx-swap-oob="true"' in response.text
    assert len(feed_ids(response.text)) == 4 and "item-unread" not in response.text
    assert unread_of(people.tenant, people.admin) == 0
    assert unread_of(people.tenant, people.client_user) == 1  # only the reader's own notices
    assert "Mark all as read" not in portal.get("/").text


def test_the_badge_counts_only_the_readers_unread_unarchived_notices(
    portal: PortalClient, people: People
) -> None:
    add_reports(people, 5)
    signed_in(portal, people, people.admin)
    assert badge_count(portal.get("/inbox/badge", headers=HTMX).text) == 6

    with tenant_tx(people.tenant.slug) as tx:
        ids = notification_ids(people.tenant, people.admin)
        tx.conn.execute("UPDATE notifications SET read_at = now() WHERE id = %s", [ids[0]])
        tx.conn.execute("UPDATE notifications SET archived_at = now() WHERE id = %s", [ids[1]])

    badge = portal.get("/inbox/badge", headers=HTMX)
    assert badge.status_code == 200 and badge_count(badge.text) == 4
    assert "<html" not in badge.text  # a fragment, not a page



def test_the_badge_of_a_user_deactivated_since_their_last_request_ends_their_session(
    portal: PortalClient, people: People
) -> None:
    # The badge reads the viewer in its own transaction (VIEWER_IN_HANDLER), not the guard's.
    signed_in(portal, people, people.admin)
    with tenant_tx(people.tenant.slug) as tx:  # behind the portal's back: no session is ended
        tx.conn.execute("UPDATE users SET deactivated_at = now() WHERE id = %s", [people.admin.id])

    badge = portal.get("/inbox/badge", headers=HTMX)

    assert badge.status_code == 401 and badge.headers["HX-Redirect"] == "/login"
    assert "count" not in badge.text
    assert not portal.cookies.get(SESSION_COOKIE)  # expired by the answer, its Redis key deleted

def test_each_notification_links_to_what_it_is_about(portal: PortalClient, people: People) -> None:
    html = signed_in(portal, people, people.admin)

    link = re.search(r'<a class="button button-secondary" href="([^"]+)"', html)

    assert link and link.group(1) == f"/clients/{people.client.id}"
    assert "Northwind Analytics" in portal.get(link.group(1)).text


def test_an_unknown_action_is_not_found(portal: PortalClient, people: People) -> None:
    html = signed_in(portal, people, people.client_user)
    [notice] = notification_ids(people.tenant, people.client_user)

    response = portal.post(f"/notifications/{notice}/delete", data={"_csrf_token": csrf_token(html)})

    assert response.status_code == 404
    assert notification_ids(people.tenant, people.client_user) == [notice]


def test_an_empty_inbox_says_what_will_appear_there(portal: PortalClient, people: People) -> None:
    html = signed_in(portal, people, people.other_client_user)

    assert "Nothing here yet" in html and "licence renewal reminders" in html
    assert badge_count(html) == 0 and "Mark all as read" not in html
