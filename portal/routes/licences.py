"""Licence pages, where licence notifications link to: a client user's own licence, every
client's licence for the tenant's staff, the Annual License Expired wall with its one-click
renewal, and an administrator's renewal or reactivation of any client."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Annotated
from zoneinfo import ZoneInfo

from litestar import get, post
from litestar.enums import RequestEncodingType
from litestar.params import Body, FromPath, QueryParameter
from litestar.response import Redirect, Template
from litestar.status_codes import HTTP_303_SEE_OTHER

from db.delivery.inbox import unread_count
from db.people.clients import Client, get_client, list_clients, renew_licence
from db.platform.tenancy import tenant_tx
from domain.errors import NotFound
from domain.notices.licence import RENEWAL_WINDOW_DAYS
from portal.auth import BEYOND_THE_WALL, CurrentViewer, Viewer, safe_next
from tocsin.core.clock import utcnow

__all__ = [
    "SOON",
    "RenewalForm",
    "client_licence",
    "clients",
    "my_licence",
    "renew_client_licence",
    "renew_own_licence",
    "wall",
]

SOON = RENEWAL_WINDOW_DAYS  # days before expiry from which a client user may renew


def _local_today(client: Client, viewer: Viewer) -> date:
    return utcnow().astimezone(ZoneInfo(client.time_zone or viewer.tenant.time_zone)).date()


def _licence_page(viewer: Viewer, client_id: int) -> Template:
    if not viewer.can_see_client(client_id):
        raise NotFound(f"no client with id {client_id}")
    with tenant_tx(viewer.tenant.slug) as tx:
        client = get_client(tx, client_id)
        unread = unread_count(tx, viewer.user.id)
    days_left = (client.access_expires_on - _local_today(client, viewer)).days
    return Template(
        "licence.html",
        context={
            "viewer": viewer, "unread": unread, "client": client, "days_left": days_left,
            "soon": SOON, "section": "licence" if viewer.is_client_user else "clients",
        },
    )


@get("/licence", sync_to_thread=True)
def my_licence(viewer: CurrentViewer) -> Template:
    """A client user's own licence; staff belong to no client, so for them it does not exist."""
    if viewer.user.client_id is None:
        raise NotFound("only client users have a licence page")
    return _licence_page(viewer, viewer.user.client_id)


@get("/clients/{client_id:int}", sync_to_thread=True)
def client_licence(viewer: CurrentViewer, client_id: FromPath[int]) -> Template:
    return _licence_page(viewer, client_id)


@get("/clients", sync_to_thread=True)
def clients(viewer: CurrentViewer, archived: Annotated[bool, QueryParameter()] = False) -> Template:
    """Every client's licence at a glance, for the tenant's staff (``archived``: the
    archived ones instead)."""
    if viewer.is_client_user:
        raise NotFound("client users see only their own licence")
    with tenant_tx(viewer.tenant.slug) as tx:
        rows = list_clients(tx, archived=archived)
        unread = unread_count(tx, viewer.user.id)
    today = utcnow().astimezone(ZoneInfo(viewer.tenant.time_zone)).date()
    return Template(
        "clients.html",
        context={
            "viewer": viewer, "unread": unread, "clients": rows, "today": today,
            "soon": SOON, "section": "clients", "archived": archived,
        },
    )


@dataclass
class RenewalForm:
    expires_on: date  # the expiry the person saw: a second submission finds it moved
    next: str = "/"


def _renew(viewer: Viewer, client_id: int, expected: date) -> None:
    """One renewal, however many clicks: the guard in renew_licence lets one through; the
    renewal notice's emails are sent once the transaction commits."""
    with tenant_tx(viewer.tenant.slug) as tx:
        client = get_client(tx, client_id)
        renew_licence(
            tx, client_id, _local_today(client, viewer), actor="user",
            actor_user_id=viewer.user.id, expected_expires_on=expected,
            by_client_user=viewer.is_client_user,
        )


@get("/renew", opt={BEYOND_THE_WALL: True}, sync_to_thread=False)
def wall(
    viewer: CurrentViewer, next_path: Annotated[str, QueryParameter(name="next", max_length=2000)] = "/"
) -> Template | Redirect:
    """The wall as a page of its own (where htmx requests are sent); once access is back,
    straight on to where the user was going."""
    if viewer.client is None:
        raise NotFound("only client users have a licence to renew")
    if not viewer.access_paused:
        return Redirect(safe_next(next_path), status_code=HTTP_303_SEE_OTHER)
    return Template(
        "wall.html", context={"viewer": viewer, "client": viewer.client, "next": safe_next(next_path),
                              "walled": True},
    )


@post("/renew", opt={BEYOND_THE_WALL: True}, sync_to_thread=True)
def renew_own_licence(
    viewer: CurrentViewer,
    data: Annotated[RenewalForm, Body(media_type=RequestEncodingType.URL_ENCODED)],
) -> Redirect:
    """One-click renewal by a client user, then back to the page they asked for."""
    if viewer.client is None:
        raise NotFound("only client users have a licence to renew")
    _renew(viewer, viewer.client.id, data.expires_on)
    return Redirect(safe_next(data.next), status_code=HTTP_303_SEE_OTHER)


@post("/clients/{client_id:int}/renew", sync_to_thread=True)
def renew_client_licence(
    viewer: CurrentViewer,
    client_id: FromPath[int],
    data: Annotated[RenewalForm, Body(media_type=RequestEncodingType.URL_ENCODED)],
) -> Redirect:
    """An administrator renews an expired client or reactivates a closed one."""
    if not viewer.is_admin:
        raise NotFound("only administrators renew other organisations' licences")
    _renew(viewer, client_id, data.expires_on)
    return Redirect(f"/clients/{client_id}", status_code=HTTP_303_SEE_OTHER)
