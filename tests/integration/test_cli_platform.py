"""`tocsin apikey`, `tocsin product` and `tocsin hierarchy`: each works, bad input is one
line on stderr with exit 2."""

from __future__ import annotations

import re

import pytest

from db.events.api_keys import key_hash, recognise_key
from db.platform.pool import connection
from db.platform.tenancy import Tenant
from tests.integration.builders import add_admin
from tests.integration.test_cli import run


def test_an_api_key_is_shown_once_stored_hashed_listed_and_revoked(
        capsys: pytest.CaptureFixture[str], tenant: Tenant) -> None:
    code, out, _ = run(capsys, "apikey", "create", "--tenant", tenant.slug, "--label", "case system")
    assert code == 0
    found = re.search(r"key: (tsk_\S+)", out)
    assert found
    key = found.group(1)
    with connection() as conn:
        stored = conn.execute("SELECT key_hash, prefix FROM control.api_keys WHERE tenant_id = %s",
                              [tenant.id]).fetchall()
    assert stored == [(key_hash(key), key[:12])]
    caller = recognise_key(key)
    assert caller is not None and caller.tenant_slug == tenant.slug
    code, out, _ = run(capsys, "apikey", "list", "--tenant", tenant.slug)
    assert code == 0 and "case system" in out and key[:12] in out and key not in out
    code, out, _ = run(capsys, "apikey", "revoke", "--tenant", tenant.slug, str(caller.id))
    assert code == 0 and "revoked" in out
    assert recognise_key(key) is None


def test_another_tenants_key_cannot_be_revoked(capsys: pytest.CaptureFixture[str], tenant: Tenant,
                                               make_tenant: object) -> None:
    other = make_tenant()  # type: ignore[operator]
    run(capsys, "apikey", "create", "--tenant", other.slug, "--label", "theirs")
    with connection() as conn:
        row = conn.execute("SELECT id FROM control.api_keys WHERE tenant_id = %s", [other.id]).fetchone()
    assert row is not None
    code, _, err = run(capsys, "apikey", "revoke", "--tenant", tenant.slug, str(row[0]))
    assert code == 2 and "has no API key" in err


def test_products_and_hierarchy_units_are_created_and_listed(
        capsys: pytest.CaptureFixture[str], tenant: Tenant) -> None:
    add_admin(tenant, "head@example.com")
    code, out, _ = run(capsys, "product", "create", "--tenant", tenant.slug, "fraud", "Fraud cases",
                       "--kinds", "case,alert")
    assert code == 0 and "case, alert" in out
    code, out, _ = run(capsys, "product", "list", "--tenant", tenant.slug)
    assert "fraud" in out and "Fraud cases" in out
    code, out, _ = run(capsys, "hierarchy", "add", "--tenant", tenant.slug, "region", "north", "North",
                       "--head", "head@example.com")
    assert code == 0 and "headed by head@example.com" in out
    code, _, err = run(capsys, "product", "create", "--tenant", tenant.slug, "Fraud!", "x")
    assert code == 2 and "product code" in err
    code, _, err = run(capsys, "product", "create", "--tenant", tenant.slug, "fraud", "Again")
    assert code == 2 and "exists already" in err
    code, _, err = run(capsys, "hierarchy", "add", "--tenant", tenant.slug, "region", "south", "South",
                       "--head", "nobody@example.com")
    assert code == 2 and "nobody@example.com" in err
