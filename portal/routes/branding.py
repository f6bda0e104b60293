"""The Branding page, for the tenant's administrators: the name, colour, footer (postal
address), sender name, reply-to and default language every email shows, and the logo; with a
live preview of a reminder as it will be sent. The checks are domain.people.brand's, the writes
db.people.brand's."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated
from urllib.parse import urlencode

from litestar import get, post
from litestar.datastructures import UploadFile
from litestar.enums import RequestEncodingType
from litestar.params import Body, QueryParameter
from litestar.response import Redirect, Response, Template
from litestar.status_codes import HTTP_200_OK, HTTP_303_SEE_OTHER, HTTP_422_UNPROCESSABLE_ENTITY

from db.delivery.email_context import BrandRow, read_brand
from db.delivery.inbox import unread_count
from db.people.brand import save_brand, save_logo
from db.platform.tenancy import tenant_tx
from domain.delivery.email_content import Brand
from domain.delivery.email_kinds import EmailFacts
from domain.errors import InvalidInput, NotFound
from domain.messages import N_
from domain.people.brand import MAX_LOGO_BYTES, check_colour
from domain.people.locales import LOCALE_NAMES, resolve_locale
from portal.auth import CurrentViewer, Viewer
from tocsin.core import runtime
from tocsin.core.clock import utcnow
from tocsin.providers.email_compose import render_email

__all__ = ["DONE", "ROUTES", "BrandForm", "LogoForm", "branding_page", "preview_brand", "preview_document",
           "save_brand_form", "upload_logo"]

DONE = {"brand": N_("Saved. The next emails carry this brand."), "logo": N_("Logo saved.")}


@dataclass
class BrandForm:
    display_name: str = ""
    colour: str = ""
    footer: str = ""
    sender_name: str = ""
    reply_to: str = ""
    default_locale: str = ""


@dataclass
class LogoForm:
    logo: UploadFile | None = None


def _admin(viewer: Viewer) -> Viewer:
    if not viewer.is_admin:
        raise NotFound("only administrators change the organisation's brand")
    return viewer


def _form_of(row: BrandRow) -> BrandForm:
    return BrandForm(row.display_name, row.colour, row.footer, row.sender_name, row.reply_to,
                     row.default_locale or "")


def _preview(form: BrandForm, row: BrandRow, tenant_name: str) -> str:
    """A d30 reminder for an example client as the brand in ``form`` would send it."""
    portal_url = runtime.settings().portal_url
    colour = form.colour if form.colour.startswith("#") and len(form.colour) == 7 else row.colour
    try:
        check_colour(colour)
    except InvalidInput:
        colour = row.colour
    logo = row.brand(portal_url).logo_url
    brand = Brand(form.display_name or tenant_name, colour.lower(), logo, form.footer)
    locale = resolve_locale(None, None, form.default_locale or None)
    facts = EmailFacts(category="license_expiring", title="", body="", href="/licence", locale=locale,
                       tenant_name=form.display_name or tenant_name, client_name="Northwind Analytics",
                       threshold="d30", due_on=utcnow().date() + timedelta(days=30))
    return render_email(facts, "UTC", brand, portal_url, portal_url + "/unsubscribe/example").html


def _frame_url(form: BrandForm) -> str:
    return "/settings/brand/preview?" + urlencode(
        {"display_name": form.display_name[:200], "colour": form.colour[:7], "footer": form.footer[:500],
         "default_locale": form.default_locale[:5]})


def _page(viewer: Viewer, form: BrandForm, row: BrandRow, unread: int, *, error: str = "",
          notice: str = "", status: int = HTTP_200_OK) -> Template:
    return Template("branding.html", status_code=status, context={
        "viewer": viewer, "unread": unread, "section": "settings", "form": form, "error": error,
        "notice": notice, "languages": LOCALE_NAMES, "logo_url": row.brand("").logo_url,
        "frame_url": _frame_url(form), "max_logo_kb": MAX_LOGO_BYTES // 1024})


@get("/settings/brand", sync_to_thread=True)
def branding_page(viewer: CurrentViewer,
                  done: Annotated[str | None, QueryParameter(max_length=20)] = None) -> Template:
    _admin(viewer)
    with tenant_tx(viewer.tenant.slug) as tx:
        row, unread = read_brand(tx), unread_count(tx, viewer.user.id)
    return _page(viewer, _form_of(row), row, unread, notice=DONE.get(done or "", ""))


@post("/settings/brand/preview", sync_to_thread=True, status_code=HTTP_200_OK)
def preview_brand(viewer: CurrentViewer,
                  data: Annotated[BrandForm, Body(media_type=RequestEncodingType.URL_ENCODED)]) -> Template:
    """The preview's frame for the values being typed (nothing is saved)."""
    _admin(viewer)
    return Template("_brand_preview.html", context={"frame_url": _frame_url(data)})


# The email is a document of its own, framed by the page: its inline styles are what mail
# clients get, and the portal's policy (no inline styles) would strip them from a srcdoc frame.
_PREVIEW_POLICY = ("default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data: {portal}; "
                   "frame-ancestors 'self'; base-uri 'none'; form-action 'none'")


@get("/settings/brand/preview", sync_to_thread=True)
def preview_document(
    viewer: CurrentViewer,
    display_name: Annotated[str, QueryParameter(max_length=200)] = "",
    colour: Annotated[str, QueryParameter(max_length=7)] = "",
    footer: Annotated[str, QueryParameter(max_length=500)] = "",
    default_locale: Annotated[str, QueryParameter(max_length=5)] = "",
) -> Response[str]:
    _admin(viewer)
    with tenant_tx(viewer.tenant.slug) as tx:
        row = read_brand(tx)
    form = BrandForm(display_name, colour, footer, default_locale=default_locale)
    policy = _PREVIEW_POLICY.replace("{portal}", runtime.settings().portal_url)
    return Response(_preview(form, row, viewer.tenant.name), media_type="text/html",
                    headers={"Content-Security-Policy": policy, "X-Frame-Options": "SAMEORIGIN"})


@post("/settings/brand", sync_to_thread=True)
def save_brand_form(viewer: CurrentViewer,
                    data: Annotated[BrandForm, Body(media_type=RequestEncodingType.URL_ENCODED)]
                    ) -> Template | Redirect:
    _admin(viewer)
    try:
        with tenant_tx(viewer.tenant.slug) as tx:
            save_brand(tx, viewer.user.id, display_name=data.display_name, colour=data.colour,
                       footer=data.footer, sender_name=data.sender_name, reply_to=data.reply_to,
                       default_locale=data.default_locale or None)
    except InvalidInput as error:
        with tenant_tx(viewer.tenant.slug) as tx:
            row, unread = read_brand(tx), unread_count(tx, viewer.user.id)
        return _page(viewer, data, row, unread, error=str(error), status=HTTP_422_UNPROCESSABLE_ENTITY)
    return Redirect("/settings/brand?done=brand", status_code=HTTP_303_SEE_OTHER)


@post("/settings/brand/logo")
async def upload_logo(viewer: CurrentViewer,
                      data: Annotated[LogoForm, Body(media_type=RequestEncodingType.MULTI_PART)]
                      ) -> Template | Redirect:
    _admin(viewer)
    if data.logo is None:
        raise InvalidInput("choose a logo file to upload")
    content = await data.logo.read(MAX_LOGO_BYTES + 1)
    declared = data.logo.content_type or ""
    try:
        await _save_logo(viewer, content, declared)
    except InvalidInput as error:
        return await _refused_logo(viewer, str(error))
    return Redirect("/settings/brand?done=logo", status_code=HTTP_303_SEE_OTHER)


async def _save_logo(viewer: Viewer, content: bytes, declared: str) -> None:
    from anyio import to_thread

    def write() -> None:
        with tenant_tx(viewer.tenant.slug) as tx:
            save_logo(tx, viewer.user.id, content, declared)

    await to_thread.run_sync(write)


async def _refused_logo(viewer: Viewer, error: str) -> Template:
    from anyio import to_thread

    def page() -> Template:
        with tenant_tx(viewer.tenant.slug) as tx:
            row, unread = read_brand(tx), unread_count(tx, viewer.user.id)
        return _page(viewer, _form_of(row), row, unread, error=f"The logo was refused: {error}.",
                     status=HTTP_422_UNPROCESSABLE_ENTITY)

    return await to_thread.run_sync(page)


ROUTES = [branding_page, preview_brand, preview_document, save_brand_form, upload_logo]
