"""The dry run in the console: a saved rule against a chosen subject or recent event, every
step and condition with the value seen, and why it would not fire (db/rules/dry_run.py, the use
case `tocsin rules dry-run` runs too)."""

from __future__ import annotations

from typing import Annotated

from litestar import get
from litestar.params import FromPath, QueryParameter
from litestar.plugins.htmx import HTMXRequest
from litestar.response import Template

from db.platform.tenancy import tenant_tx
from db.rules.definitions import get_rule
from db.rules.dry_run import dry_run_rule
from db.rules.vocabulary import recent_events, recent_subjects
from domain.people.identity import parse_whole_number
from domain.rules.conditions import LeafTrace
from domain.rules.diff import describe_condition
from portal.auth import CurrentViewer
from portal.routes.rules import admin_only, base_context
from tocsin.core.clock import utcnow

__all__ = ["ROUTES", "Choice", "describe_trace", "dry_run_page"]


def describe_trace(trace: LeafTrace) -> str:
    return describe_condition({"fact": trace.fact, "op": trace.op, "value": trace.expected})


Choice = Annotated[str, QueryParameter(max_length=20)]


@get("/rules/{rule_id:int}/dry-run", sync_to_thread=True)
def dry_run_page(request: HTMXRequest, viewer: CurrentViewer, rule_id: FromPath[int],
                 subject: Choice = "", event: Choice = "") -> Template:
    admin_only(viewer)
    subject_id = parse_whole_number(subject, "choose a subject from the list") if subject else None
    event_id = parse_whole_number(event, "choose an event from the list") if event else None
    with tenant_tx(viewer.tenant.slug) as tx:
        rule = get_rule(tx, rule_id)
        result = None
        if subject_id is not None or event_id is not None:
            result = dry_run_rule(tx, rule_id, subject_id=subject_id,
                                  event_id=None if subject_id is not None else event_id,
                                  as_of=utcnow())
        if request.htmx and result is not None:
            return Template("_rule_dry_run.html", context={"result": result, "rule": rule,
                                                           "describe": describe_trace})
        context = base_context(tx, viewer) | {"describe": describe_trace,
            "rule": rule, "result": result, "subjects": recent_subjects(tx, rule.product),
            "events": recent_events(tx, rule.product) if rule.kind != "time" else [],
            "chosen_subject": subject_id, "chosen_event": event_id}
    return Template("rule_dry_run.html", context=context)


ROUTES = [dry_run_page]
