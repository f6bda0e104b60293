"""API keys, for the tenant's administrators: the keys a host product uses for the events
API, created (the key is shown once, in the answer to the form that made it, and never
again: only its hash is kept), listed with when each was last used, and revoked after a
confirmation. The same use cases as `tocsin apikey create|list|revoke` (db/events/api_keys.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated

from litestar import get, post
from litestar.enums import RequestEncodingType
from litestar.params import Body, FromPath, QueryParameter
from litestar.plugins.htmx import HTMXRequest
from litestar.response import Redirect, Template
from litestar.status_codes import HTTP_201_CREATED, HTTP_303_SEE_OTHER

from db.delivery.inbox import unread_count
from db.events.api_keys import ApiKey, create_api_key, list_api_keys, revoke_api_key
from db.platform.tenancy import tenant_tx
from domain.errors import Forbidden, InvalidInput, NotFound
from domain.messages import N_
from portal.auth import CurrentViewer, Viewer
from tocsin.core.clock import utcnow

__all__ = [
    "DONE",
    "LABEL_MAX_LENGTH",
    "ROUTES",
    "CreateForm",
    "Form",
    "api_keys",
    "confirm_revoke",
    "create_key",
    "revoke_key",
]

LABEL_MAX_LENGTH = 200  # characters of a key's label (valid_name refuses longer)
DONE = {"revoked": N_("Key revoked: requests that present it are refused from now on.")}

Form = Body(media_type=RequestEncodingType.URL_ENCODED)


def _admin(viewer: Viewer) -> Viewer:
    if not viewer.is_admin:
        raise Forbidden("only administrators manage API keys; ask one of them for a key")
    return viewer


def _page(request: HTMXRequest, viewer: Viewer, *, created: tuple[ApiKey, str] | None = None,
          notice: str | None = None, status_code: int = 200) -> Template:
    keys = list_api_keys(viewer.tenant.slug)
    with tenant_tx(viewer.tenant.slug) as tx:
        unread = unread_count(tx, viewer.user.id)
    return Template(
        "api_keys.html", status_code=status_code,
        context={"viewer": viewer, "unread": unread, "section": "api_keys",
                 "keys": list(reversed(keys)),  # newest first
                 "live": sum(1 for k in keys if k.revoked_at is None),
                 "created": None if created is None else created[0],
                 "secret": None if created is None else created[1], "notice": notice,
                 "base_url": request.app.state.settings.portal_url,
                 "example_due": (utcnow().date() + timedelta(days=30)).isoformat()},
    )


@get("/api-keys", sync_to_thread=True)
def api_keys(request: HTMXRequest, viewer: CurrentViewer,
             done: Annotated[str | None, QueryParameter(max_length=20)] = None) -> Template:
    _admin(viewer)
    return _page(request, viewer, notice=DONE.get(done or ""))


@dataclass
class CreateForm:
    label: str = ""


# Paths of their own: Litestar 2.25 double-wraps a sync GET whose path a sync POST shares.
@post("/api-keys/new", sync_to_thread=True)
def create_key(request: HTMXRequest, viewer: CurrentViewer,
               data: Annotated[CreateForm, Form]) -> Template:
    """The key is in this answer only: never in a redirect's address, a session or a log.
    htmx swaps the keys section; without JavaScript the whole page comes back."""
    _admin(viewer)
    if len(data.label) > LABEL_MAX_LENGTH:
        raise InvalidInput(f"a key's label is at most {LABEL_MAX_LENGTH} characters")
    if not data.label.strip():
        raise InvalidInput("give the key a label that says what uses it, such as 'case system'")
    created = create_api_key(viewer.tenant.slug, data.label)
    page = _page(request, viewer, created=created, status_code=HTTP_201_CREATED)
    if request.htmx:
        return Template("_api_keys.html", context=page.context, status_code=HTTP_201_CREATED)
    return page


def _key_of(viewer: Viewer, key_id: int) -> ApiKey:
    for key in list_api_keys(viewer.tenant.slug):
        if key.id == key_id:
            return key
    raise NotFound(f"this organisation has no API key {key_id}")


@get("/api-keys/{key_id:int}/confirm-revoke", sync_to_thread=True)
def confirm_revoke(request: HTMXRequest, viewer: CurrentViewer, key_id: FromPath[int]) -> Template:
    """The confirmation step: inline in the key's row with htmx, a page of its own without."""
    _admin(viewer)
    key = _key_of(viewer, key_id)
    if request.htmx:
        return Template("_api_key_revoke.html", context={"key": key})
    with tenant_tx(viewer.tenant.slug) as tx:
        unread = unread_count(tx, viewer.user.id)
    return Template("api_key_revoke.html",
                    context={"viewer": viewer, "unread": unread, "section": "api_keys", "key": key})


@post("/api-keys/{key_id:int}/revoke", sync_to_thread=True)
def revoke_key(viewer: CurrentViewer, key_id: FromPath[int]) -> Redirect:
    _admin(viewer)
    revoke_api_key(viewer.tenant.slug, key_id)
    return Redirect("/api-keys?done=revoked", status_code=HTTP_303_SEE_OTHER)


ROUTES = [api_keys, create_key, confirm_revoke, revoke_key]
