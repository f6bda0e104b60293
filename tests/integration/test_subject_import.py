"""Subjects of the manual product imported from a CSV file: each row is checked as the
subject form is, by the events API's own parser and register checks, and every problem is
reported row by row (line, column, reason) before anything is written; "valid rows only"
records exactly the others as events in the outbox, which rules fire on as on a host's
events; the same file again records nothing; a changed row is one update event. Files of the
wrong shape, encoding or size are refused; members are refused (403), another tenant's import
is not found (404)."""

from __future__ import annotations

import csv
import io

import pytest

from db.events.manual_subjects import close_manual_subject
from db.people.users import create_user
from db.platform.tenancy import Tenant, tenant_tx
from db.rules.definitions import create_rule
from domain.csv_import import MAX_BYTES
from domain.events.subject_import import COLUMNS
from domain.people.identity import Role
from tests.integration.builders import scalar
from tests.integration.conftest import new_tenant, remove_tenant, wait_until
from tests.integration.portal_support import PASSWORD, People, PortalClient, csrf_token, sign_in, signed_in
from tests.integration.rule_builders import rule_json
from tests.integration.test_portal_subjects import evaluate, outbox

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
        row = ["permit", f"P-{n:05d}", f"Permit {n}", "2031-01-31", "", "", "admin@tenant.example",
               "", f"site = Site {n % 7}; capacity = {n % 50}"]
        if n % BAD_EVERY == 0:
            kind = (n // BAD_EVERY) % 3
            if kind == 0:
                row[3], bad[line] = "31/01/2031", "due_on"
            elif kind == 1:
                row[0], bad[line] = "Permit!", "kind"
            else:
                # no such user: the register's own check
                row[6], bad[line] = "nobody@nowhere.example", "assignees"
        writer.writerow(row)
    return out.getvalue().encode(), bad


def upload(portal: PortalClient, html: str, data: bytes, name: str = "subjects.csv") -> tuple[int, str]:
    answer = portal.post("/subjects/import", data={"_csrf_token": csrf_token(html)},
                         files={"file": (name, data, "text/csv")}, follow_redirects=False)
    if answer.status_code == 303:
        return 303, answer.headers["location"]
    return answer.status_code, answer.text


def run(portal: PortalClient, tenant: Tenant, report: str, mode: str) -> str:
    import_id = int(report.rsplit("/", 1)[1])
    html = portal.get(report).text
    answer = portal.post(f"{report}/run", data={"_csrf_token": csrf_token(html), "mode": mode},
                         follow_redirects=False)
    assert answer.status_code == 303, answer.text
    wait_until(lambda: scalar(tenant, "SELECT stage FROM imports WHERE id = %s", import_id)
               in ("done", "failed"), "the import to end")
    return portal.get(report).text


def subjects_state(tenant: Tenant) -> tuple[object, ...]:
    with tenant_tx(tenant.slug) as tx:
        row = tx.conn.execute("SELECT count(*), max(updated_at), (SELECT count(*) FROM events), "
                              "(SELECT count(*) FROM subject_fields) FROM subjects "
                              "WHERE product = 'manual'").fetchone()
    assert row is not None
    return tuple(row)


def test_ten_thousand_subjects_with_three_percent_bad_rows(portal: PortalClient, people: People) -> None:
    data, bad = big_file()
    html = signed_in(portal, people, people.admin)
    before = subjects_state(people.tenant)
    status, report = upload(portal, html, data)
    assert status == 303
    page = portal.get(report).text
    assert f"{ROWS:,} row(s): {ROWS - len(bad):,} valid, {len(bad)} problem(s)" in page
    assert subjects_state(people.tenant) == before  # nothing written by the check
    import_id = int(report.rsplit("/", 1)[1])
    with tenant_tx(people.tenant.slug) as tx:
        problems = tx.conn.execute("SELECT problems FROM imports WHERE id = %s", [import_id]).fetchone()
    assert problems is not None
    assert {(p["line"], p["column"]) for p in problems[0]} == set(bad.items())  # type: ignore[attr-defined]
    assert '<span class="value">no active user &#39;nobody@nowhere.example&#39; in this tenant' in page

    answer = portal.post(f"{report}/run", data={"_csrf_token": csrf_token(page), "mode": "all"},
                         follow_redirects=False)
    assert answer.status_code == 400 and subjects_state(people.tenant) == before

    page = run(portal, people.tenant, report, "valid_only")
    good = {f"P-{n:05d}" for n in range(1, ROWS + 1) if n + 1 not in bad}
    assert f"{len(good):,} created, 0 updated, 0 unchanged" in page
    with tenant_tx(people.tenant.slug) as tx:
        ids = {str(r[0]) for r in tx.conn.execute(
            "SELECT external_id FROM subjects WHERE product = 'manual'").fetchall()}
    assert ids == good
    # Each row is an event of the manual product in the outbox, as the events API records one.
    assert scalar(people.tenant, "SELECT count(*) FROM events WHERE product = 'manual' AND "
                  "event_type = 'created' AND source = 'portal'") == len(good)
    assert scalar(people.tenant, "SELECT count(*) FROM subject_assignees") == len(good)
    assert scalar(people.tenant, "SELECT count(*) FROM audit_log WHERE action = 'subject.import'") == 1

    # The same file again: the same report, and importing it records nothing.
    after_first = subjects_state(people.tenant)
    status, second = upload(portal, html, data)
    assert status == 303
    page = run(portal, people.tenant, second, "valid_only")
    assert f"0 created, 0 updated, {len(good):,} unchanged" in page
    assert subjects_state(people.tenant) == after_first


def test_an_imported_row_is_an_event_a_rule_fires_on_and_a_changed_row_one_update(
    portal: PortalClient, people: People
) -> None:
    with tenant_tx(people.tenant.slug) as tx:
        create_rule(tx, rule_json(
            name="New permit", product="manual", trigger={"subject_kind": "permit"},
            conditions={"all": [{"fact": "field.capacity", "op": "equals", "value": "12"}]},
            actions={"channels": ["in_app"], "category": "case_alert",
                     "recipients": [{"type": "assignees"}],
                     "template": {"title": "Permit {{ subject.external_id }}", "body": "Due soon"}}),
            "setup")
    html = signed_in(portal, people, people.admin)
    first = (b"kind,external_id,title,due_on,assignees,fields\r\n"
             b"permit,P-1,Boiler permit,2031-05-31,admin@tenant.example,\"site = Harbour; capacity = 12\"\r\n"
             b"permit,P-2,Crane permit,2031-06-30,,site = Dock\r\n")
    _, report = upload(portal, html, first)
    assert "2 created, 0 updated, 0 unchanged" in run(portal, people.tenant, report, "all")
    assert outbox(people.tenant) == [("manual", "created", None, "portal")] * 2
    assert evaluate(people.tenant) == 1  # P-1's capacity is 12: the same relay and rules as a host's event

    # P-2 loses its site and gains a capacity; P-1 is as it was.
    changed = first.replace(b"site = Dock", b"capacity = 3")
    _, report = upload(portal, html, changed)
    assert "0 created, 1 updated, 1 unchanged" in run(portal, people.tenant, report, "all")
    assert outbox(people.tenant)[-1] == ("manual", "updated", "field_changed", "portal")
    with tenant_tx(people.tenant.slug) as tx:
        fields = dict(tx.conn.execute(
            "SELECT f.name, f.value #>> '{}' FROM subject_fields f JOIN subjects s ON s.id = f.subject_id "
            "WHERE s.external_id = 'P-2' AND f.value <> 'null'::jsonb").fetchall())
    assert fields == {"capacity": "3", "due_on": "2031-06-30"}
    assert scalar(people.tenant, "SELECT title FROM subjects WHERE external_id = 'P-2'") == "Crane permit"


def test_a_row_that_would_change_a_closed_subject_is_reported(portal: PortalClient, people: People) -> None:
    html = signed_in(portal, people, people.admin)
    _, report = upload(portal, html, b"kind,external_id,title\r\npermit,P-1,Permit\r\n")
    run(portal, people.tenant, report, "all")
    with tenant_tx(people.tenant.slug) as tx:
        subject_id = int(scalar(people.tenant, "SELECT id FROM subjects WHERE external_id = 'P-1'"))
        close_manual_subject(tx, subject_id)
    _, report = upload(portal, html, b"kind,external_id,title\r\npermit,P-1,Renamed permit\r\n")
    page = portal.get(report).text
    assert "1 row(s): 0 valid, 1 problem(s)" in page and "permit P-1 is closed" in page


@pytest.mark.parametrize(("content", "status", "message"), [
    (b"", 400, "The file is empty"),
    ("kind,external_id,title\r\npermit,P-1,Café\r\n".encode("latin-1"), 400, "not UTF-8"),
    (b"external_id,name,expires_on\r\nA-1,Acme,2031-01-01\r\n", 400, "does not match the template"),
    (b"kind,external_id\r\n", 400, "no rows"),
    (b"kind,external_id\r\n" + b"A" * (MAX_BYTES + 1), 413, "at most 8 MB"),
])
def test_a_file_of_the_wrong_shape_encoding_or_size_is_refused(
    portal: PortalClient, people: People, content: bytes, status: int, message: str
) -> None:
    html = signed_in(portal, people, people.admin)
    got, page = upload(portal, html, content)
    assert got == status and message in page
    assert scalar(people.tenant, "SELECT count(*) FROM imports") == 0


def test_the_template_downloads_and_imports_as_it_is(portal: PortalClient, people: People) -> None:
    html = signed_in(portal, people, people.admin)
    template = portal.get("/subjects/import/template.csv")
    assert template.status_code == 200 and template.text.splitlines()[0] == ",".join(COLUMNS)
    status, report = upload(portal, html, template.content)
    assert status == 303
    assert "1 created" in run(portal, people.tenant, report, "all")
    assert scalar(people.tenant, "SELECT title FROM subjects WHERE external_id = 'PERMIT-001'") \
        == "Operating permit"


def test_members_are_refused_and_another_tenants_import_is_not_found(
    portal: PortalClient, people: People
) -> None:
    html = signed_in(portal, people, people.admin)
    _, report = upload(portal, html, b"kind,external_id\r\npermit,P-1\r\n")
    # A subjects import is not a clients import, even in the same tenant.
    assert portal.get(report.replace("/subjects/", "/clients/")).status_code == 404
    with tenant_tx(people.tenant.slug) as tx:
        member = create_user(tx, "member@tenant.example", Role.MEMBER, PASSWORD)
    portal.cookies.clear()
    member_html = signed_in(portal, people, member)
    assert portal.get("/subjects/import").status_code == 403
    assert portal.get(report).status_code == 403
    got, _ = upload(portal, member_html, b"kind,external_id\r\npermit,P-2\r\n")
    assert got == 403
    answer = portal.post(f"{report}/run", data={"_csrf_token": csrf_token(member_html), "mode": "all"},
                         follow_redirects=False)
    assert answer.status_code == 403
    other = new_tenant()
    try:
        with tenant_tx(other.slug) as tx:
            create_user(tx, "admin@other.example", Role.ADMIN, PASSWORD)
        portal.cookies.clear()
        assert sign_in(portal, other.slug, "admin@other.example").status_code == 303
        other_html = portal.get("/").text
        assert portal.get(report).status_code == 404
        answer = portal.post(f"{report}/run", data={"_csrf_token": csrf_token(other_html), "mode": "all"},
                             follow_redirects=False)
        assert answer.status_code == 404
        assert scalar(people.tenant, "SELECT stage FROM imports") == "validated"
        assert scalar(people.tenant, "SELECT count(*) FROM subjects WHERE product = 'manual'") == 0
    finally:
        remove_tenant(other)
