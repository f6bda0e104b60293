"""Obligations, for the tenant's team (administrators and members): every due date an
enabled time rule watches, soonest first, with the next notice and the local date it will
be sent on, overdue ones marked; filters and a CSV export like the ledger's; and per
subject its obligations' milestones and every notice ever claimed about it, with each
delivery. Client users have no access: the subjects are the organisation's own records."""

from __future__ import annotations

from datetime import date
from typing import Annotated, Any

from litestar import Request, get
from litestar.di import NamedDependency, Provide
from litestar.params import FromPath, QueryParameter
from litestar.response import Stream, Template

from db.delivery.inbox import unread_count
from db.evidence.ledger_view import attempts_for
from db.notices.obligation_list import (
    Cursor,
    ObligationFilter,
    csv_lines,
    get_subject,
    iter_obligations,
    obligations_page,
    products_and_statuses,
    subject_notices,
    subject_obligations,
)
from db.platform.tenancy import tenant_tx
from domain.errors import Forbidden, InvalidInput
from domain.people.identity import parse_whole_number
from portal.auth import CurrentViewer, Viewer
from portal.downloads import csv_download, download_time_limit
from tocsin.core.clock import utcnow

__all__ = [
    "ROUTES",
    "Filters",
    "Text",
    "obligation_filters",
    "obligations",
    "obligations_csv",
    "subject_page",
]

Text = Annotated[str, QueryParameter(max_length=100)]


def _team(viewer: Viewer) -> Viewer:
    if viewer.is_client_user:
        raise Forbidden("obligations are for your organisation's team; client users see their licence")
    return viewer


def obligation_filters(product: Text = "", status: Text = "",
                       within: Annotated[str, QueryParameter(max_length=6)] = "",
                       overdue: Annotated[str, QueryParameter(max_length=3)] = "") -> ObligationFilter:
    """The filters from the query string, shared by the page and the export."""
    days = parse_whole_number(within, "'due within' takes a number of days, such as 30") \
        if within.strip() else None
    return ObligationFilter(product=product.strip() or None, status=status.strip() or None,
                            within_days=days, overdue=overdue in ("1", "on", "yes"))


def _form(filters: ObligationFilter) -> dict[str, str]:
    return {"product": filters.product or "", "status": filters.status or "",
            "within": "" if filters.within_days is None else str(filters.within_days),
            "overdue": "1" if filters.overdue else ""}


Filters = Provide(obligation_filters, sync_to_thread=False)


@get("/obligations", sync_to_thread=True, dependencies={"filters": Filters})
def obligations(
    viewer: CurrentViewer,
    filters: NamedDependency[ObligationFilter],
    after_due: Annotated[date | None, QueryParameter(required=False)] = None,
    after_subject: Annotated[int | None, QueryParameter(required=False, ge=1)] = None,
    after_rule: Annotated[int | None, QueryParameter(required=False, ge=1)] = None,
) -> Template:
    _team(viewer)
    given = [v is not None for v in (after_due, after_subject, after_rule)]
    if any(given) and not all(given):
        raise InvalidInput("that page of obligations does not exist; start again from the first")
    after = Cursor(after_due, after_subject, after_rule) \
        if after_due is not None and after_subject is not None and after_rule is not None else None
    with tenant_tx(viewer.tenant.slug) as tx:
        rows, more = obligations_page(tx, filters, utcnow(), after)
        products, statuses = products_and_statuses(tx)
        unread = unread_count(tx, viewer.user.id)
    form = _form(filters)
    query = [(name, value) for name, value in form.items() if value]
    return Template(
        "obligations.html",
        context={"viewer": viewer, "unread": unread, "section": "obligations", "rows": rows,
                 "more": more, "form": form, "query": query, "paged": after is not None,
                 "products": products, "statuses": statuses},
    )


@get("/obligations.csv", sync_to_thread=False, dependencies={"filters": Filters},
     middleware=[download_time_limit])
def obligations_csv(
    request: Request[Any, Any, Any], viewer: CurrentViewer, filters: NamedDependency[ObligationFilter]
) -> Stream:
    _team(viewer)
    as_of = utcnow()
    return csv_download(request, viewer.tenant.slug, "obligations",
                        lambda tx: csv_lines(iter_obligations(tx, filters, as_of)))


@get("/obligations/subjects/{subject_id:int}", sync_to_thread=True)
def subject_page(viewer: CurrentViewer, subject_id: FromPath[int]) -> Template:
    _team(viewer)
    with tenant_tx(viewer.tenant.slug) as tx:
        subject = get_subject(tx, subject_id)
        watched = subject_obligations(tx, subject_id, utcnow())
        notices = subject_notices(tx, subject_id)
        attempts = attempts_for(tx, [n.id for n in notices])
        unread = unread_count(tx, viewer.user.id)
    return Template(
        "obligation_subject.html",
        context={"viewer": viewer, "unread": unread, "section": "obligations", "subject": subject,
                 "obligations": watched, "notices": notices, "attempts": attempts},
    )


ROUTES = [obligations, obligations_csv, subject_page]
