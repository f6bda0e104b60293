"""The rules console's JSON and templates under generated input, sent by a signed-in
administrator: rule files (pasted into the import) and condition trees (the builder's JSON
field) with numbers past a double, NaN and the infinities, nesting far past the limit,
line breaks before formulas in every string; templates with ranges, loops and filters that
build too much, previewed and saved. Every answer is a page or a 4xx, never a 5xx."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from db.events.products import create_product
from db.platform.tenancy import tenant_tx
from tests.fuzz.budget import is_server_error, share
from tests.fuzz.client import FuzzClient
from tests.fuzz.values import ANY_TEXT, DEEP_JSON, HUGE_INTEGERS, TRICKY
from tests.integration.portal_support import People, PortalClient

NUMBER_TEXT = st.one_of(
    st.integers().map(str), HUGE_INTEGERS.map(str),
    st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999", "-1e999", "1" + "0" * 5000]))
OPS = st.sampled_from(["equals", "not_equals", "less", "greater", "in", "contains", "before", "empty"])
FACTS = st.sampled_from(["field.amount", "subject.status", "form.intake.q1", "hierarchy.region",
                         "event.form"])
HOSTILE_TEMPLATES = [
    "{{ (1..10000000) | join }}", "{% for i in (1..100000000) reversed %}{% endfor %}",
    "{% for i in (1..900) %}{% endfor %}" * 3, "{{ field.amount | times: field.amount }}",
    "{% assign s = 'x' %}{% for i in (1..30) %}{% assign s = s | append: s %}{% endfor %}",
    "{{ subject.title | replace: 'a', 'aaaaaaaaaaaaaaaaaaaa' }}", "{% if %}", "{{ 1 | divided_by: 0 }}",
    "{{ (1..field.amount) | size }}", "{% tablerow i in (1..5000) %}{% endtablerow %}",
]
STATUSES: dict[int, int] = {}  # answers seen, by status
TEMPLATES = st.one_of(
    ANY_TEXT, st.sampled_from(HOSTILE_TEMPLATES),
    st.integers(1, 60).map(lambda n: "{% if true %}" * n + "x" + "{% endif %}" * n),
)


@st.composite
def condition_trees(draw: st.DrawFn) -> str:
    """A condition tree as JSON text, with hostile numbers written into it."""
    kind = draw(st.integers(0, 3))
    if kind == 0:
        return json.dumps(draw(DEEP_JSON))
    if kind == 1:
        return json.dumps({"any": [{"all": []}] * draw(st.integers(0, 3000))})
    leaves = [{"fact": draw(FACTS), "op": draw(OPS), "value": "@N@"}
              for _ in range(draw(st.integers(0, 4)))]
    text = json.dumps({draw(st.sampled_from(["all", "any"])): leaves})
    while "\"@N@\"" in text:
        text = text.replace("\"@N@\"", draw(NUMBER_TEXT) if draw(st.booleans())
                            else json.dumps(draw(ANY_TEXT | st.sampled_from(TRICKY))), 1)
    return text


@st.composite
def rule_files(draw: st.DrawFn) -> str:
    rule: dict[str, Any] = {
        "name": draw(ANY_TEXT), "product": "fraud",
        "kind": draw(st.sampled_from(["created", "updated", "time"])),
        "trigger": {"metadata": {"form": "@N@"}}, "conditions": "@TREE@",
        "actions": {"channels": ["in_app"], "category": "case_alert", "recipients": [{"type": "assignees"}],
                    "template": {"title": draw(TEMPLATES), "body": draw(TEMPLATES)}}}
    text = json.dumps([rule])
    return text.replace('"@N@"', draw(NUMBER_TEXT)).replace('"@TREE@"', draw(condition_trees()))


def test_no_generated_rule_file_tree_or_template_gets_a_server_error(
        portal: PortalClient, people: People) -> None:
    with tenant_tx(people.tenant.slug) as tx:
        create_product(tx, "fraud", "Fraud cases", ("case",))
    client = FuzzClient(portal, people)

    @settings(max_examples=share(0.1), deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(which=st.integers(0, 2), document=rule_files(), tree=condition_trees(),
           title=TEMPLATES, body=TEMPLATES)
    def send(which: int, document: str, tree: str, title: str, body: str) -> None:
        builder = {"product": "fraud", "name": "Fuzzed", "kind": "created", "channels": "in_app",
                   "category": "case_alert", "recipient_type": "assignees", "recipient_value": "",
                   "conditions_json": tree, "filters_join": "all", "title": title, "body": body}
        path, form = [("/rules/import", {"rules_json": document}), ("/rules/create", builder),
                      ("/rules/preview", builder)][which]
        response = client.send("POST", path, form=form,
                                headers={"HX-Request": "true"} if which == 2 else {})
        STATUSES[response.status_code] = STATUSES.get(response.status_code, 0) + 1
        assert not is_server_error(path, response.status_code), f"{path} {form!r}"[:3000]

    send()
    # The generated requests reached the handlers (not only the CSRF or size checks).
    assert set(STATUSES) & {200, 422}, STATUSES
