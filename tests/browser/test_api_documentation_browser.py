"""The events API's documentation page in a real browser, under the portal's own content
security policy: the vendored Swagger UI renders both operations, nothing is loaded from
another origin, and the browser reports no policy violation or script error."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Browser, Request, expect

from portal.openapi import SCHEMA_PATH
from tests.browser.pages import open_page

pytestmark = pytest.mark.browser


def test_swagger_ui_renders_the_events_api_from_the_portals_own_origin(
        browser: Browser, portal_url: str, artifacts: Path) -> None:
    page, errors = open_page(browser, {"width": 1280, "height": 900})
    origins: set[str] = set()
    failed: list[str] = []

    def note(request: Request) -> None:
        parts = urlsplit(request.url)
        if parts.scheme in ("http", "https"):
            origins.add(f"{parts.scheme}://{parts.netloc}")

    page.on("request", note)
    page.on("response", lambda response: failed.append(response.url) if response.status >= 400 else None)
    page.goto(f"{portal_url}{SCHEMA_PATH}")

    expect(page.locator(".opblock-summary-path", has_text="/api/v1/events/batch")).to_be_visible()
    expect(page.locator(".opblock-summary-path").first).to_be_visible()
    paths = page.locator(".opblock-summary-path").all_inner_texts()
    assert {p.replace("\u200b", "") for p in paths} == {"/api/v1/events", "/api/v1/events/batch"}
    page.locator(".opblock-summary", has_text="/api/v1/events/batch").click()  # expands, renders the schema
    expect(page.locator(".opblock-body").first).to_be_visible()
    page.screenshot(path=artifacts / "api-documentation.png", full_page=True)

    assert origins == {portal_url}
    assert failed == []
    assert errors == [], errors  # a refused script, style or fetch is reported here
    page.context.close()
