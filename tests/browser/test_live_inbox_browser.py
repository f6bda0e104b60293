"""The live inbox in a real browser: with the event stream open, a new notice appears at the
top of the feed, and on the badge, long before any poll; with the stream blocked, the poll
still brings both."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Route, expect

from db.delivery.inbox import add_to_inbox
from db.people.users import User
from db.platform.tenancy import Tenant, tenant_tx
from tests.browser.test_portal_browser import DESKTOP, open_page, sign_in
from tests.browser.test_portal_flows import CLIENT_EMAIL, POLL_WAIT_MS, seed
from tests.support.portal_server import serve_portal

pytestmark = pytest.mark.browser

STREAM_REFUSED = {"Failed to load resource: net::ERR_FAILED", "[object Event]"}
PUSH_WAIT_MS = 15_000  # milliseconds; bounds a hang only: the poll here is an hour away


@pytest.fixture(scope="module")
def slow_poll_url(artifacts: Path) -> Iterator[str]:
    """A portal whose inbox polls once an hour: whatever shows up sooner was pushed."""
    with serve_portal(artifacts / "portal-slow-poll.log", INBOX_POLL_SECONDS="3600") as url:
        yield url


def notify(tenant: Tenant, user: User, title: str) -> None:
    """A notice committed, and announced by its transaction once committed, as for every writer."""
    with tenant_tx(tenant.slug) as tx:
        add_to_inbox(tx, user.id, "report_ready", title, "Your report is ready.",
                     {"href": "/licence"}, idempotency_key=f"live:{title}")


def test_an_open_stream_puts_a_new_notice_on_top_without_a_reload_or_a_poll(
    browser: Browser, slow_poll_url: str, tenant: Tenant, artifacts: Path
) -> None:
    user, _ = seed(tenant, expires_in_days=7)
    page, errors = open_page(browser, DESKTOP)
    # The stream's opening "look now" makes the page ask once: then it is listening.
    with page.expect_response(lambda r: "/inbox/newer" in r.url, timeout=PUSH_WAIT_MS):
        sign_in(page, slow_poll_url, tenant, CLIENT_EMAIL)
    badge = page.locator("#unread-badge .count")
    expect(badge).to_have_text("1")
    expect(page.locator("#feed > li")).to_have_count(1)

    notify(tenant, user, "Quarterly report is ready")
    expect(page.locator("#feed > li").first).to_contain_text("Quarterly report is ready",
                                                             timeout=PUSH_WAIT_MS)
    expect(badge).to_have_text("2")
    expect(page.locator("#feed > li")).to_have_count(2)  # prepended, nothing repeated

    notify(tenant, user, "Annual report is ready")
    expect(page.locator("#feed > li").first).to_contain_text("Annual report is ready",
                                                             timeout=PUSH_WAIT_MS)
    expect(page.locator("#feed > li")).to_have_count(3)
    expect(badge).to_have_text("3")
    page.screenshot(path=artifacts / "inbox-live.png", full_page=True)
    assert errors == []


def test_with_the_stream_blocked_the_poll_still_brings_the_notice_and_the_badge(
    browser: Browser, portal_url: str, tenant: Tenant
) -> None:
    user, _ = seed(tenant, expires_in_days=7)
    page, errors = open_page(browser, DESKTOP)
    blocked: list[str] = []

    def refuse(route: Route) -> None:
        blocked.append(route.request.url)
        route.abort()

    page.route("**/inbox/stream", refuse)
    sign_in(page, portal_url, tenant, CLIENT_EMAIL)
    badge = page.locator("#unread-badge .count")
    expect(badge).to_have_text("1")

    notify(tenant, user, "Quarterly report is ready")
    # The feed's and the badge's polls (every 5 s on this portal); the bound stops a hang.
    expect(page.locator("#feed > li").first).to_contain_text("Quarterly report is ready",
                                                             timeout=POLL_WAIT_MS)
    expect(badge).to_have_text("2", timeout=POLL_WAIT_MS)
    expect(page.locator("#feed > li")).to_have_count(2)
    assert blocked, "the page never tried to open its stream"
    # The only errors are the refused stream's own: the browser's failed load, and htmx's log
    # of the EventSource error event (printed as "[object Event]").
    assert errors and all(e in STREAM_REFUSED for e in errors), errors
