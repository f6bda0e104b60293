"""A rule definition is validated as a whole: every error kind, all reported together,
each with its JSON path; and the summary of what an edit changed."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from domain.errors import InvalidInput
from domain.rules import InvalidRule, describe_changes, parse_rule, rule_errors


def refuse_loops(text: str) -> list[str]:
    """A template checker of the test's own: it refuses any {% for %} tag."""
    return ["loops are not allowed here"] if "{% for" in text else []


def good_rule() -> dict[str, Any]:
    return {
        "name": "Large case created",
        "product": "fraud",
        "kind": "created",
        "trigger": {"subject_kind": "case"},
        "conditions": {"all": [{"fact": "field.amount", "op": "greater", "value": 1000000}]},
        "filters": {"any": [{"fact": "hierarchy.region", "op": "in", "value": ["north"]}]},
        "actions": {
            "channels": ["email", "in_app"], "category": "case_alert",
            "recipients": [{"type": "head", "level": "region"}, {"type": "assignees"},
                           {"type": "role", "role": "compliance_officer"},
                           {"type": "user", "email": "ana@example.com"},
                           {"type": "address", "email": "ops@partner.example"}],
            "template": {"title": "Case {{ subject.title }}", "body": "Amount {{ field.amount }}"},
        },
    }


def test_a_good_rule_parses_with_defaults() -> None:
    rule = parse_rule(good_rule(), refuse_loops)
    assert rule.name == "Large case created" and rule.kind == "created"
    assert rule.trigger.subject_kind == "case" and rule.trigger.types == ()
    assert rule.actions["critical"] is False and rule.enabled is None
    assert parse_rule(rule.to_json(), refuse_loops) == rule


def test_an_update_rule_needs_trigger_types_and_a_creation_rule_has_none() -> None:
    update = {**good_rule(), "kind": "updated", "trigger": {"types": ["assigned"]}}
    assert parse_rule(update, refuse_loops).trigger.types == ("assigned",)
    no_types = {**good_rule(), "kind": "updated", "trigger": {}}
    assert [e.path for e in rule_errors(no_types, refuse_loops)] == ["trigger.types"]
    with_types = {**good_rule(), "trigger": {"types": ["assigned"]}}
    assert [e.path for e in rule_errors(with_types, refuse_loops)] == ["trigger.types"]


def test_every_error_is_reported_together_with_its_path() -> None:
    bad = good_rule()
    bad.update({"name": " ", "product": "Fraud!", "kind": "time", "colour": "red", "enabled": "yes",
                "trigger": {"types": "assigned", "subject_kind": "Case", "metadata": {"form": [1]},
                            "when": 1}})
    bad["conditions"] = {"all": [{"fact": "amount", "op": "greater", "value": "x"}]}
    bad["filters"] = {"any": [{"fact": "field.a", "op": "nearly", "value": 1}]}
    bad["actions"] = {
        "channels": ["sms", "email", "email"], "category": "gossip", "critical": "no",
        "recipients": [{"type": "boss"}, {"type": "role"}, {"type": "user", "email": "not-an-email"},
                       {"type": "head", "level": "region", "extra": 1}],
        "template": {"title": "{% for x in y %}{% endfor %}", "body": "", "footer": "x"},
        "retries": 3,
    }
    with pytest.raises(InvalidRule) as raised:
        parse_rule(bad, refuse_loops)
    assert isinstance(raised.value, InvalidInput)
    paths = sorted(e.path for e in raised.value.errors)
    assert paths == sorted([
        "colour", "name", "product", "kind", "enabled",
        "trigger.when", "trigger.types", "trigger.subject_kind", "trigger.metadata.form",
        "conditions.all[0].fact", "conditions.all[0].value",
        "filters.any[0].op",
        "actions.retries", "actions.channels[0]", "actions.channels", "actions.category",
        "actions.critical", "actions.recipients[0].type", "actions.recipients[1].role",
        "actions.recipients[2].email", "actions.recipients[3].extra",
        "actions.template.footer", "actions.template.title", "actions.template.body",
    ])
    messages = {e.path: e.message for e in raised.value.errors}
    assert messages["actions.template.title"] == "loops are not allowed here"
    assert "unknown operator 'nearly'" in messages["filters.any[0].op"]
    assert "unknown fact 'amount'" in messages["conditions.all[0].fact"]
    assert str(raised.value).startswith(f"invalid rule ({len(paths)} errors): ")
    assert "actions.recipients[2].email: " in str(raised.value)


def test_missing_parts_and_non_objects_are_reported() -> None:
    assert [e.path for e in rule_errors([], refuse_loops)] == ["$"]
    assert {e.path for e in rule_errors({}, refuse_loops)} == {"name", "product", "kind", "actions"}
    no_actions = {k: v for k, v in good_rule().items() if k != "actions"}
    assert [e.path for e in rule_errors(no_actions, refuse_loops, "[2]")] == ["[2].actions"]
    empty = {**good_rule(), "actions": {"channels": [], "category": "case_alert", "recipients": [],
                                        "template": "text"}}
    assert sorted(e.path for e in rule_errors(empty, refuse_loops)) == [
        "actions.channels", "actions.recipients", "actions.template"]


def test_the_summary_names_what_changed() -> None:
    old = parse_rule(good_rule(), refuse_loops).to_json()
    new = copy.deepcopy(old)
    new["conditions"]["all"][0]["value"] = 2000000
    new["conditions"]["all"].append({"fact": "subject.status", "op": "equals", "value": "open"})
    new["filters"] = {"all": []}
    new["actions"]["critical"] = True
    summary = describe_changes(old, new, True, False)
    assert summary == ("actions changed; changed conditions.all[0]; added conditions.all[1]; "
                       "changed filters; removed filters.any[0]; disabled")
    assert describe_changes(old, copy.deepcopy(old), True, True) == ""
