"""Signing in and out."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Annotated, Any

import anyio.to_thread
from litestar import Request, get, post
from litestar.datastructures import Cookie
from litestar.enums import RequestEncodingType
from litestar.params import Body, QueryParameter
from litestar.response import Redirect, Template
from litestar.status_codes import (
    HTTP_303_SEE_OTHER,
    HTTP_400_BAD_REQUEST,
    HTTP_403_FORBIDDEN,
    HTTP_429_TOO_MANY_REQUESTS,
)

from db.evidence.audit import record_audit, record_audit_alone
from db.people.users import get_user
from db.platform.tenancy import tenant_tx
from domain.audit import Actor, ActorKind
from domain.errors import InvalidInput, NotFound
from portal.auth import PUBLIC, ClientArchived, request_address, safe_next, sign_in
from portal.ratelimit import LoginThrottle, PasswordChecks
from portal.sessions import end_session, session_identity, session_store, start_session

__all__ = [
    "CLIENT_ARCHIVED",
    "CSRF_COOKIE",
    "FIELD_MAX_LENGTH",
    "WRONG_CREDENTIALS",
    "LoginForm",
    "login",
    "login_page",
    "logout",
    "signed_in_redirect",
]

CSRF_COOKIE = "tocsin_csrf"  # the name portal.app gives Litestar's CSRF cookie

WRONG_CREDENTIALS = (
    "The email or password is wrong. Check them, and your organisation name, and try again."
)
# Said only to someone who typed the right password: it tells nothing to a guesser.
CLIENT_ARCHIVED = (
    "Your organisation's access to this portal has been archived, so you cannot sign in. "
    "If you think this is a mistake, ask the people who manage your account to restore it."
)
FIELD_MAX_LENGTH = 1024  # characters; anything longer is not a real login


@dataclass
class LoginForm:
    organisation: str = ""
    email: str = ""
    password: str = ""
    next: str = "/"


def _login_page(
    form: LoginForm, *, error: str | None = None, notice: str | None = None, status: int = 200,
    headers: dict[str, str] | None = None,
) -> Template:
    return Template(
        "login.html",
        context={
            "organisation": form.organisation.strip(),
            "email": form.email.strip(),
            "next": safe_next(form.next),
            "error": error,
            "notice": notice,
        },
        status_code=status,
        headers=headers,
    )


@get("/login", opt={PUBLIC: True}, sync_to_thread=False)
def login_page(
    next_path: Annotated[str, QueryParameter(name="next")] = "/",
    signed_out: Annotated[bool, QueryParameter(name="signed_out")] = False,
) -> Template:
    notice = "You have signed out." if signed_out else None
    return _login_page(LoginForm(next=next_path), notice=notice)


@post("/login", opt={PUBLIC: True}, sync_to_thread=True)
def login(
    request: Request[Any, Any, Any],
    data: Annotated[LoginForm, Body(media_type=RequestEncodingType.URL_ENCODED)],
) -> Template | Redirect:
    fields = (data.organisation, data.email, data.password)
    if not all(fields) or any(len(f) > FIELD_MAX_LENGTH for f in fields):
        return _login_page(
            data, error="Enter your organisation, email and password.", status=HTTP_400_BAD_REQUEST
        )
    throttle: LoginThrottle = request.app.state.login_throttle
    checks: PasswordChecks = request.app.state.password_checks
    address = request_address(request)
    # Counted before any password work, in one step with the check: concurrent guesses
    # cannot all slip under the limit together.
    refusal = throttle.reserve(data.organisation, data.email, address)
    if refusal is not None:
        _refused(data, address, "too many failed attempts")
        minutes = f"{refusal.minutes} minute{'s' if refusal.minutes != 1 else ''}"
        return _login_page(
            data, status=HTTP_429_TOO_MANY_REQUESTS, headers={"Retry-After": str(refusal.retry_after)},
            error=f"Too many failed sign-in attempts. For your security, signing in is paused "
                  f"for a while: try again in {minutes}, or ask your administrator for help.",
        )
    try:
        with checks.turn():
            viewer = sign_in(data.organisation, data.email, data.password)
    except ClientArchived as archived:
        # The right password: not a failed attempt, yet no session.
        throttle.record_success(data.organisation, data.email, address)
        refused = archived.viewer
        record_audit_alone(refused.tenant.slug, "sign_in.refused", "user", refused.user.id,
                           actor=Actor.user(refused.user.id, refused.user.email, address),
                           after={"email": refused.user.email, "reason": "client archived"})
        return _login_page(data, error=CLIENT_ARCHIVED, status=HTTP_403_FORBIDDEN)
    except Exception:
        # No verdict on the password (too busy, the database failed): not held against anyone.
        throttle.refund(data.organisation, data.email, address)
        raise
    if viewer is None:
        _refused(data, address, "wrong email or password, or account not active")
        return _login_page(data, error=WRONG_CREDENTIALS, status=HTTP_400_BAD_REQUEST)
    throttle.record_success(data.organisation, data.email, address)
    record_audit_alone(viewer.tenant.slug, "sign_in", "user", viewer.user.id,
                       actor=Actor.user(viewer.user.id, viewer.user.email, address),
                       after={"method": "password"})
    start_session(request, viewer.tenant.slug, viewer.user.id)
    return signed_in_redirect(request, safe_next(data.next))


def _refused(data: LoginForm, address: str, reason: str) -> None:
    """A refused sign-in, in the audit log of the organisation typed (when it exists: an
    unknown organisation has no log to write to)."""
    with contextlib.suppress(InvalidInput, NotFound):
        record_audit_alone(
            data.organisation.strip().lower(), "sign_in.refused", "user", None,
            actor=Actor(ActorKind.ANONYMOUS, data.email.strip()[:320], None, address),
            after={"email": data.email.strip()[:320], "reason": reason},
        )


def _record_sign_out(tenant: str, user_id: int, address: str) -> None:
    try:
        with tenant_tx(tenant) as tx:
            user = get_user(tx, user_id)
            if user is not None:
                record_audit(tx, "sign_out", "user", user_id,
                             actor=Actor.user(user_id, user.email, address))
    except (InvalidInput, NotFound):  # the organisation is gone: nothing to record in
        pass


def signed_in_redirect(request: Request[Any, Any, Any], path: str) -> Redirect:
    """After a sign-in: the CSRF cookie is dropped, so the next page mints a fresh token (a
    token planted or read before sign-in is worth nothing after it)."""
    secure = bool(request.app.state.portal_settings.secure_cookies)
    return Redirect(path, status_code=HTTP_303_SEE_OTHER,
                    cookies=[Cookie(key=CSRF_COOKIE, value="", max_age=0, expires=0, httponly=True,
                                    secure=secure, samesite="lax")])


@post("/logout", opt={PUBLIC: True})
async def logout(request: Request[Any, Any, Any]) -> Redirect:
    """Sign out everywhere: every session of this user ends, not only this browser's."""
    identity = session_identity(request)
    if identity is not None:
        await session_store(request).end_all(identity.tenant, identity.user_id)
        await anyio.to_thread.run_sync(_record_sign_out, identity.tenant, identity.user_id,
                                       request_address(request))
    end_session(request)
    return Redirect("/login?signed_out=1", status_code=HTTP_303_SEE_OTHER)
