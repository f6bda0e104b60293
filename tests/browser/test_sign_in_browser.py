"""Single sign-on and two-factor sign-in in a real browser, on a desktop and on a phone: the
sign-in settings page, setting up two-factor (key, confirmation, recovery codes), the sign-in
page's provider button, the round trip through a real provider on 127.0.0.1, and the second
step. Screenshots land in test-artifacts/ (sign-in-*.png)."""

from __future__ import annotations

from pathlib import Path

import pyotp
import pytest
from playwright.sync_api import Browser, ViewportSize, expect

from db.people.users import create_user
from db.platform.tenancy import Tenant, tenant_tx
from domain.people.identity import Role
from tests.browser.pages import open_page, sign_in
from tests.browser.test_portal_browser import DESKTOP, PASSWORD, PHONE
from tests.integration.sign_in_support import use_provider
from tests.support.oidc_provider import Account, LocalIdentityProvider

pytestmark = pytest.mark.browser

ADMIN = "sam.admin@tenant.example"


@pytest.mark.parametrize(("name", "viewport"), [("desktop", DESKTOP), ("phone", PHONE)])
def test_an_administrator_sets_up_two_factor_then_signs_in_with_single_sign_on_and_a_recovery_code(
    browser: Browser, portal_url: str, tenant: Tenant, artifacts: Path, name: str,
    viewport: ViewportSize, idp: LocalIdentityProvider,
) -> None:
    with tenant_tx(tenant.slug) as tx:
        create_user(tx, ADMIN, Role.ADMIN, PASSWORD, display_name="Sam Admin")
    use_provider(tenant, idp)
    idp.account = Account(ADMIN)
    page, errors = open_page(browser, viewport)
    sign_in(page, portal_url, tenant, ADMIN, PASSWORD)
    expect(page.get_by_role("heading", name="Inbox")).to_be_visible()

    page.goto(f"{portal_url}/settings/sign-in")
    expect(page.get_by_role("heading", name="Single sign-on (OpenID Connect)")).to_be_visible()
    page.screenshot(path=artifacts / f"sign-in-settings-{name}.png", full_page=True)

    page.goto(f"{portal_url}/account/two-factor")
    page.get_by_role("button", name="Set up two-factor sign-in").click()
    secret = page.locator("#totp-secret").inner_text().strip()
    page.screenshot(path=artifacts / f"sign-in-two-factor-setup-{name}.png", full_page=True)
    page.get_by_label("Code", exact=True).fill(pyotp.TOTP(secret).now())
    page.get_by_role("button", name="Turn two-factor sign-in on").click()
    expect(page.get_by_role("heading", name="Your recovery codes")).to_be_visible()
    recovery = page.locator("#recovery-codes code").first.inner_text()
    page.screenshot(path=artifacts / f"sign-in-recovery-codes-{name}.png", full_page=True)
    page.get_by_role("button", name="Sign out").click()

    page.goto(f"{portal_url}/login?organisation={tenant.slug}")
    page.screenshot(path=artifacts / f"sign-in-sso-button-{name}.png", full_page=True)
    page.get_by_role("link", name="Sign in with Acme Login").click()
    expect(page.get_by_role("heading", name="Enter your code")).to_be_visible()
    page.screenshot(path=artifacts / f"sign-in-second-step-{name}.png", full_page=True)
    # A recovery code, not the app's: the code used to confirm may still be the current one.
    page.get_by_label("Code", exact=True).fill(recovery)
    page.get_by_role("button", name="Continue").click()
    expect(page.get_by_role("heading", name="Inbox")).to_be_visible()
    assert errors == []
