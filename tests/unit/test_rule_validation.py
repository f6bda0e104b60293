"""A rule definition is validated as a whole: every error kind, all reported together,
each with its JSON path; and the summary of what an edit changed."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from domain.errors import InvalidInput
from domain.rules.definitions import InvalidRule, describe_changes, parse_rule, rule_errors


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
    bad.update({"name": " ", "product": "Fraud!", "kind": "weekly", "colour": "red", "enabled": "yes",
                "trigger": {"types": "assigned", "subject_kind": "Case", "metadata": {"form": [1]},
                            "when": 1}})
    bad["conditions"] = {"all": [{"fact": "amount", "op": "greater", "value": "x"}]}
    bad["filters"] = {"any": [{"fact": "field.a", "op": "nearly", "value": 1}]}
    bad["actions"] = {
        "channels": ["fax", "email", "email"], "category": "gossip", "critical": "no",
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


# --- time-trigger rules -------------------------------------------------------------------


def time_rule(**trigger: Any) -> dict[str, Any]:
    return {
        "name": "Calibration certificate due", "product": "metrology", "kind": "time",
        "trigger": {"subject_kind": "certificate", **(trigger or {
            "due": {"fact": "field.calibration_due", "offsets": [0, -30, -1, -7]}})},
        "conditions": {"all": [{"fact": "subject.status", "op": "not_equals", "value": "closed"}]},
        "actions": {"channels": ["email", "in_app"], "recipients": [{"type": "assignees"}],
                    "template": {"title": "{{ subject.title }} due {{ due.date }}", "body": "x"}},
    }


def test_a_time_rule_parses_with_offsets_ascending_and_its_category_by_default() -> None:
    rule = parse_rule(time_rule(), refuse_loops)
    assert rule.kind == "time" and rule.trigger.turnaround is None
    assert rule.trigger.due is not None and rule.trigger.due.offsets == (-30, -7, -1, 0)
    assert rule.trigger.due.field == "calibration_due" and not rule.trigger.due.business_days
    assert rule.actions["category"] == "obligation_due"
    assert rule.to_json()["trigger"]["due"]["offsets"] == [-30, -7, -1, 0]
    assert parse_rule(rule.to_json(), refuse_loops) == rule


def test_a_turnaround_rule_parses_in_hours_or_working_days() -> None:
    hours = parse_rule(time_rule(turnaround={"after": "assigned", "hours": 48}), refuse_loops)
    assert hours.trigger.turnaround is not None and hours.trigger.turnaround.hours == 48
    days = parse_rule(time_rule(turnaround={"after": "created", "days": 2, "business_days": True}),
                      refuse_loops)
    assert days.trigger.turnaround is not None and days.trigger.turnaround.business_days
    assert parse_rule(days.to_json(), refuse_loops) == days


@pytest.mark.parametrize(("trigger", "paths"), [
    ({}, ["trigger"]),
    ({"due": {"fact": "field.d", "offsets": [0]}, "turnaround": {"after": "created", "hours": 1}},
     ["trigger"]),
    ({"due": {"fact": "subject.status", "offsets": []}}, ["trigger.due.fact", "trigger.due.offsets"]),
    ({"due": {"fact": "field.d", "offsets": [0, 0, 400, "1", True], "business_days": "yes",
              "when": 1}},
     ["trigger.due.business_days", "trigger.due.offsets", "trigger.due.offsets[2]",
      "trigger.due.offsets[3]", "trigger.due.offsets[4]", "trigger.due.when"]),
    ({"due": {"fact": "field.d", "offsets": list(range(13))}}, ["trigger.due.offsets"]),
    ({"turnaround": {"after": "closed", "hours": 0}}, ["trigger.turnaround.after",
                                                      "trigger.turnaround.hours"]),
    ({"turnaround": {"after": "created", "hours": 4, "days": 1}}, ["trigger.turnaround"]),
    ({"turnaround": {"after": "created", "hours": 4, "business_days": True}},
     ["trigger.turnaround.business_days"]),
    ({"types": ["assigned"], "due": {"fact": "field.d", "offsets": [0]}}, ["trigger.types"]),
])
def test_a_time_trigger_s_errors_are_reported_at_their_paths(trigger: dict[str, Any],
                                                              paths: list[str]) -> None:
    data = time_rule(**trigger) if trigger else {**time_rule(), "trigger": {"subject_kind": "certificate"}}
    assert sorted(e.path for e in rule_errors(data, refuse_loops)) == sorted(paths)


def test_a_time_rule_reads_no_event_and_no_change() -> None:
    data = time_rule()
    data["conditions"] = {"all": [{"fact": "event.form", "op": "equals", "value": "x"},
                                  {"any": [{"fact": "field.a", "op": "changed"}]}]}
    data["filters"] = {"all": [{"fact": "subject.status", "op": "changed_to", "value": "open"}]}
    errors = {e.path: e.message for e in rule_errors(data, refuse_loops)}
    assert sorted(errors) == ["conditions.all[0].fact", "conditions.all[1].any[0].op",
                              "filters.all[0].op"]
    assert "a time rule has no event" in errors["conditions.all[0].fact"]


def test_a_time_rule_may_name_a_case_category_but_not_an_unknown_one() -> None:
    data = time_rule()
    data["actions"]["category"] = "case_alert"
    assert rule_errors(data, refuse_loops) == []
    data["actions"]["category"] = "license_expiring"
    assert [e.path for e in rule_errors(data, refuse_loops)] == ["actions.category"]
    event_rule = good_rule()
    event_rule["actions"]["category"] = "obligation_due"
    assert [e.path for e in rule_errors(event_rule, refuse_loops)] == ["actions.category"]


def test_the_nul_character_postgresql_cannot_store_is_refused_wherever_it_is_written() -> None:
    data = good_rule()
    data["name"] = "Large\x00case"
    data["trigger"] = {"subject_kind": "case", "metadata": {"form\x00": "intake"}}
    data["actions"]["template"]["body"] = "Amount\x00"
    paths = [e.path for e in rule_errors(data, refuse_loops) if "NUL" in e.message]
    assert paths == ["actions.template.body", "name", "trigger.metadata.form\\u0000"]
