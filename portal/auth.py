"""Who is asking: signing in, and the guard that loads the signed-in user on every request.

The tenant always comes from the server-side session, never from the URL or a form after
sign-in; the user is re-read from the tenant's schema each request, so deactivating an
account ends its sessions at their next click, and a client user's licence is re-read with
it, so the Annual License Expired wall stands from the first request after expiry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any, TypeAlias
from urllib.parse import urlencode
from weakref import WeakKeyDictionary

import anyio.to_thread
from litestar import Request
from litestar.di import NamedDependency
from litestar.exceptions import NotAuthorizedException
from litestar.handlers.base import BaseRouteHandler

from db.evidence.audit import set_actor
from db.people.clients import Client, get_client
from db.people.users import User, authenticate, get_user, spend_a_password_check
from db.platform.tenancy import Tenant, TenantTx, tenant_tx
from domain.audit import Actor
from domain.errors import InvalidInput, NotFound
from domain.people.identity import Role
from portal.client_address import client_address
from portal.links import local_path
from portal.sessions import AnyConnection, end_session, session_identity

__all__ = [
    "ANY_QUERY",
    "BEYOND_THE_WALL",
    "PUBLIC",
    "VIEWER",
    "VIEWER_IN_HANDLER",
    "AccessPaused",
    "ClientArchived",
    "CurrentViewer",
    "UnknownParameter",
    "Viewer",
    "admit",
    "check_query",
    "declared_query_names",
    "load_viewer",
    "login_url",
    "provide_viewer",
    "request_address",
    "requested_path",
    "requires_login",
    "safe_next",
    "sign_in",
    "viewer_in",
    "viewer_tx",
]

PUBLIC = "public"  # route opt: reachable without signing in
BEYOND_THE_WALL = "beyond_the_wall"  # route opt: reachable while a client's access is paused
ANY_QUERY = "any_query"  # route opt: query parameters are not checked (static files)
# Route opt: the handler loads the viewer itself, in the tenant transaction it reads in
# (viewer_tx), instead of the guard loading it in one of its own: one hand-off to a worker
# thread and one transaction per request instead of two. For the requests every open page
# repeats (the badge), where that hand-off and transaction were half the work.
VIEWER_IN_HANDLER = "viewer_in_handler"
VIEWER = "tocsin.viewer"  # connection-state key of the signed-in Viewer


@dataclass(frozen=True)
class Viewer:
    """The signed-in person and the tenant whose schema every query of theirs runs in."""

    tenant: Tenant
    user: User
    client: Client | None = None  # a client user's organisation, read on every request

    @property
    def is_client_user(self) -> bool:
        return self.user.role is Role.CLIENT_USER

    @property
    def is_admin(self) -> bool:
        return self.user.role is Role.ADMIN

    @property
    def access_paused(self) -> bool:
        """A client user whose client's licence has expired or closed: the wall stands."""
        return self.client is not None and self.client.status != "active"

    def can_see_client(self, client_id: int) -> bool:
        return not self.is_client_user or self.user.client_id == client_id


class ClientArchived(Exception):
    """A client user, with the right password, whose client organisation is archived: the
    sign-in is refused with a plain message (not the wrong-credentials one) until an
    administrator restores the client."""

    def __init__(self, viewer: Viewer):
        super().__init__("client archived")
        self.viewer = viewer


# How a handler asks for the signed-in viewer: `viewer: CurrentViewer`.
CurrentViewer: TypeAlias = NamedDependency[Viewer]


def sign_in(organisation: str, email: str, password: str) -> Viewer | None:
    """The viewer for these credentials, or None for any reason at all (unknown or suspended
    organisation, unknown email, wrong password, deactivated user). ClientArchived for the
    right credentials of a user whose client organisation is archived."""
    try:
        with tenant_tx(organisation.strip().lower()) as tx:
            user = authenticate(tx, email, password)
            tenant = tx.tenant
            client = None if user is None or user.client_id is None else get_client(tx, user.client_id)
    except (InvalidInput, NotFound):
        # An unknown organisation costs the same argon2 work as a wrong password, so
        # response times do not tell which organisations exist.
        spend_a_password_check(password)
        return None
    if user is None or tenant.status != "active":
        return None
    viewer = Viewer(tenant, user, client)
    if client is not None and client.archived:
        raise ClientArchived(viewer)
    return viewer


def viewer_in(tx: TenantTx, user_id: int) -> Viewer | None:
    """The signed-in user as this transaction reads them, if they may still be signed in (a
    client user of an archived client may not: their session ends at their next request)."""
    user = get_user(tx, user_id)
    if user is None or not user.active or not user.can_sign_in or tx.tenant.status != "active":
        return None
    client = None if user.client_id is None else get_client(tx, user.client_id)
    if client is not None and client.archived:
        return None
    return Viewer(tx.tenant, user, client)


def load_viewer(tenant: str, user_id: int) -> Viewer | None:
    try:
        with tenant_tx(tenant) as tx:
            return viewer_in(tx, user_id)
    except (InvalidInput, NotFound):
        return None


class AccessPaused(Exception):
    """A client user asked for a page behind the Annual License Expired wall."""

    def __init__(self, viewer: Viewer):
        super().__init__("access paused")
        self.viewer = viewer


class UnknownParameter(Exception):
    """A query parameter the route does not take: a clear 400 instead of being ignored."""


# Per handler function, computed on first use. Not per handler object: guards receive a
# fresh copy of the handler on every request, and a multi-method @route handler cannot be
# weakly referenced at all (that raised a TypeError, a 500, for any query on such a route).
_DECLARED_QUERY: WeakKeyDictionary[Callable[..., Any], frozenset[str]] = WeakKeyDictionary()


def declared_query_names(handler: BaseRouteHandler, path_params: frozenset[str]) -> frozenset[str]:
    names = _DECLARED_QUERY.get(handler.fn)
    if names is None:
        model = handler.create_kwargs_model(dict.fromkeys(path_params))  # type: ignore[arg-type]
        names = frozenset(p.field_alias for p in model.expected_query_params)
        _DECLARED_QUERY[handler.fn] = names
    return names


def check_query(connection: AnyConnection, handler: BaseRouteHandler) -> None:
    if handler.opt.get(ANY_QUERY) or not connection.scope.get("query_string"):
        return
    path_params = frozenset(connection.scope.get("path_params", {}))
    unknown = set(connection.query_params) - declared_query_names(handler, path_params)
    if unknown:
        raise UnknownParameter(", ".join(sorted(unknown))[:100])


async def requires_login(connection: AnyConnection, handler: BaseRouteHandler) -> None:
    """App-wide guard: no query parameter a route does not take; every route needs a
    signed-in, active user unless it is marked PUBLIC; and a client user whose licence has
    lapsed meets the wall on every route not marked BEYOND_THE_WALL."""
    check_query(connection, handler)
    if handler.opt.get(PUBLIC):
        return
    identity = session_identity(connection)
    if identity is None:
        admit(connection, handler, None)
    elif not handler.opt.get(VIEWER_IN_HANDLER):
        admit(connection, handler,
              await anyio.to_thread.run_sync(load_viewer, identity.tenant, identity.user_id))


def admit(connection: AnyConnection, handler: BaseRouteHandler, viewer: Viewer | None) -> Viewer:
    """The guard's verdict on a viewer loaded for this request (None: nobody may be)."""
    if viewer is None:
        end_session(connection)
        raise NotAuthorizedException("sign in to continue")
    connection.state[VIEWER] = viewer
    # Whatever this request changes is recorded against them (db/evidence/audit.py).
    set_actor(Actor.user(viewer.user.id, viewer.user.email, request_address(connection)))
    if viewer.access_paused and not handler.opt.get(BEYOND_THE_WALL):
        raise AccessPaused(viewer)
    return viewer


def request_address(connection: AnyConnection) -> str:
    """The client address of a request, as the sign-in throttle and the audit log see it."""
    settings = connection.app.state.portal_settings
    return client_address(connection.client.host if connection.client else None,
                          connection.headers.get("x-forwarded-for"), settings.trusted_proxies)


@contextmanager
def viewer_tx(request: Request[Any, Any, Any]) -> Iterator[tuple[Viewer, TenantTx]]:
    """For a VIEWER_IN_HANDLER route: the signed-in viewer and the tenant transaction they
    were read in, which the handler goes on reading in; the guard's verdict as requires_login
    gives it, raised from here."""
    identity = session_identity(request)
    handler = request.route_handler
    if identity is None:  # requires_login refused it already; never reached
        admit(request, handler, None)
        raise AssertionError("unreachable")
    with ExitStack() as stack:
        try:
            tx: TenantTx | None = stack.enter_context(tenant_tx(identity.tenant))
        except (InvalidInput, NotFound):  # the tenant is gone, or the slug was never valid
            tx = None
        viewer = admit(request, handler, None if tx is None else viewer_in(tx, identity.user_id))
        assert tx is not None
        yield viewer, tx


def provide_viewer(request: Request[Any, Any, Any]) -> Viewer:
    viewer = request.state.get(VIEWER)
    if not isinstance(viewer, Viewer):  # a PUBLIC route asked for a viewer: a programming error
        raise RuntimeError("no signed-in viewer on a public route")
    return viewer


def safe_next(path: str | None) -> str:
    """Where to go after signing in: a path on this site, never another origin."""
    local = local_path(path)
    if local is None or local.startswith("/login"):
        return "/"
    return local


def login_url(next_path: str | None = None) -> str:
    target = safe_next(next_path)
    return "/login" if target == "/" else "/login?" + urlencode({"next": target})


def requested_path(connection: AnyConnection) -> str:
    """The path and query asked for, to come back to after signing in."""
    query = connection.scope.get("query_string", b"").decode("latin-1")
    return connection.scope["path"] + (f"?{query}" if query else "")
