"""Browser fixtures: the portal served by uvicorn in a subprocess (as in production, against
the test database and Redis) and Debian's Chromium driven through Playwright."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Playwright, sync_playwright

from db.tenancy import Tenant
from tests.integration.conftest import WAIT_LIMIT, new_tenant, remove_tenant, wait_until

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="session")
def portal_url(artifacts: Path) -> Iterator[str]:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = artifacts / "portal-server.log"
    # The badge polls every 5 s (the minimum) so a test sees a new notice arrive quickly.
    env = dict(os.environ, PORT=str(port), PORTAL_URL=url, INBOX_POLL_SECONDS="5")
    with log_path.open("wb") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "portal.app:create_app", "--factory",
             "--host", "127.0.0.1", "--port", str(port)],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        )
        try:
            wait_until(lambda: server.poll() is not None or _healthy(url), "the portal to start")
            if server.poll() is not None:
                raise AssertionError(f"the portal exited at start-up; see {log_path}")
            yield url
        finally:
            server.terminate()
            try:
                server.wait(timeout=WAIT_LIMIT)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


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
