"""Every email kind as a mail client's web view shows it: Chromium at 375 px (a phone) and
800 px (a desktop), light and dark. Each is kept as a screenshot in test-artifacts/emails/; the
test checks what a reader would notice: nothing wider than the phone, the card readable in dark
mode, the action button and the brand's logo on screen."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Browser, Route

from tests.support.email_samples import BRAND, PORTAL, UNSUBSCRIBE, ZONE, sample_facts
from tocsin.providers.email_compose import render_email

pytestmark = pytest.mark.browser

LOGO = (b'<svg xmlns="http://www.w3.org/2000/svg" width="160" height="40" viewBox="0 0 160 40">'
        b'<rect width="40" height="40" rx="8" fill="#0f5132"/><text x="50" y="27" font-family="Arial" '
        b'font-size="18" font-weight="bold" fill="#0f5132">Acme</text></svg>')


def _serve_logo(route: Route) -> None:
    route.fulfill(status=200, content_type="image/svg+xml", body=LOGO)


# Every kind in English; German's longer words for the kinds with the longest copy.
CASES = [("en", kind) for kind in sample_facts("en")] + [("de", "licence_reminder"), ("de", "digest")]


def test_every_email_reads_well_on_a_phone_and_a_desktop_in_light_and_dark(
    browser: Browser, artifacts: Path
) -> None:
    folder = artifacts / "emails"
    folder.mkdir(exist_ok=True)
    for locale, kind in CASES:
        facts = sample_facts(locale)[kind]
        email = render_email(facts, ZONE, BRAND, PORTAL, None if kind == "digest" else UNSUBSCRIBE)
        for width in (375, 800):
            for scheme in ("light", "dark"):
                context = browser.new_context(viewport={"width": width, "height": 900},
                                              color_scheme=scheme)  # type: ignore[arg-type]
                page = context.new_page()
                page.route(f"{PORTAL}/brand/logo/**", _serve_logo)
                page.set_content(email.html, wait_until="load")
                page.screenshot(path=folder / f"{locale}-{kind}-{width}-{scheme}.png", full_page=True)
                scroll_width = page.evaluate("document.documentElement.scrollWidth")
                assert scroll_width <= width, f"{kind} is {scroll_width} px wide at {width} px"
                card = page.evaluate(
                    "getComputedStyle(document.querySelector('.card')).backgroundColor")
                assert card == ("rgb(31, 41, 55)" if scheme == "dark" else "rgb(255, 255, 255)")
                logo_width = page.evaluate("document.querySelector('img.logo').naturalWidth")
                assert logo_width > 0, "the logo loads from its absolute URL"
                button = page.locator("a.button-link")
                assert button.is_visible()
                assert button.bounding_box()["width"] <= width  # type: ignore[index]
                context.close()
