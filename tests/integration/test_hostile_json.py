"""Hostile JSON against every reader of it, over the real app, the CLI and PostgreSQL: arrays
nested thousands deep, NaN and the infinities, 1e999, integers of 400 and 5,000 digits, and
a condition tree of 180,000 empty groups. The events API, the rules import (file and pasted),
the builder's tree field and `tocsin rules import|create` each answer 400/422 (the CLI: exit
2 with one line) with a plain message, never a 500 or a traceback, and write nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from db.events.api_keys import create_api_key
from db.platform.tenancy import Tenant, tenant_tx
from db.rules.definitions import list_rules
from domain.events.json_input import MAX_JSON_DEPTH
from tests.integration.intake_support import Desk, case_event, events_of, fraud_desk
from tests.integration.portal_support import PortalClient, csrf_token
from tests.integration.rule_builders import add_product, rule_json
from tests.integration.test_cli import run
from tests.integration.test_portal_rules import ADMIN, builder_form, people, post_form, signed_in_as

DEEP = "[" * 5000 + "]" * 5000
NUMBERS = {  # the number as the attacker writes it -> words of the refusal
    "NaN": "finite", "Infinity": "finite", "-Infinity": "finite", "1e999": "finite",
    "1" + "0" * 400: "finite", "9" * 5000: "finite",
}


@pytest.fixture
def desk(tenant: Tenant) -> Desk:
    return fraud_desk(tenant)


@pytest.fixture
def key(desk: Desk) -> str:
    return create_api_key(desk.tenant.slug, "case system")[1]


def post_raw(portal: PortalClient, path: str, key: str, body: str) -> Any:
    return portal.post(path, content=body.encode(), headers={
        "Authorization": f"Bearer {key}", "content-type": "application/json"})


def event_with_amount(number: str) -> str:
    event = json.dumps(case_event("C-1", fields={"amount": 0}))
    return event.replace('"amount": 0', f'"amount": {number}')


@pytest.mark.parametrize("path", ["/api/v1/events", "/api/v1/events/batch"])
@pytest.mark.parametrize("body", [
    DEEP,
    '{"events": ' + "[" * 600 + "]" * 600 + "}",
    json.dumps(case_event("C-1", fields={"x": 0})).replace("0}", "[" * 500 + "]" * 500 + "}"),
    "{" + '"a":{' * 3000 + "}" * 3001,
], ids=["arrays-5000-deep", "events-600-deep", "fact-500-deep", "objects-3000-deep"])
def test_the_events_api_refuses_a_body_nested_too_deeply_before_parsing_it(
        portal: PortalClient, desk: Desk, key: str, path: str, body: str) -> None:
    response = post_raw(portal, path, key, body)
    assert response.status_code == 400, response.text
    deep = f"the body nests arrays and objects more than {MAX_JSON_DEPTH} deep"
    assert response.json() == {"error": "bad_request", "message": deep}
    assert events_of(desk.tenant) == []


@pytest.mark.parametrize("number", list(NUMBERS))
def test_the_events_api_refuses_a_number_no_double_holds_with_a_plain_message(
        portal: PortalClient, desk: Desk, key: str, number: str) -> None:
    single = post_raw(portal, "/api/v1/events", key, event_with_amount(number))
    batch = post_raw(portal, "/api/v1/events/batch", key, f'{{"events": [{event_with_amount(number)}]}}')
    for response, path in ((single, "subject.fields.amount"), (batch, "events[0].subject.fields.amount")):
        assert response.status_code in (400, 422), response.text
        answer = response.json()
        assert "finite" in answer["message"] and "Traceback" not in response.text
        if response.status_code == 422:  # parsed, then refused at its path
            assert [p["path"] for p in answer["problems"]] == [path]
    assert events_of(desk.tenant) == []


def test_a_fact_value_nested_within_the_body_limit_but_past_the_facts_is_refused_at_its_path(
        portal: PortalClient, desk: Desk, key: str) -> None:
    value: Any = 1
    for _ in range(20):
        value = [value]
    response = portal.post("/api/v1/events", json=case_event("C-1", fields={"nested": value}),
                           headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 422
    (problem,) = response.json()["problems"]
    assert problem["path"].startswith("subject.fields.nested[0]") and "deep" in problem["message"]


# --- the rules: import, builder, CLI ------------------------------------------------------


def hostile_rule_files() -> dict[str, str]:
    """Rule files as an attacker writes them, and the words the refusal must hold."""
    rule = json.dumps([rule_json()])
    files = {"deep": DEEP}
    for number in NUMBERS:
        files[f"value {number[:12]}"] = rule.replace("1000000", number, 1)
    files["metadata NaN"] = json.dumps([rule_json(trigger={"subject_kind": "case",
                                                          "metadata": {"form": 1}})]) \
        .replace('"form": 1', '"form": NaN')
    files["20000 empty groups"] = json.dumps([rule_json(conditions={"all": [{"all": []}] * 20_000})])
    return files


EXPECTED = {"deep": f"more than {MAX_JSON_DEPTH} deep", "20000 empty groups": "at most 100 groups"}


def refusal_words(name: str) -> str:
    return EXPECTED.get(name, "finite")


@pytest.fixture
def admin_portal(tenant: Tenant, portal: PortalClient) -> Iterator[PortalClient]:
    add_product(tenant)
    people(tenant)
    signed_in_as(portal, tenant, ADMIN)
    yield portal


@pytest.mark.parametrize("name", list(hostile_rule_files()))
def test_the_rules_import_refuses_hostile_json_with_a_plain_message(
        tenant: Tenant, admin_portal: PortalClient, name: str) -> None:
    text = hostile_rule_files()[name]
    token = csrf_token(admin_portal.get("/rules").text)
    response = admin_portal.post("/rules/import", data={"_csrf_token": token, "rules_json": text})
    assert response.status_code == 422, response.text[:500]
    assert refusal_words(name) in response.text
    if name.startswith(("value", "metadata")):  # parsed, then refused at its path
        assert "[0].conditions.all[0].value" in response.text or "[0].trigger.metadata.form" in response.text
    with tenant_tx(tenant.slug) as tx:
        assert list_rules(tx) == []


@pytest.mark.parametrize("tree", [
    DEEP,
    '{"all": [{"fact": "field.amount", "op": "greater", "value": NaN}]}',
    '{"all": [{"fact": "field.amount", "op": "greater", "value": 1e999}]}',
    '{"all": [{"fact": "field.amount", "op": "greater", "value": ' + "7" * 5000 + "}]}",
    json.dumps({"any": [{"all": []}] * 3_000}),  # within the field's 50,000 characters
])
def test_the_builders_tree_field_refuses_hostile_json_at_the_tree(
        tenant: Tenant, admin_portal: PortalClient, tree: str) -> None:
    token = csrf_token(admin_portal.get("/rules/new?product=fraud").text)
    form = [(k, v) for k, v in builder_form(token) if not k.startswith("conditions_")]
    response = post_form(admin_portal, "/rules/create", [*form, ("conditions_json", tree)])
    assert response.status_code in (400, 413, 422), response.text[:500]
    if response.status_code == 422:
        assert "The rule was not saved." in response.text
    with tenant_tx(tenant.slug) as tx:
        assert list_rules(tx) == []


@pytest.mark.parametrize("name", list(hostile_rule_files()))
def test_tocsin_rules_import_and_create_refuse_hostile_json_in_one_line_with_exit_2(
        tenant: Tenant, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    add_product(tenant)
    path = tmp_path / "rules.json"
    path.write_text(hostile_rule_files()[name])
    for command in ("import", "create"):
        code, out, err = run(capsys, "rules", command, "--tenant", tenant.slug, str(path))
        assert code == 2, (command, out, err[-500:])
        assert err.startswith("tocsin: error: ") and err.count("\n") == 1, err[-500:]
        if command == "import" or name == "deep":
            assert refusal_words(name) in err
    with tenant_tx(tenant.slug) as tx:
        assert list_rules(tx) == []


def test_the_installed_command_exits_2_with_one_line_on_a_deeply_nested_file(
        tenant: Tenant, tmp_path: Path) -> None:
    add_product(tenant)
    path = tmp_path / "deep.json"
    path.write_text(DEEP)
    for document in (str(path), "-"):
        done = subprocess.run([sys.executable, "-m", "tocsin.boot.cli", "rules", "import", "--tenant",
                               tenant.slug, document], input=DEEP, capture_output=True, text=True,
                              timeout=120, env=dict(os.environ))
        assert done.returncode == 2, done.stderr[-1000:]
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
        assert f"more than {MAX_JSON_DEPTH} deep" in done.stderr


def test_a_tree_of_180000_empty_groups_is_refused_by_its_node_count(
        tenant: Tenant, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    add_product(tenant)
    path = tmp_path / "wide.json"
    path.write_text(json.dumps([rule_json(conditions={"all": [{"all": []}] * 180_000})],
                               separators=(",", ":")))
    code, _, err = run(capsys, "rules", "import", "--tenant", tenant.slug, str(path))
    assert code == 2 and err.count("\n") == 1
    assert "[0].conditions.all[99]: a tree holds at most 100 groups and conditions together" in err
    with tenant_tx(tenant.slug) as tx:
        assert list_rules(tx) == []
