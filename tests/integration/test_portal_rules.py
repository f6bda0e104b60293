"""The rules console over the real app and database: admins only; a rule created through
the builder's form (errors shown at their fields, nothing saved); edits as versions with a
readable diff; enable, disable, duplicate; export and import the CLI's JSON; the dry run
saying why a rule would not fire; the template preview in the sandbox."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from html import unescape
from typing import Any

import psycopg
import pytest

from db.events.relay import claim_events
from db.people.users import User, create_user
from db.platform.tenancy import Tenant, tenant_tx
from db.rules.definitions import create_rule, export_rules, get_rule, list_rules, rule_versions
from db.rules.evaluations import evaluate_claimed
from domain.people.identity import Role
from tests.integration.intake_support import case_event
from tests.integration.portal_support import (
    HTMX,
    PASSWORD,
    PortalClient,
    csrf_token,
    local_today,
    sign_in,
)
from tests.integration.rule_builders import add_product, add_subject, rule_json
from tests.integration.test_cli import run
from tocsin.core import runtime
from tocsin.shell.outbox import record_event

ADMIN = "admin@rules.example"
MEMBER = "member@rules.example"


def people(tenant: Tenant) -> tuple[User, User]:
    with tenant_tx(tenant.slug) as tx:
        admin = create_user(tx, ADMIN, Role.ADMIN, PASSWORD)
        member = create_user(tx, MEMBER, Role.MEMBER, PASSWORD)
    return admin, member


def signed_in_as(portal: PortalClient, tenant: Tenant, email: str) -> None:
    assert sign_in(portal, tenant.slug, email).status_code == 303


def text_of(html: str) -> str:
    """The page's words, without tags, for assertions that read like the page."""
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


def builder_form(token: str, **overrides: Any) -> list[tuple[str, str]]:
    """The builder's fields as a browser posts them (repeated names for the rows)."""
    fields: dict[str, Any] = {
        "_csrf_token": token, "product": "fraud", "name": "Large case", "kind": "created",
        "subject_kind": "case", "metadata": "",
        "conditions_join": "all", "conditions_fact": ["field.amount"],
        "conditions_op": ["greater"], "conditions_value": ["1000000"],
        "filters_join": "all",
        "channels": ["in_app", "email"], "category": "case_alert",
        "recipient_type": ["assignees"], "recipient_value": [""],
        "title": "Case {{ subject.external_id }}", "body": "Amount {{ field.amount }}",
    }
    fields.update(overrides)
    out: list[tuple[str, str]] = []
    for key, value in fields.items():
        for v in value if isinstance(value, list) else [value]:
            out.append((key, str(v)))
    return out


def post_form(portal: PortalClient, path: str, pairs: list[tuple[str, str]],
              headers: dict[str, str] | None = None) -> Any:
    from urllib.parse import urlencode

    return portal.post(path, content=urlencode(pairs), follow_redirects=False,
                       headers={"Content-Type": "application/x-www-form-urlencoded", **(headers or {})})


def saved_rule(tenant: Tenant, data: dict[str, Any] | None = None, by: str = ADMIN) -> int:
    with tenant_tx(tenant.slug) as tx:
        return create_rule(tx, data or rule_json(), by).id


def test_a_team_member_is_refused_every_rules_page_with_403(
        tenant: Tenant, portal: PortalClient) -> None:
    add_product(tenant)
    people(tenant)
    rule_id = saved_rule(tenant)
    signed_in_as(portal, tenant, MEMBER)
    for path in ("/rules", "/rules/new?product=fraud", f"/rules/{rule_id}",
                 f"/rules/{rule_id}/history", f"/rules/{rule_id}/dry-run",
                 "/rules/export.json"):
        response = portal.get(path)
        assert response.status_code == 403, path
        assert "for administrators" in response.text
    token = csrf_token(portal.get("/preferences").text)
    response = portal.post(f"/rules/{rule_id}/disable", data={"_csrf_token": token},
                           follow_redirects=False)
    assert response.status_code == 403
    with tenant_tx(tenant.slug) as tx:
        assert get_rule(tx, rule_id).enabled  # nothing changed
    assert 'href="/rules"' not in portal.get("/").text  # no nav link for members


def test_creating_a_rule_shows_every_error_at_its_field_and_saves_nothing(
        tenant: Tenant, portal: PortalClient) -> None:
    add_product(tenant)
    people(tenant)
    signed_in_as(portal, tenant, ADMIN)
    page = portal.get("/rules/new?product=fraud")
    assert page.status_code == 200
    token = csrf_token(page.text)
    response = post_form(portal, "/rules/create", builder_form(
        token, name="", conditions_fact=["field.amount", "subject.status"],
        conditions_op=["greater", "equals"], conditions_value=["lots", "open"],
        title="{% if %}", recipient_type=["user"], recipient_value=["not-an-email"]))
    assert response.status_code == 422
    html = response.text
    assert "The rule was not saved." in html
    # Each message sits next to its field.
    assert re.search(r'id="name-error"[^>]*>a rule needs a name<', html)
    row = re.search(r'<div class="cond-row row-invalid".*?</div>\s*</div>|'
                    r'<div class="cond-row row-invalid".*?cond-error[^>]*>([^<]+)<', html, re.S)
    assert row is not None and "greater needs a number" in row.group(0)
    assert re.search(r'id="title-error"[^>]*>[^<]*', html)
    assert "a valid email for a user recipient" in html
    # What was typed is kept.
    assert 'value="lots"' in html and 'value="open"' in html
    with tenant_tx(tenant.slug) as tx:
        assert list_rules(tx) == []


def test_a_rule_created_and_edited_in_the_builder_has_versions_with_a_readable_diff(
        tenant: Tenant, portal: PortalClient) -> None:
    add_product(tenant)
    people(tenant)
    signed_in_as(portal, tenant, ADMIN)
    token = csrf_token(portal.get("/rules/new?product=fraud").text)
    created = post_form(portal, "/rules/create", builder_form(token))
    assert created.status_code == 303
    rule_id = int(created.headers["location"].split("/")[2].split("?")[0])
    with tenant_tx(tenant.slug) as tx:
        rule = get_rule(tx, rule_id)
    assert rule.enabled is False  # a new rule waits for its dry run unless asked otherwise
    assert rule.definition.conditions == {"all": [{"fact": "field.amount", "op": "greater",
                                                   "value": 1000000}]}
    edit = portal.get(created.headers["location"])
    assert "Rule created." in edit.text
    response = post_form(portal, f"/rules/{rule_id}/save", builder_form(
        csrf_token(edit.text), conditions_fact=["field.amount", "hierarchy.region"],
        conditions_op=["greater", "in"], conditions_value=["2000000", "north, south"],
        title="Large case {{ subject.external_id }}"))
    assert response.status_code == 303 and response.headers["location"].endswith("saved=updated")
    with tenant_tx(tenant.slug) as tx:
        versions = rule_versions(tx, rule_id)
    assert [(v.version, v.changed_by) for v in versions] == [(1, ADMIN), (2, ADMIN)]
    assert versions[1].definition["conditions"]["all"][1] == {
        "fact": "hierarchy.region", "op": "in", "value": ["north", "south"]}
    history = text_of(portal.get(f"/rules/{rule_id}/history").text)
    assert "Version 2" in history and f"Saved by {ADMIN}" in history
    assert "Condition 1 changed field.amount is greater than 1000000 " \
           "field.amount is greater than 2000000" in history
    assert "Condition 2 added — hierarchy.region is one of “north”, “south”" in history
    assert "Title template changed Case {{ subject.external_id }} " \
           "Large case {{ subject.external_id }}" in history
    # Saving the same thing again makes no version.
    same = post_form(portal, f"/rules/{rule_id}/save", builder_form(
        csrf_token(edit.text), conditions_fact=["field.amount", "hierarchy.region"],
        conditions_op=["greater", "in"], conditions_value=["2000000", "north, south"],
        title="Large case {{ subject.external_id }}"))
    assert same.headers["location"].endswith("saved=unchanged")


def test_the_ledger_links_the_version_that_fired_to_the_history(
        tenant: Tenant, portal: PortalClient) -> None:
    add_product(tenant)
    people(tenant)
    rule_id = saved_rule(tenant)
    subject = add_subject(tenant, fields={"amount": 5})
    with tenant_tx(tenant.slug) as tx:
        tx.conn.execute(
            "INSERT INTO notification_ledger (rule, subject_kind, subject_id, threshold, due_on, "
            "local_date, rule_id, rule_version) VALUES (%s, 'subject', %s, 'event:1', current_date, "
            "current_date, %s, 1)", [f"rule:{rule_id}", subject, rule_id])
    signed_in_as(portal, tenant, ADMIN)
    ledger = portal.get("/ledger").text
    assert f'href="/rules/{rule_id}/history#v1">version 1</a>' in ledger
    listed = text_of(portal.get("/rules?product=fraud").text)
    assert "1 / 1" in listed and "Never" not in listed  # claims in 30 days / all, last fired


def test_the_ledger_shows_why_a_rule_claim_fired_with_the_values_its_evaluation_saw(
        tenant: Tenant, portal: PortalClient) -> None:
    """The trace the evaluation stored on the event (db/rules/evaluations.py) is what the
    ledger shows under a rule's claim: each condition, the value seen, and that it held."""
    add_product(tenant)
    people(tenant)
    saved_rule(tenant)
    with psycopg.connect(runtime.settings().database_url) as conn:
        record_event(conn, tenant.slug, case_event("C-7", fields={"amount": 2_500_000}))
    with tenant_tx(tenant.slug) as tx:
        batch = claim_events(tx, limit=10, lease_seconds=60, max_attempts=5)
        assert evaluate_claimed(tx, batch.event_ids).claims == 1
    signed_in_as(portal, tenant, ADMIN)
    ledger = text_of(portal.get("/ledger").text)
    assert "Why it fired: each condition with the value the evaluation saw" in ledger
    assert "conditions.all[0] saw 2500000 · held" in ledger


def test_enable_disable_and_duplicate_from_the_list(tenant: Tenant, portal: PortalClient) -> None:
    add_product(tenant)
    people(tenant)
    rule_id = saved_rule(tenant)
    signed_in_as(portal, tenant, ADMIN)
    page = portal.get("/rules?product=fraud")
    assert "Large case created" in page.text and "Enabled" in page.text
    token = csrf_token(page.text)
    row = portal.post(f"/rules/{rule_id}/disable", data={"_csrf_token": token}, headers=HTMX)
    assert row.status_code == 200
    assert row.text.lstrip().startswith(f'<tr id="rule-{rule_id}"') and "Disabled" in row.text
    back = portal.post(f"/rules/{rule_id}/enable?back=rule", data={"_csrf_token": token},
                       follow_redirects=False)
    assert back.headers["location"] == f"/rules/{rule_id}?saved=enabled"
    with tenant_tx(tenant.slug) as tx:
        assert [v.summary for v in rule_versions(tx, rule_id)] == ["created", "disabled", "enabled"]
    for expected in ("Copy of Large case created", "Copy of Large case created (2)"):
        copy = portal.post(f"/rules/{rule_id}/duplicate", data={"_csrf_token": token},
                           follow_redirects=False)
        assert copy.status_code == 303
        copy_id = int(copy.headers["location"].split("/")[2].split("?")[0])
        with tenant_tx(tenant.slug) as tx:
            made = get_rule(tx, copy_id)
            original = get_rule(tx, rule_id)
        assert made.name == expected and made.enabled is False
        assert {**made.to_json(), "name": "", "enabled": True} == \
            {**original.to_json(), "name": "", "enabled": True}


def test_export_and_import_round_trip_the_same_json_as_the_cli(
        tenant: Tenant, make_tenant: Any, portal: PortalClient,
        capsys: pytest.CaptureFixture[str]) -> None:
    add_product(tenant)
    people(tenant)
    saved_rule(tenant)
    saved_rule(tenant, rule_json(name="Disabled one", enabled=False,
                                 filters={"any": [{"fact": "subject.status", "op": "equals",
                                                   "value": "open"}]}))
    signed_in_as(portal, tenant, ADMIN)
    exported = portal.get("/rules/export.json?product=fraud")
    assert exported.status_code == 200
    assert exported.headers["content-disposition"].startswith("attachment;")
    code, cli_out, _ = run(capsys, "rules", "export", "--tenant", tenant.slug, "--product", "fraud")
    assert code == 0 and exported.text == cli_out  # byte for byte the CLI's export

    other = make_tenant()
    add_product(other)
    with tenant_tx(other.slug) as tx:
        create_user(tx, ADMIN, Role.ADMIN, PASSWORD)
    portal.cookies.clear()
    signed_in_as(portal, other, ADMIN)
    token = csrf_token(portal.get("/rules").text)
    imported = portal.post("/rules/import", data={"_csrf_token": token},
                           files={"file": ("rules.json", exported.content, "application/json")})
    assert imported.status_code == 200
    assert "Imported 2 rule(s): created 2, updated 0, unchanged 0." in imported.text
    with tenant_tx(other.slug) as tx:
        assert export_rules(tx, "fraud") == json.loads(exported.text)

    # A wrong import saves nothing and names each error by its path.
    bad = json.loads(exported.text)
    bad[1]["conditions"] = {"all": [{"fact": "field.amount", "op": "greater", "value": "x"}]}
    bad.append({"name": "Nameless"})
    refused = portal.post("/rules/import", data={"_csrf_token": token, "rules_json": json.dumps(bad)})
    assert refused.status_code == 422
    words = text_of(refused.text)
    assert "Nothing was imported." in words
    assert "[1].conditions.all[0].value: greater needs a number" in words
    assert "[2].product:" in words
    with tenant_tx(other.slug) as tx:
        assert [v.version for r in list_rules(tx) for v in rule_versions(tx, r.id)] == [1, 1]


def test_the_dry_run_shows_each_condition_and_why_the_rule_would_not_fire(
        tenant: Tenant, portal: PortalClient) -> None:
    add_product(tenant)
    people(tenant)
    rule_id = saved_rule(tenant, rule_json(
        conditions={"all": [{"fact": "field.amount", "op": "greater", "value": 1000000},
                            {"fact": "subject.status", "op": "equals", "value": "open"}]}))
    subject = add_subject(tenant, external_id="C-9", fields={"amount": 250})
    signed_in_as(portal, tenant, ADMIN)
    page = portal.get(f"/rules/{rule_id}/dry-run")
    assert page.status_code == 200 and "C-9" in page.text
    result = portal.get(f"/rules/{rule_id}/dry-run?subject={subject}", headers=HTMX)
    words = text_of(result.text)
    assert "It would not fire" in words
    assert "Conditions: do not hold (1 of 2 false, see below)" in words
    assert "field.amount is greater than 1000000 250 false" in words
    assert "subject.status is “open” \"open\" true" in words

    # Against a recent event whose trigger the rule does not answer.
    with tenant_tx(tenant.slug) as tx:
        row = tx.conn.execute(
            "INSERT INTO events (product, subject_id, event_type, trigger_type, occurred_at, source) "
            "VALUES ('fraud', %s, 'updated', 'assigned', now(), 'cli') RETURNING id",
            [subject]).fetchone()
    assert row is not None
    words = text_of(portal.get(f"/rules/{rule_id}/dry-run?event={row[0]}", headers=HTMX).text)
    assert "Event kind: the event is a updated event, the rule answers created events" in words


def test_the_dry_run_of_a_time_rule_shows_the_milestones_and_the_window_of_today(
        tenant: Tenant, portal: PortalClient, capsys: pytest.CaptureFixture[str]) -> None:
    add_product(tenant, "metrology", subject_kinds=("certificate",))
    people(tenant)
    today = local_today(tenant)
    due = today + timedelta(days=10)
    rule_id = saved_rule(tenant, {
        "name": "Calibration due", "product": "metrology", "kind": "time",
        "trigger": {"subject_kind": "certificate",
                    "due": {"fact": "field.calibration_due", "offsets": [-30, -7, 0]}},
        "conditions": {"all": [{"fact": "subject.status", "op": "not_equals", "value": "open"}]},
        "actions": {"channels": ["in_app"], "recipients": [{"type": "assignees"}],
                    "template": {"title": "{{ subject.title }} due {{ due.date }}", "body": "Due"}}})
    subject = add_subject(tenant, product="metrology", kind="certificate", external_id="CERT-1",
                          fields={"calibration_due": due.isoformat()})
    signed_in_as(portal, tenant, ADMIN)
    words = text_of(portal.get(f"/rules/{rule_id}/dry-run?subject={subject}", headers=HTMX).text)
    assert "It would not fire" in words
    assert f"Due date passed: field.calibration_due is {due.isoformat()}" in words
    assert f"Window passed: today is {today.isoformat()} in Europe/London: inside the window " \
           f"of offset -30, {(due - timedelta(days=30)).isoformat()} to " \
           f"{(due - timedelta(days=7)).isoformat()} (exclusive)" in words
    assert "today falls in this window" in words
    assert "subject.status is not “open” \"open\" false" in words
    # The CLI runs the same use case.
    code, out, _ = run(capsys, "rules", "dry-run", "--tenant", tenant.slug, str(rule_id),
                       "--subject", str(subject))
    assert code == 0 and "verdict: would NOT fire" in out
    assert f"milestone offset:-30: {(due - timedelta(days=30)).isoformat()} .. " \
           f"{(due - timedelta(days=7)).isoformat()}  <- today" in out
    assert "Conditions: do not hold" in out


def test_the_preview_renders_against_a_subject_and_refuses_a_bad_template(
        tenant: Tenant, portal: PortalClient) -> None:
    add_product(tenant)
    people(tenant)
    subject = add_subject(tenant, external_id="C-77", fields={"amount": 1250000})
    signed_in_as(portal, tenant, ADMIN)
    token = csrf_token(portal.get("/rules/new?product=fraud").text)
    good = post_form(portal, "/rules/preview", builder_form(
        token, preview_subject=str(subject), title="Case {{ subject.external_id }}",
        body="Amount {{ field.amount }} for {{ rule.name }}"), headers=HTMX)
    assert good.status_code == 200
    words = text_of(good.text)
    assert "Case C-77" in words and "Amount 1250000 for Large case" in words
    bad = post_form(portal, "/rules/preview", builder_form(
        token, preview_subject=str(subject), body="{% for x in (1..5000) %}{{ x }}{% endfor %}"),
        headers=HTMX)
    words = text_of(bad.text)
    assert "Case C-77" in words
    assert "The body template is refused:" in words and "loop" in words
    unclosed = post_form(portal, "/rules/preview", builder_form(token, title="{{ subject.title"),
                         headers=HTMX)
    assert "The title template is refused:" in text_of(unclosed.text)


def test_a_condition_row_offers_the_operators_that_fit_the_facts_type(
        tenant: Tenant, portal: PortalClient) -> None:
    add_product(tenant)
    people(tenant)
    add_subject(tenant, fields={"amount": 10, "opened_on": "2026-01-02", "flagged": True},
                forms={"intake": {"q1": "yes"}}, hierarchy={"region": "north"})
    signed_in_as(portal, tenant, ADMIN)
    new = portal.get("/rules/new?product=fraud").text
    for fact in ("field.amount (number)", "field.opened_on (date)", "field.flagged (boolean)",
                 "form.intake.q1 (string)", "hierarchy.region (string)", "subject.assignees (list)"):
        assert fact in new, fact

    def ops(fact: str, kind: str = "created") -> list[str]:
        html = portal.get("/rules/builder/row", params={
            "tree": "conditions", "product": "fraud", "kind": kind, "conditions_fact": fact,
            "conditions_op": "", "conditions_value": ""}, headers=HTMX).text
        select = re.search(r'name="conditions_op".*?</select>', html, re.S)
        assert select is not None
        return re.findall(r'<option value="([a-z_]+)"', select.group(0))

    assert "greater" in ops("field.amount") and "contains" not in ops("field.amount")
    assert "before" in ops("field.opened_on") and "greater" not in ops("field.opened_on")
    assert ops("subject.assignees") == ["contains", "empty", "not_empty", "changed", "changed_to",
                                        "changed_from"]
    assert "changed" not in ops("field.amount", "time")  # a time rule has no event
