"""What the system tests observe: plain reads of the deliveries, and the copies the SES
endpoint received per delivery."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from db.platform.tenancy import Tenant, tenant_tx
from tests.integration.builders import PASSWORD
from tests.integration.conftest import SesOutbox

RECOVERY_LIMIT = 180.0  # seconds a whole recovery (leases, heartbeats, sweeps) may take


def delivery_ids(tenant: Tenant) -> list[int]:
    with tenant_tx(tenant.slug) as tx:
        return [int(str(r[0])) for r in tx.conn.execute(
            "SELECT id FROM notification_deliveries ORDER BY id").fetchall()]


def statuses(tenant: Tenant) -> Counter[str]:
    with tenant_tx(tenant.slug) as tx:
        return Counter(str(r[0]) for r in tx.conn.execute(
            "SELECT status FROM notification_deliveries").fetchall())


def uncertain(tenant: Tenant) -> set[int]:
    """Deliveries with an attempt whose outcome was unknown (the provider may have it)."""
    with tenant_tx(tenant.slug) as tx:
        return {int(str(r[0])) for r in tx.conn.execute(
            "SELECT DISTINCT delivery_id FROM delivery_attempts WHERE outcome = 'unknown'").fetchall()}


def provider_called_unrecorded(tenant: Tenant) -> set[int]:
    """Deliveries whose open attempt was marked provider-called and has no outcome yet."""
    with tenant_tx(tenant.slug) as tx:
        return {int(str(r[0])) for r in tx.conn.execute(
            "SELECT delivery_id FROM delivery_attempts "
            "WHERE provider_called_at IS NOT NULL AND ended_at IS NULL").fetchall()}


def copies(ses: SesOutbox, tenant: Tenant) -> Counter[int]:
    """Copies the SES endpoint accepted, per delivery id (read from the Message-ID)."""
    marker = f".{tenant.slug}@"
    return Counter(int(m.message_id.split(".")[0].removeprefix("<delivery-"))
                   for m in ses.sent() if marker in m.message_id)


def assert_each_accepted_once(tenant: Tenant, ses: SesOutbox, ids: list[int]) -> None:
    """Every delivery accepted; each sent once, or twice with the same Message-ID where an
    attempt's outcome was unknown (the answer was lost with the worker); none lost."""
    assert statuses(tenant) == Counter({"accepted": len(ids)})
    sent = copies(ses, tenant)
    assert set(sent) == set(ids)  # none lost
    resendable = uncertain(tenant)
    doubled = {i: n for i, n in sent.items() if n > (2 if i in resendable else 1)}
    assert doubled == {}, "sent more often than an unknown outcome allows"


@contextmanager
def signed_in_portal(portal_url: str, tenant: Tenant, email: str) -> Iterator[tuple[httpx.Client, str]]:
    """A browser signed in to a stack's web process as ``email``, and a CSRF token of its
    session (what the pages' forms post back)."""
    with httpx.Client(base_url=portal_url, timeout=30) as browser:
        login = browser.get("/login")
        token = re.search(r'name="_csrf_token" value="([^"]+)"', login.text)
        assert token, login.text
        signed_in = browser.post("/login", data={
            "organisation": tenant.slug, "email": email, "password": PASSWORD, "next": "/",
            "_csrf_token": token.group(1)})
        assert signed_in.status_code == 303, (signed_in.status_code, signed_in.text)
        fresh = re.search(r'name="_csrf_token" value="([^"]+)"', browser.get("/settings").text)
        assert fresh, "the settings page carries no CSRF token"
        yield browser, fresh.group(1)
