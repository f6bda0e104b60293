"""Email failover, for the tenant's administrators: which SES failures send an email through
the SMTP server instead (db/delivery/email_failover.py; domain/delivery/failover.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from litestar import get, post
from litestar.enums import RequestEncodingType
from litestar.params import Body, QueryParameter
from litestar.response import Redirect, Template
from litestar.status_codes import HTTP_303_SEE_OTHER

from db.delivery.email_failover import failover_policy, save_failover_policy
from db.delivery.inbox import unread_count
from db.platform.tenancy import tenant_tx
from domain.delivery.failover import FailoverPolicy
from domain.errors import Forbidden, InvalidInput
from portal.auth import CurrentViewer, Viewer
from tocsin.core import runtime

__all__ = ["ROUTES", "FailoverForm", "failover_page", "save_failover"]

Form = Body(media_type=RequestEncodingType.URL_ENCODED)


@dataclass
class FailoverForm:
    on_paused: str = ""  # checkboxes: "on" when ticked
    on_throttled: str = ""
    throttled_minutes: str = "15"
    on_5xx: str = ""
    run_of_5xx: str = "3"


def _admin(viewer: Viewer) -> Viewer:
    if not viewer.is_admin:
        raise Forbidden("only administrators choose the email failover")
    return viewer


def _whole(value: str, what: str) -> int:
    text = value.strip()
    if not (text.isascii() and text.isdigit()) or len(text) > 5:
        raise InvalidInput(f"{what} must be a whole number")
    return int(text)


@get("/channels/email-failover", sync_to_thread=True)
def failover_page(viewer: CurrentViewer,
                  done: Annotated[str | None, QueryParameter(max_length=10)] = None) -> Template:
    _admin(viewer)
    with tenant_tx(viewer.tenant.slug) as tx:
        policy = failover_policy(tx)
        unread = unread_count(tx, viewer.user.id)
    return Template("email_failover.html", context={
        "viewer": viewer, "unread": unread, "section": "webhooks", "policy": policy,
        "smtp_configured": bool(runtime.settings().smtp_url), "saved": done == "saved"})


@post("/channels/email-failover", sync_to_thread=True)
def save_failover(viewer: CurrentViewer, data: Annotated[FailoverForm, Form]) -> Redirect:
    _admin(viewer)
    policy = FailoverPolicy(
        on_paused=data.on_paused == "on", on_throttled=data.on_throttled == "on",
        throttled_minutes=_whole(data.throttled_minutes, "the throttling patience"),
        on_5xx=data.on_5xx == "on", run_of_5xx=_whole(data.run_of_5xx, "the run of server errors"))
    with tenant_tx(viewer.tenant.slug) as tx:
        save_failover_policy(tx, policy, viewer.user.id)
    return Redirect("/channels/email-failover?done=saved", status_code=HTTP_303_SEE_OTHER)


ROUTES = [failover_page, save_failover]
