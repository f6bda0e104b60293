"""Tenant email templates in the sandbox: the shipped default renders exactly the shipped copy
for every kind and language; a template's blocks replace the subject, preheader and body and
keep the layout's links; a template that fails at render time leaves the shipped copy and
says why; a template that does not parse is refused with line and column; a save's diff
names what changed, block by block."""

from __future__ import annotations

import pytest

from domain.delivery.email_templates import (
    EmailTemplate,
    default_template,
    template_diff,
    template_problems,
)
from domain.people.locales import SHIPPED_LOCALES
from tests.support.email_samples import BRAND, HOSTILE, PORTAL, UNSUBSCRIBE, ZONE, sample_facts
from tocsin.providers.email_compose import render_email

CASES = [(locale, kind) for locale in SHIPPED_LOCALES for kind in sample_facts(locale)]


@pytest.mark.parametrize(("locale", "kind"), CASES)
def test_the_shipped_default_template_renders_exactly_the_shipped_copy(locale: str, kind: str) -> None:
    facts = sample_facts(locale)[kind]
    shipped = render_email(facts, ZONE, BRAND, PORTAL, UNSUBSCRIBE)
    templated = render_email(facts, ZONE, BRAND, PORTAL, UNSUBSCRIBE, default_template(kind, locale))
    assert templated.fallback is None
    assert (templated.subject, templated.text, templated.html) == (
        shipped.subject, shipped.text, shipped.html)


def test_a_templates_blocks_replace_subject_preheader_and_body_and_keep_the_links() -> None:
    facts = sample_facts("de")["licence_reminder"]
    template = EmailTemplate("licence_reminder", "de", "{{ client.name }} · {{ due.date }}",
                             "Bis {{ due.relative }}", "Hallo {{ recipient.name }},\n\n{{ default.body }}")
    email = render_email(facts, ZONE, BRAND, PORTAL, UNSUBSCRIBE, template)
    assert email.fallback is None
    assert email.subject.startswith(f"{facts.client_name} · ")
    assert email.text.startswith(email.subject + "\n")
    assert f"Hallo {facts.recipient_name}," in email.text and email.content.preheader.startswith("Bis ")
    assert UNSUBSCRIBE in email.text and UNSUBSCRIBE in email.html  # the layout's links stay
    assert f"{PORTAL}/preferences" in email.text


def test_hostile_data_in_a_template_is_escaped_in_the_html_part() -> None:
    facts = sample_facts("en")["rule_notice"]
    template = EmailTemplate("rule_notice", "en", "{{ subject.title }}", "", "About {{ subject.title }}")
    email = render_email(facts, ZONE, BRAND, PORTAL, UNSUBSCRIBE, template)
    assert email.fallback is None
    assert "<script>" not in email.html and HOSTILE in email.text


@pytest.mark.parametrize("broken", [
    "{{ 1 | divided_by: 0 }}", "{% for i in (1..5000) %}x{% endfor %}", "  "])
def test_a_template_that_fails_when_rendered_leaves_the_shipped_copy_and_says_why(broken: str) -> None:
    facts = sample_facts("fr")["licence_expiry"]
    shipped = render_email(facts, ZONE, BRAND, PORTAL, UNSUBSCRIBE)
    template = EmailTemplate("licence_expiry", "fr", broken, "", "")
    email = render_email(facts, ZONE, BRAND, PORTAL, UNSUBSCRIBE, template)
    assert (email.subject, email.text, email.html) == (shipped.subject, shipped.text, shipped.html)
    assert email.fallback is not None and email.fallback.startswith("the licence_expiry template (fr) failed")


def test_a_template_that_does_not_parse_is_refused_with_line_and_column() -> None:
    problems = template_problems(EmailTemplate("digest", "en", "", "{{ ok }}", "one\ntwo {% if %}"))
    assert problems["subject"] == "the subject may not be empty"
    assert problems["body"] == "missing expression at line 2, column 8"
    assert "preheader" not in problems


def test_a_saves_diff_names_each_changed_block_with_the_lines_removed_and_added() -> None:
    first = EmailTemplate("invitation", "en", "Join {{ tenant.name }}", "{{ default.preheader }}",
                          "Hello\n\n{{ default.body }}")
    second = EmailTemplate("invitation", "en", "Join us", "{{ default.preheader }}",
                           "Hello\n\n{{ default.body }}\n\nBye")
    assert template_diff(first, second) == ["@@ subject", "-Join {{ tenant.name }}", "+Join us",
                                            "@@ body", " {{ default.body }}", "+", "+Bye"]
    assert template_diff(None, first)[:3] == [
        "@@ subject", "-{{ default.subject }}", "+Join {{ tenant.name }}"]
