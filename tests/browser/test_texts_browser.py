"""Text messages in headless Chromium, on a desktop and a phone: a number without its country
code is refused next to the field, a good one saved in E.164, texts turned on for a category,
STOP pressed; screenshots of both widths in the artifacts."""

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
def test_a_member_saves_a_mobile_number_turns_texts_on_and_stops_them(
    browser: Browser, portal_url: str, tenant: Tenant, artifacts: Path, name: str, viewport: ViewportSize
) -> None:
    email = f"texter-{name}@northwind.example"
    with tenant_tx(tenant.slug) as tx:
        create_user(tx, email, Role.MEMBER, PASSWORD)
    page, errors = open_page(browser, viewport)
    sign_in(page, portal_url, tenant, email, PASSWORD, path="/login?next=/preferences/texts")
    expect(page.get_by_role("heading", name="Text messages", exact=True)).to_be_visible()

    page.get_by_label("Mobile number, with its country code").fill("07400 123456")
    page.get_by_role("button", name="Save number").click()
    expect(page.locator("#phone-error")).to_contain_text("country code")
    page.get_by_label("Mobile number, with its country code").fill("+44 7400 123456")
    page.get_by_role("button", name="Save number").click()
    expect(page.get_by_role("status")).to_contain_text("Mobile number saved")
    expect(page.get_by_label("Mobile number, with its country code")).to_have_value("+447400123456")

    page.get_by_role("button", name="Turn on texts for Licence").click()
    expect(page.locator("#texts-license_expiring")).to_contain_text("Texts on")
    page.screenshot(path=artifacts / f"texts-{name}.png", full_page=True)
    page.get_by_role("button", name="STOP all texts").click()
    expect(page.get_by_role("button", name="Resume texts")).to_be_visible()
    assert [e for e in errors if "status of 422" not in e] == []  # the refused number: expected
