"""The live inbox: writers name the users they notified on Redis after commit; the event
stream (against a real uvicorn, since it stays open) says "look now" to the named reader of
the named tenant only; /inbox/newer gives the page what arrived after its cursor, which is
also what the fallback poll asks for."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import httpx
import pytest
import redis
from litestar.testing import TestClient

from db.delivery.inbox import add_to_inbox
from db.notices.scan import run_scan
from db.people.clients import create_client
from db.people.users import User, create_user
from db.platform.tenancy import Tenant, tenant_tx
from domain.people.identity import Role
from portal.live import InboxListener
from portal.settings import PortalSettings
from tests.integration.conftest import WAIT_LIMIT
from tests.integration.portal_support import (
    HTMX,
    PASSWORD,
    People,
    PortalClient,
    badge_count,
    local_today,
    signed_in,
)
from tests.support.portal_server import ROOT, serve_portal
from tocsin.boot.web import build_app
from tocsin.core.settings import load_settings
from tocsin.messaging.inbox_events import InboxAnnouncer, channel, decode

LOGS = ROOT / "test-artifacts"


@pytest.fixture(scope="module")
def live_url() -> Iterator[str]:
    with serve_portal(LOGS / "portal-live-server.log") as url:
        yield url


def cursor_of(html: str) -> dict[str, str]:
    """The page's #feed-cursor inputs, as query parameters."""
    block = re.search(r'<div id="feed-cursor"[^>]*>(.*?)</div>', html, re.S)
    assert block, "no feed cursor in the page"
    return dict(re.findall(r'name="(created_at|id)" value="([^"]*)"', block.group(1)))


def titles(html: str) -> list[str]:
    return re.findall(r'<h2 class="item-title"[^>]*>([^<]*)</h2>', html)


def add_report(tenant: Tenant, user: User, title: str) -> None:
    with tenant_tx(tenant.slug) as tx:
        add_to_inbox(tx, user.id, "report_ready", title, "Ready.", idempotency_key=f"{title}:{user.id}")


# --- what the page asks for: /inbox/newer ---------------------------------------------------


def test_newer_gives_only_what_arrived_after_the_cursor_and_moves_the_cursor(
    portal: PortalClient, people: People
) -> None:
    page = signed_in(portal, people, people.admin)
    cursor = cursor_of(page)
    assert cursor and 'hx-get="/inbox/newer"' in page

    add_report(people.tenant, people.admin, "Quarterly report")
    add_report(people.tenant, people.admin, "Annual report")
    add_report(people.tenant, people.client_user, "Someone else's report")
    newer = portal.get("/inbox/newer", params=cursor, headers=HTMX)
    assert newer.status_code == 200
    assert titles(newer.text) == ["Annual report", "Quarterly report"]  # newest first, only mine
    assert 'hx-swap-oob="afterbegin:#feed"' in newer.text
    assert badge_count(newer.text) == 3 and 'hx-swap-oob="true"' in newer.text
    moved = cursor_of(newer.text)
    assert int(moved["id"]) > int(cursor["id"])

    again = portal.get("/inbox/newer", params=moved, headers=HTMX)
    assert titles(again.text) == [] and cursor_of(again.text) == moved  # nothing twice


def test_an_empty_inbox_takes_its_first_notice_and_drops_the_empty_state(
    portal: PortalClient, people: People
) -> None:
    with tenant_tx(people.tenant.slug) as tx:
        newcomer = create_user(tx, "new@tenant.example", Role.MEMBER, PASSWORD)
    page = signed_in(portal, people, newcomer)
    assert 'id="feed-empty"' in page and cursor_of(page) == {}

    add_report(people.tenant, newcomer, "Your first report")
    newer = portal.get("/inbox/newer", headers=HTMX)
    assert titles(newer.text) == ["Your first report"]
    assert '<div id="feed-empty" hx-swap-oob="delete">' in newer.text


def test_the_inbox_listens_to_the_stream_and_polls_the_feed_as_the_fallback(
    portal: PortalClient, people: People
) -> None:
    page = signed_in(portal, people, people.client_user)
    assert 'sse-connect="/inbox/stream"' in page and "/static/htmx-ext-sse.js" in page
    assert 'hx-trigger="every 30s, sse:inbox"' in page


def test_with_live_push_switched_off_the_inbox_only_polls(people: People) -> None:
    off = PortalSettings(inbox_poll_seconds=5, secure_cookies=False, live_push=False)
    with TestClient(app=build_app(portal_settings=off)) as portal:
        page = signed_in(portal, people, people.client_user)
        assert "sse-connect" not in page and "htmx-ext-sse" not in page
        assert 'hx-trigger="every 5s"' in page
        assert portal.get("/inbox/stream").status_code == 404


def test_the_stream_is_only_for_a_signed_in_reader(portal: PortalClient) -> None:
    response = portal.get("/inbox/stream", follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"].startswith("/login")
    assert not response.headers.get("content-type", "").startswith("text/event-stream")


# --- who is told: the announcement and the listener ------------------------------------------


def test_a_scan_and_any_writer_announce_the_users_they_notified_after_commit(tenant: Tenant) -> None:
    today = local_today(tenant)
    with tenant_tx(tenant.slug) as tx:
        client = create_client(tx, "Northwind Analytics", today + timedelta(days=7))
        user = create_user(tx, "ops@northwind.example", Role.CLIENT_USER, PASSWORD, client_id=client.id)
        admin = create_user(tx, "admin@tenant.example", Role.ADMIN, PASSWORD)
    settings = load_settings()
    subscriber = redis.Redis.from_url(settings.redis_url, decode_responses=True).pubsub(
        ignore_subscribe_messages=True
    )
    subscriber.subscribe(channel(settings.dramatiq_namespace, tenant.slug))
    try:
        run_scan(tenant.slug, datetime.now(UTC))
        message = subscriber.get_message(timeout=WAIT_LIMIT)
        while message is None or message["type"] != "message":  # past the confirmation
            message = subscriber.get_message(timeout=WAIT_LIMIT)
            assert message is not None, "the scan announced nothing"
        decoded = decode(settings.dramatiq_namespace, message["channel"], message["data"])
        assert decoded == (tenant.slug, frozenset({user.id, admin.id}))

        run_scan(tenant.slug, datetime.now(UTC))  # claims nothing new: announces nothing
        add_report(tenant, admin, "a marker")  # any writer's transaction announces its readers
        message = subscriber.get_message(timeout=WAIT_LIMIT)
        assert message is not None
        assert decode(settings.dramatiq_namespace, message["channel"], message["data"]) \
            == (tenant.slug, frozenset({admin.id}))  # the marker's reader only: the scan said nothing
    finally:
        subscriber.close()


def test_a_message_wakes_only_the_named_readers_of_the_named_tenant() -> None:
    settings = load_settings()
    announcer = InboxAnnouncer(redis.Redis.from_url(settings.redis_url), settings.dramatiq_namespace)

    async def scenario() -> tuple[bool, bool, bool]:
        listener = InboxListener(settings.redis_url, settings.dramatiq_namespace)
        await listener.start()
        try:
            with listener.watch("acme", 1) as acme_1, listener.watch("acme", 2) as acme_2, \
                    listener.watch("globex", 1) as globex_1:
                announcer.announce("globex", [1])  # another tenant's user 1
                announcer.announce("acme", [2])
                # Pub/sub keeps order on one connection: once acme's user 2 is woken,
                # globex's message has been dispatched too.
                await asyncio.wait_for(acme_2.wait(), WAIT_LIMIT)
                return acme_1.is_set(), acme_2.is_set(), globex_1.is_set()
        finally:
            await listener.close()

    # A thread of its own: Playwright's sync API keeps an event loop running in this one
    # when the browser tests ran first.
    with ThreadPoolExecutor(max_workers=1) as thread:
        acme_1, acme_2, globex_1 = thread.submit(asyncio.run, scenario()).result()
    assert (acme_1, acme_2, globex_1) == (False, True, True)


# --- the stream itself, over a real server --------------------------------------------------


@contextmanager
def signed_in_over_http(url: str, tenant: Tenant, email: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=url, timeout=WAIT_LIMIT) as client:
        token = re.search(r'name="_csrf_token" value="([^"]+)"', client.get("/login").text)
        assert token
        response = client.post("/login", data={"organisation": tenant.slug, "email": email,
                                               "password": PASSWORD, "next": "/",
                                               "_csrf_token": token.group(1)})
        assert response.status_code == 303 and response.headers["location"] == "/"
        yield client


def sse_fields(lines: Iterator[str]) -> Iterator[dict[str, str]]:
    """Each event's fields (comments under ':'), as the stream sends them."""
    fields: dict[str, str] = {}
    for line in lines:
        if line == "":
            if fields:
                yield fields
            fields = {}
            continue
        name, _, value = line.partition(":")
        fields[name] = value.strip()
    if fields:
        yield fields


def next_event(events: Iterator[dict[str, str]]) -> dict[str, str]:
    """The next real event, past heartbeat comments."""
    for fields in events:
        if "event" in fields:
            return fields
    raise AssertionError("the stream ended without another event")


def test_a_scan_that_notifies_a_reader_tells_their_open_stream_at_once(
    live_url: str, tenant: Tenant
) -> None:
    today = local_today(tenant)
    with tenant_tx(tenant.slug) as tx:
        client = create_client(tx, "Northwind Analytics", today + timedelta(days=7))
        create_user(tx, "ops@northwind.example", Role.CLIENT_USER, PASSWORD, client_id=client.id)
    with signed_in_over_http(live_url, tenant, "ops@northwind.example") as browser, \
            browser.stream("GET", "/inbox/stream") as stream:
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        events = sse_fields(stream.iter_lines())
        opening = next(events)
        assert opening.get("") == "watching" and opening["retry"] == "3000"
        assert next_event(events) == {"event": "inbox", "data": "new"}  # catch up once on open

        run_scan(tenant.slug, datetime.now(UTC))
        assert next_event(events) == {"event": "inbox", "data": "new"}
        newer = browser.get("/inbox/newer", headers={"HX-Request": "true"})
        assert [t for t in titles(newer.text) if "Northwind" in t], newer.text


def test_the_stream_ends_after_its_lifetime_so_the_browser_reconnects(tenant: Tenant) -> None:
    with tenant_tx(tenant.slug) as tx:
        create_user(tx, "admin@tenant.example", Role.ADMIN, PASSWORD)
    with serve_portal(LOGS / "portal-short-stream.log", INBOX_STREAM_SECONDS="1") as url:
        started = time.monotonic()
        with signed_in_over_http(url, tenant, "admin@tenant.example") as browser, \
                browser.stream("GET", "/inbox/stream") as stream:
            seen = list(sse_fields(stream.iter_lines()))  # returns only because the stream ends
        assert time.monotonic() - started < WAIT_LIMIT
        assert seen[0]["retry"] == "3000" and {"event": "inbox", "data": "new"} in seen
