"""Text messages in the preference centre: each person's mobile number (checked and kept in
E.164), texts on or off per category (off until turned on: each costs money), and STOP.
The use cases are db/people/sms_settings.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from litestar import Request, get, post
from litestar.enums import RequestEncodingType
from litestar.params import Body, QueryParameter
from litestar.response import Redirect, Template
from litestar.status_codes import HTTP_303_SEE_OTHER, HTTP_422_UNPROCESSABLE_ENTITY

from db.delivery.inbox import unread_count
from db.people.sms_settings import (
    clear_phone,
    resume_texts,
    save_phone,
    set_sms_category,
    sms_settings,
    stop_texts,
)
from db.platform.tenancy import tenant_tx
from domain.delivery.preferences import CATEGORIES
from domain.errors import InvalidInput
from domain.messages import N_
from portal.auth import CurrentViewer, Viewer
from portal.language import error_text

__all__ = ["DONE", "ROUTES", "PhoneForm", "TextCategoryForm", "save_text_category", "save_texts_phone",
           "stop_all_texts", "texts_page"]

DONE = {
    "phone": N_("Mobile number saved."),
    "cleared": N_("Mobile number removed: no texts are sent to you."),
    "on": N_("Texts turned on for that kind of notice."),
    "off": N_("Texts turned off for that kind of notice."),
    "stopped": N_("STOP saved: no text is sent to your number until you resume."),
    "resumed": N_("Texts resumed for the kinds of notice you turned on."),
}
Form = Body(media_type=RequestEncodingType.URL_ENCODED)


@dataclass
class PhoneForm:
    phone: str = ""


@dataclass
class TextCategoryForm:
    category: str = ""
    sms: str = ""  # "on" to turn texts on, anything else turns them off


def _page(viewer: Viewer, *, notice: str | None = None, typed: str | None = None,
          error: str | None = None, status_code: int = 200) -> Template:
    with tenant_tx(viewer.tenant.slug) as tx:
        settings = sms_settings(tx, viewer.user.id)
        unread = unread_count(tx, viewer.user.id)
    context: dict[str, Any] = {
        "viewer": viewer, "unread": unread, "section": "preferences", "settings": settings,
        "categories": CATEGORIES, "notice": notice, "phone": settings.phone if typed is None else typed,
        "error": error}
    return Template("texts.html", context=context, status_code=status_code)


@get("/preferences/texts", sync_to_thread=True)
def texts_page(viewer: CurrentViewer,
               done: Annotated[str | None, QueryParameter(max_length=20)] = None) -> Template:
    return _page(viewer, notice=DONE.get(done or ""))


@post("/preferences/texts/phone", sync_to_thread=True)
def save_texts_phone(request: Request[Any, Any, Any], viewer: CurrentViewer,
                     data: Annotated[PhoneForm, Form]) -> Redirect | Template:
    """Save (or, left empty, remove) the mobile number; a number that cannot take texts is
    refused with what to change, next to the field."""
    try:
        with tenant_tx(viewer.tenant.slug) as tx:
            if data.phone.strip():
                save_phone(tx, viewer.user.id, data.phone)
            else:
                clear_phone(tx, viewer.user.id)
    except InvalidInput as error:
        return _page(viewer, typed=data.phone[:60], error=error_text(request, error) + ".",
                     status_code=HTTP_422_UNPROCESSABLE_ENTITY)
    done = "phone" if data.phone.strip() else "cleared"
    return Redirect(f"/preferences/texts?done={done}", status_code=HTTP_303_SEE_OTHER)


@post("/preferences/texts/category", sync_to_thread=True)
def save_text_category(viewer: CurrentViewer, data: Annotated[TextCategoryForm, Form]) -> Redirect:
    on = data.sms == "on"
    with tenant_tx(viewer.tenant.slug) as tx:
        set_sms_category(tx, viewer.user.id, data.category, on)
    return Redirect(f"/preferences/texts?done={'on' if on else 'off'}", status_code=HTTP_303_SEE_OTHER)


@post("/preferences/texts/stop", sync_to_thread=True)
def stop_all_texts(viewer: CurrentViewer, data: Annotated[TextCategoryForm, Form]) -> Redirect:
    """STOP (``sms=on``) or resume (anything else) every text to the person's number."""
    with tenant_tx(viewer.tenant.slug) as tx:
        if data.sms == "on":
            stop_texts(tx, viewer.user.id)
        else:
            resume_texts(tx, viewer.user.id)
    return Redirect(f"/preferences/texts?done={'stopped' if data.sms == 'on' else 'resumed'}",
                    status_code=HTTP_303_SEE_OTHER)


ROUTES = [texts_page, save_texts_phone, save_text_category, stop_all_texts]
