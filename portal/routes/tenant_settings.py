"""Organisation settings, for the tenant's administrators: what Tocsin does when an email's
outcome is unknown (the provider may or may not have it), with the trade-off beside each
choice. The same use case as `tocsin tenant unknown-outcome` (db/platform/tenancy.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from litestar import get, post
from litestar.enums import RequestEncodingType
from litestar.params import Body, QueryParameter
from litestar.response import Redirect, Template
from litestar.status_codes import HTTP_303_SEE_OTHER

from db.delivery.inbox import unread_count
from db.platform.tenancy import set_unknown_outcome_policy, tenant_tx
from domain.delivery.states import UnknownPolicy
from domain.errors import NotFound
from domain.messages import N_
from portal.auth import CurrentViewer, Viewer

__all__ = ["DONE", "ROUTES", "PolicyForm", "change_unknown_outcome", "settings_page"]

DONE = {"unknown-outcome": N_("Saved. It applies to every unknown outcome from now on.")}


def _admin(viewer: Viewer) -> Viewer:
    if not viewer.is_admin:
        raise NotFound("only administrators change the organisation's settings")
    return viewer


@get("/settings", sync_to_thread=True)
def settings_page(
    viewer: CurrentViewer, done: Annotated[str | None, QueryParameter(max_length=20)] = None
) -> Template:
    _admin(viewer)
    with tenant_tx(viewer.tenant.slug) as tx:
        unread = unread_count(tx, viewer.user.id)
        policy = tx.tenant.unknown_outcome_policy  # read now, not from the session's copy
    return Template(
        "settings.html",
        context={"viewer": viewer, "unread": unread, "section": "settings", "policy": policy,
                 "policies": list(UnknownPolicy), "notice": DONE.get(done or "")},
    )


@dataclass
class PolicyForm:
    policy: str = ""


@post("/settings/unknown-outcome", sync_to_thread=True)
def change_unknown_outcome(
    viewer: CurrentViewer, data: Annotated[PolicyForm, Body(media_type=RequestEncodingType.URL_ENCODED)]
) -> Redirect:
    _admin(viewer)
    set_unknown_outcome_policy(viewer.tenant.slug, data.policy[:20])
    return Redirect("/settings?done=unknown-outcome", status_code=HTTP_303_SEE_OTHER)


ROUTES = [settings_page, change_unknown_outcome]
