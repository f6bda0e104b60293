"""Every condition operator, table-driven: true, false, a missing fact and a type mismatch;
nested groups; validation with paths; the facts a tree references."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from domain.rules.conditions import (
    MAX_DEPTH,
    MAX_LEAVES,
    MAX_NODES,
    NOT_LOADED,
    OPERATORS,
    CompiledTree,
    Facts,
    WantedFacts,
    _apply,
    evaluate,
    facts_to_load,
    leaf_test,
    parse_fact,
    validate,
)

FACTS: dict[str, object] = {
    "field.amount": 1500,
    "field.ratio": 0.5,
    "field.label": "urgent case",
    "field.flag": True,
    "field.tags": ["aml", "pep"],
    "field.blank": "",
    "field.nothing": None,
    "field.none_list": [],
    "field.due": "2025-03-10",
    "field.count_text": "5",
    "hierarchy.region": "north",
    "subject.status": "open",
}
CHANGES: dict[str, object] = {
    "subject.status": {"from": "open", "to": "closed"},
    "field.amount": {"from": 10, "to": 1500},
    "field.same": {"from": 3, "to": 3},
}

# (fact, op, value, expected result, reason fragment ("" when none))
ROWS: list[tuple[str, str, Any, bool, str]] = [
    # equals
    ("field.amount", "equals", 1500, True, ""),
    ("field.amount", "equals", 1500.0, True, ""),
    ("field.amount", "equals", 1, False, ""),
    ("field.missing", "equals", 1, False, ""),
    ("field.count_text", "equals", 5, False, ""),  # "5" is not 5
    ("field.flag", "equals", 1, False, ""),  # a boolean is not a number
    ("field.nothing", "equals", None, True, ""),
    # not_equals: the negation of equals, so true for a missing fact
    ("field.amount", "not_equals", 1, True, ""),
    ("field.amount", "not_equals", 1500, False, ""),
    ("field.missing", "not_equals", 1, True, ""),
    ("field.count_text", "not_equals", 5, True, ""),
    # less / greater / less_or_equal / greater_or_equal
    ("field.amount", "less", 2000, True, ""),
    ("field.amount", "less", 1500, False, ""),
    ("field.missing", "less", 10, False, ""),
    ("field.label", "less", 10, False, "type mismatch"),
    ("field.flag", "less", 10, False, "type mismatch"),
    ("field.amount", "greater", 1000, True, ""),
    ("field.amount", "greater", 1500, False, ""),
    ("field.missing", "greater", 0, False, ""),
    ("field.count_text", "greater", 1, False, "type mismatch"),
    ("field.amount", "less_or_equal", 1500, True, ""),
    ("field.ratio", "less_or_equal", 0.4, False, ""),
    ("field.missing", "less_or_equal", 0, False, ""),
    ("field.tags", "less_or_equal", 3, False, "type mismatch"),
    ("field.amount", "greater_or_equal", 1500, True, ""),
    ("field.amount", "greater_or_equal", 1501, False, ""),
    ("field.missing", "greater_or_equal", 0, False, ""),
    ("field.nothing", "greater_or_equal", 0, False, "type mismatch"),
    # in / not_in
    ("hierarchy.region", "in", ["north", "south"], True, ""),
    ("hierarchy.region", "in", ["east"], False, ""),
    ("hierarchy.missing", "in", ["north"], False, ""),
    ("field.count_text", "in", [5, 6], False, ""),
    ("hierarchy.region", "not_in", ["east"], True, ""),
    ("hierarchy.region", "not_in", ["north"], False, ""),
    ("hierarchy.missing", "not_in", ["north"], True, ""),
    ("field.count_text", "not_in", [5], True, ""),
    # contains: a list's item or a substring
    ("field.tags", "contains", "pep", True, ""),
    ("field.tags", "contains", "sanctions", False, ""),
    ("field.label", "contains", "urgent", True, ""),
    ("field.label", "contains", "calm", False, ""),
    ("field.missing", "contains", "x", False, ""),
    ("field.amount", "contains", 1, False, "type mismatch"),
    ("field.label", "contains", 5, False, "type mismatch"),
    # empty / not_empty
    ("field.blank", "empty", None, True, ""),
    ("field.nothing", "empty", None, True, ""),
    ("field.none_list", "empty", None, True, ""),
    ("field.label", "empty", None, False, ""),
    ("field.missing", "empty", None, True, ""),
    ("field.amount", "empty", None, False, ""),  # a number is never empty (0 neither)
    ("field.label", "not_empty", None, True, ""),
    ("field.blank", "not_empty", None, False, ""),
    ("field.missing", "not_empty", None, False, ""),
    # changed / changed_to / changed_from: the event's changes
    ("subject.status", "changed", None, True, ""),
    ("field.same", "changed", None, False, "did not change"),
    ("field.label", "changed", None, False, ""),  # not in the changes: missing there
    ("field.missing", "changed", None, False, ""),
    ("subject.status", "changed_to", "closed", True, ""),
    ("subject.status", "changed_to", "open", False, ""),
    ("field.label", "changed_to", "x", False, ""),
    ("field.amount", "changed_to", "1500", False, ""),  # text is not a number
    ("subject.status", "changed_from", "open", True, ""),
    ("subject.status", "changed_from", "closed", False, ""),
    ("field.label", "changed_from", "x", False, ""),
    ("field.amount", "changed_from", 10, True, ""),
    # before / after: ISO dates compared as dates
    ("field.due", "before", "2025-04-01", True, ""),
    ("field.due", "before", "2025-03-10", False, ""),
    ("field.missing", "before", "2025-01-01", False, ""),
    ("field.amount", "before", "2025-01-01", False, "type mismatch"),
    ("field.label", "before", "2025-01-01", False, "type mismatch"),
    ("field.due", "after", "2025-03-09", True, ""),
    ("field.due", "after", "2025-03-10", False, ""),
    ("field.missing", "after", "2025-01-01", False, ""),
    ("field.count_text", "after", "2025-01-01", False, "type mismatch"),
]


def _leaf(fact: str, op: str, value: Any) -> dict[str, Any]:
    return {"fact": fact, "op": op} if op in ("empty", "not_empty", "changed") else \
        {"fact": fact, "op": op, "value": value}


def test_the_table_covers_every_operator_with_true_false_and_missing_rows() -> None:
    for op in OPERATORS:
        rows = [r for r in ROWS if r[1] == op]
        assert {r[3] for r in rows} == {True, False}, op
        source = CHANGES if op.startswith("changed") else FACTS
        assert any(r[0] not in source for r in rows), op


@pytest.mark.parametrize(("fact", "op", "value", "expected", "reason"), ROWS)
def test_operator(fact: str, op: str, value: Any, expected: bool, reason: str) -> None:
    tree = {"all": [_leaf(fact, op, value)]}
    assert validate(tree) == []
    result, trace = evaluate(tree, Facts(FACTS, CHANGES))
    assert result is expected
    (leaf,) = trace
    assert (leaf.fact, leaf.op, leaf.result) == (fact, op, expected)
    assert leaf.path == "conditions.all[0]"
    source = CHANGES if op.startswith("changed") else FACTS
    assert leaf.missing is (fact not in source)
    if leaf.missing:
        assert "seen" not in leaf.to_json() and leaf.to_json()["missing"] is True
    else:
        assert leaf.to_json()["seen"] == source[fact]
    assert reason in leaf.reason if reason else leaf.reason == ""


def test_nested_groups_combine_and_trace_every_leaf() -> None:
    tree = {"all": [
        {"fact": "field.amount", "op": "greater", "value": 1000},
        {"any": [
            {"fact": "hierarchy.region", "op": "equals", "value": "south"},
            {"all": [{"fact": "field.tags", "op": "contains", "value": "pep"},
                     {"fact": "field.missing", "op": "empty"}]},
        ]},
    ]}
    assert validate(tree) == []
    result, trace = evaluate(tree, Facts(FACTS))
    assert result is True
    assert [(t.path, t.result) for t in trace] == [
        ("conditions.all[0]", True),
        ("conditions.all[1].any[0]", False),
        ("conditions.all[1].any[1].all[0]", True),
        ("conditions.all[1].any[1].all[1]", True),
    ]
    result, _ = evaluate(tree, Facts({**FACTS, "field.tags": []}))
    assert result is False


def test_empty_all_holds_and_empty_any_does_not() -> None:
    assert evaluate({"all": []}, Facts({}))[0] is True
    assert evaluate({"any": []}, Facts({}))[0] is False


def test_validation_reports_every_error_with_its_path() -> None:
    tree = {"all": [
        {"fact": "field.amount", "op": "bigger", "value": 1},
        {"fact": "salary", "op": "equals", "value": 1},
        {"fact": "field.amount", "op": "less", "value": "1000"},
        {"any": [{"fact": "field.x", "op": "in", "value": []},
                 {"fact": "field.d", "op": "before", "value": "10/03/2025"},
                 {"fact": "field.e", "op": "empty", "value": 3},
                 {"fact": "field.f", "op": "equals"},
                 {"fact": "field.g", "op": "equals", "value": {"a": 1}, "extra": 1}]},
        "text",
        {"none": []},
    ]}
    errors = {(e.path, e.message.split(" ")[0]) for e in validate(tree)}
    paths = [e.path for e in validate(tree)]
    assert paths == [
        "conditions.all[0].op",
        "conditions.all[1].fact",
        "conditions.all[2].value",
        "conditions.all[3].any[0].value",
        "conditions.all[3].any[1].value",
        "conditions.all[3].any[2].value",
        "conditions.all[3].any[3].value",
        "conditions.all[3].any[4].extra",
        "conditions.all[3].any[4].value",
        "conditions.all[4]",
        "conditions.all[5].none",
        "conditions.all[5].fact",
        "conditions.all[5].op",
    ]
    assert ("conditions.all[0].op", "unknown") in errors


def test_groups_deeper_than_the_bound_and_too_many_leaves_are_refused() -> None:
    tree: dict[str, Any] = {"all": [{"fact": "field.a", "op": "empty"}]}
    for _ in range(MAX_DEPTH - 1):
        tree = {"any": [tree]}
    assert validate(tree) == []
    too_deep = {"all": [tree]}
    assert [e.message for e in validate(too_deep)] == [f"groups nest at most {MAX_DEPTH} deep"]
    wide = {"all": [{"fact": "field.a", "op": "empty"}] * (MAX_LEAVES + 1)}
    assert [e.path for e in validate(wide)] == [f"conditions.all[{MAX_LEAVES}]"]


def test_the_top_level_must_be_one_group() -> None:
    assert [e.path for e in validate({"fact": "field.a", "op": "empty"}, "filters")] == ["filters"]
    assert [e.path for e in validate({"all": {"fact": "field.a"}})] == ["conditions.all"]
    assert validate(None) != []


@pytest.mark.parametrize(("name", "family", "key"), [
    ("field.amount", "field", ("amount",)),
    ("form.intake.q1", "form", ("intake", "q1")),
    ("hierarchy.region", "hierarchy", ("region",)),
    ("subject.assignees", "subject", ("assignees",)),
    ("event.form", "event", ("form",)),
])
def test_fact_names_in_the_vocabulary(name: str, family: str, key: tuple[str, ...]) -> None:
    fact = parse_fact(name)
    assert fact is not None and (fact.family, fact.key) == (family, key)


@pytest.mark.parametrize("name", ["amount", "field.", "form.intake", "hierarchy.Region",
                                  "subject.owner", "field.a.b", "event.", 3])
def test_fact_names_outside_the_vocabulary(name: object) -> None:
    assert parse_fact(name) is None


def test_the_families_to_load_leave_out_changes_and_subject_facts() -> None:
    tree = {"any": [
        {"fact": "field.amount", "op": "greater", "value": 1},
        {"all": [{"fact": "form.intake.q1", "op": "equals", "value": "yes"},
                 {"fact": "hierarchy.region", "op": "in", "value": ["north"]}]},
        {"fact": "field.stage", "op": "changed"},  # read from the event's changes
        {"fact": "subject.status", "op": "equals", "value": "open"},  # on the subject row
    ]}
    wanted = facts_to_load(tree)
    assert wanted == WantedFacts(frozenset({"amount"}), frozenset({("intake", "q1")}),
                                 frozenset({"region"}))
    assert wanted.families() == ("field", "form", "hierarchy")
    assert not facts_to_load({"all": [{"fact": "subject.status", "op": "empty"}]})


# --- the compiled leaves answer as the reference operator does ------------------------

_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.floats(-5, 5, allow_nan=False),
                     st.sampled_from(["a", "b", "ab", "", "2025-03-10", "2025-03-11", "5"]))
_VALUES = st.one_of(_SCALARS, st.lists(_SCALARS, max_size=3),
                    st.dictionaries(st.sampled_from(["from", "to"]), _SCALARS, max_size=2))


@given(op=st.sampled_from(OPERATORS), expected=_VALUES, seen=_VALUES)
@settings(max_examples=1500, deadline=None)
def test_each_compiled_leaf_test_answers_what_the_reference_operator_answers(
        op: str, expected: object, seen: object) -> None:
    """conditions.leaf_test specialises a leaf once per rule version (strings in a set,
    the bound of a comparison as a float, the date parsed); for any expected value and any
    value seen it must give _apply's result and reason, type mismatches included."""
    assume(not validate({"all": [{"fact": "field.x", "op": op, "value": expected}]}))  # saved rules only
    assert leaf_test(op, expected)(seen) == _apply(op, seen, False, expected)


def test_a_compiled_tree_evaluates_every_leaf_even_once_its_group_is_decided() -> None:
    tree = {"any": [{"fact": "field.amount", "op": "greater", "value": 1000},
                    {"all": [{"fact": "field.label", "op": "contains", "value": "x"},
                             {"fact": "field.absent", "op": "not_equals", "value": 1}]}]}
    held, trace = CompiledTree(tree).evaluate(Facts(FACTS, CHANGES))
    assert held is True
    assert [(t.path, t.result, t.missing) for t in trace] == [
        ("conditions.any[0]", True, False), ("conditions.any[1].all[0]", False, False),
        ("conditions.any[1].all[1]", True, True)]
    held, trace = CompiledTree(tree).evaluate(Facts(FACTS, CHANGES), not_loaded=True)
    assert held is False and all(t.reason == NOT_LOADED for t in trace)


HUGE = 10**400  # a value no double holds: float() of it raised OverflowError


@pytest.mark.parametrize(("op", "expected", "seen", "holds"), [
    ("greater", 1000, HUGE, True), ("less", 1000, HUGE, False), ("less", 1000, -HUGE, True),
    ("greater_or_equal", 1.5, HUGE, True), ("less_or_equal", HUGE - 1, HUGE, False),
    ("greater", HUGE - 1, HUGE, True),  # exact: a float would have made these two equal
    ("equals", 1000, HUGE, False), ("not_equals", 1000, HUGE, True), ("in", [1, 2], HUGE, False),
])
def test_a_number_no_double_holds_is_compared_exactly_and_never_raises(
        op: str, expected: object, seen: object, holds: bool) -> None:
    tree = {"all": [{"fact": "field.amount", "op": op, "value": expected}]}
    held, (trace,) = evaluate(tree, Facts({"field.amount": seen}))
    assert (held, trace.result) == (holds, holds)
    assert leaf_test(op, expected)(seen)[0] is holds
    assert _apply(op, seen, False, expected)[0] is holds


@pytest.mark.parametrize("value", [HUGE, -HUGE, float("nan"), float("inf"), [1, float("-inf")], 2 * 10**308])
def test_a_rule_value_no_double_holds_is_refused_at_its_path(value: object) -> None:
    op = "in" if isinstance(value, list) else "greater"
    (error,) = validate({"any": [{"fact": "field.amount", "op": op, "value": value}]})
    assert error.path == "conditions.any[0].value" and "finite" in error.message


def test_a_tree_is_limited_in_groups_and_conditions_together() -> None:
    assert validate({"all": [{"all": []}] * (MAX_NODES - 1)}) == []  # the root counts too
    (error,) = validate({"all": [{"all": []}] * 180_000})
    assert error.path == f"conditions.all[{MAX_NODES - 1}]"
    assert error.message == f"a tree holds at most {MAX_NODES} groups and conditions together"
    nested = {"all": [{"any": [{"fact": "field.a", "op": "empty"}] * 30}] * 5}  # 1 + 5 + 150 nodes
    assert [e.message for e in validate(nested)][-1].startswith("a tree holds at most")
