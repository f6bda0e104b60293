"""A tenant admin's hostile templates against the rules console, the CLI and preparation,
over the real app, PostgreSQL and the CLI: the range literal that built ten million items
(`(1..10000000) | join`), loops that passed the limit one by one, a range whose end is a
fact. Each preview is refused at once with the reason; each save is refused (a dry render
against the product's latest subject), through the builder, the import and the CLI; a rule
saved before these limits still sends its notice, with the default text, and is listed on
Needs attention."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from db.evidence.ledger_view import defaulted_notices
from db.notices.rule_notices import prepare_rule_claims
from db.platform.tenancy import Tenant, tenant_tx
from db.rules.definitions import create_rule, list_rules
from domain.rules.definitions import InvalidRule
from tests.integration.platform_builders import add_person, add_rule, fire
from tests.integration.platform_builders import add_subject as add_case
from tests.integration.portal_support import HTMX, PortalClient, csrf_token
from tests.integration.rule_builders import add_product, add_subject, rule_json
from tests.integration.test_cli import run
from tests.integration.test_portal_rules import (
    ADMIN,
    builder_form,
    people,
    post_form,
    signed_in_as,
    text_of,
)

RANGE_ATTACK = "{% for i in (1..5) %}{% assign n = (1..10000000) | join: '' | size %}{% endfor %}{{ n }}"
LOOPS_ONE_BY_ONE = "{% for i in (1..900) %}{% endfor %}" * 5  # each loop under the old limit
FACT_RANGE = "{% for i in (1..field.amount) %}{{ i }}{% endfor %}"


@pytest.fixture
def console(tenant: Tenant, portal: PortalClient) -> PortalClient:
    add_product(tenant)
    people(tenant)
    signed_in_as(portal, tenant, ADMIN)
    return portal


def rules_of(tenant: Tenant) -> list[str]:
    with tenant_tx(tenant.slug) as tx:
        return [r.name for r in list_rules(tx)]


@pytest.mark.parametrize("body", [RANGE_ATTACK, "{{ (1..100000000) | sort | reverse | first }}",
                                  "{% for i in (1..100000000) reversed %}{{ i }}{% break %}{% endfor %}"])
def test_the_preview_refuses_a_range_literal_before_building_it(
        tenant: Tenant, console: PortalClient, body: str) -> None:
    subject = add_subject(tenant, external_id="C-77", fields={"amount": 1250000})
    token = csrf_token(console.get("/rules/new?product=fraud").text)
    response = post_form(console, "/rules/preview", builder_form(
        token, preview_subject=str(subject), body=body), headers=HTMX)
    assert response.status_code == 200
    words = text_of(response.text)
    assert "Case C-77" in words  # the title still renders
    assert "The body template is refused: range limit reached" in words


def test_the_preview_refuses_loops_that_run_too_often_together(
        tenant: Tenant, console: PortalClient) -> None:
    token = csrf_token(console.get("/rules/new?product=fraud").text)
    response = post_form(console, "/rules/preview", builder_form(token, body=LOOPS_ONE_BY_ONE), headers=HTMX)
    assert "The body template is refused: loop iteration limit reached" in text_of(response.text)


@pytest.mark.parametrize("body", [RANGE_ATTACK, LOOPS_ONE_BY_ONE])
def test_saving_a_rule_with_a_template_past_the_limits_is_refused_at_its_field(
        tenant: Tenant, console: PortalClient, body: str) -> None:
    token = csrf_token(console.get("/rules/new?product=fraud").text)
    response = post_form(console, "/rules/create", builder_form(token, body=body))
    assert response.status_code == 422
    assert "The rule was not saved." in response.text
    assert "limit reached" in text_of(response.text.split('id="body-error"')[1][:2000])
    assert rules_of(tenant) == []


def test_a_range_reaching_a_fact_is_refused_when_the_latest_subject_makes_it_too_long(
        tenant: Tenant) -> None:
    add_product(tenant)
    rule = rule_json(actions={**rule_json()["actions"], "template": {"title": "T", "body": FACT_RANGE}})
    with tenant_tx(tenant.slug) as tx:  # no subject yet: only the template's own text is tried
        create_rule(tx, rule, "ana")
    add_subject(tenant, external_id="C-HUGE", fields={"amount": 10_000_000})
    with tenant_tx(tenant.slug) as tx, pytest.raises(InvalidRule) as refused:
        create_rule(tx, {**rule, "name": "Second"}, "ana")
    (error,) = refused.value.errors
    assert error.path == "actions.template.body"
    assert "range limit reached" in error.message and "subject case C-HUGE" in error.message
    assert rules_of(tenant) == ["Large case created"]


def test_importing_a_rule_with_the_range_literal_is_refused(tenant: Tenant, console: PortalClient) -> None:
    rule = rule_json(actions={**rule_json()["actions"], "template": {"title": "T", "body": RANGE_ATTACK}})
    token = csrf_token(console.get("/rules").text)
    response = console.post("/rules/import", data={"_csrf_token": token, "rules_json": json.dumps([rule])})
    assert response.status_code == 422
    assert "[0].actions.template.body" in response.text and "range limit reached" in response.text
    assert rules_of(tenant) == []


@pytest.mark.parametrize("command", ["create", "import"])
def test_the_cli_refuses_the_range_literal_in_one_line(
        tenant: Tenant, tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    add_product(tenant)
    rule = rule_json(actions={**rule_json()["actions"], "template": {"title": RANGE_ATTACK, "body": "b"}})
    path = tmp_path / "rule.json"
    path.write_text(json.dumps(rule if command == "create" else [rule]))
    code, _, err = run(capsys, "rules", command, "--tenant", tenant.slug, str(path))
    assert code == 2 and err.count("\n") == 1
    assert "actions.template.title: range limit reached" in err
    assert rules_of(tenant) == []


def test_a_rule_saved_before_the_limits_sends_its_notice_with_the_default_text(tenant: Tenant) -> None:
    product = "fraud"
    add_product(tenant)
    user = add_person(tenant, "ana@example.com")
    rule = add_rule(tenant, product, "Old rule", recipients=[{"type": "assignees"}], body=RANGE_ATTACK)
    claim = fire(tenant, rule, add_case(tenant, product, "C-1", title="Wire fraud", assignees=[user]))
    with tenant_tx(tenant.slug) as tx:
        report = prepare_rule_claims(tx, [claim])
    assert report.prepared == [claim] and report.notices == 1
    with tenant_tx(tenant.slug) as tx:
        body = tx.conn.execute("SELECT body FROM notifications").fetchone()
        (listed,) = defaulted_notices(tx)
    assert body is not None and 'The rule "Old rule" fired for' in str(body[0])
    assert "the body template was refused: range limit reached" in listed.error
