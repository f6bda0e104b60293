"""What the portal tests share: people in a fresh tenant (notifications from the real
licence scan), a test client over the real app, and small readers of pages and rows."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import httpx
import pytest
import redis
from litestar import Litestar
from litestar.testing import TestClient

from db.delivery.inbox import inbox_page, unread_count
from db.notices.fanout import prepare_claims
from db.notices.licence_scan import claim_due_milestones
from db.people.clients import Client, create_client
from db.people.users import User, create_user
from db.platform.tenancy import Tenant, tenant_tx
from domain.people.identity import Role
from portal.ratelimit import PREFIX as THROTTLE_PREFIX
from tocsin.boot.web import build_app
from tocsin.core.settings import load_settings

PASSWORD = "correct horse battery"
GENERIC_ERROR = "email or password is wrong"
HTMX = {"HX-Request": "true", "HX-Current-URL": "http://testserver.local/"}

PortalClient = TestClient[Litestar]


@dataclass(frozen=True)
class People:
    tenant: Tenant
    client: Client
    other_client: Client
    client_user: User
    other_client_user: User
    admin: User


def local_today(tenant: Tenant) -> date:
    return datetime.now(UTC).astimezone(ZoneInfo(tenant.time_zone)).date()


@pytest.fixture
def people(tenant: Tenant) -> People:
    """A client whose access ends in 7 days (so the scan claims its d7 reminder), a second
    client far from renewal, a user at each, and an admin; then the real claim + prepare."""
    today = local_today(tenant)
    with tenant_tx(tenant.slug) as tx:
        client = create_client(tx, "Northwind Analytics", today + timedelta(days=7))
        other = create_client(tx, "Summit Energy", today + timedelta(days=200))
        client_user = create_user(tx, "ops@northwind.example", Role.CLIENT_USER, PASSWORD,
                                  client_id=client.id)
        other_user = create_user(tx, "grid@summit.example", Role.CLIENT_USER, PASSWORD,
                                 client_id=other.id)
        admin = create_user(tx, "admin@tenant.example", Role.ADMIN, PASSWORD)
        claim_due_milestones(tx, datetime.now(UTC))
        prepare_claims(tx)
    return People(tenant, client, other, client_user, other_user, admin)


def forget_sign_in_failures() -> None:
    """Each test starts with no failed sign-ins and no wrong API keys counted (they live in
    the shared Redis, by address: every test client is the same one)."""
    settings = load_settings()
    client = redis.Redis.from_url(settings.redis_url)
    keys = [*client.scan_iter(f"{THROTTLE_PREFIX}:*"),
            *client.scan_iter(f"{settings.dramatiq_namespace}:api-key-failures:*")]
    if keys:
        client.delete(*keys)


@pytest.fixture
def portal() -> Iterator[PortalClient]:
    forget_sign_in_failures()
    with TestClient(app=build_app()) as client:
        yield client


def csrf_token(html: str) -> str:
    match = re.search(r'name="_csrf_token" value="([^"]+)"', html)
    assert match, "the page carries no CSRF token"
    return match.group(1)


def sign_in(portal: PortalClient, organisation: str, email: str, password: str = PASSWORD,
            next_path: str = "/") -> httpx.Response:
    token = csrf_token(portal.get("/login").text)
    return portal.post(
        "/login",
        data={"organisation": organisation, "email": email, "password": password,
              "next": next_path, "_csrf_token": token},
        follow_redirects=False,
    )


def signed_in(portal: PortalClient, people: People, user: User) -> str:
    """Sign in and return the inbox page's HTML."""
    response = sign_in(portal, people.tenant.slug, user.email)
    assert response.status_code == 303
    inbox = portal.get("/")
    assert inbox.status_code == 200
    return inbox.text


def notification_ids(tenant: Tenant, user: User) -> list[int]:
    with tenant_tx(tenant.slug) as tx:
        items, _ = inbox_page(tx, user.id)
    return [item.id for item in items]


def unread_of(tenant: Tenant, user: User) -> int:
    with tenant_tx(tenant.slug) as tx:
        return unread_count(tx, user.id)


def badge_count(html: str) -> int:
    match = re.search(r'id="unread-badge"[^>]*><span class="count">(\d+)</span>', html)
    assert match, "no unread badge in the page"
    return int(match.group(1))
