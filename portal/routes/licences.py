"""Licence pages, where licence notifications link to: a client user's own licence, and any
client's licence for the tenant's staff."""

from __future__ import annotations

from datetime import UTC, date, datetime
from zoneinfo import ZoneInfo

from litestar import get
from litestar.params import FromPath
from litestar.response import Template

from db.clients import Client, get_client, list_clients
from db.inbox import unread_count
from db.tenancy import tenant_tx
from domain.errors import NotFound
from portal.auth import CurrentViewer, Viewer

SOON = 30  # days before expiry from which the licence page speaks of renewing


def _local_today(client: Client, viewer: Viewer) -> date:
    return datetime.now(UTC).astimezone(ZoneInfo(client.time_zone or viewer.tenant.time_zone)).date()


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
def clients(viewer: CurrentViewer) -> Template:
    """Every client's licence at a glance, for the tenant's staff."""
    if viewer.is_client_user:
        raise NotFound("client users see only their own licence")
    with tenant_tx(viewer.tenant.slug) as tx:
        rows = list_clients(tx)
        unread = unread_count(tx, viewer.user.id)
    today = datetime.now(UTC).astimezone(ZoneInfo(viewer.tenant.time_zone)).date()
    return Template(
        "clients.html",
        context={
            "viewer": viewer, "unread": unread, "clients": rows, "today": today,
            "soon": SOON, "section": "clients",
        },
    )
