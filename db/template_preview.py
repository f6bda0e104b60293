"""A rule's notice template rendered in the sandbox against a chosen subject's facts, the
way preparation renders it (db/rule_notices.py), for the rules console's live preview."""

from __future__ import annotations

from dataclasses import dataclass

from db.facts import load_all_facts, load_subject_facts
from db.tenancy import TenantTx
from domain.errors import NotFound
from domain.templates import TemplateRefused, render, template_context


@dataclass(frozen=True)
class Preview:
    title: str | None  # None: refused (see problems)
    body: str | None
    problems: dict[str, str]  # by part (title, body): why the sandbox refused it
    subject: str | None  # what it was rendered against, in words; None: no subject


def preview_templates(tx: TenantTx, title: str, body: str, *, subject_id: int | None,
                      rule_name: str, event_type: str | None = None,
                      trigger_type: str | None = None) -> Preview:
    facts: dict[str, object] = {}
    subject = None
    if subject_id is not None:
        facts = load_subject_facts(tx, subject_id)
        if not facts:
            raise NotFound(f"no subject {subject_id}")
        facts.update(load_all_facts(tx, subject_id))
        subject = f"{facts['subject.kind']} {facts['subject.external_id']}"
    context = template_context(facts, event_type=event_type, trigger=trigger_type,
                               rule_name=rule_name)
    rendered: dict[str, str | None] = {}
    problems: dict[str, str] = {}
    for part, text in (("title", title), ("body", body)):
        try:
            rendered[part] = render(text, context)
        except TemplateRefused as refused:
            rendered[part] = None
            problems[part] = refused.reason
    return Preview(rendered["title"], rendered["body"], problems, subject)
