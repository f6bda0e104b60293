"""What every browser test does first: a fresh page that collects console errors (a CSP
violation, a failed htmx request, an uncaught script error) so the test can insist there are
none, and signing in through the login form."""

from __future__ import annotations

from playwright.sync_api import Browser, ConsoleMessage, Page, ViewportSize

from db.platform.tenancy import Tenant

EXPECT_TIMEOUT = 15_000  # milliseconds a page may take to show what the test waits for


def open_page(browser: Browser, viewport: ViewportSize) -> tuple[Page, list[str]]:
    context = browser.new_context(viewport=viewport)
    context.set_default_timeout(EXPECT_TIMEOUT)
    page = context.new_page()
    errors: list[str] = []

    def record(message: ConsoleMessage) -> None:
        if message.type == "error":
            errors.append(message.text)

    page.on("console", record)
    page.on("pageerror", lambda error: errors.append(str(error)))
    return page, errors


def sign_in(page: Page, portal_url: str, tenant: Tenant, email: str, password: str,
            path: str = "/login") -> None:
    page.goto(f"{portal_url}{path}")
    page.get_by_label("Organisation").fill(tenant.slug)
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
