"""What the single sign-on and two-factor tests share: a local identity provider on
127.0.0.1, a tenant set up to use it, a sign-in walked through it as a browser would, and
the audit rows a sign-in leaves."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from db.people.sign_in_settings import save_provider
from db.platform.tenancy import Tenant, tenant_tx
from tests.integration.portal_support import PortalClient
from tests.support.oidc_provider import LocalIdentityProvider


@pytest.fixture
def idp() -> Iterator[LocalIdentityProvider]:
    provider = LocalIdentityProvider()
    yield provider
    provider.close()


def use_provider(tenant: Tenant, idp: LocalIdentityProvider, *,
                 domains: tuple[str, ...] = ("tenant.example",), provision: bool = False) -> None:
    with tenant_tx(tenant.slug) as tx:
        save_provider(tx, issuer=idp.issuer, client_id=idp.client_id, client_secret=idp.client_secret,
                      provider_name="Acme Login", allowed_domains=domains, provision_members=provision)


def start_at_provider(portal: PortalClient, organisation: str) -> httpx.Response:
    """What the sign-in page's "Sign in with <provider>" link does."""
    page = portal.get(f"/login?organisation={organisation}").text
    link = re.search(r'id="sso-button"\s+href="([^"]+)"', page)
    assert link, "the sign-in page shows no single sign-on button"
    return portal.get(link.group(1).replace("&amp;", "&"), follow_redirects=False)


def way_back(started: httpx.Response) -> str:
    """The browser at the provider, which signs its account in at once: the portal path it
    is sent back to (the callback, with code and state)."""
    assert started.status_code == 303, started.text
    answer = httpx.get(started.headers["location"], follow_redirects=False)
    assert answer.status_code == 302, answer.text
    back = urlsplit(answer.headers["location"])
    return f"{back.path}?{back.query}"


def sso_sign_in(portal: PortalClient, organisation: str) -> httpx.Response:
    return portal.get(way_back(start_at_provider(portal, organisation)), follow_redirects=False)


def signed_in_as(portal: PortalClient) -> str | None:
    """The email the portal's header shows, or None when nobody is signed in."""
    page = portal.get("/", follow_redirects=False)
    if page.status_code != 200:
        return None
    match = re.search(r'class="who-email">([^<]+)<', page.text)
    return match.group(1) if match else None


def last_audit(tenant: Tenant, prefix: str) -> tuple[str, dict[str, object]]:
    with tenant_tx(tenant.slug) as tx:
        row = tx.conn.execute(
            "SELECT action, after FROM audit_log WHERE action LIKE %s ORDER BY id DESC LIMIT 1",
            [prefix + "%"]).fetchone()
    assert row is not None, f"no audit row {prefix}*"
    after = row[1] if isinstance(row[1], dict) else json.loads(str(row[1] or "{}"))
    return str(row[0]), after
