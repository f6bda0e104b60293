"""The portal's three journeys in a real browser: the badge catching a new notice, the
Annual License Expired wall renewed in one click, and an administrator exporting the ledger.
Screenshots land in test-artifacts/."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from playwright.sync_api import Browser, expect

from db.delivery.inbox import add_to_inbox
from db.notices.fanout import prepare_claims
from db.notices.licence_scan import claim_due_milestones
from db.people.clients import create_client
from db.people.users import User, create_user
from db.platform.tenancy import Tenant, tenant_tx
from domain.people.identity import Role
from tests.browser.test_portal_browser import DESKTOP, PASSWORD, open_page, sign_in

pytestmark = pytest.mark.browser

CLIENT_EMAIL = "ops@northwind.example"
ADMIN_EMAIL = "admin@tenant.example"
POLL_WAIT_MS = 30_000  # milliseconds to wait for a poll that comes every 5 s


def seed(tenant: Tenant, expires_in_days: int) -> tuple[User, User]:
    today = datetime.now(UTC).astimezone(ZoneInfo(tenant.time_zone)).date()
    with tenant_tx(tenant.slug) as tx:
        client = create_client(tx, "Northwind Analytics", today + timedelta(days=expires_in_days))
        user = create_user(tx, CLIENT_EMAIL, Role.CLIENT_USER, PASSWORD, client_id=client.id,
                           display_name="Olivia Park")
        admin = create_user(tx, ADMIN_EMAIL, Role.ADMIN, PASSWORD, display_name="Sam Admin")
        claim_due_milestones(tx, datetime.now(UTC))
        prepare_claims(tx)
    return user, admin


def test_the_badge_catches_a_new_notice_and_one_is_marked_read(
    browser: Browser, portal_url: str, tenant: Tenant, artifacts: Path
) -> None:
    user, _ = seed(tenant, expires_in_days=7)
    page, errors = open_page(browser, DESKTOP)
    sign_in(page, portal_url, tenant, CLIENT_EMAIL)
    badge = page.locator("#unread-badge .count")
    expect(badge).to_have_text("1")

    with tenant_tx(tenant.slug) as tx:  # a notice arrives while the page is open
        add_to_inbox(tx, user.id, "report_ready", "Quarterly <b>report</b> is ready",
                     "Your <script>alert(1)</script> report is ready.", {"href": "/licence"},
                     idempotency_key="browser-report")
    # The badge's next poll (every 5 s here); the bound only stops a hang.
    expect(badge).to_have_text("2", timeout=POLL_WAIT_MS)

    page.reload()
    report = page.locator(".item").filter(has_text="Quarterly <b>report</b> is ready")
    expect(report).to_contain_text("Your <script>alert(1)</script> report is ready.")  # text, not markup
    page.screenshot(path=artifacts / "inbox-two-unread.png", full_page=True)
    report.get_by_role("button", name="Mark as read").click()
    expect(badge).to_have_text("1")
    expect(report).to_contain_text("Read just now")
    page.get_by_role("button", name="Mark all as read").click()
    expect(badge).to_have_text("0")
    page.screenshot(path=artifacts / "inbox.png", full_page=True)
    assert errors == []


def test_an_expired_client_user_renews_in_one_click_and_lands_where_they_were_going(
    browser: Browser, portal_url: str, tenant: Tenant, artifacts: Path
) -> None:
    seed(tenant, expires_in_days=-2)  # the scan expires the client
    page, errors = open_page(browser, DESKTOP)

    sign_in(page, portal_url, tenant, CLIENT_EMAIL, "/login?next=/licence")
    expect(page.get_by_role("heading", name="Your annual licence has expired")).to_be_visible()
    expect(page.get_by_text("Nothing has been deleted")).to_be_visible()
    assert page.url == f"{portal_url}/licence"
    page.screenshot(path=artifacts / "wall.png", full_page=True)
    errors.clear()  # the browser logs the wall's 402 status itself; that one is expected

    page.get_by_role("button", name="Renew for one year").click()
    expect(page.get_by_role("heading", name="Northwind Analytics")).to_be_visible()
    assert page.url == f"{portal_url}/licence"
    expect(page.locator(".licence .status")).to_have_text("Active")
    expect(page.locator("#unread-badge .count")).not_to_have_text("0")  # the renewal notice
    page.screenshot(path=artifacts / "wall-renewed.png", full_page=True)
    assert errors == []


def test_an_admin_reads_the_ledger_and_exports_it(
    browser: Browser, portal_url: str, tenant: Tenant, artifacts: Path
) -> None:
    seed(tenant, expires_in_days=7)
    page, errors = open_page(browser, DESKTOP)
    sign_in(page, portal_url, tenant, ADMIN_EMAIL)

    page.get_by_role("link", name="Evidence").click()
    expect(page.get_by_role("heading", name="Notification ledger")).to_be_visible()
    expect(page.locator(".ledger-row")).to_have_count(3)  # d30 and d14 skipped, d7 claimed
    page.get_by_label("Status").select_option("undelivered")
    page.get_by_role("button", name="Filter").click()
    expect(page.locator(".ledger-row")).to_have_count(1)
    page.locator(".attempts summary").click()
    expect(page.locator(".attempts")).to_contain_text(CLIENT_EMAIL)
    page.screenshot(path=artifacts / "ledger.png", full_page=True)

    with page.expect_download() as download_info:
        page.get_by_role("link", name="Export CSV").click()
    download = download_info.value
    rows = list(csv.DictReader(io.StringIO(Path(download.path()).read_text())))
    assert [(r["threshold"], r["status"]) for r in rows] == [("d7", "claimed")]
    assert download.suggested_filename.startswith(f"tocsin-ledger-{tenant.slug}-")

    page.get_by_role("link", name="Needs attention").click()
    expect(page.get_by_role("heading", name="Needs attention")).to_be_visible()
    page.screenshot(path=artifacts / "attention.png", full_page=True)
    page.get_by_role("link", name="Members").click()
    expect(page.get_by_role("heading", name="Members")).to_be_visible()
    page.screenshot(path=artifacts / "members.png", full_page=True)
    assert errors == []
