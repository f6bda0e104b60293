"""Single sign-on with the organisation's OpenID Connect provider: the code flow with PKCE,
state and nonce. The state, nonce and verifier are kept server-side (oidc_sign_ins) and the
state is also set in a short-lived cookie, so the way back is accepted only in the browser
that set out, and only once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import urlencode

from litestar import Request, get, post
from litestar.datastructures import Cookie
from litestar.enums import RequestEncodingType
from litestar.params import Body, FromPath, QueryParameter
from litestar.response import Redirect, Template
from litestar.status_codes import HTTP_303_SEE_OTHER, HTTP_400_BAD_REQUEST

from db.people.sign_in_settings import (
    SingleSignOnRefused,
    begin_single_sign_on,
    provider_credentials,
    sign_in_settings,
    take_single_sign_on,
    user_for_verified_email,
)
from db.people.users import User
from db.platform.tenancy import tenant_tx
from domain.errors import InvalidInput, NotFound
from domain.people.sign_in import SignInRefusal
from portal.auth import PUBLIC, request_address, safe_next
from portal.language import translate
from portal.routes.login import FIELD_MAX_LENGTH, LoginForm, login_form_page
from portal.sign_in_flow import finish_first_step, record_refusal, sign_in_options
from tocsin.core import runtime
from tocsin.providers.oidc import (
    IdTokenRefused,
    ProviderUnavailable,
    authorization_url,
    discover,
    exchange_code,
    verified_identity,
)

__all__ = ["ROUTES", "STATE_COOKIE", "SsoForm", "callback_path", "choose_sso", "sso_callback",
           "start_sso"]

STATE_COOKIE = "tocsin_sso_state"
STATE_COOKIE_SECONDS = 600  # seconds: as long as the server-side state lives


@dataclass
class SsoForm:
    organisation: str = ""
    next: str = "/"
    email: str = ""  # sent along by the password form's "Use single sign-on" button
    password: str = ""  # likewise; never read


def callback_path(tenant: str) -> str:
    return f"/login/sso/{tenant}/callback"


def _redirect_uri(tenant: str) -> str:
    return runtime.settings().portal_url + callback_path(tenant)


def _allow_private() -> bool:
    return runtime.settings().sso_allow_private


def _refused(request: Request[Any, Any, Any], organisation: str, email: str | None, address: str,
             reason: SignInRefusal, status: int = HTTP_400_BAD_REQUEST) -> Template:
    record_refusal(organisation, email, address, reason.value)
    return login_form_page(LoginForm(organisation=organisation), error=translate(request, reason.message),
                           options=sign_in_options(organisation), status=status)


def _state_cookie(request: Request[Any, Any, Any], value: str, max_age: int) -> Cookie:
    secure = bool(request.app.state.portal_settings.secure_cookies)
    return Cookie(key=STATE_COOKIE, value=value, max_age=max_age, path="/login/sso",
                  httponly=True, secure=secure, samesite="lax")


@post("/login/sso", opt={PUBLIC: True}, sync_to_thread=False)
def choose_sso(data: Annotated[SsoForm, Body(media_type=RequestEncodingType.URL_ENCODED)]) -> Redirect:
    """The password form's "Use single sign-on": to the organisation's sign-in page, which
    shows its provider's button. Never straight to the provider: the Content-Security-Policy's
    form-action 'self' forbids a form's redirect to another origin."""
    query = {"organisation": data.organisation.strip().lower()[:FIELD_MAX_LENGTH],
             "next": safe_next(data.next), "sso": "1"}
    return Redirect("/login?" + urlencode(query), status_code=HTTP_303_SEE_OTHER)


# PUBLIC: it only sets out to the provider; what comes back is checked by sso_callback.
@get("/login/sso/{tenant:str}", opt={PUBLIC: True}, sync_to_thread=True)
def start_sso(
    request: Request[Any, Any, Any], tenant: FromPath[str],
    next_path: Annotated[str, QueryParameter(name="next", max_length=FIELD_MAX_LENGTH)] = "/",
) -> Template | Redirect:
    """Off to the organisation's provider, with a fresh state, nonce and PKCE challenge (a
    link, not a form: see choose_sso)."""
    organisation = tenant.strip().lower()[:100]
    address = request_address(request)
    try:
        with tenant_tx(organisation) as tx:
            credentials = provider_credentials(tx) if tx.tenant.status == "active" else None
    except (InvalidInput, NotFound):
        credentials = None
    if credentials is None:
        return _refused(request, organisation, None, address, SignInRefusal.NOT_CONFIGURED)
    try:
        meta = discover(credentials.issuer, allow_private=_allow_private())
    except ProviderUnavailable:
        return _refused(request, organisation, None, address, SignInRefusal.PROVIDER_ERROR)
    with tenant_tx(organisation) as tx:
        pending = begin_single_sign_on(tx, safe_next(next_path))
    url = authorization_url(meta, credentials.client_id, _redirect_uri(organisation),
                            state=pending.state, nonce=pending.nonce,
                            code_verifier=pending.code_verifier)
    return Redirect(url, status_code=HTTP_303_SEE_OTHER,
                    cookies=[_state_cookie(request, pending.state, STATE_COOKIE_SECONDS)])


def _identify(tenant: str, state: str, code: str) -> tuple[User, str]:
    """The single sign-on's verdict: (the person, where to go next), or
    SingleSignOnRefused. The state is spent first, whatever follows."""
    with tenant_tx(tenant) as tx:
        pending = take_single_sign_on(tx, state)
        credentials = provider_credentials(tx)
    if credentials is None:
        raise SingleSignOnRefused(SignInRefusal.NOT_CONFIGURED)
    try:
        allow_private = _allow_private()
        meta = discover(credentials.issuer, allow_private=allow_private)
        id_token = exchange_code(meta, credentials.client_id, credentials.client_secret,
                                 _redirect_uri(tenant), code=code,
                                 code_verifier=pending.code_verifier, allow_private=allow_private)
        identity = verified_identity(meta, id_token, client_id=credentials.client_id,
                                     nonce=pending.nonce, allow_private=allow_private)
    except ProviderUnavailable:
        raise SingleSignOnRefused(SignInRefusal.PROVIDER_ERROR) from None
    except IdTokenRefused as e:
        raise SingleSignOnRefused(e.reason) from None
    if not identity.email:
        raise SingleSignOnRefused(SignInRefusal.INVALID_TOKEN)
    if not identity.email_verified:
        raise SingleSignOnRefused(SignInRefusal.EMAIL_NOT_VERIFIED, identity.email)
    with tenant_tx(tenant) as tx:
        user = user_for_verified_email(tx, sign_in_settings(tx), identity.email)
    return user, pending.next_path


# PUBLIC: what authenticates the way back is the state (single use, server-side, matching
# the cookie set by start_sso) and the ID token the provider signs.
@get("/login/sso/{tenant:str}/callback", opt={PUBLIC: True}, sync_to_thread=True)
def sso_callback(
    request: Request[Any, Any, Any],
    tenant: FromPath[str],
    oidc_state: Annotated[str, QueryParameter(name="state", max_length=200)] = "",
    code: Annotated[str, QueryParameter(max_length=2000)] = "",
    error: Annotated[str, QueryParameter(max_length=200)] = "",
    error_description: Annotated[str, QueryParameter(max_length=2000)] = "",
) -> Template | Redirect:
    address = request_address(request)
    tenant = tenant.strip().lower()[:100]
    expired = _state_cookie(request, "", 0)
    cookie = request.cookies.get(STATE_COOKIE, "")
    try:
        if not oidc_state or cookie != oidc_state:
            # A replayed or forged link, or another browser's: spend nothing, trust nothing.
            raise SingleSignOnRefused(SignInRefusal.UNKNOWN_STATE)
        if error or not code:
            with tenant_tx(tenant) as tx:
                take_single_sign_on(tx, oidc_state)
            raise SingleSignOnRefused(SignInRefusal.PROVIDER_ERROR)
        user, next_path = _identify(tenant, oidc_state, code)
    except (InvalidInput, NotFound):
        page = login_form_page(
            LoginForm(), error=translate(request, "This sign-in link names no organisation here."),
            status=HTTP_400_BAD_REQUEST)
        page.cookies.append(expired)
        return page
    except SingleSignOnRefused as refused:
        page = _refused(request, tenant, refused.email, address, refused.reason)
        page.cookies.append(expired)
        return page
    redirect = finish_first_step(request, tenant, user, "oidc", next_path)
    redirect.cookies.append(expired)
    return redirect


ROUTES = [choose_sso, start_sso, sso_callback]
