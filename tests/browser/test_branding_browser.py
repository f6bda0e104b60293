"""The Branding page in headless Chromium, on a desktop and a phone: typing a footer updates
the live preview of an email without a reload, and saving a colour below AA contrast shows why
it was refused; the saved brand (name, logo, colour) then heads every page, in the reader's
language, and fits a phone."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Browser, ViewportSize, expect

from db.people.brand import save_brand, save_logo
from db.people.users import create_user
from db.platform.tenancy import Tenant, tenant_tx
from domain.people.identity import Role
from tests.browser.pages import open_page, sign_in

pytestmark = pytest.mark.browser

PASSWORD = "correct horse battery"
LOGO = (b'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 40 40">'
        b'<circle cx="20" cy="20" r="18" fill="#8b1e3f"/></svg>')


@pytest.mark.parametrize(("name", "viewport"), [("desktop", {"width": 1280, "height": 900}),
                                                ("phone", {"width": 390, "height": 844})])
def test_an_admin_sees_the_preview_follow_the_footer_and_a_clear_refusal(
    browser: Browser, portal_url: str, tenant: Tenant, artifacts: Path, name: str, viewport: ViewportSize
) -> None:
    email = f"brand-{name}@example.com"
    with tenant_tx(tenant.slug) as tx:
        create_user(tx, email, Role.ADMIN, PASSWORD)
    page, errors = open_page(browser, viewport)
    sign_in(page, portal_url, tenant, email, PASSWORD)
    page.goto(f"{portal_url}/settings/brand")
    page.get_by_label("Footer with your postal address").fill("Acme GmbH, Hafenstraße 1, Hamburg")
    frame = page.frame_locator("iframe.brand-preview-frame")
    expect(frame.get_by_text("Acme GmbH, Hafenstraße 1, Hamburg")).to_be_visible()
    page.screenshot(path=artifacts / f"branding-{name}.png", full_page=True)
    page.locator("#colour").evaluate("(input) => { input.value = '#ffd700'; }")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("alert")).to_contain_text("contrast of 1.4:1 on white")
    # The refusal answers 422, which Chromium logs; nothing else may be logged.
    assert [e for e in errors if "status of 422" not in e] == []


@pytest.mark.parametrize(("name", "viewport"), [("desktop", {"width": 1280, "height": 900}),
                                                ("phone", {"width": 390, "height": 844})])
def test_a_french_member_sees_the_tenants_brand_in_a_french_header_that_fits_the_screen(
    browser: Browser, portal_url: str, tenant: Tenant, artifacts: Path, name: str, viewport: ViewportSize
) -> None:
    email = f"brand-fr-{name}@example.com"
    with tenant_tx(tenant.slug) as tx:
        admin = create_user(tx, email, Role.MEMBER, PASSWORD)
        tx.conn.execute("UPDATE users SET locale = 'fr' WHERE id = %s", [admin.id])
        save_brand(tx, admin.id, display_name="Northwind Conformité", colour="#8b1e3f", footer="")
        save_logo(tx, admin.id, LOGO, "image/svg+xml")
    page, errors = open_page(browser, viewport)
    sign_in(page, portal_url, tenant, email, PASSWORD)
    page.goto(f"{portal_url}/preferences")
    expect(page.locator("html")).to_have_attribute("lang", "fr")
    header = page.locator("header.topbar")
    expect(header.get_by_text("Northwind Conformité")).to_be_visible()
    expect(header.locator("img.brand-logo")).to_be_visible()
    expect(page.get_by_role("heading", name="Préférences de notification")).to_be_visible()
    assert header.evaluate("(h) => getComputedStyle(h).borderTopColor") == "rgb(139, 30, 63)"
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
    page.screenshot(path=artifacts / f"branded-header-fr-{name}.png", full_page=True)
    assert errors == []
