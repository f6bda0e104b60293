"""Sessions as an attacker meets them: an absolute lifetime beside the idle one, sign-out and
deactivation ending every session of the user, a request in flight during sign-out unable to
bring the session back, sessions confined to their deployment's namespace, Secure cookies
and HSTS behind https, and a fresh CSRF token at sign-in."""

from __future__ import annotations

import dataclasses
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import httpx
import pytest
import redis
from litestar.testing import TestClient

from portal.app import HSTS
from portal.sessions import MAX_REFRESH_STEP_SECONDS, SESSION_COOKIE
from tests.integration.builders import scalar
from tests.integration.conftest import WAIT_LIMIT
from tests.integration.portal_support import (
    PASSWORD,
    People,
    PortalClient,
    csrf_token,
    sign_in,
)
from tests.support.portal_server import serve_portal
from tocsin.boot.web import build_app
from tocsin.core.settings import Settings, load_settings

CSRF_COOKIE = "tocsin_csrf"


@pytest.fixture
def store() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(load_settings().redis_url)
    yield client
    client.close()


def _key(portal: PortalClient, settings: Settings | None = None) -> str:
    session_id = portal.cookies[SESSION_COOKIE].split(".")[0]
    return f"{(settings or load_settings()).dramatiq_namespace}:session:{session_id}"


def _signed_in(portal: PortalClient) -> bool:
    return portal.get("/", follow_redirects=False).status_code == 200


def test_the_absolute_lifetime_bounds_the_sliding_refresh_and_then_ends_the_session(
    portal: PortalClient, people: People, store: redis.Redis
) -> None:
    settings = load_settings()
    sign_in(portal, people.tenant.slug, people.client_user.email)
    key = _key(portal)
    data = json.loads(store.get(key) or b"{}")
    # The fake clock: the session was started long ago (100 s of its absolute lifetime left).
    data["started"] = int(time.time()) - settings.session_absolute_seconds + 100
    store.set(key, json.dumps(data), keepttl=True)

    response = portal.get("/", follow_redirects=False)  # a polling tab keeps asking

    assert response.status_code == 200
    cookie = next(c for c in response.headers.get_list("set-cookie") if c.startswith(SESSION_COOKIE))
    max_age = int(cookie.split("Max-Age=")[1].split(";")[0])
    assert 0 < max_age <= 100 and 0 < store.ttl(key) <= 100  # not the 8 idle hours

    data["started"] = int(time.time()) - settings.session_absolute_seconds - 1
    store.set(key, json.dumps(data), keepttl=True)
    assert portal.get("/", follow_redirects=False).status_code == 303
    assert not store.exists(key)



def test_a_read_within_the_refresh_step_writes_nothing_back_and_a_later_one_slides_the_session(
    portal: PortalClient, people: People, store: redis.Redis
) -> None:
    idle = load_settings().session_idle_seconds
    step = min(MAX_REFRESH_STEP_SECONDS, idle // 10)
    sign_in(portal, people.tenant.slug, people.client_user.email)
    key = _key(portal)

    fresh = portal.get("/", follow_redirects=False)  # right after sign-in: nothing is due

    assert fresh.status_code == 200
    assert not any(c.startswith(SESSION_COOKIE) for c in fresh.headers.get_list("set-cookie"))
    store.expire(key, idle - step - 5)  # as if the last refresh was a step and 5 s ago

    due = portal.get("/", follow_redirects=False)

    cookie = next(c for c in due.headers.get_list("set-cookie") if c.startswith(SESSION_COOKIE))
    assert idle - 5 <= int(cookie.split("Max-Age=")[1].split(";")[0]) <= idle
    assert idle - 5 <= store.ttl(key) <= idle

def test_signing_out_ends_every_session_of_that_user(people: People, store: redis.Redis) -> None:
    with TestClient(app=build_app()) as laptop, TestClient(app=build_app()) as phone:
        sign_in(laptop, people.tenant.slug, people.client_user.email)
        sign_in(phone, people.tenant.slug, people.client_user.email)
        keys = [_key(laptop), _key(phone)]
        assert _signed_in(phone)

        laptop.post("/logout", data={"_csrf_token": csrf_token(laptop.get("/preferences").text)})

        assert not _signed_in(laptop) and not _signed_in(phone)
        assert store.exists(*keys) == 0


def test_deactivation_ends_every_session_of_that_user_at_once(people: People, store: redis.Redis) -> None:
    with TestClient(app=build_app()) as theirs, TestClient(app=build_app()) as admin:
        sign_in(theirs, people.tenant.slug, people.client_user.email)
        key = _key(theirs)
        sign_in(admin, people.tenant.slug, people.admin.email)
        token = csrf_token(admin.get("/members").text)

        admin.post(f"/members/{people.client_user.id}/deactivate", data={"_csrf_token": token})

        assert not store.exists(key)
        assert not _signed_in(theirs)


def test_a_request_in_flight_during_sign_out_does_not_bring_the_session_back(
    people: People, store: redis.Redis, tmp_path: Path
) -> None:
    with serve_portal(tmp_path / "portal.log") as url, httpx.Client(base_url=url) as browser:
        login = browser.get("/login")
        browser.post("/login", data={"organisation": people.tenant.slug, "email": people.client_user.email,
                                     "password": PASSWORD, "_csrf_token": csrf_token(login.text)})
        licence = browser.get("/licence")
        token = csrf_token(licence.text)
        cookie = browser.cookies[SESSION_COOKIE]
        key = f"{load_settings().dramatiq_namespace}:session:{cookie.split('.')[0]}"
        body = urlencode({"expires_on": people.client.access_expires_on.isoformat(),
                          "next": "/licence"}).encode()
        address = urlsplit(url)
        head = (f"POST /renew HTTP/1.1\r\nHost: {address.netloc}\r\n"
                f"Cookie: {SESSION_COOKIE}={cookie}; {CSRF_COOKIE}={browser.cookies[CSRF_COOKIE]}\r\n"
                f"X-CSRFToken: {token}\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
        watcher = redis.Redis.from_url(load_settings().redis_url, socket_timeout=WAIT_LIMIT)
        with socket.create_connection((address.hostname, address.port), timeout=WAIT_LIMIT) as slow, \
                watcher.monitor() as monitor:
            slow.sendall(head + body[:1])  # the portal loads the session, then waits for the body
            while not monitor.next_command()["command"].startswith(f"GET {key}"):
                pass
            browser.post("/logout", data={"_csrf_token": token})  # sign out meanwhile
            slow.sendall(body[1:])
            answer = b""
            while chunk := slow.recv(65536):
                answer += chunk
        watcher.close()

        status_line, _, rest = answer.partition(b"\r\n")
        assert status_line.split()[1] == b"303"  # it ran as signed in: the race happened
        assert f"{SESSION_COOKIE}=null".encode() in rest  # and it ends the session, not revives it
        assert not store.exists(key)
        browser.cookies.set(SESSION_COOKIE, cookie)
        assert browser.get("/", follow_redirects=False).status_code == 303


def test_two_deployments_sharing_a_redis_do_not_accept_each_others_sessions(
    people: People, store: redis.Redis
) -> None:
    ours = load_settings()
    theirs = dataclasses.replace(ours, dramatiq_namespace=f"{ours.dramatiq_namespace}-other")
    with TestClient(app=build_app(ours)) as a, TestClient(app=build_app(theirs)) as b:
        sign_in(a, people.tenant.slug, people.client_user.email)
        assert store.exists(_key(a, ours))
        b.cookies.set(SESSION_COOKIE, a.cookies[SESSION_COOKIE], domain="testserver.local")

        assert not _signed_in(b)
        assert _signed_in(a)


def _sign_in_over(url: str, people: People) -> list[httpx.Response]:
    login = httpx.get(f"{url}/login")
    # By hand: a browser sends a Secure cookie back over https, httpx never over http.
    csrf = login.headers["set-cookie"].split(";")[0]
    signed = httpx.post(f"{url}/login", headers={"Cookie": csrf}, data={
        "organisation": people.tenant.slug, "email": people.client_user.email,
        "password": PASSWORD, "_csrf_token": csrf_token(login.text)})
    return [login, signed]


def test_behind_https_cookies_are_secure_and_hsts_is_sent(people: People, tmp_path: Path) -> None:
    # Plain http to the portal, https to the browser: a TLS-terminating proxy in front.
    with serve_portal(tmp_path / "https.log", PORTAL_URL="https://portal.example") as url:
        login, signed = _sign_in_over(url, people)
    cookies = login.headers.get_list("set-cookie") + signed.headers.get_list("set-cookie")
    assert login.headers["strict-transport-security"] == HSTS
    assert signed.status_code == 303 and signed.headers["strict-transport-security"] == HSTS
    assert {c.split("=")[0] for c in cookies} == {CSRF_COOKIE, SESSION_COOKIE}
    assert all("; Secure" in c for c in cookies), cookies

    with serve_portal(tmp_path / "http.log") as url:
        plain = _sign_in_over(url, people)
    assert all("strict-transport-security" not in r.headers for r in plain)


def test_signing_in_gives_a_fresh_csrf_token_and_the_old_one_no_longer_works(
    portal: PortalClient, people: People
) -> None:
    before = csrf_token(portal.get("/login").text)  # known to whoever planted or read it
    sign_in(portal, people.tenant.slug, people.admin.email)
    after = csrf_token(portal.get("/members").text)

    stale = portal.post(f"/members/{people.client_user.id}/deactivate",
                        data={"_csrf_token": before}, follow_redirects=False)

    assert after != before
    assert stale.status_code == 403
    assert scalar(people.tenant, "SELECT deactivated_at FROM users WHERE id = %s",
                  people.client_user.id) is None
