"""Webhooks, for the tenant's administrators: the endpoints of their own systems that Tocsin
calls (signed per Standard Webhooks), each with its health and a delivery log; "send a test
event", "redeliver", rotate the signing secret, disable and enable. The use cases are
db/delivery/webhook_endpoints.py and db/delivery/webhook_deliveries.py."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Annotated

from litestar import get, post
from litestar.enums import RequestEncodingType
from litestar.params import Body, FromPath, QueryParameter
from litestar.plugins.htmx import HTMXRequest
from litestar.response import Redirect, Template
from litestar.status_codes import HTTP_303_SEE_OTHER, HTTP_422_UNPROCESSABLE_ENTITY

from db.delivery.channel_health import channel_health
from db.delivery.inbox import unread_count
from db.delivery.webhook_deliveries import delivery_log, queue_test_event, redeliver
from db.delivery.webhook_endpoints import (
    create_endpoint,
    disable_endpoint,
    enable_endpoint,
    get_endpoint,
    list_endpoints,
    rotate_secret,
)
from db.people.sms_settings import month_spend, set_spend_cap
from db.platform.tenancy import tenant_tx
from domain.delivery.webhooks import EVENT_KINDS, TEST_EVENT
from domain.errors import Forbidden, InvalidInput
from domain.messages import N_
from portal.auth import CurrentViewer, Viewer
from portal.routes.chat import channels_page_context
from portal.settings import app_settings
from tocsin.core.clock import utcnow

__all__ = [
    "DONE",
    "ROUTES",
    "EndpointForm",
    "SpendCapForm",
    "add_endpoint",
    "channels",
    "disable",
    "enable",
    "endpoint_page",
    "redeliver_delivery",
    "rotate",
    "save_sms_cap",
    "send_test",
    "webhooks",
]

DONE = {
    "created": N_("Endpoint added. Send it a test event to check that your receiver verifies the signature."),
    "test": N_("Test event queued: it appears in the delivery log below within seconds."),
    "rotated": N_("New secret made. The previous one keeps signing beside it for 24 hours: switch your "
               "receiver over within that time."),
    "disabled": N_("Endpoint disabled: nothing is sent to it, and what waited for it was cancelled."),
    "enabled": N_("Endpoint enabled, with a clean health record."),
    "redelivered": N_("Sent again, with the same webhook-id: a receiver that had it drops the repeat."),
}
KIND_LABELS = {"notice.created": "A notice is created (one per claim)",
               TEST_EVENT: "Test events (from this page)"}

Form = Body(media_type=RequestEncodingType.URL_ENCODED)


def _admin(viewer: Viewer) -> Viewer:
    if not viewer.is_admin:
        raise Forbidden("only administrators manage webhooks")
    return viewer


@get("/webhooks", sync_to_thread=True)
def webhooks(request: HTMXRequest, viewer: CurrentViewer,
             done: Annotated[str | None, QueryParameter(max_length=20)] = None) -> Template:
    _admin(viewer)
    with tenant_tx(viewer.tenant.slug) as tx:
        endpoints = list_endpoints(tx)
        unread = unread_count(tx, viewer.user.id)
    return Template("webhooks.html", context={
        "viewer": viewer, "unread": unread, "section": "webhooks", "endpoints": endpoints,
        "now": utcnow(), "notice": DONE.get(done or ""), "kinds": EVENT_KINDS, "kind_labels": KIND_LABELS,
        "allow_http": app_settings(request).webhook_allow_private})


def _channels_page(request: HTMXRequest, viewer: Viewer, *, done: str | None = None,
                   cap_typed: str | None = None, cap_error: str | None = None,
                   status_code: int = 200) -> Template:
    with tenant_tx(viewer.tenant.slug) as tx:
        health = channel_health(tx)
        chat = channels_page_context(tx)
        spend = month_spend(tx, _ceiling(request))
        unread = unread_count(tx, viewer.user.id)
    return Template("channels.html", status_code=status_code, context={
        "viewer": viewer, "unread": unread, "section": "webhooks", "channels": health, "done": done,
        "sms_spend": spend, "cap_typed": cap_typed, "cap_error": cap_error, **chat})


def _ceiling(request: HTMXRequest) -> Decimal:
    """The operator's SMS_MONTHLY_SPEND_CAP: each tenant's default and the most it may set."""
    return Decimal(str(app_settings(request).sms_monthly_spend_cap))


@get("/channels", sync_to_thread=True)
def channels(request: HTMXRequest, viewer: CurrentViewer,
             done: Annotated[str | None, QueryParameter(max_length=20)] = None) -> Template:
    """Every channel with its health: what it delivered and failed in 24 hours, what waits;
    Slack and Teams with their switch, channel URL and breaker (portal/routes/chat.py); texts
    with this month's spend and the tenant's own cap."""
    _admin(viewer)
    return _channels_page(request, viewer, done=done)


@dataclass
class SpendCapForm:
    cap: str = ""


@post("/channels/sms/cap", sync_to_thread=True)
def save_sms_cap(request: HTMXRequest, viewer: CurrentViewer,
                 data: Annotated[SpendCapForm, Form]) -> Redirect | Template:
    """The tenant's own monthly SMS spend cap; a negative one, or one above the operator's,
    is refused next to the field."""
    _admin(viewer)
    try:
        with tenant_tx(viewer.tenant.slug) as tx:
            set_spend_cap(tx, data.cap, _ceiling(request))
    except InvalidInput as error:
        return _channels_page(request, viewer, cap_typed=data.cap[:20], cap_error=str(error),
                              status_code=HTTP_422_UNPROCESSABLE_ENTITY)
    return Redirect("/channels?done=sms_cap#sms-cap", status_code=HTTP_303_SEE_OTHER)


@get("/webhooks/{endpoint_id:int}", sync_to_thread=True)
def endpoint_page(viewer: CurrentViewer, endpoint_id: FromPath[int],
                  done: Annotated[str | None, QueryParameter(max_length=20)] = None) -> Template:
    _admin(viewer)
    with tenant_tx(viewer.tenant.slug) as tx:
        endpoint = get_endpoint(tx, endpoint_id)
        log = delivery_log(tx, endpoint_id)
        unread = unread_count(tx, viewer.user.id)
    return Template("webhook_endpoint.html", context={
        "viewer": viewer, "unread": unread, "section": "webhooks", "endpoint": endpoint,
        "log": log, "now": utcnow(), "notice": DONE.get(done or ""), "kind_labels": KIND_LABELS})


@dataclass
class EndpointForm:
    url: str = ""
    description: str = ""
    notice_created: str = ""  # a checkbox: "on" when ticked
    webhook_test: str = ""


@post("/webhooks/new", sync_to_thread=True)
def add_endpoint(request: HTMXRequest, viewer: CurrentViewer,
                 data: Annotated[EndpointForm, Form]) -> Redirect:
    _admin(viewer)
    if len(data.url) > 2000 or len(data.description) > 1000:
        raise InvalidInput("the URL or the description is too long")
    kinds = [k for k, ticked in (("notice.created", data.notice_created), (TEST_EVENT, data.webhook_test))
             if ticked]
    with tenant_tx(viewer.tenant.slug) as tx:
        endpoint = create_endpoint(tx, data.url, kinds, description=data.description,
                                   allow_private=app_settings(request).webhook_allow_private)
    return Redirect(f"/webhooks/{endpoint.id}?done=created", status_code=HTTP_303_SEE_OTHER)


@post("/webhooks/{endpoint_id:int}/test", sync_to_thread=True)
def send_test(viewer: CurrentViewer, endpoint_id: FromPath[int]) -> Redirect:
    _admin(viewer)
    with tenant_tx(viewer.tenant.slug) as tx:
        queue_test_event(tx, endpoint_id, viewer.user.email)
    return Redirect(f"/webhooks/{endpoint_id}?done=test", status_code=HTTP_303_SEE_OTHER)


@post("/webhooks/{endpoint_id:int}/rotate", sync_to_thread=True)
def rotate(viewer: CurrentViewer, endpoint_id: FromPath[int]) -> Redirect:
    _admin(viewer)
    with tenant_tx(viewer.tenant.slug) as tx:
        rotate_secret(tx, endpoint_id)
    return Redirect(f"/webhooks/{endpoint_id}?done=rotated", status_code=HTTP_303_SEE_OTHER)


@post("/webhooks/{endpoint_id:int}/disable", sync_to_thread=True)
def disable(viewer: CurrentViewer, endpoint_id: FromPath[int]) -> Redirect:
    _admin(viewer)
    with tenant_tx(viewer.tenant.slug) as tx:
        disable_endpoint(tx, endpoint_id, f"disabled by {viewer.user.email}")
    return Redirect(f"/webhooks/{endpoint_id}?done=disabled", status_code=HTTP_303_SEE_OTHER)


@post("/webhooks/{endpoint_id:int}/enable", sync_to_thread=True)
def enable(viewer: CurrentViewer, endpoint_id: FromPath[int]) -> Redirect:
    _admin(viewer)
    with tenant_tx(viewer.tenant.slug) as tx:
        enable_endpoint(tx, endpoint_id)
    return Redirect(f"/webhooks/{endpoint_id}?done=enabled", status_code=HTTP_303_SEE_OTHER)


@post("/webhooks/{endpoint_id:int}/deliveries/{delivery_id:int}/redeliver", sync_to_thread=True)
def redeliver_delivery(viewer: CurrentViewer, endpoint_id: FromPath[int],
                       delivery_id: FromPath[int]) -> Redirect:
    _admin(viewer)
    with tenant_tx(viewer.tenant.slug) as tx:
        get_endpoint(tx, endpoint_id)  # another tenant's or a wrong id: 404
        if not any(e.delivery_id == delivery_id for e in delivery_log(tx, endpoint_id, limit=10_000)):
            raise InvalidInput("that delivery is not one of this endpoint's")
        redeliver(tx, delivery_id)
    return Redirect(f"/webhooks/{endpoint_id}?done=redelivered", status_code=HTTP_303_SEE_OTHER)


ROUTES = [channels, save_sms_cap, webhooks, endpoint_page, add_endpoint, send_test, rotate, disable, enable,
          redeliver_delivery]
