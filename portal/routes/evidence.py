"""Evidence pages for administrators: the ledger (filtered, paged, with every delivery
attempt), its CSV export streamed straight from a server-side cursor, and what needs a
person (stuck claims, failed and unknown deliveries)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from litestar import Request, get, post
from litestar.di import NamedDependency, Provide
from litestar.params import FromPath, QueryParameter
from litestar.response import Redirect, Stream, Template
from litestar.status_codes import HTTP_303_SEE_OTHER

from db.delivery.email_templates import templates_fallen_back
from db.delivery.inbox import unread_count
from db.delivery.reviews import Decision, decide_held_delivery, reviews_of
from db.evidence.ledger_view import (
    LedgerCursor,
    LedgerFilter,
    LedgerStatus,
    attempts_for,
    csv_lines,
    defaulted_notices,
    failed_preparations,
    iter_ledger,
    ledger_page,
    stuck_claims,
    troubled_deliveries,
    why_fired,
)
from db.platform.runs import last_runs
from db.platform.tenancy import tenant_tx
from db.rules.definitions import list_rules
from domain.errors import Conflict, InvalidInput, NotFound
from domain.people.identity import parse_date, parse_whole_number
from portal.auth import CurrentViewer, Viewer
from portal.downloads import csv_download, download_time_limit
from tocsin.core.settings import Settings
from tocsin.monitoring.status import tenant_liveness

__all__ = [
    "DECIDED",
    "STATUS_LABELS",
    "Filters",
    "Text",
    "ledger",
    "ledger_csv",
    "ledger_filters",
    "mark_delivered",
    "needs_attention",
    "send_again",
]

STATUS_LABELS = {
    LedgerStatus.CLAIMED: "Claimed", LedgerStatus.SKIPPED: "Skipped (window passed)",
    LedgerStatus.CANCELLED: "Cancelled", LedgerStatus.DELIVERED: "Delivered",
    LedgerStatus.UNDELIVERED: "Not delivered yet", LedgerStatus.ACKNOWLEDGED: "Acknowledged",
}

Text = Annotated[str, QueryParameter(max_length=100)]


def _admin(viewer: Viewer) -> Viewer:
    if not viewer.is_admin:
        raise NotFound("only administrators read the evidence pages")
    return viewer


def ledger_filters(
    rule: Text = "", subject: Text = "", threshold: Text = "",
    date_from: Annotated[str, QueryParameter(name="from", max_length=10)] = "",
    date_to: Annotated[str, QueryParameter(name="to", max_length=10)] = "",
    status: Text = "",
) -> LedgerFilter:
    """The ledger's filters from the query string, shared by the page and the export."""
    subject_id = parse_whole_number(subject, "the subject filter takes a client number, such as 42") \
        if subject else None
    try:
        chosen = LedgerStatus(status) if status else None
    except ValueError:
        raise InvalidInput("choose a status from the list") from None
    return LedgerFilter(
        rule=rule.strip() or None, subject_id=subject_id,
        threshold=threshold.strip() or None,
        claimed_from=parse_date(date_from) if date_from else None,
        claimed_to=parse_date(date_to) if date_to else None, status=chosen,
    )


def _form(filters: LedgerFilter) -> dict[str, str]:
    """The filters as the form (and its links) carry them."""
    return {
        "rule": filters.rule or "",
        "subject": "" if filters.subject_id is None else str(filters.subject_id),
        "threshold": filters.threshold or "",
        "from": filters.claimed_from.isoformat() if filters.claimed_from else "",
        "to": filters.claimed_to.isoformat() if filters.claimed_to else "",
        "status": filters.status.value if filters.status else "",
    }


Filters = Provide(ledger_filters, sync_to_thread=False)


@get("/ledger", sync_to_thread=True, dependencies={"filters": Filters})
def ledger(
    viewer: CurrentViewer,
    filters: NamedDependency[LedgerFilter],
    after_at: Annotated[datetime | None, QueryParameter(required=False)] = None,
    after_id: Annotated[int | None, QueryParameter(required=False, ge=1)] = None,
) -> Template:
    _admin(viewer)
    if (after_at is None) != (after_id is None) or (after_at is not None and after_at.tzinfo is None):
        raise InvalidInput("that page of the ledger does not exist; start again from the newest")
    after = LedgerCursor(after_at, after_id) if after_at is not None and after_id is not None else None
    with tenant_tx(viewer.tenant.slug) as tx:
        rows, more = ledger_page(tx, filters, after)
        attempts = attempts_for(tx, [r.id for r in rows])
        why = why_fired(tx, rows)
        unread = unread_count(tx, viewer.user.id)
        rules = list_rules(tx)
    form = _form(filters)
    query = [(name, value) for name, value in form.items() if value]
    return Template(
        "ledger.html",
        context={"viewer": viewer, "unread": unread, "section": "evidence", "rows": rows,
                 "attempts": attempts, "why": why, "more": more, "form": form, "query": query,
                 "paged": after is not None, "statuses": STATUS_LABELS, "rules": rules},
    )


@get("/ledger.csv", sync_to_thread=False, dependencies={"filters": Filters},
     middleware=[download_time_limit])
def ledger_csv(
    request: Request[Any, Any, Any], viewer: CurrentViewer, filters: NamedDependency[LedgerFilter]
) -> Stream:
    _admin(viewer)
    return csv_download(request, viewer.tenant.slug, "ledger",
                        lambda tx: csv_lines(iter_ledger(tx, filters)))


# What the attention page says after a decision on a held delivery (its ?done= value).
DECIDED = {
    "sent-again": "Sent again: the email goes out once more, with the same Message-ID.",
    "marked-delivered": "Marked as delivered: nothing more is sent.",
    "already-decided": "Someone else decided about that delivery first (or an event from the email "
                       "provider settled it); see its status below.",
}


@get("/ledger/attention", sync_to_thread=True)
def needs_attention(
    viewer: CurrentViewer, request: Request[Any, Any, Any],
    done: Annotated[str | None, QueryParameter(max_length=20)] = None,
) -> Template:
    _admin(viewer)
    settings: Settings = request.app.state.settings
    with tenant_tx(viewer.tenant.slug) as tx:
        stuck = stuck_claims(tx)
        troubled = troubled_deliveries(tx)
        reviews = reviews_of(tx, [d.delivery_id for d in troubled])
        unprepared = failed_preparations(tx)
        defaulted = defaulted_notices(tx)
        fallen_back = templates_fallen_back(tx)
        unread = unread_count(tx, viewer.user.id)
        liveness = tenant_liveness(last_runs(tx), settings.sweep_interval_seconds)
    return Template(
        "attention.html",
        context={"viewer": viewer, "unread": unread, "section": "evidence", "stuck": stuck,
                 "troubled": troubled, "reviews": reviews, "unprepared": unprepared,
                 "defaulted": defaulted, "fallen_back": fallen_back, "liveness": liveness,
                 "notice": DECIDED.get(done or ""),
                 "policy": viewer.tenant.unknown_outcome_policy},
    )


def _decide(viewer: Viewer, delivery_id: int, decision: Decision, done: str) -> Redirect:
    _admin(viewer)
    try:
        with tenant_tx(viewer.tenant.slug) as tx:  # a resend is handed to the workers on commit
            decide_held_delivery(tx, delivery_id, decision, viewer.user.id)
    except Conflict:
        done = "already-decided"
    return Redirect(f"/ledger/attention?done={done}#failed-title", status_code=HTTP_303_SEE_OTHER)


@post("/ledger/attention/deliveries/{delivery_id:int}/send-again", sync_to_thread=True)
def send_again(viewer: CurrentViewer, delivery_id: FromPath[int]) -> Redirect:
    return _decide(viewer, delivery_id, Decision.SEND_AGAIN, "sent-again")


@post("/ledger/attention/deliveries/{delivery_id:int}/mark-delivered", sync_to_thread=True)
def mark_delivered(viewer: CurrentViewer, delivery_id: FromPath[int]) -> Redirect:
    return _decide(viewer, delivery_id, Decision.MARK_DELIVERED, "marked-delivered")
