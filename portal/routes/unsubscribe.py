"""The List-Unsubscribe link: GET shows what it will do and a confirm button; POST (RFC 8058
one-click, body `List-Unsubscribe=One-Click`) turns that category's email off. No login and
no CSRF token: the signed token scoped to tenant, user and category is the authority."""

from __future__ import annotations

from typing import Any

from litestar import Request, route
from litestar.enums import HttpMethod
from litestar.params import FromPath
from litestar.response import Template
from litestar.status_codes import HTTP_200_OK, HTTP_400_BAD_REQUEST

from db.evidence.audit import set_actor
from db.people.preferences import resolve_preference, unsubscribe_email
from db.people.users import get_user
from db.platform.tenancy import tenant_tx
from domain.audit import Actor, ActorKind
from domain.delivery.unsubscribe import UnsubscribeScope, read_unsubscribe_token
from domain.errors import InvalidInput, NotFound
from domain.messages import N_
from domain.tokens import TokenExpired
from portal.auth import PUBLIC, request_address
from tocsin.core.clock import utcnow
from tocsin.core.keys import SigningKeys

__all__ = ["EXPIRED", "INVALID", "ROUTES", "unsubscribe_link"]

INVALID = (N_("This unsubscribe link is not valid"),
           N_("It may have been copied incompletely. Open the link from your most recent email, "
              "or sign in and change your notification preferences."))
EXPIRED = (N_("This unsubscribe link has expired"),
           N_("Links in emails work for 60 days. Open the link from a more recent email, or sign in "
              "and change your notification preferences."))


def _scope(request: Request[Any, Any, Any], token: str) -> UnsubscribeScope:
    keys = request.app.state.signing_keys
    assert isinstance(keys, SigningKeys)
    return read_unsubscribe_token(keys.unsubscribe.verifying, token, utcnow())


def _refused(error: Exception) -> Template:
    title, message = EXPIRED if isinstance(error, TokenExpired) else INVALID
    return Template("unsubscribe.html", context={"state": "invalid", "title": title, "message": message},
                    status_code=HTTP_400_BAD_REQUEST)


@route("/unsubscribe/{token:str}", http_method=[HttpMethod.GET, HttpMethod.POST], opt={PUBLIC: True},
       sync_to_thread=True, status_code=HTTP_200_OK)
def unsubscribe_link(request: Request[Any, Any, Any], token: FromPath[str]) -> Template:
    """GET shows what the link will do and changes nothing (mail scanners follow links);
    POST acts at once, as RFC 8058 one-click asks, whatever the body carries."""
    try:
        scope = _scope(request, token)
        # The signed link speaks for its recipient: what it changes is theirs.
        set_actor(Actor(ActorKind.USER, f"unsubscribe link of user {scope.user_id}", scope.user_id,
                        request_address(request)))
        with tenant_tx(scope.tenant) as tx:
            if request.method == HttpMethod.POST:
                outcome = unsubscribe_email(tx, scope.user_id, scope.category)
                state = "locked" if outcome.locked_reason else "done"
                reason = outcome.locked_reason
            else:
                if get_user(tx, scope.user_id) is None:
                    raise NotFound("no such user")
                resolved = resolve_preference(tx, scope.user_id, scope.category)
                state = "confirm" if resolved.preference.email else "already"
                state = "locked" if resolved.locked else state
                reason = resolved.lock_reason
    except (InvalidInput, NotFound) as error:
        return _refused(error)
    return Template("unsubscribe.html", context={
        "state": state, "token": token, "category": scope.category, "reason": reason,
    })


ROUTES = [unsubscribe_link]
