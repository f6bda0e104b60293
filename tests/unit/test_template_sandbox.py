"""The tenant template sandbox (domain/templates.py): what a hostile template can and cannot do."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

import pytest

from domain.templates import (
    MAX_LOOP_ITERATIONS,
    MAX_OUTPUT_CHARS,
    MAX_TEMPLATE_CHARS,
    TemplateRefused,
    check,
    render,
    template_context,
)

FACTS = {
    "field.amount": 1500000,
    "field.opened_on": "2026-11-30",
    "form.intake.q1": "yes",
    "hierarchy.region": "north",
    "subject.title": "Card fraud at Leeds branch",
    "subject.external_id": "C-1042",
    "subject.status": "open",
    "subject.assignees": ["ana@example.com", "bo@example.com"],
}


def context() -> dict[str, object]:
    return template_context(
        FACTS, event_type="updated", trigger="assigned", metadata={"form": "intake"},
        changes={"field.amount": {"from": 10, "to": 1500000}}, rule_name="Large case",
    )


def test_facts_are_reached_by_their_dotted_names() -> None:
    text = ("{{ rule.name }}: {{ subject.external_id }} {{ subject.title }} in {{ hierarchy.region }}, "
            "amount {{ field.amount }}, q1 {{ form.intake.q1 }}, {{ event.type }}/{{ event.trigger }} "
            "form {{ event.form }}, was {{ changes['field.amount'].from }}, "
            "{{ subject.assignees | join: ', ' }}")
    assert render(text, context()) == (
        "Large case: C-1042 Card fraud at Leeds branch in north, amount 1500000, q1 yes, "
        "updated/assigned form intake, was 10, ana@example.com, bo@example.com")


def test_an_undefined_name_renders_as_empty_text() -> None:
    assert render("[{{ field.missing }}][{{ nothing.at.all }}]", context()) == "[][]"


@pytest.mark.parametrize("text", [
    "{{ field.__class__ }}",
    "{{ field.__dict__ }}",
    "{{ subject.title.__class__.__mro__ }}",
    "{{ rule.__init__.__globals__ }}",
    "{{ subject.assignees.__class__.__subclasses__ }}",
    "{{ event.items }}{{ field.keys }}{{ subject.title.upper }}",
])
def test_attribute_walking_into_python_objects_finds_nothing(text: str) -> None:
    assert render(text, context()) == ""


def test_objects_handed_in_reach_the_template_only_as_text() -> None:
    class Secretive:
        secret = "s3cr3t"

        def __str__(self) -> str:
            return "just text"

    rendered = render("{{ field.thing }}|{{ field.thing.secret }}|{{ field.when }}|{{ field.n }}",
                      template_context({"field.thing": Secretive(), "field.when": date(2026, 1, 2),
                                        "field.n": Decimal("12.0")}))
    assert rendered == "just text||2026-01-02|12"


def test_a_huge_loop_is_refused_by_the_iteration_limit_and_reported() -> None:
    with pytest.raises(TemplateRefused) as refused:
        render("{% for i in (1..100000000) %}{{ i }}{% endfor %}", context())
    assert "loop iteration limit" in refused.value.reason
    assert "line 1" in refused.value.reason


def test_nested_loops_count_together_against_the_limit() -> None:
    side = int(MAX_LOOP_ITERATIONS ** 0.5) + 2  # each loop alone is well under the limit
    with pytest.raises(TemplateRefused, match="loop iteration limit"):
        render(f"{{% for i in (1..{side}) %}}{{% for j in (1..{side}) %}}x{{% endfor %}}{{% endfor %}}",
               context())


def test_a_loop_within_the_limit_runs() -> None:
    assert render("{% for i in (1..5) %}{{ i }}{% endfor %}", context()) == "12345"


def test_oversized_output_is_refused() -> None:
    with pytest.raises(TemplateRefused, match="output stream limit"):
        render("{% for i in (1..500) %}" + "x" * 100 + "{% endfor %}", context())
    assert MAX_OUTPUT_CHARS < 500 * 100


def test_growing_a_variable_without_bound_is_refused() -> None:
    with pytest.raises(TemplateRefused, match="local namespace limit"):
        render("{% assign s = 'aaaaaaaaaa' %}{% for i in (1..40) %}{% assign s = s | append: s %}"
               "{% endfor %}{{ s | size }}", context())


def test_deep_nesting_is_refused_when_checked_and_when_rendered() -> None:
    text = "{% if true %}" * 40 + "deep" + "{% endif %}" * 40
    (problem,) = check(text)
    assert "nesting limit" in problem
    with pytest.raises(TemplateRefused, match="nesting limit"):
        render(text, context())


def test_moderate_nesting_is_fine() -> None:
    assert render("{% if true %}{% if true %}{% if true %}ok{% endif %}{% endif %}{% endif %}",
                  context()) == "ok"


def test_a_parse_error_is_reported_by_check_with_its_place() -> None:
    (problem,) = check("Case {{ subject.title }}\n{% if %}oops{% endif %}")
    assert "line 2" in problem


def test_a_valid_template_has_no_problems() -> None:
    assert check("Case {{ subject.external_id }} over {{ field.amount }}") == []


@pytest.mark.parametrize("text", [
    "{{ 'x' | no_such_filter }}",
    "{% include 'other' %}",
    "{% render 'other' %}",
    "{% unknown_tag %}",
    "{{ subject.title",
])
def test_unknown_filters_tags_and_included_templates_are_refused(text: str) -> None:
    with pytest.raises(TemplateRefused):
        render(text, context())


def test_an_overlong_template_is_refused_before_parsing() -> None:
    (problem,) = check("x" * (MAX_TEMPLATE_CHARS + 1))
    assert str(MAX_TEMPLATE_CHARS) in problem


def test_a_fact_clashing_with_a_shorter_name_keeps_the_shorter_one() -> None:
    built = template_context({"field.a": "short", "field.a.b": "long"})
    assert built["field"] == {"a": "short"}
