"""Signing in and out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import anyio.to_thread
from litestar import Request, get, post
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
from domain.audit import Actor
from domain.errors import InvalidInput, NotFound
from domain.messages import N_
from domain.people.sign_in import SignInRefusal, SignInSettings
from portal.auth import PUBLIC, ClientArchived, request_address, safe_next, sign_in
from portal.language import translate, translate_plural
from portal.ratelimit import LoginThrottle, PasswordChecks
from portal.sessions import end_session, session_identity, session_store
from portal.sign_in_flow import (
    CSRF_COOKIE,
    finish_first_step,
    record_refusal,
    sign_in_options,
    signed_in_redirect,
)

__all__ = [
    "CLIENT_ARCHIVED",
    "CSRF_COOKIE",
    "FIELD_MAX_LENGTH",
    "WRONG_CREDENTIALS",
    "LoginForm",
    "login",
    "login_form_page",
    "login_page",
    "logout",
    "signed_in_redirect",
]

WRONG_CREDENTIALS = N_(
    "The email or password is wrong. Check them, and your organisation name, and try again."
)
# Said only to someone who typed the right password: it tells nothing to a guesser.
CLIENT_ARCHIVED = N_(
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


def login_form_page(
    form: LoginForm, *, error: str | None = None, notice: str | None = None, status: int = 200,
    headers: dict[str, str] | None = None, options: SignInSettings | None = None,
) -> Template:
    """The sign-in page; with the organisation's options known, its single sign-on button
    ("Sign in with <provider>"), and no password fields when password sign-in is off."""
    return Template(
        "login.html",
        context={
            "organisation": form.organisation.strip(),
            "email": form.email.strip(),
            "next": safe_next(form.next),
            "error": error,
            "notice": notice,
            "sso_label": options.provider_label if options and options.oidc_configured else None,
            "password_enabled": options is None or options.password_enabled,
        },
        status_code=status,
        headers=headers,
    )


@get("/login", opt={PUBLIC: True}, sync_to_thread=True)
def login_page(
    request: Request[Any, Any, Any],
    next_path: Annotated[str, QueryParameter(name="next")] = "/",
    signed_out: Annotated[bool, QueryParameter(name="signed_out")] = False,
    organisation: Annotated[str, QueryParameter(max_length=FIELD_MAX_LENGTH)] = "",
    sso: Annotated[bool, QueryParameter()] = False,
) -> Template:
    notice = translate(request, "You have signed out.") if signed_out else None
    options = sign_in_options(organisation) if organisation.strip() else None
    if sso and not (options and options.oidc_configured):
        # Asked for single sign-on ("Use single sign-on"), which this organisation has not.
        notice = translate(request, SignInRefusal.NOT_CONFIGURED.message)
    return login_form_page(LoginForm(organisation=organisation, next=next_path), notice=notice,
                           options=options)


@post("/login", opt={PUBLIC: True}, sync_to_thread=True)
def login(
    request: Request[Any, Any, Any],
    data: Annotated[LoginForm, Body(media_type=RequestEncodingType.URL_ENCODED)],
) -> Template | Redirect:
    fields = (data.organisation, data.email, data.password)
    if any(len(f) > FIELD_MAX_LENGTH for f in fields):
        return login_form_page(data, error=translate(request, "Enter your organisation, email and password."),
                               status=HTTP_400_BAD_REQUEST)
    options = sign_in_options(data.organisation) if data.organisation else None
    address = request_address(request)
    if options is not None and not options.password_enabled:
        record_refusal(data.organisation, data.email, address, SignInRefusal.PASSWORD_OFF.value)
        return login_form_page(data, error=translate(request, SignInRefusal.PASSWORD_OFF.message),
                               options=options, status=HTTP_403_FORBIDDEN)
    if not all(fields):
        return login_form_page(
            data, error=translate(request, "Enter your organisation, email and password."),
            status=HTTP_400_BAD_REQUEST
        )
    throttle: LoginThrottle = request.app.state.login_throttle
    checks: PasswordChecks = request.app.state.password_checks
    # Counted before any password work, in one step with the check: concurrent guesses
    # cannot all slip under the limit together.
    refusal = throttle.reserve(data.organisation, data.email, address)
    if refusal is not None:
        record_refusal(data.organisation, data.email, address, "too many failed attempts")
        return login_form_page(
            data, status=HTTP_429_TOO_MANY_REQUESTS, headers={"Retry-After": str(refusal.retry_after)},
            error=translate_plural(
                request, "Too many failed sign-in attempts. For your security, signing in is paused "
                "for a while: try again in {count} minute, or ask your administrator for help.",
                "Too many failed sign-in attempts. For your security, signing in is paused "
                "for a while: try again in {count} minutes, or ask your administrator for help.",
                refusal.minutes),
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
        return login_form_page(data, error=translate(request, CLIENT_ARCHIVED), status=HTTP_403_FORBIDDEN,
                               options=options)
    except Exception:
        # No verdict on the password (too busy, the database failed): not held against anyone.
        throttle.refund(data.organisation, data.email, address)
        raise
    if viewer is None:
        record_refusal(data.organisation, data.email, address,
                       "wrong email or password, or account not active")
        return login_form_page(data, error=translate(request, WRONG_CREDENTIALS), status=HTTP_400_BAD_REQUEST,
                               options=options)
    throttle.record_success(data.organisation, data.email, address)
    return finish_first_step(request, viewer.tenant.slug, viewer.user, "password",
                             safe_next(data.next))


def _record_sign_out(tenant: str, user_id: int, address: str) -> None:
    try:
        with tenant_tx(tenant) as tx:
            user = get_user(tx, user_id)
            if user is not None:
                record_audit(tx, "sign_out", "user", user_id,
                             actor=Actor.user(user_id, user.email, address))
    except (InvalidInput, NotFound):  # the organisation is gone: nothing to record in
        pass


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
