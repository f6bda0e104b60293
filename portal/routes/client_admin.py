"""Clients, for the tenant's administrators: adding one, editing its details, correcting its
licence date with a reason, archiving and restoring it, and inviting and deactivating its
users (the members' invitation flow). Every form carries the version of the client it was
read at: a change based on an older one is refused with who changed it, when, and the
current values (db/people/client_admin.py StaleEdit)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Annotated, Any
from zoneinfo import ZoneInfo

import anyio.to_thread
from litestar import Request, get, post
from litestar.enums import RequestEncodingType
from litestar.params import Body, FromPath, QueryParameter
from litestar.response import Redirect, Template
from litestar.status_codes import HTTP_303_SEE_OTHER, HTTP_400_BAD_REQUEST, HTTP_409_CONFLICT

from db.delivery.inbox import unread_count
from db.people.client_admin import (
    ClientDetails,
    StaleEdit,
    archive_client,
    client_user_of,
    client_users,
    correct_expiry,
    edit_client,
    restore_client,
)
from db.people.clients import Client, create_client, get_client, license_events
from db.people.members import deactivate, invite_member
from db.platform.tenancy import TenantTx, tenant_tx
from domain.errors import Conflict, Forbidden, InvalidInput
from domain.people.contacts import valid_contacts
from domain.people.identity import Role, parse_date, parse_whole_number, valid_plan
from portal.auth import CurrentViewer, Viewer
from portal.routes.members import INVITATION_DAYS
from portal.sessions import session_store
from tocsin.core.clock import utcnow
from tocsin.core.keys import SigningKeys

__all__ = [
    "DONE",
    "FIELD_MAX_LENGTH",
    "ROUTES",
    "ClientForm",
    "ExpiryForm",
    "UserForm",
    "VersionForm",
    "archive",
    "change_details",
    "change_expiry",
    "create",
    "deactivate_client_user",
    "invite_client_user",
    "manage_page",
    "new_client_page",
    "restore",
]

FIELD_MAX_LENGTH = 1024  # characters; longer input is refused outright
DONE = {
    "created": "Client added. Its licence reminders follow the expiry date from now on.",
    "details": "Details saved.",
    "expiry": "Expiry date changed. Reminders still waiting for the old date were cancelled.",
    "archived": "Client archived: it is off the list and receives no licence reminders until restored. "
                "Its users were signed out and cannot sign in until then.",
    "restored": "Client restored: its licence reminders follow its expiry date again, and its users "
                "can sign in again.",
    "invited": f"Invitation sent. It works once, for {INVITATION_DAYS} days.",
    "deactivated": "Account deactivated: they can no longer sign in or receive notices.",
}

Form = Body(media_type=RequestEncodingType.URL_ENCODED)


def _admin(viewer: Viewer) -> Viewer:
    if not viewer.is_admin:
        raise Forbidden("only administrators manage client organisations")
    return viewer


def _short(*values: str) -> None:
    if any(len(v) > FIELD_MAX_LENGTH for v in values):
        raise InvalidInput("that is longer than any name, address or reason")


def _version(text: str) -> int:
    return parse_whole_number(text, "reload the page and try again")


@dataclass
class ClientForm:
    name: str = ""
    expires_on: str = ""
    plan: str = "standard"
    time_zone: str = ""
    contact_name: str = ""
    contact_email: str = ""
    contact_phone: str = ""
    version: str = ""

    def details(self) -> ClientDetails:
        _short(*asdict(self).values())
        return ClientDetails(self.name, valid_plan(self.plan), self.time_zone.strip() or None,
                             valid_contacts(self.contact_name, self.contact_email, self.contact_phone))


def _new_page(viewer: Viewer, form: ClientForm, error: str | None = None,
              status: int = 200) -> Template:
    with tenant_tx(viewer.tenant.slug) as tx:
        unread = unread_count(tx, viewer.user.id)
    return Template("client_new.html", status_code=status, context={
        "viewer": viewer, "unread": unread, "section": "clients", "form": form, "error": error})


@get("/clients/new", sync_to_thread=True)
def new_client_page(viewer: CurrentViewer) -> Template:
    _admin(viewer)
    return _new_page(viewer, ClientForm())


@post("/clients/new", sync_to_thread=True)
def create(viewer: CurrentViewer, data: Annotated[ClientForm, Form]) -> Template | Redirect:
    _admin(viewer)
    try:
        details = data.details()
        expires = parse_date(data.expires_on.strip())
        with tenant_tx(viewer.tenant.slug) as tx:
            client = create_client(tx, details.name, expires, details.plan, details.time_zone,
                                   actor="user", contacts=details.contacts)
    except InvalidInput as problem:
        return _new_page(viewer, data, _sentence(problem), HTTP_400_BAD_REQUEST)
    return Redirect(f"/clients/{client.id}/manage?done=created", status_code=HTTP_303_SEE_OTHER)


def _sentence(problem: Exception) -> str:
    text = str(problem)
    return f"{text[:1].upper()}{text[1:]}."


def _manage(viewer: Viewer, client_id: int, *, notice: str | None = None, error: str | None = None,
            typed: dict[str, str] | None = None, status: int = 200) -> Template:
    with tenant_tx(viewer.tenant.slug) as tx:
        client = get_client(tx, client_id)
        users = client_users(tx, client_id)
        history = license_events(tx, client_id)
        unread = unread_count(tx, viewer.user.id)
    return Template("client_manage.html", status_code=status, context={
        "viewer": viewer, "unread": unread, "section": "clients", "client": client,
        "users": users, "history": history[-10:][::-1], "notice": notice, "error": error,
        "typed": typed or {}})


@get("/clients/{client_id:int}/manage", sync_to_thread=True)
def manage_page(viewer: CurrentViewer, client_id: FromPath[int],
                done: Annotated[str | None, QueryParameter(max_length=20)] = None) -> Template:
    _admin(viewer)
    return _manage(viewer, client_id, notice=DONE.get(done or ""))


def _refused(viewer: Viewer, client_id: int, problem: Exception, typed: dict[str, str]) -> Template:
    """The page again, with what was wrong: a stale edit shows the current values (the
    typed ones are dropped: they were based on an old version)."""
    if isinstance(problem, Conflict) and not isinstance(problem, StaleEdit):  # an account exists
        return _manage(viewer, client_id, error=_sentence(problem), typed=typed,
                       status=HTTP_409_CONFLICT)
    if isinstance(problem, StaleEdit):
        return _manage(viewer, client_id, error=_sentence(problem), status=HTTP_409_CONFLICT)
    return _manage(viewer, client_id, error=_sentence(problem), typed=typed,
                   status=HTTP_400_BAD_REQUEST)


def _done(client_id: int, what: str) -> Redirect:
    return Redirect(f"/clients/{client_id}/manage?done={what}", status_code=HTTP_303_SEE_OTHER)


@post("/clients/{client_id:int}/details", sync_to_thread=True)
def change_details(viewer: CurrentViewer, client_id: FromPath[int],
                   data: Annotated[ClientForm, Form]) -> Template | Redirect:
    _admin(viewer)
    try:
        details = data.details()
        with tenant_tx(viewer.tenant.slug) as tx:
            edit_client(tx, client_id, _version(data.version), details)
    except (InvalidInput, StaleEdit) as problem:
        return _refused(viewer, client_id, problem, asdict(data))
    return _done(client_id, "details")


@dataclass
class ExpiryForm:
    expires_on: str = ""
    reason: str = ""
    version: str = ""


def _local_today(viewer: Viewer, client: Client) -> Any:
    return utcnow().astimezone(ZoneInfo(client.time_zone or viewer.tenant.time_zone)).date()


@post("/clients/{client_id:int}/expiry", sync_to_thread=True)
def change_expiry(viewer: CurrentViewer, client_id: FromPath[int],
                  data: Annotated[ExpiryForm, Form]) -> Template | Redirect:
    _admin(viewer)
    try:
        _short(data.expires_on, data.reason, data.version)
        new_date = parse_date(data.expires_on.strip())
        with tenant_tx(viewer.tenant.slug) as tx:
            client = get_client(tx, client_id)
            correct_expiry(tx, client_id, _version(data.version), new_date, data.reason,
                           _local_today(viewer, client))
    except (InvalidInput, StaleEdit) as problem:
        return _refused(viewer, client_id, problem, {"expires_on": data.expires_on, "reason": data.reason})
    return _done(client_id, "expiry")


@dataclass
class VersionForm:
    version: str = ""


@post("/clients/{client_id:int}/archive")
async def archive(request: Request[Any, Any, Any], viewer: CurrentViewer, client_id: FromPath[int],
                  data: Annotated[VersionForm, Form]) -> Template | Redirect:
    """Archived, the client's users can no longer sign in (portal.auth.sign_in), and their
    sessions end now, on every device; restoring the client lets them sign in again."""
    answer = await anyio.to_thread.run_sync(_archive_move, viewer, client_id, data, archive_client,
                                            "archived")
    if isinstance(answer, Redirect):
        store = session_store(request)
        for user_id in await anyio.to_thread.run_sync(_client_user_ids, viewer, client_id):
            await store.end_all(viewer.tenant.slug, user_id)
    return answer


def _client_user_ids(viewer: Viewer, client_id: int) -> list[int]:
    with tenant_tx(viewer.tenant.slug) as tx:
        return [user.id for user in client_users(tx, client_id)]


@post("/clients/{client_id:int}/restore", sync_to_thread=True)
def restore(viewer: CurrentViewer, client_id: FromPath[int],
            data: Annotated[VersionForm, Form]) -> Template | Redirect:
    return _archive_move(viewer, client_id, data, restore_client, "restored")


def _archive_move(viewer: Viewer, client_id: int, data: VersionForm,
                  move: Callable[[TenantTx, int, int], object], done: str) -> Template | Redirect:
    """Archive or restore: admins only, guarded by the version the form was based on."""
    _admin(viewer)
    try:
        with tenant_tx(viewer.tenant.slug) as tx:
            move(tx, client_id, _version(data.version[:20]))
    except (InvalidInput, StaleEdit) as problem:
        return _refused(viewer, client_id, problem, {})
    return _done(client_id, done)


@dataclass
class UserForm:
    email: str = ""
    display_name: str = ""


@post("/clients/{client_id:int}/users/invite", sync_to_thread=True)
def invite_client_user(request: Request[Any, Any, Any], viewer: CurrentViewer, client_id: FromPath[int],
                       data: Annotated[UserForm, Form]) -> Template | Redirect:
    """The members' invitation, as a user of this client organisation."""
    _admin(viewer)
    keys = request.app.state.signing_keys
    assert isinstance(keys, SigningKeys)
    try:
        _short(data.email, data.display_name)
        with tenant_tx(viewer.tenant.slug) as tx:
            get_client(tx, client_id)
            invite_member(tx, data.email, Role.CLIENT_USER, viewer.user.id, key=keys.invitation.current,
                          expires_at=utcnow() + timedelta(days=INVITATION_DAYS), client_id=client_id,
                          display_name=data.display_name)
    except (InvalidInput, Conflict) as problem:
        return _refused(viewer, client_id, problem, {"invite_email": data.email,
                                                     "invite_name": data.display_name})
    return _done(client_id, "invited")


def _deactivate(viewer: Viewer, client_id: int, user_id: int) -> None:
    with tenant_tx(viewer.tenant.slug) as tx:
        get_client(tx, client_id)
        client_user_of(tx, client_id, user_id)  # another client's user, or staff: 404
        deactivate(tx, viewer.user.id, user_id)


@post("/clients/{client_id:int}/users/{user_id:int}/deactivate")
async def deactivate_client_user(request: Request[Any, Any, Any], viewer: CurrentViewer,
                                 client_id: FromPath[int], user_id: FromPath[int]) -> Redirect:
    _admin(viewer)
    await anyio.to_thread.run_sync(_deactivate, viewer, client_id, user_id)
    await session_store(request).end_all(viewer.tenant.slug, user_id)  # every device, now
    return _done(client_id, "deactivated")


ROUTES = [new_client_page, create, manage_page, change_details, change_expiry, archive, restore,
          invite_client_user, deactivate_client_user]
