"""The sign-in throttle under attack, over HTTP against a real portal (uvicorn in a
subprocess) and the real Redis: concurrent guesses are counted before any password work, so
no more than the limit are ever checked; and X-Forwarded-For is believed only from a
trusted proxy, so a client cannot reset its address's count by making addresses up."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import redis

from db.platform.tenancy import Tenant
from portal.ratelimit import ACCOUNT_FAILURES, ADDRESS_FAILURES, account_key, address_key
from tests.integration.builders import PASSWORD, add_admin
from tests.integration.conftest import WAIT_LIMIT
from tests.integration.portal_support import forget_sign_in_failures
from tests.support.portal_server import ROOT, serve_portal
from tocsin.core.settings import load_settings

LOGS = ROOT / "test-artifacts"
WRONG = "email or password is wrong"
PAUSED = "Too many failed sign-in attempts"
GUESSES = 30


@pytest.fixture(scope="module")
def portal_url() -> Iterator[str]:
    # A generous wait for a turn at password checking: this test counts verdicts, and a
    # sign-in told "busy" would be neither a verdict nor a refusal by the throttle.
    with serve_portal(LOGS / "portal-throttle.log", PASSWORD_CHECK_WAIT_SECONDS="60") as url:
        yield url


@pytest.fixture
def fresh_counts() -> Iterator[None]:
    """No counts before the test, and none left after it: these tests fill the count of
    127.0.0.1, the address of every real HTTP client of every later test in this worker
    (a Procfile stack's sign-in was refused with 429 after one of them)."""
    forget_sign_in_failures()
    yield
    forget_sign_in_failures()


def counter(key: str) -> int:
    value = redis.Redis.from_url(load_settings().redis_url).get(key)
    return 0 if value is None else int(value)


def attempt(url: str, tenant: Tenant, email: str, password: str,
            forwarded_for: str | None = None, ready: threading.Barrier | None = None) -> httpx.Response:
    """One sign-in from a browser of its own: the login page (its CSRF cookie and token),
    then the form; with a barrier, every browser posts at the same moment."""
    with httpx.Client(base_url=url, timeout=WAIT_LIMIT * 2) as browser:
        token = re.search(r'name="_csrf_token" value="([^"]+)"', browser.get("/login").text)
        assert token
        headers = {"X-Forwarded-For": forwarded_for} if forwarded_for else {}
        if ready is not None:
            ready.wait(timeout=WAIT_LIMIT)
        return browser.post("/login", headers=headers, data={
            "organisation": tenant.slug, "email": email, "password": password, "next": "/",
            "_csrf_token": token.group(1)})


@pytest.mark.usefixtures("fresh_counts")
def test_thirty_concurrent_wrong_passwords_check_no_more_than_the_limit(
    portal_url: str, tenant: Tenant
) -> None:
    admin = add_admin(tenant)
    ready = threading.Barrier(GUESSES)
    with ThreadPoolExecutor(max_workers=GUESSES) as pool:
        answers = list(pool.map(
            lambda _: attempt(portal_url, tenant, admin.email, "wrong password", ready=ready),
            range(GUESSES)))

    statuses = sorted(a.status_code for a in answers)
    verdicts = [a for a in answers if a.status_code == 400]
    refused = [a for a in answers if a.status_code == 429]
    print(f"{GUESSES} concurrent wrong passwords: {len(verdicts)} checked, {len(refused)} refused")
    # Only a checked password can be called wrong: exactly the limit were checked.
    assert len(verdicts) == ACCOUNT_FAILURES, statuses
    assert all(WRONG in a.text for a in verdicts)
    assert len(refused) == GUESSES - ACCOUNT_FAILURES, statuses
    assert all(PAUSED in a.text and int(a.headers["Retry-After"]) > 0 for a in refused)
    assert counter(account_key(tenant.slug, admin.email)) == ACCOUNT_FAILURES

    # The right password now is refused too, without being checked (nothing is counted).
    late = attempt(portal_url, tenant, admin.email, PASSWORD)
    assert late.status_code == 429 and PAUSED in late.text and "tocsin_session" not in late.cookies
    assert counter(account_key(tenant.slug, admin.email)) == ACCOUNT_FAILURES


@pytest.mark.usefixtures("fresh_counts")
def test_a_made_up_forwarded_for_from_an_untrusted_peer_does_not_reset_the_address_count(
    portal_url: str, tenant: Tenant
) -> None:
    add_admin(tenant)
    # A spray across accounts, each guess claiming to come from another address.
    for n in range(ADDRESS_FAILURES):
        answer = attempt(portal_url, tenant, f"guess{n}@example.com", "wrong password",
                         forwarded_for=f"203.0.113.{n + 1}")
        assert answer.status_code == 400 and WRONG in answer.text

    refused = attempt(portal_url, tenant, "admin@example.com", PASSWORD, forwarded_for="198.51.100.9")

    assert refused.status_code == 429 and PAUSED in refused.text
    # Counted against the peer the portal saw, never against an address the client named.
    assert counter(address_key("127.0.0.1")) == ADDRESS_FAILURES
    assert counter(address_key("203.0.113.1")) == counter(address_key("198.51.100.9")) == 0


@pytest.mark.usefixtures("fresh_counts")
def test_behind_a_trusted_proxy_each_forwarded_client_has_its_own_count(tenant: Tenant) -> None:
    add_admin(tenant)
    with serve_portal(LOGS / "portal-trusted-proxy.log", TRUSTED_PROXIES="127.0.0.1/32") as url:
        # The proxy appends the address it saw; anything the client wrote is further left.
        for n in range(ADDRESS_FAILURES):
            answer = attempt(url, tenant, f"guess{n}@example.com", "wrong password",
                             forwarded_for=f"10.0.0.{n}, 192.0.2.10")
            assert answer.status_code == 400
        paused = attempt(url, tenant, "admin@example.com", PASSWORD,
                         forwarded_for="10.0.0.99, 192.0.2.10")
        other_client = attempt(url, tenant, "admin@example.com", PASSWORD, forwarded_for="192.0.2.20")

    assert paused.status_code == 429  # the same client behind the proxy, whatever it wrote
    assert other_client.status_code == 303  # another client behind the same proxy is not
    assert counter(address_key("192.0.2.10")) == ADDRESS_FAILURES
    assert counter(address_key("127.0.0.1")) == 0 and counter(address_key("10.0.0.0")) == 0
