"""Server-side sessions in Redis that hold only who is signed in: a tenant slug, a user id and
when they signed in.

What Litestar's server-side backend does not do, and this one does:
- a fresh id at every sign-in (whoever planted an id before sign-in must not share the
  session), and no Redis key for an anonymous visitor;
- the cookie carries the id signed with the session key (tocsin.core.keys; previous
  secrets still verify), so an id from another deployment or a guessed one is never looked up;
- keys under the deployment's namespace (``{DRAMATIQ_NAMESPACE}:session:``), so two
  deployments sharing a Redis never accept each other's cookies;
- two lifetimes: idle (slides with each request) and absolute (from sign-in, never slides);
- an index of each user's session ids, so sign-out and deactivation end all of them;
- a request that loaded a session only ever extends the existing key (EXPIRE / SET XX, both
  atomic no-ops on a missing key): a request in flight during sign-out cannot bring the
  session back;
- the idle lifetime slides in steps (refresh_step): a read (GET) whose session was refreshed
  less than a step ago sends no EXPIRE and no Set-Cookie. Polling pages ask every few
  seconds, and that write and that cookie were a fifth of the badge's cost.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass
from typing import Any

from litestar.connection import ASGIConnection
from litestar.datastructures import Cookie, MutableScopeHeaders
from litestar.middleware.session.server_side import (
    ServerSideSessionBackend,
    ServerSideSessionConfig,
)
from litestar.types import Empty, Message, ScopeSession
from redis.asyncio import Redis as AsyncRedis

from tocsin.core.clock import timestamp
from tocsin.core.keys import KeyRing, Purpose

__all__ = [
    "MAX_REFRESH_STEP_SECONDS",
    "MUST_ENROL",
    "PENDING_USER",
    "SESSION_COOKIE",
    "SESSION_ID_BYTES",
    "STORE",
    "AnyConnection",
    "LoadedSession",
    "SessionIdentity",
    "SessionStore",
    "SignedSessionBackend",
    "SignedSessionConfig",
    "end_session",
    "must_enrol",
    "pending_sign_in",
    "session_config",
    "session_identity",
    "session_store",
    "start_pending_session",
    "start_session",
]

SESSION_COOKIE = "tocsin_session"
SESSION_ID_BYTES = 32  # random bytes of a session id
_ROTATE = "tocsin.rotate_session"  # connection-state flag set by start_session
_LOADED = "tocsin.loaded_session"  # connection state: the LoadedSession this request read
MAX_REFRESH_STEP_SECONDS = 60  # seconds; an idle session may end this much early, at most
# Requests that may skip a refresh not yet due: reads, which polling pages repeat. An action
# always writes back, so its answer says (with an expired cookie) when the session ended
# while it ran.
_READS = frozenset({"GET", "HEAD"})
STORE = "session_store"  # app-state key of the SessionStore
PENDING_USER = "pending_user_id"  # session key: a sign-in waiting for its two-factor code
MUST_ENROL = "must_enrol"  # session key: signed in, but may only set up two-factor

AnyConnection = ASGIConnection[Any, Any, Any, Any]


@dataclass(frozen=True)
class LoadedSession:
    session_id: str
    data: dict[str, Any]
    ttl_seconds: int  # what Redis had left of the key's lifetime when it was read
    signed_with_current_key: bool  # else its cookie is signed anew, refresh due or not


@dataclass(frozen=True)
class SessionIdentity:
    tenant: str
    user_id: int


class SessionStore:
    """The sessions of one deployment in Redis, and the index of each user's sessions."""

    def __init__(self, redis: AsyncRedis, namespace: str, keys: KeyRing, *,
                 idle_seconds: int, absolute_seconds: int):
        self.redis = redis
        self.prefix = f"{namespace}:session"
        self.keys = keys
        self.idle_seconds = idle_seconds  # seconds of inactivity after which a session ends
        self.absolute_seconds = absolute_seconds  # seconds after sign-in when it ends regardless
        # seconds: a session is refreshed once its key has this much less left than a refresh
        # would give it; a tenth of the idle lifetime, so a short one still slides.
        self.refresh_step = min(MAX_REFRESH_STEP_SECONDS, idle_seconds // 10)

    def _key(self, session_id: str) -> str:
        return f"{self.prefix}:{session_id}"

    def _index(self, tenant: str, user_id: int) -> str:
        return f"{self.prefix}-index:{tenant}:{user_id}"

    def _mac(self, key: bytes, session_id: str) -> str:
        digest = hmac.new(key, f"{Purpose.SESSION.value}.{session_id}".encode(), hashlib.sha256)
        return base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode("ascii")

    def cookie_value(self, session_id: str) -> str:
        return f"{session_id}.{self._mac(self.keys.current, session_id)}"

    def verified_id(self, cookie: str | None) -> tuple[str, bool] | None:
        """The session id a cookie carries, if one of our keys signed it, and whether that
        was the current key (a cookie signed with a previous one is signed anew)."""
        if not cookie or cookie.count(".") != 1 or len(cookie) > 200:
            return None
        session_id, mac = cookie.split(".")
        for key in self.keys.verifying:
            if hmac.compare_digest(mac, self._mac(key, session_id)):
                return session_id, key == self.keys.current
        return None

    def _ttl(self, data: dict[str, Any], now: float) -> int:
        """Seconds this session may live from now: the idle lifetime, never past the absolute."""
        started = data.get("started")
        left = (float(started) + self.absolute_seconds - now) if isinstance(started, int | float) else 0
        return int(min(self.idle_seconds, left))

    async def load(self, session_id: str, *, signed_with_current_key: bool) -> LoadedSession | None:
        async with self.redis.pipeline(transaction=False) as pipe:  # one round trip
            pipe.get(self._key(session_id))
            pipe.ttl(self._key(session_id))
            raw, ttl = await pipe.execute()
        if raw is None:
            return None
        try:
            data = json.loads(raw)
        except ValueError:
            data = None
        if not isinstance(data, dict) or self._ttl(data, timestamp()) <= 0:
            await self.redis.delete(self._key(session_id))
            return None
        return LoadedSession(session_id, data, int(ttl), signed_with_current_key)

    async def create(self, data: dict[str, Any]) -> tuple[str, int]:
        """A new session for a sign-in: its id and its lifetime in seconds."""
        session_id = secrets.token_hex(SESSION_ID_BYTES)
        data = {**data, "started": int(timestamp())}
        ttl = min(self.idle_seconds, self.absolute_seconds)
        # A sign-in waiting for its second step is indexed under its user too: signing out
        # everywhere, or deactivation, ends it with the others.
        user_id = data.get("user_id", data.get(PENDING_USER))
        index = self._index(str(data["tenant"]), int(str(user_id)))
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.set(self._key(session_id), json.dumps(data), ex=ttl)
            pipe.sadd(index, session_id)
            pipe.expire(index, self.absolute_seconds)
            await pipe.execute()
        return session_id, ttl

    def is_fresh(self, loaded: LoadedSession, data: dict[str, Any]) -> bool:
        """Nothing to write back: the handler left the session as it was, its cookie is
        signed with the current key, and its key has no more than a refresh would give it and
        less than a step short of that (so the cookie, refreshed with the key, matches too)."""
        wanted = self._ttl(loaded.data, timestamp())
        return (data == loaded.data and loaded.signed_with_current_key
                and wanted - self.refresh_step <= loaded.ttl_seconds <= wanted)

    async def refresh(self, loaded: LoadedSession, data: dict[str, Any]) -> int | None:
        """Slide the idle lifetime (never past the absolute one) of a session that still
        exists; None if it has ended meanwhile (signed out by another request)."""
        ttl = self._ttl(loaded.data, timestamp())
        if ttl <= 0:
            return None
        key = self._key(loaded.session_id)
        if data == loaded.data:
            kept = bool(await self.redis.expire(key, ttl))
        else:  # the handler changed what the session holds: replace it, only if it exists
            replaced = json.dumps({**data, "started": loaded.data["started"]})
            kept = bool(await self.redis.set(key, replaced, ex=ttl, xx=True))
        return ttl if kept else None

    async def delete(self, session_id: str) -> None:
        await self.redis.delete(self._key(session_id))

    async def end_all(self, tenant: str, user_id: int) -> int:
        """End every session of this user (sign-out, deactivation); how many were live."""
        index = self._index(tenant, user_id)
        ended = 0
        while True:
            # SPOP, not SMEMBERS + DEL: an id added meanwhile is popped in a later round.
            ids = await self.redis.spop(index, 100)
            if not ids:
                return ended
            names = [self._key(i.decode() if isinstance(i, bytes) else str(i)) for i in ids]
            ended += int(await self.redis.delete(*names))


def session_store(connection: AnyConnection) -> SessionStore:
    store = connection.scope["app"].state[STORE]
    assert isinstance(store, SessionStore)
    return store


def start_session(connection: AnyConnection, tenant: str, user_id: int, *,
                  must_enrol: bool = False) -> None:
    """Sign in: the session holds the tenant and the user, under a freshly minted id;
    ``must_enrol``: an admin whose organisation requires two-factor, who has none yet, may
    only set it up (portal.auth.requires_login)."""
    data: dict[str, Any] = {"tenant": tenant, "user_id": user_id}
    if must_enrol:
        data[MUST_ENROL] = True
    connection.set_session(data)
    connection.state[_ROTATE] = True


def start_pending_session(connection: AnyConnection, tenant: str, user_id: int,
                          **details: str | int) -> None:
    """The first step of a sign-in passed, the second (a two-factor code) is still to come:
    the session names the user under another key, so nothing reads it as signed in."""
    connection.set_session({"tenant": tenant, PENDING_USER: user_id, **details})
    connection.state[_ROTATE] = True


def pending_sign_in(connection: AnyConnection) -> dict[str, Any] | None:
    """The session of a sign-in waiting for its second step, or None."""
    session = connection.scope.get("session")
    if (not isinstance(session, dict) or not isinstance(session.get("tenant"), str)
            or not isinstance(session.get(PENDING_USER), int)):
        return None
    return session


def end_session(connection: AnyConnection) -> None:
    """This session ends: the Redis key is deleted and the cookie expired when the response
    starts (a guard finding the user gone; sign-out also calls end_all)."""
    connection.clear_session()


def session_identity(connection: AnyConnection) -> SessionIdentity | None:
    session = connection.scope.get("session")
    if not isinstance(session, dict):
        return None
    tenant, user_id = session.get("tenant"), session.get("user_id")
    if not isinstance(tenant, str) or not isinstance(user_id, int):
        return None
    return SessionIdentity(tenant, user_id)


def must_enrol(connection: AnyConnection) -> bool:
    session = connection.scope.get("session")
    return isinstance(session, dict) and session.get(MUST_ENROL) is True


class SignedSessionBackend(ServerSideSessionBackend):
    async def load_from_connection(self, connection: AnyConnection) -> dict[str, Any]:
        store = session_store(connection)
        verified = store.verified_id(connection.cookies.get(self.config.key))
        if verified is None:
            return {}
        loaded = await store.load(verified[0], signed_with_current_key=verified[1])
        if loaded is None:
            return {}
        connection.state[_LOADED] = loaded
        return dict(loaded.data)

    async def store_in_message(
        self, scope_session: ScopeSession, message: Message, connection: AnyConnection
    ) -> None:
        store = session_store(connection)
        loaded: LoadedSession | None = connection.state.get(_LOADED)
        if (loaded is not None and connection.scope.get("method") in _READS
                and isinstance(scope_session, dict) and scope_session
                and not connection.state.get(_ROTATE) and store.is_fresh(loaded, scope_session)):
            return  # the key and the cookie were refreshed less than a step ago
        headers = MutableScopeHeaders.from_message(message)
        presented = connection.cookies.get(self.config.key) not in (None, "", "null")
        if scope_session is Empty or not isinstance(scope_session, dict) or not scope_session:
            if loaded is not None:
                await store.delete(loaded.session_id)
            if presented:
                headers.add("Set-Cookie", self._cookie("null", expires=0))
            return
        if connection.state.get(_ROTATE) or loaded is None:
            if loaded is not None:
                await store.delete(loaded.session_id)
            session_id, ttl = await store.create(dict(scope_session))
        else:
            session_id = loaded.session_id
            refreshed = await store.refresh(loaded, dict(scope_session))
            if refreshed is None:  # signed out while this request ran: it stays signed out
                headers.add("Set-Cookie", self._cookie("null", expires=0))
                return
            ttl = refreshed
        headers.add("Set-Cookie", self._cookie(store.cookie_value(session_id), max_age=ttl))

    def _cookie(self, value: str, *, expires: int | None = None, max_age: int | None = None) -> str:
        config = self.config
        return Cookie(
            key=config.key, value=value, path=config.path, domain=config.domain,
            secure=config.secure, httponly=config.httponly, samesite=config.samesite,
            max_age=max_age, expires=expires,
        ).to_header(header="")


class SignedSessionConfig(ServerSideSessionConfig):
    _backend_class = SignedSessionBackend


def session_config(*, secure: bool, idle_seconds: int) -> SignedSessionConfig:
    return SignedSessionConfig(
        key=SESSION_COOKIE,
        max_age=idle_seconds,
        secure=secure,
        httponly=True,
        samesite="lax",
        # Static files and the health checks never need to know who is asking.
        exclude=["^/static/", "^/(healthz|readyz|metrics)$"],
    )
