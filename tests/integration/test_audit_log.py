"""The audit log: each change is recorded with its actor, client address and values in the
transaction that makes it; the rows cannot be changed or removed; administrators read,
filter and export them (as safe CSV), nobody else does."""

from __future__ import annotations

import csv
import io

import psycopg
import pytest

from db.evidence.audit import audit_page, record_audit
from db.people.users import create_user
from db.platform.tenancy import Tenant, tenant_tx
from domain.audit import AuditFilter
from domain.errors import Conflict
from domain.people.identity import Role
from tests.integration.conftest import new_tenant, remove_tenant
from tests.integration.portal_support import (
    PASSWORD,
    People,
    PortalClient,
    csrf_token,
    sign_in,
    signed_in,
)


def actions(tenant: Tenant, prefix: str = "") -> list[str]:
    with tenant_tx(tenant.slug) as tx:
        rows = tx.conn.execute("SELECT action FROM audit_log WHERE action LIKE %s ORDER BY id",
                               [prefix + "%"]).fetchall()
    return [str(r[0]) for r in rows]


@pytest.mark.parametrize("statement", [
    "UPDATE audit_log SET action = 'nothing.happened'",
    "DELETE FROM audit_log",
    "TRUNCATE audit_log",
])
def test_the_audit_log_refuses_every_update_delete_and_truncate(tenant: Tenant, statement: str) -> None:
    with tenant_tx(tenant.slug) as tx:
        record_audit(tx, "client.create", "client", 1, after={"name": "Acme"})
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"), \
            tenant_tx(tenant.slug) as tx:
        tx.conn.execute(statement)
    assert actions(tenant) == ["tenant.create", "client.create"]


def test_a_change_that_rolls_back_leaves_no_audit_row(tenant: Tenant) -> None:
    with tenant_tx(tenant.slug) as tx:
        create_user(tx, "someone@example.com", Role.MEMBER, PASSWORD)
    with pytest.raises(Conflict), tenant_tx(tenant.slug) as tx:
        create_user(tx, "someone@example.com", Role.MEMBER, PASSWORD)
    assert actions(tenant, "user.") == ["user.create"]


def test_sign_in_refusal_and_sign_out_are_recorded_with_the_client_address(
    portal: PortalClient, people: People
) -> None:
    assert sign_in(portal, people.tenant.slug, people.admin.email, "not the password").status_code == 400
    html = signed_in(portal, people, people.admin)
    portal.post("/logout", data={"_csrf_token": csrf_token(html)}, follow_redirects=False)
    with tenant_tx(people.tenant.slug) as tx:
        entries, _ = audit_page(tx, AuditFilter())
    seen = [(e.action, e.actor_label, e.client_address) for e in reversed(entries)
            if e.action.startswith("sign")]
    assert seen == [("sign_in.refused", people.admin.email, "testclient"),
                    ("sign_in", people.admin.email, "testclient"),
                    ("sign_out", people.admin.email, "testclient")]


def test_an_administrator_filters_the_log_and_exports_it_as_safe_csv(
    portal: PortalClient, people: People
) -> None:
    with tenant_tx(people.tenant.slug) as tx:
        record_audit(tx, "client.edit", "client", people.client.id,
                     before={"name": "Northwind"}, after={"name": "=HYPERLINK(\"http://x\")"})
    signed_in(portal, people, people.admin)
    page = portal.get("/audit", params={"action": "client", "object_id": str(people.client.id)})
    assert page.status_code == 200
    assert "client.edit" in page.text and "Northwind" in page.text
    assert "sign_in" not in page.text.split("<tbody>")[1]  # filtered out
    export = portal.get("/audit.csv", params={"action": "client"})
    assert export.status_code == 200 and export.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(export.text)))
    assert [r["action"] for r in rows] == ["client.create", "client.create", "client.edit"]
    assert rows[-1]["after"].startswith('{"name": "=HYPERLINK')  # JSON text, not a formula cell
    assert all(not value.startswith(("=", "+", "-", "@")) for r in rows for value in r.values())
    assert actions(people.tenant, "export.") == ["export.audit"]


@pytest.mark.parametrize("who", ["member", "client_user"])
def test_members_and_client_users_are_refused_the_audit_log(
    portal: PortalClient, people: People, who: str
) -> None:
    if who == "member":
        with tenant_tx(people.tenant.slug) as tx:
            user = create_user(tx, "member@tenant.example", Role.MEMBER, PASSWORD)
    else:
        user = people.client_user
    signed_in(portal, people, user)
    before = actions(people.tenant)
    assert portal.get("/audit").status_code == 403
    assert portal.get("/audit.csv").status_code == 403
    assert "export.audit" not in actions(people.tenant)
    assert len(actions(people.tenant)) == len(before)


def test_an_administrator_sees_only_their_own_organisations_entries(
    portal: PortalClient, people: People
) -> None:
    other = new_tenant()
    try:
        with tenant_tx(other.slug) as tx:
            record_audit(tx, "client.create", "client", 424242, after={"name": "Elsewhere Ltd"})
        signed_in(portal, people, people.admin)
        page = portal.get("/audit")
        assert page.status_code == 200 and "Elsewhere Ltd" not in page.text
        assert "No entries match" in portal.get("/audit", params={"object_id": "424242"}).text
    finally:
        remove_tenant(other)
