"""How the organisation signs in, for its administrators: the single sign-on provider
(OpenID Connect discovery is tried before anything is saved), password sign-in on or off
(off only while the provider answers, so nobody is locked out), and two-factor required of
administrators."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from litestar import get, post
from litestar.enums import RequestEncodingType
from litestar.params import Body, QueryParameter
from litestar.response import Redirect, Template
from litestar.status_codes import HTTP_303_SEE_OTHER, HTTP_400_BAD_REQUEST

from db.delivery.inbox import unread_count
from db.people.sign_in_settings import (
    provider_credentials,
    save_provider,
    set_password_sign_in,
    set_two_factor_required,
    sign_in_settings,
)
from db.platform.tenancy import tenant_tx
from domain.errors import InvalidInput, NotFound
from domain.messages import N_
from domain.people.sign_in import valid_domains, valid_issuer
from portal.auth import CurrentViewer, Viewer
from portal.routes.single_sign_on import callback_path
from tocsin.core import runtime
from tocsin.providers.oidc import ProviderUnavailable, discover

__all__ = ["DONE", "ROUTES", "PasswordForm", "ProviderForm", "TwoFactorForm"]

FIELD_MAX_LENGTH = 2000  # characters of any field of these forms
DONE = {
    "provider": N_("Saved. People can sign in with single sign-on from the sign-in page."),
    "password": N_("Saved. It applies to the next sign-in."),
    "two-factor": N_("Saved. It applies to each administrator's next sign-in."),
}


def _admin(viewer: Viewer) -> Viewer:
    if not viewer.is_admin:
        raise NotFound("only administrators change how the organisation signs in")
    return viewer


def _page(viewer: Viewer, *, error: str | None = None, notice: str | None = None,
          form: ProviderForm | None = None, status: int = 200) -> Template:
    with tenant_tx(viewer.tenant.slug) as tx:
        settings = sign_in_settings(tx)
        unread = unread_count(tx, viewer.user.id)
    return Template("sign_in_settings.html", status_code=status, context={
        "viewer": viewer, "unread": unread, "section": "settings", "settings": settings,
        "error": error, "notice": notice, "form": form,
        "redirect_uri": runtime.settings().portal_url + callback_path(viewer.tenant.slug),
        "login_link": f"{runtime.settings().portal_url}/login?organisation={viewer.tenant.slug}",
    })


@get("/settings/sign-in", sync_to_thread=True)
def sign_in_settings_page(
    viewer: CurrentViewer, done: Annotated[str | None, QueryParameter(max_length=20)] = None
) -> Template:
    return _page(_admin(viewer), notice=DONE.get(done or ""))


@dataclass
class ProviderForm:
    issuer: str = ""
    client_id: str = ""
    client_secret: str = ""
    provider_name: str = ""
    allowed_domains: str = ""
    provision_members: str = ""


def _refusal(e: Exception) -> str:
    text = str(e)
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


@post("/settings/sign-in/provider", sync_to_thread=True)
def save_provider_route(
    viewer: CurrentViewer,
    data: Annotated[ProviderForm, Body(media_type=RequestEncodingType.URL_ENCODED)],
) -> Template | Redirect:
    _admin(viewer)
    if any(len(v) > FIELD_MAX_LENGTH for v in vars(data).values()):
        return _page(viewer, error=N_("A field is too long."), form=data, status=HTTP_400_BAD_REQUEST)
    try:
        issuer = valid_issuer(data.issuer)
        domains = valid_domains(data.allowed_domains)
        # A provider that does not answer discovery is never saved.
        discover(issuer, allow_private=runtime.settings().sso_allow_private)
        with tenant_tx(viewer.tenant.slug) as tx:
            save_provider(tx, issuer=issuer, client_id=data.client_id,
                          client_secret=data.client_secret, provider_name=data.provider_name,
                          allowed_domains=domains, provision_members=data.provision_members == "on")
    except InvalidInput as e:
        return _page(viewer, error=_refusal(e), form=data, status=HTTP_400_BAD_REQUEST)
    except ProviderUnavailable as e:
        return _page(viewer, form=data, status=HTTP_400_BAD_REQUEST,
                     error=f"The provider did not answer OpenID Connect discovery, so nothing was "
                           f"saved. Check the issuer. ({str(e)[:300]})")
    return Redirect("/settings/sign-in?done=provider", status_code=HTTP_303_SEE_OTHER)


@dataclass
class PasswordForm:
    password_enabled: str = ""


@post("/settings/sign-in/password", sync_to_thread=True)
def set_password_route(
    viewer: CurrentViewer,
    data: Annotated[PasswordForm, Body(media_type=RequestEncodingType.URL_ENCODED)],
) -> Template | Redirect:
    _admin(viewer)
    enabled = data.password_enabled == "on"
    try:
        if not enabled:
            # Off only while the provider answers now: otherwise nobody could sign in at all.
            with tenant_tx(viewer.tenant.slug) as tx:
                credentials = provider_credentials(tx)
            if credentials is not None:
                discover(credentials.issuer,
                         allow_private=runtime.settings().sso_allow_private)
        with tenant_tx(viewer.tenant.slug) as tx:
            set_password_sign_in(tx, enabled)
    except InvalidInput as e:
        return _page(viewer, error=_refusal(e), status=HTTP_400_BAD_REQUEST)
    except ProviderUnavailable:
        return _page(viewer, status=HTTP_400_BAD_REQUEST,
                     error=N_("Password sign-in stays on: the single sign-on provider does not answer "
                              "right now, and without it nobody could sign in."))
    return Redirect("/settings/sign-in?done=password", status_code=HTTP_303_SEE_OTHER)


@dataclass
class TwoFactorForm:
    required: str = ""


@post("/settings/sign-in/two-factor", sync_to_thread=True)
def set_two_factor_route(
    viewer: CurrentViewer,
    data: Annotated[TwoFactorForm, Body(media_type=RequestEncodingType.URL_ENCODED)],
) -> Redirect:
    _admin(viewer)
    with tenant_tx(viewer.tenant.slug) as tx:
        set_two_factor_required(tx, data.required == "on")
    return Redirect("/settings/sign-in?done=two-factor", status_code=HTTP_303_SEE_OTHER)


ROUTES = [sign_in_settings_page, save_provider_route, set_password_route, set_two_factor_route]
