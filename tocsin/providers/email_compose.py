"""One email, both parts, from its facts: the kind's content in the reader's language
(domain.delivery.email_kinds), the text part (domain.delivery.email_content) and the HTML part
(email_html). The worker composes each email with this at send time.

A tenant's template for the kind and locale (domain.delivery.email_templates) replaces the
subject, preheader and body; when it fails, the shipped copy is sent and ``fallback`` says
why, for the caller to record on the delivery: a broken template never loses a reminder."""

from __future__ import annotations

from dataclasses import dataclass

from domain.delivery.email_content import Brand, EmailContent, text_part
from domain.delivery.email_kinds import EmailFacts, Links, build_email
from domain.delivery.email_templates import EmailTemplate, apply_template, template_variables
from domain.rules.templates import TemplateRefused
from tocsin.core.i18n import formats_for, translations
from tocsin.providers.email_html import render_html

__all__ = ["Rendered", "render_email"]


@dataclass(frozen=True)
class Rendered:
    content: EmailContent
    subject: str
    text: str
    html: str
    fallback: str | None = None  # why the tenant's template was not used (the shipped copy was)


def render_email(facts: EmailFacts, zone: str, brand: Brand, portal_url: str,
                 unsubscribe_url: str | None, template: EmailTemplate | None = None) -> Rendered:
    formats = formats_for(facts.locale, zone)
    content = build_email(facts, brand, Links(portal_url, unsubscribe_url),
                          translations(facts.locale), formats)
    fallback = None
    if template is not None:
        try:
            content = apply_template(content, template, template_variables(facts, content, formats))
        except TemplateRefused as refused:
            fallback = (f"the {template.kind} template ({template.locale}) failed, so the shipped "
                        f"copy was sent: {refused.reason}")
    return Rendered(content, " ".join(content.subject.split()), text_part(content),
                    render_html(content), fallback)
