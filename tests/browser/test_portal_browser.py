"""A client user's first visit, in a real browser: sign in, see the licence reminder, mark it
read, watch the badge go to zero. Screenshots land in test-artifacts/ for people to look at."""

from __future__ import annotations

import contextlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from playwright.sync_api import Browser, Page, ViewportSize, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from db.notices.fanout import prepare_claims
from db.notices.licence_scan import claim_due_milestones
from db.people.clients import create_client
from db.people.users import create_user
from db.platform.tenancy import Tenant, tenant_tx
from domain.people.identity import Role
from tests.browser import pages
from tests.browser.pages import open_page

pytestmark = pytest.mark.browser

PASSWORD = "correct horse battery"
EMAIL = "ops@northwind.example"
DESKTOP: ViewportSize = {"width": 1280, "height": 800}
PHONE: ViewportSize = {"width": 390, "height": 844}


def seed_client_user_with_a_reminder(tenant: Tenant) -> None:
    today = datetime.now(UTC).astimezone(ZoneInfo(tenant.time_zone)).date()
    with tenant_tx(tenant.slug) as tx:
        client = create_client(tx, "Northwind Analytics", today + timedelta(days=7))
        create_user(tx, EMAIL, Role.CLIENT_USER, PASSWORD, client_id=client.id,
                    display_name="Olivia Park")
        claim_due_milestones(tx, datetime.now(UTC))
        prepare_claims(tx)


def sign_in(page: Page, portal_url: str, tenant: Tenant, email: str = EMAIL,
            path: str = "/login") -> None:
    pages.sign_in(page, portal_url, tenant, email, PASSWORD, path)


def test_a_client_user_signs_in_reads_the_reminder_and_the_badge_goes_to_zero(
    browser: Browser, portal_url: str, tenant: Tenant, artifacts: Path
) -> None:
    seed_client_user_with_a_reminder(tenant)
    page, errors = open_page(browser, DESKTOP)

    page.goto(f"{portal_url}/login")
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    page.screenshot(path=artifacts / "login.png", full_page=True)

    page.get_by_label("Organisation").fill(tenant.slug)
    page.get_by_label("Email").fill(EMAIL)
    page.get_by_label("Password").fill("not the password")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("email or password is wrong")
    page.screenshot(path=artifacts / "login-error.png", full_page=True)
    errors.clear()  # the browser logs the refused sign-in's 400 itself; that one is expected

    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Inbox", exact=True)).to_be_visible()
    reminder = page.locator(".item").filter(has_text="one week until access pauses")
    expect(reminder).to_have_class("item item-unread")
    badge = page.locator("#unread-badge .count")
    expect(badge).to_have_text("1")
    page.screenshot(path=artifacts / "inbox.png", full_page=True)

    reminder.get_by_role("button", name="Mark as read").click()
    expect(badge).to_have_text("0")
    expect(reminder).to_have_class("item")
    expect(reminder).to_contain_text("Read just now")
    expect(page.locator(".read-state")).to_be_focused()  # focus stays on the item
    page.screenshot(path=artifacts / "inbox-read.png", full_page=True)

    page.reload()  # the read state is stored, not only swapped into the page
    expect(badge).to_have_text("0")

    reminder.get_by_role("link", name="View licence details").click()
    expect(page.get_by_role("heading", name="Northwind Analytics")).to_be_visible()
    expect(page.get_by_text("7 days left")).to_be_visible()
    page.screenshot(path=artifacts / "licence.png", full_page=True)

    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_text("You have signed out.")).to_be_visible()
    assert errors == []


def test_the_portal_fits_a_phone_screen(
    browser: Browser, portal_url: str, tenant: Tenant, artifacts: Path
) -> None:
    seed_client_user_with_a_reminder(tenant)
    page, errors = open_page(browser, PHONE)

    page.goto(f"{portal_url}/login")
    expect(page.get_by_label("Organisation")).to_be_focused()  # and its focus ring shows
    page.screenshot(path=artifacts / "login-phone.png", full_page=True)
    sign_in(page, portal_url, tenant)
    expect(page.locator("#unread-badge .count")).to_have_text("1")
    page.screenshot(path=artifacts / "inbox-phone.png", full_page=True)

    overflow = page.evaluate("document.documentElement.scrollWidth > window.innerWidth")
    assert overflow is False, "the inbox scrolls sideways on a phone"
    assert errors == []


def test_htmx_failures_are_shown_and_an_ended_session_leads_to_login(
    browser: Browser, portal_url: str, tenant: Tenant, artifacts: Path
) -> None:
    seed_client_user_with_a_reminder(tenant)
    page, _ = open_page(browser, DESKTOP)
    sign_in(page, portal_url, tenant)
    mark_read = page.get_by_role("button", name="Mark as read")

    page.context.clear_cookies(name="tocsin_csrf")  # the form's token no longer matches
    mark_read.click()
    expect(page.locator("#flash")).to_contain_text("This page has expired")
    expect(page.locator("#unread-badge .count")).to_have_text("1")
    page.screenshot(path=artifacts / "inbox-flash.png", full_page=True)

    page.reload()  # a fresh token; then the session ends: signed out from another tab
    # (server-side, so the page's own background requests, the live stream and the feed's
    # poll, cannot bring it back the way they could restore a cookie cleared in the browser).
    token = json.loads(page.locator("body").get_attribute("hx-headers") or "{}")["x-csrftoken"]
    assert page.request.post(f"{portal_url}/logout", headers={"x-csrftoken": token}).ok
    # The feed's poll may meet the ended session first and lead to the login page itself.
    with contextlib.suppress(PlaywrightTimeoutError):
        mark_read.click(timeout=5_000)
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    assert page.url.startswith(f"{portal_url}/login")
