"""The audit log, for the tenant's administrators: who changed what, when and from where,
with the values before and after, filtered and paged, and its CSV export (itself recorded).
Rows are written by db/evidence/audit.py record_audit, in the transaction of each change."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Request, get
from litestar.di import NamedDependency, Provide
from litestar.params import QueryParameter
from litestar.response import Stream, Template

from db.delivery.inbox import unread_count
from db.evidence.audit import audit_csv_lines, audit_page
from db.platform.tenancy import tenant_tx
from domain.audit import AuditFilter
from domain.errors import Forbidden
from domain.messages import N_
from domain.people.identity import parse_date
from portal.auth import CurrentViewer, Viewer
from portal.downloads import csv_download, download_time_limit

__all__ = ["ACTIONS", "ROUTES", "AuditFilters", "audit_csv", "audit_filters", "audit_log"]

# The families of actions the filter offers (a prefix matches every action of the family),
# named in the catalogs' words (translated where the page shows them).
ACTIONS = {
    "sign_in": N_("Sign-in"), "sign_out": N_("Sign-out"), "member": N_("Members and roles"),
    "user": N_("Accounts created"), "client": N_("Clients"), "licence": N_("Licences and renewals"),
    "rule": N_("Rules"), "settings": N_("Settings"), "preference": N_("Preferences"),
    "api_key": N_("API keys"), "events": N_("Events sent by API keys"), "export": N_("Exports"),
    "delivery": N_("Held deliveries"), "product": N_("Products"), "hierarchy": N_("Hierarchy"),
    "tenant": N_("Organisation"),
}

Text = Annotated[str, QueryParameter(max_length=100)]


def _admin(viewer: Viewer) -> Viewer:
    if not viewer.is_admin:
        raise Forbidden("only administrators read the audit log")
    return viewer


def audit_filters(
    action: Text = "", actor: Text = "", object_kind: Text = "", object_id: Text = "",
    date_from: Annotated[str, QueryParameter(name="from", max_length=10)] = "",
    date_to: Annotated[str, QueryParameter(name="to", max_length=10)] = "",
) -> AuditFilter:
    """The filters from the query string, shared by the page and the export."""
    return AuditFilter(
        action=action.strip() or None, actor=actor.strip() or None,
        object_kind=object_kind.strip() or None, object_id=object_id.strip() or None,
        since=parse_date(date_from) if date_from else None,
        until=parse_date(date_to) if date_to else None,
    )


AuditFilters = Provide(audit_filters, sync_to_thread=False)


def _form(f: AuditFilter) -> dict[str, str]:
    return {"action": f.action or "", "actor": f.actor or "", "object_kind": f.object_kind or "",
            "object_id": f.object_id or "", "from": f.since.isoformat() if f.since else "",
            "to": f.until.isoformat() if f.until else ""}


@get("/audit", sync_to_thread=True, dependencies={"filters": AuditFilters})
def audit_log(
    viewer: CurrentViewer, filters: NamedDependency[AuditFilter],
    before: Annotated[int | None, QueryParameter(required=False, ge=1)] = None,
) -> Template:
    _admin(viewer)
    with tenant_tx(viewer.tenant.slug) as tx:
        entries, more = audit_page(tx, filters, before_id=before)
        unread = unread_count(tx, viewer.user.id)
    form = _form(filters)
    query = [(name, value) for name, value in form.items() if value]
    return Template(
        "audit.html",
        context={"viewer": viewer, "unread": unread, "section": "audit", "entries": entries,
                 "more": more, "form": form, "query": query, "paged": before is not None,
                 "actions": ACTIONS},
    )


@get("/audit.csv", sync_to_thread=False, dependencies={"filters": AuditFilters},
     middleware=[download_time_limit])
def audit_csv(
    request: Request[Any, Any, Any], viewer: CurrentViewer, filters: NamedDependency[AuditFilter]
) -> Stream:
    _admin(viewer)
    return csv_download(request, viewer.tenant.slug, "audit",
                        lambda tx: audit_csv_lines(tx, filters))


ROUTES = [audit_log, audit_csv]
