"""Tenant email templates: per email kind and locale, the subject, preheader and body of an
email written in the sandboxed Liquid of rule templates (domain/rules/templates.py), laid
into the same layout as the shipped copy (the why line, the action, the preferences and
unsubscribe links, the digest's groups and the brand stay the layout's).

The shipped default of every kind and locale is the current copy itself, offered to a
template as ``{{ default.subject }}``, ``{{ default.preheader }}`` and ``{{ default.body }}``
(already in the recipient's language): a kind nobody edited renders exactly as before, and
an admin may keep the shipped words and add their own around them.

A template that fails at send time (a render error, a limit reached, an empty subject) is
never the end of a reminder: the caller sends the shipped copy and records why.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, replace
from datetime import date

from domain.delivery.email_content import EmailContent, paragraphs_of
from domain.delivery.email_kinds import KINDS, EmailFacts, Formats
from domain.errors import InvalidInput
from domain.people.locales import SHIPPED_LOCALES
from domain.rules.templates import TemplateRefused, check, render

__all__ = [
    "BLOCKS",
    "EmailTemplate",
    "apply_template",
    "default_template",
    "template_diff",
    "template_problems",
    "template_variables",
    "valid_kind_and_locale",
]

BLOCKS = ("subject", "preheader", "body")
MAX_SUBJECT_CHARS = 250  # characters of a rendered subject (RFC 5322 advises 78 per line; folded)



@dataclass(frozen=True)
class EmailTemplate:
    kind: str
    locale: str
    subject: str
    preheader: str
    body: str

    def block(self, name: str) -> str:
        return str(getattr(self, name))


def valid_kind_and_locale(kind: str, locale: str) -> None:
    if kind not in KINDS:
        raise InvalidInput(f"unknown email kind {kind!r}")
    if locale not in SHIPPED_LOCALES:
        raise InvalidInput(f"unknown language {locale!r}: choose one of {', '.join(SHIPPED_LOCALES)}")


def default_template(kind: str, locale: str) -> EmailTemplate:
    """The shipped template: the current copy, block for block."""
    return EmailTemplate(kind, locale, "{{ default.subject }}", "{{ default.preheader }}",
                         "{{ default.body }}")


def template_problems(template: EmailTemplate) -> dict[str, str]:
    """Why each block cannot be saved ("... at line 2, column 5"), by block; empty: it parses
    within the sandbox's limits."""
    problems = {}
    for name in BLOCKS:
        found = check(template.block(name))
        if found:
            problems[name] = found[0]
    if not template.subject.strip():
        problems.setdefault("subject", "the subject may not be empty")
    return problems


def template_variables(facts: EmailFacts, content: EmailContent, formats: Formats) -> dict[str, object]:
    """The names a template sees: the recipient, the tenant, the client, the rule and the
    subject, the due date (formatted for the recipient), the action, and the shipped copy."""
    due: dict[str, object] = {}
    if facts.due_on is not None:
        due = {"date": formats.long_date(facts.due_on), "relative": formats.days_from_today(facts.due_on),
               "iso": facts.due_on.isoformat()}
    return {
        "recipient": {"name": facts.recipient_name},
        "tenant": {"name": facts.tenant_name},
        "client": {"name": facts.client_name or ""},
        "rule": {"name": facts.rule_name or ""},
        "subject": {"title": facts.subject_title or str(facts.data.get("subject") or "")},
        "milestone": facts.threshold or "",
        "due": due,
        "inviter": facts.inviter or "",
        "action": {"label": content.action.label if content.action else "",
                   "url": content.action.url if content.action else ""},
        "notifications": len(facts.digest),
        "locale": facts.locale,
        "default": {"subject": content.subject, "preheader": content.preheader,
                    "body": "\n\n".join(content.paragraphs)},
    }


def apply_template(content: EmailContent, template: EmailTemplate,
                   variables: dict[str, object]) -> EmailContent:
    """``content`` with the template's blocks rendered in; TemplateRefused when any block
    fails (an email renders from its template completely or not at all)."""
    subject = " ".join(render(template.subject, variables).split())
    if not subject:
        raise TemplateRefused("the subject rendered empty")
    if len(subject) > MAX_SUBJECT_CHARS:
        raise TemplateRefused(f"the subject rendered {len(subject)} characters; keep it under "
                              f"{MAX_SUBJECT_CHARS}")
    preheader = " ".join(render(template.preheader, variables).split())
    paragraphs = paragraphs_of(render(template.body, variables))
    return replace(content, subject=subject, heading=subject, preheader=preheader,
                   paragraphs=paragraphs)


def template_diff(before: EmailTemplate | None, after: EmailTemplate) -> list[str]:
    """What a save changed, block by block, as unified-diff lines ("- old", "+ new"), each
    block headed by its name; the first save is compared with the shipped default."""
    old = before or default_template(after.kind, after.locale)
    lines: list[str] = []
    for name in BLOCKS:
        a, b = old.block(name).splitlines(), after.block(name).splitlines()
        if a == b:
            continue
        lines.append(f"@@ {name}")
        for line in difflib.unified_diff(a, b, lineterm="", n=1):
            if line.startswith(("---", "+++", "@@")):
                continue
            lines.append(line)
    return lines


def sample_due(today: date) -> date:
    """The due date a preview shows when the chosen subject has none: a month ahead."""
    return date.fromordinal(today.toordinal() + 30)
