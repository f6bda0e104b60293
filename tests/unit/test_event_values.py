"""The values an event carries (domain/events/intake.py): what JSON holds and a double can compare,
refused otherwise at the exact path of the offending part, however deep it is written."""

from __future__ import annotations

from typing import Any

import pytest

from domain.events.intake import VALUE_DEPTH_LIMIT, parse_batch, parse_event


def event(**fields: Any) -> dict[str, Any]:
    return {"product": "fraud", "type": "created",
            "subject": {"kind": "case", "external_id": "C-1", "fields": fields}}


@pytest.mark.parametrize(("fields", "path"), [
    ({"amount": 10**400}, "subject.fields.amount"),
    ({"amount": -(10**309)}, "subject.fields.amount"),
    ({"amount": float("nan")}, "subject.fields.amount"),
    ({"amounts": [1, 2, [3, float("inf")]]}, "subject.fields.amounts[2][1]"),
    ({"nested": {"a": {"b": 10**400}}}, "subject.fields.nested.a.b"),
])
def test_a_number_no_double_holds_is_refused_at_its_own_path(fields: dict[str, Any], path: str) -> None:
    parsed, problems = parse_event(event(**fields))
    assert parsed is None
    assert [(p.path, "finite" in p.message) for p in problems] == [(path, True)]


def test_a_batch_names_the_index_of_the_event_holding_it() -> None:
    _, problems = parse_batch({"events": [event(amount=5), event(amount=10**400)]})
    assert [p.path for p in problems] == ["events[1].subject.fields.amount"]


def test_a_value_nested_past_the_limit_is_refused_without_recursion() -> None:
    value: Any = 1
    for _ in range(100_000):  # far past the interpreter's recursion limit
        value = [value]
    _, problems = parse_event(event(deep=value))
    (problem,) = problems
    assert problem.path == "subject.fields.deep" + "[0]" * VALUE_DEPTH_LIMIT
    assert f"more than {VALUE_DEPTH_LIMIT} deep" in problem.message


def test_numbers_a_double_holds_are_kept_as_they_are() -> None:
    parsed, problems = parse_event(event(amount=10**308, ratio=-2.5, big=2**70))
    assert problems == [] and parsed is not None
    assert dict(parsed.subject.fields) == {"amount": 10**308, "ratio": -2.5, "big": 2**70}
