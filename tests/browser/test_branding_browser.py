"""The Branding page in headless Chromium, on a desktop and a phone: typing a footer updates
the live preview of an email without a reload, and saving a colour below AA contrast shows why
it was refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Browser, ViewportSize, expect

from db.people.users import create_user
from db.platform.tenancy import Tenant, tenant_tx
from domain.people.identity import Role
from tests.browser.pages import open_page, sign_in

pytestmark = pytest.mark.browser

PASSWORD = "correct horse battery"


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
