"""Two-factor sign-in: the second step of a sign-in (a code from an authenticator app or a
recovery code), and each person's own set-up page (enrol, confirm, see the recovery codes
once, turn off). Every refused code is audited."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from litestar import Request, get, post
from litestar.enums import RequestEncodingType
from litestar.params import Body
from litestar.response import Redirect, Template
from litestar.status_codes import (
    HTTP_303_SEE_OTHER,
    HTTP_400_BAD_REQUEST,
    HTTP_429_TOO_MANY_REQUESTS,
)

from db.delivery.inbox import unread_count
from db.evidence.audit import record_audit, record_audit_alone
from db.people.sign_in_settings import sign_in_settings
from db.people.two_factor import (
    SecondFactorRefused,
    check_second_factor,
    confirm_enrolment,
    disable_two_factor,
    pending_enrolment,
    start_enrolment,
    two_factor_enabled,
)
from db.people.users import get_user
from db.platform.tenancy import tenant_tx
from domain.audit import Actor
from domain.errors import InvalidInput, NotFound
from domain.messages import N_
from portal.auth import PUBLIC, TWO_FACTOR_SETUP, CurrentViewer, Viewer, request_address, safe_next
from portal.language import translate
from portal.ratelimit import LoginThrottle
from portal.routes.login import LoginForm, login_form_page
from portal.sessions import (
    MUST_ENROL,
    PENDING_USER,
    end_session,
    must_enrol,
    pending_sign_in,
    start_session,
)
from portal.sign_in_flow import record_refusal, signed_in_redirect

__all__ = ["MAX_SECOND_STEP_FAILURES", "ROUTES", "CodeForm"]

MAX_SECOND_STEP_FAILURES = 5  # wrong codes before the half-done sign-in is thrown away
CODE_MAX_LENGTH = 64  # characters; a TOTP code is 6, a recovery code 15


@dataclass
class CodeForm:
    code: str = ""


def _step_page(error: str | None = None, status: int = 200) -> Template:
    return Template("two_factor_step.html", context={"error": error}, status_code=status)


@get("/login/two-factor", opt={PUBLIC: True}, sync_to_thread=False)
def second_step_page(request: Request[Any, Any, Any]) -> Template | Redirect:
    # PUBLIC: the half-done sign-in in the session (pending_sign_in) authenticates it.
    if pending_sign_in(request) is None:
        return Redirect("/login", status_code=HTTP_303_SEE_OTHER)
    return _step_page()


@post("/login/two-factor", opt={PUBLIC: True}, sync_to_thread=True)
def second_step(
    request: Request[Any, Any, Any],
    data: Annotated[CodeForm, Body(media_type=RequestEncodingType.URL_ENCODED)],
) -> Template | Redirect:
    # PUBLIC: only a session whose first step passed (pending_sign_in) gets this far.
    pending = pending_sign_in(request)
    if pending is None:
        return Redirect("/login", status_code=HTTP_303_SEE_OTHER)
    tenant, user_id = str(pending["tenant"]), int(pending[PENDING_USER])
    email = str(pending.get("email", ""))
    address = request_address(request)
    # Codes are counted with the account's password attempts: a correct password clears that
    # count, so without this whoever has the password could try five codes per sign-in forever.
    throttle: LoginThrottle = request.app.state.login_throttle
    if throttle.reserve(tenant, email, address) is not None:
        end_session(request)
        record_refusal(tenant, email, address, "too many failed attempts")
        return login_form_page(LoginForm(organisation=tenant), status=HTTP_429_TOO_MANY_REQUESTS,
                               error=translate(request, "Too many failed sign-in attempts. For your "
                                               "security, signing in is paused for a while: "
                                               "try again later."))
    try:
        with tenant_tx(tenant) as tx:
            user = get_user(tx, user_id)
            if user is None or not user.active:
                raise NotFound("the account is gone")
            used = check_second_factor(tx, user_id, data.code[:CODE_MAX_LENGTH])
            method = f"{pending.get('method', 'password')}+{used}"
            record_audit(tx, "sign_in", "user", user_id,
                         actor=Actor.user(user_id, user.email, address), after={"method": method})
    except (InvalidInput, NotFound):
        throttle.refund(tenant, email, address)
        end_session(request)
        return Redirect("/login", status_code=HTTP_303_SEE_OTHER)
    except SecondFactorRefused as refused:
        record_refusal(tenant, None, address, refused.reason.value)
        failures = int(pending.get("failures", 0)) + 1
        if failures >= MAX_SECOND_STEP_FAILURES:
            end_session(request)
            return login_form_page(
                LoginForm(organisation=tenant), status=HTTP_400_BAD_REQUEST,
                error=translate(request, "Too many wrong codes. Sign in again from the start."))
        request.set_session({**pending, "failures": failures})
        return _step_page(refused.reason.message, HTTP_400_BAD_REQUEST)
    throttle.record_success(tenant, email, address)
    start_session(request, tenant, user_id)
    return signed_in_redirect(request, safe_next(str(pending.get("next", "/"))))


def _refused(viewer: Viewer, refused: SecondFactorRefused) -> None:
    record_audit_alone(viewer.tenant.slug, "two_factor.refused", "user", viewer.user.id,
                       after={"reason": refused.reason.value})


def _account_page(request: Request[Any, Any, Any], viewer: Viewer, *, recovery_codes: list[str] | None = None,
                  error: str | None = None, notice: str | None = None, status: int = 200) -> Template:
    with tenant_tx(viewer.tenant.slug) as tx:
        enabled = two_factor_enabled(tx, viewer.user.id)
        enrolment = None if enabled else pending_enrolment(tx, viewer.user.id)
        required = viewer.is_admin and sign_in_settings(tx).require_two_factor_for_admins
        unread = unread_count(tx, viewer.user.id)
    return Template("two_factor.html", status_code=status, context={
        "viewer": viewer, "unread": unread, "section": "preferences", "enabled": enabled,
        "enrolment": enrolment, "required": required, "recovery_codes": recovery_codes,
        "error": error, "notice": notice, "must_enrol": must_enrol(request),
        **({"walled": True} if must_enrol(request) else {}),
    })


@get("/account/two-factor", opt={TWO_FACTOR_SETUP: True}, sync_to_thread=True)
def two_factor_page(request: Request[Any, Any, Any], viewer: CurrentViewer) -> Template:
    return _account_page(request, viewer)


@post("/account/two-factor/start", opt={TWO_FACTOR_SETUP: True}, sync_to_thread=True)
def start_two_factor(request: Request[Any, Any, Any], viewer: CurrentViewer) -> Template | Redirect:
    try:
        with tenant_tx(viewer.tenant.slug) as tx:
            start_enrolment(tx, viewer.user.id)
            record_audit(tx, "two_factor.start", "user", viewer.user.id)
    except InvalidInput as e:
        return _account_page(request, viewer, error=str(e).capitalize() + ".", status=HTTP_400_BAD_REQUEST)
    return Redirect("/account/two-factor", status_code=HTTP_303_SEE_OTHER)


@post("/account/two-factor/confirm", opt={TWO_FACTOR_SETUP: True}, sync_to_thread=True)
def confirm_two_factor(
    request: Request[Any, Any, Any], viewer: CurrentViewer,
    data: Annotated[CodeForm, Body(media_type=RequestEncodingType.URL_ENCODED)],
) -> Template:
    try:
        with tenant_tx(viewer.tenant.slug) as tx:
            codes = confirm_enrolment(tx, viewer.user.id, data.code[:CODE_MAX_LENGTH])
    except SecondFactorRefused as refused:
        _refused(viewer, refused)
        return _account_page(request, viewer, error=refused.reason.message, status=HTTP_400_BAD_REQUEST)
    if must_enrol(request):
        session = request.session
        request.set_session({k: v for k, v in session.items() if k != MUST_ENROL})
    # Shown in this answer only: the page never shows them again.
    return _account_page(request, viewer, recovery_codes=codes,
                         notice=N_("Two-factor sign-in is on. Keep your recovery codes somewhere safe."))


@post("/account/two-factor/disable", opt={TWO_FACTOR_SETUP: True}, sync_to_thread=True)
def disable_two_factor_route(
    request: Request[Any, Any, Any], viewer: CurrentViewer,
    data: Annotated[CodeForm, Body(media_type=RequestEncodingType.URL_ENCODED)],
) -> Template | Redirect:
    with tenant_tx(viewer.tenant.slug) as tx:
        required = viewer.is_admin and sign_in_settings(tx).require_two_factor_for_admins
    if required:
        return _account_page(request, viewer, status=HTTP_400_BAD_REQUEST,
                             error=N_("Your organisation requires two-factor sign-in for administrators: "
                                      "it cannot be turned off."))
    try:
        with tenant_tx(viewer.tenant.slug) as tx:
            disable_two_factor(tx, viewer.user.id, data.code[:CODE_MAX_LENGTH])
    except SecondFactorRefused as refused:
        _refused(viewer, refused)
        return _account_page(request, viewer, error=refused.reason.message, status=HTTP_400_BAD_REQUEST)
    return Redirect("/account/two-factor", status_code=HTTP_303_SEE_OTHER)


ROUTES = [second_step_page, second_step, two_factor_page, start_two_factor, confirm_two_factor,
          disable_two_factor_route]

