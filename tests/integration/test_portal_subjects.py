"""Subjects of the built-in "manual" product, written by an administrator in the portal: each
save is an event in the outbox with the events API's validation, so a rule of the manual
product fires on it exactly as on a host's event; edits and closing go the same way;
members and client users are refused (403) with nothing written; another tenant's subjects
are not found (404)."""

from __future__ import annotations

import pytest

from db.events.relay import claim_events
from db.people.users import create_user
from db.platform.tenancy import Tenant, tenant_tx
from db.rules.definitions import create_rule
from db.rules.evaluations import evaluate_claimed
from domain.people.identity import Role
from tests.integration.builders import scalar
from tests.integration.conftest import new_tenant, remove_tenant
from tests.integration.portal_support import (
    PASSWORD,
    People,
    PortalClient,
    csrf_token,
    signed_in,
)
from tests.integration.rule_builders import rule_json

PERMIT = {"kind": "permit", "external_id": "P-2041", "title": "Boiler operating permit",
          "due_on": "2031-05-31", "assignees": "admin@tenant.example",
          "fields": "site = Harbour works\ncapacity = 12"}


def create(portal: PortalClient, html: str, **form: str) -> tuple[int, str]:
    answer = portal.post("/subjects/new", data={"_csrf_token": csrf_token(html), **form},
                         follow_redirects=False)
    if answer.status_code == 303:
        return 303, portal.get(answer.headers["location"]).text
    return answer.status_code, answer.text


def outbox(tenant: Tenant) -> list[tuple[str, str, str | None, str]]:
    with tenant_tx(tenant.slug) as tx:
        rows = tx.conn.execute("SELECT product, event_type, trigger_type, source FROM events "
                               "ORDER BY id").fetchall()
    return [(str(r[0]), str(r[1]), None if r[2] is None else str(r[2]), str(r[3])) for r in rows]


def evaluate(tenant: Tenant) -> int:
    with tenant_tx(tenant.slug) as tx:
        batch = claim_events(tx, limit=10, lease_seconds=60, max_attempts=5)
        return evaluate_claimed(tx, batch.event_ids).claims


def test_a_subject_written_in_the_portal_is_an_event_a_rule_fires_on(
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
    status, page = create(portal, html, **PERMIT)
    assert status == 303 and "Subject created." in page and "Boiler operating permit" in page
    assert outbox(people.tenant) == [("manual", "created", None, "portal")]
    assert scalar(people.tenant, "SELECT value #>> '{}' FROM subject_fields WHERE name = 'due_on'") \
        == "2031-05-31"
    assert evaluate(people.tenant) == 1  # the same relay and rules as a host's event
    assert scalar(people.tenant, "SELECT count(*) FROM audit_log WHERE action = 'subject.create'") == 1

    subject_id = int(scalar(people.tenant, "SELECT id FROM subjects WHERE external_id = 'P-2041'"))
    form = portal.get(f"/subjects/{subject_id}/edit").text
    assert "Harbour works" in form and 'value="2031-05-31"' in form
    answer = portal.post(f"/subjects/{subject_id}/edit", follow_redirects=False, data={
        "_csrf_token": csrf_token(form), **PERMIT, "due_on": "2031-06-30", "fields": "site = Harbour works"})
    assert answer.status_code == 303
    assert outbox(people.tenant)[-1] == ("manual", "updated", "field_changed", "portal")
    changes = scalar(people.tenant, "SELECT changes FROM events ORDER BY id DESC LIMIT 1")
    assert changes["field.due_on"] == {"from": "2031-05-31", "to": "2031-06-30"}
    assert changes["field.capacity"] == {"from": "12", "to": None}  # taken off the form

    answer = portal.post(f"/subjects/{subject_id}/close", data={"_csrf_token": csrf_token(form)},
                         follow_redirects=False)
    assert answer.status_code == 303
    assert outbox(people.tenant)[-1] == ("manual", "updated", "status_changed", "portal")
    assert scalar(people.tenant, "SELECT status FROM subjects WHERE id = %s", subject_id) == "closed"
    assert "P-2041" in portal.get("/subjects", params={"closed": "true"}).text


def test_a_subject_the_events_api_would_refuse_is_refused_with_every_problem_and_nothing_written(
    portal: PortalClient, people: People
) -> None:
    html = signed_in(portal, people, people.admin)
    status, page = create(portal, html, kind="Permit!", external_id="", due_on="31/05/2031",
                          assignees="nobody@nowhere.example", fields="no equals sign")
    assert status == 400 and "Nothing was saved." in page
    for path in ("subject.kind", "subject.external_id", "subject.fields.due_on", "fields line 1"):
        assert path in page, path
    status, page = create(portal, html, **{**PERMIT, "assignees": "nobody@nowhere.example"})
    assert status == 400 and "nobody@nowhere.example" in page
    assert outbox(people.tenant) == []
    status, _ = create(portal, html, **PERMIT)
    status, page = create(portal, html, **PERMIT)
    assert status == 409 and "already" in page
    assert len(outbox(people.tenant)) == 1


@pytest.mark.parametrize("who", ["member", "client_user"])
def test_members_and_client_users_are_refused_with_403_and_nothing_written(
    portal: PortalClient, people: People, who: str
) -> None:
    if who == "member":
        with tenant_tx(people.tenant.slug) as tx:
            user = create_user(tx, "member@tenant.example", Role.MEMBER, PASSWORD)
    else:
        user = people.client_user
    html = signed_in(portal, people, user)
    assert portal.get("/subjects").status_code == 403
    assert portal.get("/subjects/new").status_code == 403
    status, _ = create(portal, html, **PERMIT)
    assert status == 403
    assert outbox(people.tenant) == []


def test_another_tenants_subjects_are_not_found(portal: PortalClient, people: People) -> None:
    other = new_tenant()
    try:
        with tenant_tx(other.slug) as tx:
            create_user(tx, "admin@other.example", Role.ADMIN, PASSWORD)
        html = signed_in(portal, people, people.admin)
        create(portal, html, **PERMIT)
        theirs = int(scalar(people.tenant, "SELECT id FROM subjects WHERE external_id = 'P-2041'"))
        portal.cookies.clear()
        from tests.integration.portal_support import sign_in

        assert sign_in(portal, other.slug, "admin@other.example").status_code == 303
        html = portal.get("/").text
        assert portal.get(f"/subjects/{theirs}/edit").status_code == 404
        answer = portal.post(f"/subjects/{theirs}/close", data={"_csrf_token": csrf_token(html)},
                             follow_redirects=False)
        assert answer.status_code == 404
        assert scalar(people.tenant, "SELECT status FROM subjects WHERE id = %s", theirs) == "open"
    finally:
        remove_tenant(other)
