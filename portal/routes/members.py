"""Members, for the tenant's administrators: who has access, inviting people by email,
changing a team member's role and deactivating an account. Accepting an invitation is public:
the signed, single-use link is the credential."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated, Any

import anyio.to_thread
from litestar import Request, get, post
from litestar.enums import RequestEncodingType
from litestar.params import Body, FromPath, QueryParameter
from litestar.response import Redirect, Template
from litestar.status_codes import HTTP_303_SEE_OTHER, HTTP_400_BAD_REQUEST

from db.delivery.inbox import unread_count
from db.evidence.audit import set_actor
from db.people.clients import list_clients
from db.people.members import (
    INVITE_PURPOSE,
    accept_invitation,
    deactivate,
    get_invitation,
    invite_member,
    list_members,
    set_role,
)
from db.platform.tenancy import tenant_tx
from domain.audit import ANONYMOUS
from domain.errors import InvalidInput, NotFound
from domain.messages import N_
from domain.people.identity import parse_whole_number, valid_role
from domain.tokens import verify
from portal.auth import PUBLIC, CurrentViewer, Viewer, request_address
from portal.routes.login import signed_in_redirect
from portal.sessions import session_store, start_session
from tocsin.core.clock import utcnow
from tocsin.core.keys import SigningKeys

__all__ = [
    "DONE",
    "FIELD_MAX_LENGTH",
    "INVITATION_DAYS",
    "AcceptForm",
    "Form",
    "InviteForm",
    "RoleForm",
    "change_role",
    "deactivate_member",
    "invitation_page",
    "invite",
    "join",
    "members",
]

INVITATION_DAYS = 7  # days an invitation link works
FIELD_MAX_LENGTH = 1024  # characters; longer input is refused outright
DONE = {
    "invited": N_("Invitation sent. It works once, for {days} days."),
    "role": N_("Role changed."),
    "deactivated": N_("Account deactivated: they can no longer sign in or receive notices."),
}

Form = Body(media_type=RequestEncodingType.URL_ENCODED)


def _admin(viewer: Viewer) -> Viewer:
    if not viewer.is_admin:
        raise NotFound("only administrators manage members")
    return viewer


def _keys(request: Request[Any, Any, Any]) -> SigningKeys:
    keys = request.app.state.signing_keys
    assert isinstance(keys, SigningKeys)
    return keys


@get("/members", sync_to_thread=True)
def members(
    viewer: CurrentViewer, done: Annotated[str | None, QueryParameter(max_length=20)] = None
) -> Template:
    _admin(viewer)
    with tenant_tx(viewer.tenant.slug) as tx:
        people = list_members(tx)
        clients = list_clients(tx)
        unread = unread_count(tx, viewer.user.id)
    notice = DONE.get(done or "")  # translated by the page, {days} filled there
    return Template(
        "members.html",
        context={"viewer": viewer, "unread": unread, "members": people, "clients": clients,
                 "notice": notice, "invitation_days": INVITATION_DAYS, "section": "members"},
    )


@dataclass
class InviteForm:
    email: str = ""
    role: str = "member"
    client_id: str = ""
    display_name: str = ""


@post("/members/invite", sync_to_thread=True)
def invite(request: Request[Any, Any, Any], viewer: CurrentViewer,
           data: Annotated[InviteForm, Form]) -> Redirect:
    _admin(viewer)
    if any(len(v) > FIELD_MAX_LENGTH for v in (data.email, data.role, data.client_id, data.display_name)):
        raise InvalidInput("that is longer than any email address or name")
    client_id = parse_whole_number(data.client_id, "choose a client organisation from the list") \
        if data.client_id else None
    role = valid_role(data.role)
    with tenant_tx(viewer.tenant.slug) as tx:  # the email is sent once this commits
        invite_member(
            tx, data.email, role, viewer.user.id, key=_keys(request).invitation.current,
            expires_at=utcnow() + timedelta(days=INVITATION_DAYS),
            client_id=client_id,
            display_name=data.display_name,
        )
    return Redirect("/members?done=invited", status_code=HTTP_303_SEE_OTHER)


@dataclass
class RoleForm:
    role: str


@post("/members/{user_id:int}/role", sync_to_thread=True)
def change_role(viewer: CurrentViewer, user_id: FromPath[int], data: Annotated[RoleForm, Form]) -> Redirect:
    _admin(viewer)
    role = valid_role(data.role[:FIELD_MAX_LENGTH])
    with tenant_tx(viewer.tenant.slug) as tx:
        set_role(tx, viewer.user.id, user_id, role)
    return Redirect("/members?done=role", status_code=HTTP_303_SEE_OTHER)


def _deactivate(viewer: Viewer, user_id: int) -> None:
    with tenant_tx(viewer.tenant.slug) as tx:
        deactivate(tx, viewer.user.id, user_id)


@post("/members/{user_id:int}/deactivate")
async def deactivate_member(request: Request[Any, Any, Any], viewer: CurrentViewer,
                            user_id: FromPath[int]) -> Redirect:
    _admin(viewer)
    await anyio.to_thread.run_sync(_deactivate, viewer, user_id)
    # Every session of theirs ends now, on every device, not only at their next click.
    await session_store(request).end_all(viewer.tenant.slug, user_id)
    return Redirect("/members?done=deactivated", status_code=HTTP_303_SEE_OTHER)


def _invitation(request: Request[Any, Any, Any], token: str) -> tuple[str, int]:
    """The tenant and invitation a link names; a tampered or expired link says so."""
    claims = verify(_keys(request).invitation.verifying, INVITE_PURPOSE, token, utcnow())
    tenant, invitation = claims.get("tenant"), claims.get("invitation")
    if not isinstance(tenant, str) or not isinstance(invitation, int):
        raise InvalidInput("This link is not valid.")
    return tenant, invitation


@get("/invitations/{token:str}", opt={PUBLIC: True}, sync_to_thread=True)
def invitation_page(request: Request[Any, Any, Any], token: FromPath[str]) -> Template:
    slug, invitation_id = _invitation(request, token)
    with tenant_tx(slug) as tx:
        invitation = get_invitation(tx, invitation_id)
        organisation = tx.tenant.name
    return Template(
        "invitation.html",
        context={"invitation": invitation, "organisation": organisation, "slug": slug,
                 "token": token, "error": None},
    )


@dataclass
class AcceptForm:
    password: str = ""
    confirm: str = ""


# A path of its own: Litestar 2.25 double-wraps a sync GET whose path a sync POST shares.
@post("/invitations/{token:str}/join", opt={PUBLIC: True}, sync_to_thread=True)
def join(
    request: Request[Any, Any, Any], token: FromPath[str], data: Annotated[AcceptForm, Form]
) -> Template | Redirect:
    slug, invitation_id = _invitation(request, token)
    set_actor(ANONYMOUS.at(request_address(request)))  # member.join names the new member
    error = None
    if data.password != data.confirm:
        error = "The two passwords are different. Type the same password twice."
    try:
        with tenant_tx(slug) as tx:
            invitation = get_invitation(tx, invitation_id)
            organisation = tx.tenant.name
            if error is None:
                user = accept_invitation(tx, invitation_id, data.password)
    except InvalidInput as problem:
        error = f"{str(problem)[:1].upper()}{str(problem)[1:]}."
    if error is not None:
        return Template(
            "invitation.html", status_code=HTTP_400_BAD_REQUEST,
            context={"invitation": invitation, "organisation": organisation, "slug": slug,
                     "token": token, "error": error},
        )
    start_session(request, slug, user.id)
    return signed_in_redirect(request, "/")
