"""Clients imported from a CSV file: 10,000 rows with 3% bad ones are reported row by row
(line, column, reason) before anything is written; everything-or-nothing is refused while a
row is bad; "valid rows only" imports exactly the others, with its progress readable while
it runs; the same file again changes nothing. Files of the wrong shape, encoding or size are
refused with a clear message."""

from __future__ import annotations

import csv
import io
import re

import pytest

from db.people.users import create_user
from db.platform.tenancy import Tenant, tenant_tx
from domain.people.client_import import COLUMNS, MAX_BYTES
from domain.people.identity import Role
from tests.integration.builders import scalar
from tests.integration.conftest import new_tenant, remove_tenant, wait_until
from tests.integration.portal_support import PASSWORD, People, PortalClient, csrf_token, signed_in

ROWS = 10_000
BAD_EVERY = 33  # every 33rd row is bad: 303 of 10,000 (3%)


def big_file() -> tuple[bytes, dict[int, str]]:
    """The CSV, and each bad row's line with the column at fault."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(COLUMNS)
    bad: dict[int, str] = {}
    for n in range(1, ROWS + 1):
        line = n + 1
        row = [f"C-{n:05d}", f"Client {n}", "2031-01-31", "standard", "", "", "", ""]
        if n % BAD_EVERY == 0:
            kind = (n // BAD_EVERY) % 3
            if kind == 0:
                row[2], bad[line] = "31/01/2031", "expires_on"
            elif kind == 1:
                row[3], bad[line] = "platinum", "plan"
            else:
                row[6], bad[line] = "not-an-email", "contact_email"
        writer.writerow(row)
    return out.getvalue().encode(), bad


def upload(portal: PortalClient, html: str, data: bytes, name: str = "clients.csv") -> tuple[int, str]:
    answer = portal.post("/clients/import", data={"_csrf_token": csrf_token(html)},
                         files={"file": (name, data, "text/csv")}, follow_redirects=False)
    if answer.status_code == 303:
        return 303, answer.headers["location"]
    return answer.status_code, answer.text


def run(portal: PortalClient, tenant: Tenant, report: str, mode: str) -> int:
    import_id = int(report.rsplit("/", 1)[1])
    html = portal.get(report).text
    answer = portal.post(f"{report}/run", data={"_csrf_token": csrf_token(html), "mode": mode},
                         follow_redirects=False)
    assert answer.status_code == 303, answer.text
    wait_until(lambda: scalar(tenant, "SELECT stage FROM imports WHERE id = %s", import_id)
               in ("done", "failed"), "the import to end")
    return import_id


def clients_state(tenant: Tenant) -> tuple[object, ...]:
    with tenant_tx(tenant.slug) as tx:
        row = tx.conn.execute("SELECT count(*), sum(version), max(updated_at), "
                              "(SELECT count(*) FROM license_events) FROM clients").fetchone()
    assert row is not None
    return tuple(row)


def test_ten_thousand_clients_with_three_percent_bad_rows(portal: PortalClient, people: People) -> None:
    data, bad = big_file()
    html = signed_in(portal, people, people.admin)
    before = clients_state(people.tenant)
    status, report = upload(portal, html, data)
    assert status == 303
    page = portal.get(report).text
    assert f"{ROWS:,} row(s): {ROWS - len(bad):,} valid, {len(bad)} problem(s)" in page
    assert clients_state(people.tenant) == before  # nothing written by the check
    import_id = int(report.rsplit("/", 1)[1])
    with tenant_tx(people.tenant.slug) as tx:
        problems = tx.conn.execute("SELECT problems FROM imports WHERE id = %s", [import_id]).fetchone()
    assert problems is not None
    assert {(p["line"], p["column"]) for p in problems[0]} == set(bad.items())  # type: ignore[attr-defined]

    # Everything-or-nothing is refused while a row is bad.
    answer = portal.post(f"{report}/run", data={"_csrf_token": csrf_token(page), "mode": "all"},
                         follow_redirects=False)
    assert answer.status_code == 400 and clients_state(people.tenant) == before

    run(portal, people.tenant, report, "valid_only")
    page = portal.get(report).text
    assert f"{ROWS - len(bad):,} created, 0 updated, 0 unchanged" in page
    imported = scalar(people.tenant, "SELECT count(*) FROM clients WHERE external_id IS NOT NULL")
    assert imported == ROWS - len(bad)
    good = {f"C-{n:05d}" for n in range(1, ROWS + 1) if n + 1 not in bad}
    with tenant_tx(people.tenant.slug) as tx:
        ids = {str(r[0]) for r in tx.conn.execute(
            "SELECT external_id FROM clients WHERE external_id IS NOT NULL").fetchall()}
    assert ids == good
    assert scalar(people.tenant, "SELECT done FROM imports WHERE id = %s", import_id) == len(good)

    # The same file again: the same report, and importing it changes nothing.
    after_first = clients_state(people.tenant)
    status, second = upload(portal, html, data)
    assert status == 303
    run(portal, people.tenant, second, "valid_only")
    assert f"0 created, 0 updated, {len(good):,} unchanged" in portal.get(second).text
    assert clients_state(people.tenant) == after_first


def test_the_progress_is_readable_while_the_import_runs(portal: PortalClient, people: People) -> None:
    data, _ = big_file()
    html = signed_in(portal, people, people.admin)
    _, report = upload(portal, html, data)
    import_id = int(report.rsplit("/", 1)[1])
    seen: set[int] = set()

    def progressed() -> bool:
        fragment = portal.get(f"{report}/progress").text
        match = re.search(r'<progress max="(\d+)" value="(\d+)"', fragment)
        if match:
            seen.add(int(match.group(2)))
        return "Imported" in fragment

    page = portal.get(report).text
    portal.post(f"{report}/run", data={"_csrf_token": csrf_token(page), "mode": "valid_only"})
    wait_until(progressed, "the import to finish")
    assert scalar(people.tenant, "SELECT stage FROM imports WHERE id = %s", import_id) == "done"
    assert all(0 <= n <= ROWS for n in seen)  # whatever the polls caught, in range


@pytest.mark.parametrize(("content", "status", "message"), [
    (b"", 400, "The file is empty"),
    ("external_id,name,expires_on\r\nA-1,Café Zoë,2031-01-01\r\n".encode("latin-1"), 400, "not UTF-8"),
    (b"id,title\r\n1,x\r\n", 400, "does not match the template"),
    (b"external_id,name,expires_on\r\n", 400, "no rows"),
    (b"external_id,name,expires_on\r\n" + b"A" * (MAX_BYTES + 1), 413, "at most 8 MB"),
])
def test_a_file_of_the_wrong_shape_encoding_or_size_is_refused(
    portal: PortalClient, people: People, content: bytes, status: int, message: str
) -> None:
    html = signed_in(portal, people, people.admin)
    before = scalar(people.tenant, "SELECT count(*) FROM imports")
    got, page = upload(portal, html, content)
    assert got == status and message in page
    assert scalar(people.tenant, "SELECT count(*) FROM imports") == before


def test_the_template_downloads_and_imports_as_it_is(portal: PortalClient, people: People) -> None:
    html = signed_in(portal, people, people.admin)
    template = portal.get("/clients/import/template.csv")
    assert template.status_code == 200 and template.text.splitlines()[0] == ",".join(COLUMNS)
    status, report = upload(portal, html, template.content)
    assert status == 303
    run(portal, people.tenant, report, "all")
    assert scalar(people.tenant, "SELECT name FROM clients WHERE external_id = 'ACME-001'") \
        == "Acme Assurance"


def test_members_are_refused_and_another_tenants_import_is_not_found(
    portal: PortalClient, people: People
) -> None:
    html = signed_in(portal, people, people.admin)
    _, report = upload(portal, html, b"external_id,name,expires_on\r\nA-1,Acme,2031-01-01\r\n")
    with tenant_tx(people.tenant.slug) as tx:
        member = create_user(tx, "member@tenant.example", Role.MEMBER, PASSWORD)
    portal.cookies.clear()
    member_html = signed_in(portal, people, member)
    assert portal.get("/clients/import").status_code == 403
    assert portal.get(report).status_code == 403
    got, _ = upload(portal, member_html, b"external_id,name,expires_on\r\nA-2,B,2031-01-01\r\n")
    assert got == 403
    other = new_tenant()
    try:
        with tenant_tx(other.slug) as tx:
            create_user(tx, "admin@other.example", Role.ADMIN, PASSWORD)
        portal.cookies.clear()
        from tests.integration.portal_support import sign_in

        assert sign_in(portal, other.slug, "admin@other.example").status_code == 303
        other_html = portal.get("/").text
        assert portal.get(report).status_code == 404
        answer = portal.post(f"{report}/run", data={"_csrf_token": csrf_token(other_html), "mode": "all"},
                             follow_redirects=False)
        assert answer.status_code == 404
        assert scalar(people.tenant, "SELECT stage FROM imports") == "validated"
    finally:
        remove_tenant(other)
