"""Browser fixtures: the portal served by uvicorn in a subprocess (as in production, against
the test database and Redis) and Debian's Chromium driven through Playwright."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Playwright, sync_playwright

from db.platform.tenancy import Tenant
from tests.integration.conftest import new_tenant, remove_tenant
from tests.support.portal_server import ROOT, serve_portal

ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="session")
def portal_url(artifacts: Path) -> Iterator[str]:
    # The badge polls every 5 s (the minimum) so a test sees a new notice arrive quickly.
    with serve_portal(artifacts / "portal-server.log", INBOX_POLL_SECONDS="5") as url:
        yield url


@pytest.fixture(scope="session")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="session")
def browser(playwright: Playwright) -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} is missing: the browser tests drive Debian's Chromium. "
            "Install it with `apt-get install chromium` (CI does).",
            pytrace=False,
        )
    browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
    yield browser
    browser.close()


@pytest.fixture
def tenant() -> Iterator[Tenant]:
    made = new_tenant()
    yield made
    remove_tenant(made)
