"""Reading hostile JSON (domain/events/json_input.py): nesting judged before parsing, without
recursion; numbers no double holds read so that validation can name their path."""

from __future__ import annotations

import math

import pytest

from domain.events.json_input import (
    MAX_JSON_DEPTH,
    InvalidJson,
    body_problem,
    is_finite_number,
    load_json,
    nesting_depth_exceeds,
)


def nested(depth: int, opener: str = "[", closer: str = "]") -> str:
    return opener * depth + closer * depth


@pytest.mark.parametrize(("document", "too_deep"), [
    (nested(MAX_JSON_DEPTH), False),
    (nested(MAX_JSON_DEPTH + 1), True),
    (nested(100_000), True),
    ('{"a":' * (MAX_JSON_DEPTH + 1) + "1" + "}" * (MAX_JSON_DEPTH + 1), True),
    ("[]" * 500_000, False),  # wide, not deep
    ('["' + "[" * 5000 + '"]', False),  # brackets inside a string do not count
    ('["\\"' + "[" * 5000 + '"]', False),  # nor after an escaped quote
    ('{"k": "v"}', False),
])
def test_nesting_is_judged_from_the_brackets_outside_strings(document: str, too_deep: bool) -> None:
    assert nesting_depth_exceeds(document) is too_deep
    assert nesting_depth_exceeds(document.encode()) is too_deep


def test_a_body_with_nan_or_infinity_is_refused_in_words_before_parsing() -> None:
    assert body_problem(b'{"a": NaN}') == "NaN is not a JSON number: " \
        "a number must be finite and between -1.8e308 and 1.8e308 (what a double holds)"
    assert (body_problem(b'{"a": [1, -Infinity]}') or "").startswith("-Infinity is not a JSON number")
    assert body_problem(b'{"a": "NaN and Infinity in a string are text"}') is None
    assert body_problem(nested(MAX_JSON_DEPTH + 1).encode()) == \
        f"the body nests arrays and objects more than {MAX_JSON_DEPTH} deep"


@pytest.mark.parametrize(("value", "finite"), [
    (0, True), (-1.5, True), (10**308, True), (2 * 10**308, False), (-(10**400), False),
    (math.inf, False), (-math.inf, False), (math.nan, False), (True, False), ("1", False),
])
def test_a_finite_number_is_one_a_double_holds_judged_without_float(value: object, finite: bool) -> None:
    assert is_finite_number(value) is finite


def test_numbers_no_double_holds_are_read_for_validation_to_refuse_at_their_path() -> None:
    loaded = load_json('[1e999, -1e999, NaN, Infinity, ' + "9" * 5000 + ", -" + "9" * 400 + ", 5, 2.5]")
    assert isinstance(loaded, list)
    assert [is_finite_number(v) for v in loaded] == [False] * 6 + [True, True]
    assert loaded[4] == math.inf and loaded[5] == -math.inf  # never handed to int()


@pytest.mark.parametrize(("text", "words"), [
    (nested(5000), f"more than {MAX_JSON_DEPTH} deep"),
    ("{not json", "is not JSON: Expecting property name"),
    ("", "is not JSON"),
])
def test_a_document_that_cannot_be_read_is_refused_in_one_plain_message(text: str, words: str) -> None:
    with pytest.raises(InvalidJson) as refused:
        load_json(text, "rules.json")
    assert str(refused.value).startswith("rules.json") and words in str(refused.value)
    assert "\n" not in str(refused.value)
