"""The console's pure parts: the readable diff between versions, and the builder's form
shaped to rule JSON and back."""

from __future__ import annotations

from domain.rules.builder import ConditionRow, RuleForm, Tree, definition_of, form_of, operators_for
from domain.rules.definitions import parse_rule
from domain.rules.diff import Change, diff_rules

BASE = {"name": "Large", "product": "fraud", "kind": "created", "trigger": {"subject_kind": "case"},
        "conditions": {"all": [{"fact": "field.amount", "op": "greater", "value": 10},
                               {"fact": "subject.status", "op": "equals", "value": "open"}]},
        "filters": {"all": []},
        "actions": {"channels": ["in_app"], "category": "case_alert", "critical": False,
                    "recipients": [{"type": "assignees"}],
                    "template": {"title": "T", "body": "B"}}}


def test_removing_the_first_condition_reads_as_one_removal_not_every_later_change() -> None:
    after = {**BASE, "conditions": {"all": [BASE["conditions"]["all"][1]]}}
    assert diff_rules(BASE, after) == [
        Change("Condition 1", "removed", "field.amount is greater than 10", None)]


def test_a_state_change_and_a_template_edit_are_named_in_words() -> None:
    after = {**BASE, "actions": {**BASE["actions"], "template": {"title": "T2", "body": "B"}}}
    assert diff_rules(BASE, after, True, False) == [
        Change("Title template", "changed", "T", "T2"), Change("State", "changed", "enabled", "disabled")]


def test_a_stored_definition_survives_the_builder_form_unchanged() -> None:
    rule = parse_rule(BASE, lambda _: [])
    data, problems = definition_of(form_of(rule.to_json()), {"field.amount": "number"})
    assert problems == []
    assert parse_rule(data, lambda _: []).to_json() == rule.to_json()


def test_the_form_types_values_by_operator_and_fact_and_keeps_nested_trees_as_json() -> None:
    form = RuleForm(product="fraud", name="x", conditions=Tree("any", [
        ConditionRow("field.amount", "in", "1, 2.5"), ConditionRow("field.flag", "equals", "true"),
        ConditionRow("subject.status", "empty", "ignored"), ConditionRow("", "equals", "")]))
    data, _ = definition_of(form, {"field.amount": "number", "field.flag": "boolean"})
    assert data["conditions"] == {"any": [{"fact": "field.amount", "op": "in", "value": [1, 2.5]},
                                          {"fact": "field.flag", "op": "equals", "value": True},
                                          {"fact": "subject.status", "op": "empty"}]}
    nested = {"all": [{"any": [{"fact": "field.a", "op": "equals", "value": 1}]}]}
    assert form_of({**BASE, "conditions": nested}).conditions.json_text is not None


def test_operators_fit_the_type_and_time_rules_compare_no_changes() -> None:
    assert [op for op, _ in operators_for("list", "created")] == [
        "contains", "empty", "not_empty", "changed", "changed_to", "changed_from"]
    assert all(op not in ("changed", "changed_to", "changed_from")
               for op, _ in operators_for(None, "time"))
