"""Server-side sessions in Redis that hold only who is signed in: a tenant slug and a user id.

Litestar's server-side backend keeps the session id from the cookie for ever; signing in
must mint a new one (or whoever planted the old id before sign-in would share the session),
and an anonymous visitor should not leave a key in Redis, so this backend does both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from litestar.connection import ASGIConnection
from litestar.datastructures import Cookie, MutableScopeHeaders
from litestar.middleware.session.server_side import (
    ServerSideSessionBackend,
    ServerSideSessionConfig,
)
from litestar.types import Empty, Message, ScopeSession

SESSION_COOKIE = "tocsin_session"
SESSION_NAMESPACE = "tocsin-session"  # Redis key prefix of every session
SESSION_MAX_AGE = 8 * 60 * 60  # seconds of inactivity after which a session ends
_ROTATE = "tocsin.rotate_session"  # connection-state flag set by start_session

AnyConnection = ASGIConnection[Any, Any, Any, Any]


@dataclass(frozen=True)
class SessionIdentity:
    tenant: str
    user_id: int


def start_session(connection: AnyConnection, tenant: str, user_id: int) -> None:
    """Sign in: the session holds the tenant and the user, under a freshly minted id."""
    connection.set_session({"tenant": tenant, "user_id": user_id})
    connection.state[_ROTATE] = True


def end_session(connection: AnyConnection) -> None:
    """Sign out: the Redis key is deleted and the cookie expired when the response starts."""
    connection.clear_session()


def session_identity(connection: AnyConnection) -> SessionIdentity | None:
    session = connection.scope.get("session")
    if not isinstance(session, dict):
        return None
    tenant, user_id = session.get("tenant"), session.get("user_id")
    if not isinstance(tenant, str) or not isinstance(user_id, int):
        return None
    return SessionIdentity(tenant, user_id)


class RotatingSessionBackend(ServerSideSessionBackend):
    async def store_in_message(
        self, scope_session: ScopeSession, message: Message, connection: AnyConnection
    ) -> None:
        store = self.config.get_store_from_app(connection.scope["app"])
        headers = MutableScopeHeaders.from_message(message)
        presented = connection.cookies.get(self.config.key)
        if presented in (None, "", "null"):
            presented = None
        if scope_session is Empty or not scope_session:
            if presented is not None:
                await self.delete(presented, store)
                headers.add("Set-Cookie", self._cookie("null", expires=0))
            return
        if connection.state.get(_ROTATE) or presented is None:
            if presented is not None:
                await self.delete(presented, store)
            session_id = self.generate_session_id()
        else:
            session_id = presented
        await self.set(session_id, self.serialize_data(scope_session, connection.scope), store)
        headers.add("Set-Cookie", self._cookie(session_id))

    def _cookie(self, value: str, expires: int | None = None) -> str:
        config = self.config
        return Cookie(
            key=config.key, value=value, path=config.path, domain=config.domain,
            secure=config.secure, httponly=config.httponly, samesite=config.samesite,
            max_age=None if expires is not None else config.max_age, expires=expires,
        ).to_header(header="")


class RotatingSessionConfig(ServerSideSessionConfig):
    _backend_class = RotatingSessionBackend


def session_config(*, secure: bool) -> RotatingSessionConfig:
    return RotatingSessionConfig(
        key=SESSION_COOKIE,
        max_age=SESSION_MAX_AGE,
        secure=secure,
        httponly=True,
        samesite="lax",
        store="sessions",
        # Static files and the health checks never need to know who is asking.
        exclude=["^/static/", "^/(healthz|readyz|metrics)$"],
    )
