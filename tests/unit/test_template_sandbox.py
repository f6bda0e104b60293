"""The tenant template sandbox (domain/rules/templates.py): what a hostile template can and cannot do."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

import pytest

from domain.rules.templates import (
    DEFAULT_BODY,
    DEFAULT_TITLE,
    MAX_LOOP_ITERATIONS,
    MAX_OUTPUT_CHARS,
    MAX_TEMPLATE_CHARS,
    TemplateRefused,
    TemplateTooCostly,
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


def test_a_loop_over_a_long_list_is_refused_by_the_iteration_limit_and_reported() -> None:
    facts = {"field.items": list(range(MAX_LOOP_ITERATIONS + 1))}
    with pytest.raises(TemplateTooCostly) as refused:
        render("{% for i in field.items %}{{ i }}{% endfor %}", template_context(facts))
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


# --- limits that count the whole render (domain/rules/template_limits.py) -----------------------

HUGE = 10_000_000  # numbers in the attacker's range: ~0.8 GB once built


@pytest.mark.parametrize("text", [
    "{{ (1..10000000) | join }}",
    "{% assign n = (1..10000000) | join: '' | size %}{{ n }}",
    "{% for i in (1..5) %}{% assign n = (1..10000000) | join: '' | size %}{% endfor %}",
    "{{ (1..10000000) | sort | first }}",
    "{{ (1..10000000) | reverse | first }}",
    "{% for i in (1..10000000) reversed %}{{ i }}{% break %}{% endfor %}",
    "{% for i in (1..10000000) offset: 9999990 %}{{ i }}{% endfor %}",
    "{% if (1..10000000) contains 5 %}x{% endif %}",
    "{% case 1 %}{% when (1..10000000) %}x{% endcase %}",
    "{% liquid\nassign r = (1..10000000)\necho r | size %}",
    "{% capture c %}{{ (1..10000000) | map: 'x' }}{% endcapture %}",
    "{% tablerow i in (1..10000000) %}{{ i }}{% endtablerow %}",
    "{{ 'x' | concat: (1..10000000) }}",
    "{% cycle (1..10000000), 2 %}",
])
def test_a_range_literal_past_the_iteration_limit_is_refused_when_parsed(text: str) -> None:
    (problem,) = check(text)
    assert "range limit" in problem and str(HUGE) in problem
    with pytest.raises(TemplateTooCostly, match="range limit"):
        render(text, context())


@pytest.mark.parametrize("text", [
    "{{ (1..field.n) | join }}",
    "{% assign top = field.n %}{{ (1..top) | sort | size }}",
    "{% for i in (field.one..field.n) reversed %}{{ i }}{% break %}{% endfor %}",
    "{{ (field.one..field.n) | reverse | first }}",
])
def test_a_range_whose_end_is_a_variable_is_refused_before_it_is_built(text: str) -> None:
    assert check(text) == []  # nothing to judge before a subject is at hand
    facts = {"field.n": HUGE, "field.one": 1}
    with pytest.raises(TemplateTooCostly, match=f"range limit reached: .* would hold {HUGE}"):
        render(text, template_context(facts))
    assert render(text, template_context({"field.n": 3, "field.one": 1})) in ("1 2 3", "3", "123", "3")


def test_a_range_as_long_as_the_limit_is_fine() -> None:
    assert render(f"{{{{ (1..{MAX_LOOP_ITERATIONS}) | size }}}}", context()) == str(MAX_LOOP_ITERATIONS)


def test_loops_one_after_another_count_together_against_the_limit() -> None:
    five = "{% for i in (1..900) %}{% endfor %}" * 5  # each loop alone is under the limit
    assert check(five) == []
    with pytest.raises(TemplateTooCostly, match="loop iteration limit"):
        render(five, context())
    assert render("{% for i in (1..500) %}{% endfor %}" * 2 + "done", context()) == "done"


def test_a_loop_inside_a_loop_counts_each_of_its_runs() -> None:
    # 10 outer iterations, then 10 runs of 99 inner ones: 1,000 in all is allowed, one more is not
    assert render("{% for a in (1..10) %}{% for b in (1..99) %}{% endfor %}{% endfor %}ok",
                  context()) == "ok"
    with pytest.raises(TemplateTooCostly, match="loop iteration limit"):
        render("{% for a in (1..10) %}{% for b in (1..100) %}{% endfor %}{% endfor %}", context())


@pytest.mark.parametrize("text", [
    "{{ field.letters | join: field.wide }}",  # 1,000 items joined by 100 characters
    "{{ field.a_lot | replace: 'a', field.wide }}",  # 1,000 'a's each made 100 characters
    "{% assign s = field.wide %}{{ s | append: s | append: s | append: s | append: s | append: s"
    " | append: s | append: s | append: s | append: s | append: s | append: s }}",
])
def test_a_filter_that_would_build_too_much_text_is_refused(text: str) -> None:
    facts = {"field.letters": ["x"] * 1000, "field.wide": "w" * 100, "field.a_lot": "a" * 1000}
    wide = {**facts, "field.wide": "w" * 5_000}
    with pytest.raises(TemplateTooCostly, match="text limit"):
        render(text, template_context(wide if "append" in text else facts))


def test_a_filter_that_would_build_too_long_a_sequence_is_refused() -> None:
    with pytest.raises(TemplateTooCostly, match="sequence limit"):
        render("{{ field.text | split: '' | size }}", template_context({"field.text": "z" * 5000}))
    with pytest.raises(TemplateTooCostly, match="sequence limit"):
        render("{% assign a = field.text | split: '' %}{{ a | concat: a | size }}",
               template_context({"field.text": "z" * 600}))
    assert render("{{ field.text | split: '' | size }}", template_context({"field.text": "zz"})) == "2"


def test_a_render_that_runs_out_of_time_is_stopped() -> None:
    ticks = iter(range(10_000))  # a clock that moves a second at every look

    def clock() -> float:
        return float(next(ticks))

    with pytest.raises(TemplateTooCostly, match="render time limit"):
        render("{% for i in (1..3) %}{{ subject.title }}{% endfor %}", context(), clock=clock)
    assert render("{{ subject.title }}", context()) == "Card fraud at Leeds branch"


def test_the_default_templates_render_for_any_subject() -> None:
    facts = {**FACTS, "subject.kind": "case"}
    assert render(DEFAULT_TITLE, template_context(facts, rule_name="Large case")) == "Large case: case C-1042"
    body = render(DEFAULT_BODY, template_context(facts, rule_name="Large case"))
    assert "Large case" in body and "C-1042" in body and "Card fraud at Leeds branch" in body
    assert render(DEFAULT_BODY, template_context({}, rule_name="R")).startswith('The rule "R" fired for  .')
