"""A rule's notice template rendered in the sandbox against a chosen subject's facts, the
way preparation renders it (db/notices/rule_notices.py): for the rules console's live preview, and
as the dry render that refuses, when a rule is saved, a template past the sandbox's limits."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime

from db.events.facts import load_all_facts, load_subject_facts
from db.platform.tenancy import TenantTx
from db.rules.calendar import load_calendar
from domain.errors import NotFound
from domain.rules.conditions import PathError
from domain.rules.definitions import RuleDefinition
from domain.rules.obligation_dates import DueDate, due_context, local_date, next_milestone
from domain.rules.templates import TemplateRefused, TemplateTooCostly, render, template_context
from tocsin.core.clock import utcnow

__all__ = ["Preview", "dry_render_errors", "preview_templates"]


@dataclass(frozen=True)
class Preview:
    title: str | None  # None: refused (see problems)
    body: str | None
    problems: dict[str, str]  # by part (title, body): why the sandbox refused it
    subject: str | None  # what it was rendered against, in words; None: no subject


def _due_context(tx: TenantTx, subject_id: int, due: DueDate, value: object,
                 as_of: datetime) -> dict[str, object]:
    """{{ due.date }}, {{ due.offset_days }}, {{ due.milestone_date }} as the scan would give
    them today: the milestone whose window holds the subject's local today, else the next."""
    try:
        day = date.fromisoformat(str(value))
    except ValueError:
        return {}
    row = tx.conn.execute("SELECT coalesce(time_zone, %s) FROM subjects WHERE id = %s",
                          [tx.tenant.time_zone, subject_id]).fetchone()
    today = local_date(as_of, str(row[0]) if row else tx.tenant.time_zone)
    cal = load_calendar(tx)
    m = next_milestone(day, due.offsets, due.business_days, cal, today)
    if m is None:
        return {"date": day.isoformat(), "offset": None, "offset_days": None,
                "milestone_date": None}
    return due_context(day, m.offset, due.business_days, cal)


def _context(tx: TenantTx, *, subject_id: int | None, rule_name: str, event_type: str | None,
             trigger_type: str | None, due: DueDate | None,
             as_of: datetime | None) -> tuple[dict[str, object], str | None]:
    """What a template sees for this subject (none: only the rule's own names), the way
    preparation builds it, and the subject in words."""
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
    if due is not None and subject_id is not None and due.fact in facts:
        context["due"] = _due_context(tx, subject_id, due, facts[due.fact],
                                      as_of or utcnow())
    return context, subject


def preview_templates(tx: TenantTx, title: str, body: str, *, subject_id: int | None,
                      rule_name: str, event_type: str | None = None,
                      trigger_type: str | None = None, due: DueDate | None = None,
                      as_of: datetime | None = None) -> Preview:
    context, subject = _context(tx, subject_id=subject_id, rule_name=rule_name,
                                event_type=event_type, trigger_type=trigger_type, due=due,
                                as_of=as_of)
    rendered: dict[str, str | None] = {}
    problems: dict[str, str] = {}
    for part, text in (("title", title), ("body", body)):
        try:
            rendered[part] = render(text, context)
        except TemplateRefused as refused:
            rendered[part] = None
            problems[part] = refused.reason
    return Preview(rendered["title"], rendered["body"], problems, subject)


# The subject a rule's templates are tried against when it is saved: the product's latest
# registered one (of the trigger's kind, when it names one), found through the primary key.
_SAMPLE_SUBJECT = """
SELECT id FROM subjects
WHERE product = %(product)s AND (%(kind)s::text IS NULL OR kind = %(kind)s)
ORDER BY id DESC LIMIT 1
"""


def dry_render_errors(tx: TenantTx, definition: RuleDefinition, path: str = "") -> list[PathError]:
    """A dry render of a rule's title and body against a sample subject (the product's
    latest, or none yet: the templates' own text): a template that reaches one of the
    sandbox's limits there is refused at its path, before it is saved. Other render errors
    depend on the subject and are left to the preview (at send time such a notice goes out
    with the default template and is listed on Needs attention)."""
    row = tx.conn.execute(_SAMPLE_SUBJECT, {"product": definition.product,
                                            "kind": definition.trigger.subject_kind}).fetchone()
    kind = definition.kind if definition.kind in ("created", "updated") else None
    context, subject = _context(
        tx, subject_id=None if row is None else int(str(row[0])), rule_name=definition.name,
        event_type=kind, trigger_type=definition.trigger.types[0] if definition.trigger.types else None,
        due=definition.trigger.due, as_of=None)
    template = definition.actions.get("template") or {}
    errors = []
    at = f"{path}." if path else ""
    for part in ("title", "body"):
        try:
            render(str(template.get(part) or ""), context)
        except TemplateTooCostly as refused:
            against = f"subject {subject}" if subject else "no subject (none registered yet)"
            errors.append(PathError(f"{at}actions.template.{part}",
                                    f"{refused.reason}, when tried against {against}"))
        except TemplateRefused:
            continue
    return errors
