"""One email, both parts, from its facts: the kind's content in the reader's language
(domain.delivery.email_kinds), the text part (domain.delivery.email_content) and the HTML part
(email_html). The worker composes each email with this at send time."""

from __future__ import annotations

from dataclasses import dataclass

from domain.delivery.email_content import Brand, EmailContent, text_part
from domain.delivery.email_kinds import EmailFacts, Links, build_email
from tocsin.core.i18n import formats_for, translations
from tocsin.providers.email_html import render_html

__all__ = ["Rendered", "render_email"]


@dataclass(frozen=True)
class Rendered:
    content: EmailContent
    subject: str
    text: str
    html: str


def render_email(facts: EmailFacts, zone: str, brand: Brand, portal_url: str,
                 unsubscribe_url: str | None) -> Rendered:
    content = build_email(facts, brand, Links(portal_url, unsubscribe_url),
                          translations(facts.locale), formats_for(facts.locale, zone))
    return Rendered(content, " ".join(content.subject.split()), text_part(content),
                    render_html(content))
