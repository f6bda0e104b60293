"""The email template editor in headless Chromium, on a desktop and a phone: typing in the
body updates the live preview (the HTML at desktop and phone widths, and the text part)
without a reload, a template that does not parse shows its line and column, and saving makes
a version the page lists."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from playwright.sync_api import Browser, ViewportSize, expect

from db.people.clients import create_client
from db.people.users import create_user
from db.platform.tenancy import Tenant, tenant_tx
from domain.people.identity import Role
from tests.browser.pages import open_page, sign_in
from tocsin.core.i18n import formats_for

pytestmark = pytest.mark.browser

PASSWORD = "correct horse battery"


@pytest.mark.parametrize(("name", "viewport"), [("desktop", {"width": 1280, "height": 900}),
                                                ("phone", {"width": 390, "height": 844})])
def test_an_admin_edits_a_template_with_a_live_preview_and_sees_why_one_is_refused(
    browser: Browser, portal_url: str, tenant: Tenant, artifacts: Path, name: str, viewport: ViewportSize
) -> None:
    email = f"templates-{name}@example.com"
    due = datetime.now(UTC).date() + timedelta(days=20)  # in its d30 window: the preview shows its date
    renew = f"Renew Northwind Analytics by {formats_for('en', 'UTC').long_date(due)}."
    with tenant_tx(tenant.slug) as tx:
        create_user(tx, email, Role.ADMIN, PASSWORD)
        create_client(tx, "Northwind Analytics", due)
    page, errors = open_page(browser, viewport)
    sign_in(page, portal_url, tenant, email, PASSWORD)
    page.goto(f"{portal_url}/settings/email-templates")
    page.screenshot(path=artifacts / f"email-templates-{name}.png", full_page=True)
    page.get_by_role("link", name="Shipped text of Licence reminder (before expiry) in English").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("Licence reminder")

    page.get_by_label("Body").fill("Dear {{ recipient.name }},\n\nRenew {{ client.name }} by {{ due.date }}.")
    text = page.locator(".template-text")
    expect(text).to_contain_text(renew)
    desktop = page.frame_locator(".template-frame-desktop iframe")
    phone = page.frame_locator(".template-frame-phone iframe")
    expect(desktop.get_by_text(renew)).to_be_visible()
    expect(phone.get_by_text(renew)).to_be_visible()
    page.screenshot(path=artifacts / f"email-template-editor-{name}.png", full_page=True)

    page.get_by_label("Subject", exact=True).fill("Renew {% if %}")
    expect(page.get_by_role("alert")).to_contain_text("line 1, column")
    page.get_by_label("Subject", exact=True).fill("{{ client.name }}: time to renew")
    expect(text).to_contain_text("Northwind Analytics: time to renew")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status")).to_contain_text("Saved")
    expect(page.locator(".template-versions")).to_contain_text("Version 1")
    page.screenshot(path=artifacts / f"email-template-saved-{name}.png", full_page=True)
    assert errors == []
