"""The inbox: the feed, its older pages, what is newer than the page, the unread badge, and
what a reader does with a notification (read, unread, archive, acknowledge, mark all read).

The full page and the htmx fragments render the same partials (_feed, _item, _badge); every
action's htmx answer carries the badge out of band, so the count never lags the page.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any

from litestar import Request, get, post
from litestar.params import FromPath, QueryParameter
from litestar.plugins.htmx import HTMXRequest
from litestar.response import Redirect, Template
from litestar.status_codes import HTTP_200_OK, HTTP_303_SEE_OTHER

from db.delivery.inbox import (
    Cursor,
    InboxItem,
    acknowledge,
    archive,
    inbox_page,
    mark_all_read,
    mark_read,
    mark_unread,
    newer_items,
    unread_count,
)
from db.platform.tenancy import TenantTx, tenant_tx
from domain.errors import InvalidInput, NotFound
from portal.auth import VIEWER_IN_HANDLER, CurrentViewer, Viewer, viewer_tx

__all__ = [
    "ACTIONS",
    "CreatedAt",
    "CursorId",
    "ItemAction",
    "change_notification",
    "inbox",
    "newer_notifications",
    "older_notifications",
    "read_everything",
    "unread_badge",
]

CreatedAt = Annotated[datetime | None, QueryParameter(name="created_at", required=False)]
CursorId = Annotated[int | None, QueryParameter(name="id", required=False, ge=1)]

ItemAction = Callable[[TenantTx, int, int], InboxItem]
ACTIONS: dict[str, ItemAction] = {
    "read": mark_read,
    "unread": mark_unread,
    "archive": archive,
    "acknowledge": acknowledge,
}


def _cursor(created_at: datetime | None, cursor_id: int | None) -> Cursor | None:
    if created_at is None and cursor_id is None:
        return None
    if created_at is None or cursor_id is None or created_at.tzinfo is None:
        raise InvalidInput("that page of the inbox does not exist; start again from the newest")
    return Cursor(created_at, cursor_id)


def _feed_context(viewer: Viewer, after: Cursor | None) -> dict[str, object]:
    with tenant_tx(viewer.tenant.slug) as tx:
        items, next_cursor = inbox_page(tx, viewer.user.id, after)
        unread = unread_count(tx, viewer.user.id)
    newest = _newest(items) if after is None else None
    return {
        "viewer": viewer, "items": items, "next_cursor": next_cursor, "unread": unread,
        "paged": after is not None, "cursor": newest,
    }


def _newest(items: list[InboxItem]) -> Cursor | None:
    return Cursor(items[0].created_at, items[0].id) if items else None


@get("/", sync_to_thread=True)
def inbox(viewer: CurrentViewer, created_at: CreatedAt = None, cursor_id: CursorId = None) -> Template:
    context = _feed_context(viewer, _cursor(created_at, cursor_id))
    return Template("inbox.html", context=context | {"section": "inbox"})


@get("/inbox/feed", sync_to_thread=True)
def older_notifications(
    request: HTMXRequest, viewer: CurrentViewer, created_at: CreatedAt = None, cursor_id: CursorId = None
) -> Template | Redirect:
    """The next page of the feed as list items, appended in place of the 'Older' control."""
    after = _cursor(created_at, cursor_id)
    if not request.htmx:
        return Redirect(
            "/" + (f"?{request.url.query}" if request.url.query else ""),
            status_code=HTTP_303_SEE_OTHER,
        )
    return Template("_feed.html", context=_feed_context(viewer, after))


@get("/inbox/newer", sync_to_thread=True)
def newer_notifications(
    request: HTMXRequest, viewer: CurrentViewer, created_at: CreatedAt = None, cursor_id: CursorId = None
) -> Template | Redirect:
    """What arrived after the newest notification the page shows (the cursor it sends): put
    at the top of the feed, the page's cursor moved past it and the badge refreshed, all out
    of band. The page asks on every poll and, while its event stream is open, as soon as
    the stream says something arrived; either way the items come from here."""
    if not request.htmx:
        return Redirect("/", status_code=HTTP_303_SEE_OTHER)
    than = _cursor(created_at, cursor_id)
    with tenant_tx(viewer.tenant.slug) as tx:
        items = newer_items(tx, viewer.user.id, than)
        unread = unread_count(tx, viewer.user.id)
    return Template("_feed_newer.html", context={
        "viewer": viewer, "items": items, "cursor": _newest(items) or than, "unread": unread,
        "was_empty": than is None, "badge_oob": True,
    })


@get("/inbox/badge", opt={VIEWER_IN_HANDLER: True}, sync_to_thread=True)
def unread_badge(request: Request[Any, Any, Any]) -> Template:
    """Asked by every open page every INBOX_POLL_SECONDS: the viewer and the count are read
    in one transaction, on one worker thread (portal.auth.VIEWER_IN_HANDLER)."""
    with viewer_tx(request) as (viewer, tx):
        unread = unread_count(tx, viewer.user.id)
    return Template("_badge.html", context={"unread": unread})


@post("/notifications/{notification_id:int}/{action:str}", sync_to_thread=True,
      status_code=HTTP_200_OK)
def change_notification(
    request: HTMXRequest, viewer: CurrentViewer, notification_id: FromPath[int], action: FromPath[str]
) -> Template | Redirect:
    """Read, unread, archive or acknowledge one of the viewer's notifications: htmx gets the
    item re-rendered (nothing, once archived) plus the badge out of band; a plain form post
    goes back to the inbox."""
    change = ACTIONS.get(action)
    if change is None:
        raise NotFound(f"no action {action!r}")
    with tenant_tx(viewer.tenant.slug) as tx:
        item = change(tx, viewer.user.id, notification_id)
        unread = unread_count(tx, viewer.user.id)
    if not request.htmx:
        return Redirect("/", status_code=HTTP_303_SEE_OTHER)
    return Template(
        "_read.html", context={"viewer": viewer, "item": item, "unread": unread, "badge_oob": True}
    )


@post("/inbox/read-all", sync_to_thread=True, status_code=HTTP_200_OK)
def read_everything(request: HTMXRequest, viewer: CurrentViewer) -> Template | Redirect:
    with tenant_tx(viewer.tenant.slug) as tx:
        mark_all_read(tx, viewer.user.id)
    if not request.htmx:
        return Redirect("/", status_code=HTTP_303_SEE_OTHER)
    context = _feed_context(viewer, None)
    return Template("_feed_page.html", context=context | {"badge_oob": True})
