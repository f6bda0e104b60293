"""Email templates, for the tenant's administrators: every email kind in every shipped
language, each with an editor (subject, preheader, body in the sandboxed Liquid), a live
preview of the HTML at desktop and phone widths beside the text part, rendered for a real
recipient and client or subject of the tenant; a test email to the editing admin; versions
with what each changed, and restore. The checks are domain.delivery.email_templates', the
reads and writes db.delivery.email_templates'."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Annotated
from urllib.parse import urlencode

from litestar import get, post
from litestar.enums import RequestEncodingType
from litestar.params import Body, FromPath, QueryParameter
from litestar.response import Redirect, Response, Template
from litestar.status_codes import HTTP_200_OK, HTTP_303_SEE_OTHER, HTTP_422_UNPROCESSABLE_ENTITY

from db.delivery.email_context import read_brand
from db.delivery.email_templates import (
    TemplateInvalid,
    load_draft,
    restore_version,
    save_draft,
    save_template,
    send_template_test,
    stored_template,
    stored_templates,
    template_versions,
)
from db.delivery.inbox import unread_count
from db.delivery.template_samples import about_choices, recipient_choices, sample_facts
from db.platform.tenancy import TenantTx, tenant_tx
from domain.delivery.email_kinds import KINDS
from domain.delivery.email_templates import (
    EmailTemplate,
    default_template,
    template_problems,
    valid_kind_and_locale,
)
from domain.errors import Forbidden, InvalidInput, NotFound
from domain.messages import N_
from domain.people.locales import LOCALE_NAMES, SHIPPED_LOCALES
from portal.auth import CurrentViewer, Viewer
from tocsin.core import runtime
from tocsin.providers.email_compose import Rendered, render_email

__all__ = ["ROUTES", "TemplateForm"]

DONE = {"saved": N_("Saved. The next emails of this kind use this template."),
        "restored": N_("Restored as a new version."),
        "test": N_("A test email is on its way to you.")}
KIND_NAMES = {
    "licence_reminder": N_("Licence reminder (before expiry)"),
    "licence_expiry": N_("Licence expired"),
    "licence_grace": N_("Licence grace reminder (after expiry)"),
    "licence_closed": N_("Account closed"),
    "licence_renewed": N_("Licence renewed"),
    "invitation": N_("Invitation"),
    "rule_notice": N_("Rule notice"),
    "obligation_notice": N_("Obligation notice (due date)"),
    "notice": N_("Other notice"),
    "digest": N_("Digest"),
}
BLOCK_NAMES = {"subject": N_("Subject"), "preheader": N_("Preheader"), "body": N_("Body")}
# What a template sees, as the editor lists it (the first three: the shipped text).
NAMES = ("{{ default.subject }}", "{{ default.preheader }}", "{{ default.body }}",
         "{{ recipient.name }}", "{{ tenant.name }}", "{{ client.name }}", "{{ rule.name }}",
         "{{ subject.title }}", "{{ due.date }}", "{{ due.relative }}", "{{ milestone }}",
         "{{ inviter }}", "{{ notifications }}", "{{ action.url }}")
WIDTHS = {"desktop": 600, "phone": 375}  # pixels: the layout's width, and a phone's


@dataclass
class TemplateForm:
    subject: str = ""
    preheader: str = ""
    body: str = ""
    recipient: str = ""
    about: str = ""


def _admin(viewer: Viewer) -> Viewer:
    if not viewer.is_admin:
        raise Forbidden("only administrators edit the organisation's email templates")
    return viewer


def _known(kind: str, locale: str) -> None:
    """An address naming a kind or language that does not exist is a page that does not."""
    try:
        valid_kind_and_locale(kind, locale)
    except InvalidInput as error:
        raise NotFound(str(error)) from None


def _template_of(kind: str, locale: str, form: TemplateForm) -> EmailTemplate:
    return EmailTemplate(kind, locale, form.subject, form.preheader, form.body)


def _recipient(viewer: Viewer, form: TemplateForm) -> int:
    return int(form.recipient) if form.recipient.isascii() and form.recipient.isdigit() else viewer.user.id


def _render(tx: TenantTx, template: EmailTemplate, recipient: int, about: str) -> Rendered:
    brand = read_brand(tx)
    facts, zone = sample_facts(tx, template.kind, template.locale, recipient, about, brand.display_name)
    portal_url = runtime.settings().portal_url
    return render_email(facts, zone, brand.brand(portal_url), portal_url,
                        portal_url + "/unsubscribe/example", template)


def _preview_context(tx: TenantTx, viewer: Viewer, template: EmailTemplate,
                     form: TemplateForm, *, draft: bool = False) -> dict[str, object]:
    """What the preview fragment shows: the problems by block, or the subject, the text part
    and the frames' addresses (the HTML is a document of its own, see document())."""
    problems = template_problems(template)
    recipient = _recipient(viewer, form)
    rendered = None if problems else _render(tx, template, recipient, form.about)
    digest = hashlib.sha256("\0".join((template.subject, template.preheader, template.body)).encode())
    # The page's own frames show the template in use; the live preview's, the draft just kept.
    query = urlencode({"recipient": recipient, "about": form.about, "draft": int(draft),
                       "rev": digest.hexdigest()[:12]})
    base = f"/settings/email-templates/{template.kind}/{template.locale}/document?{query}"
    return {"problems": problems, "rendered": rendered, "frame_url": base, "widths": WIDTHS,
            "block_names": BLOCK_NAMES}


def _page(tx: TenantTx, viewer: Viewer, kind: str, locale: str, form: TemplateForm, *,
          notice: str = "", problems: dict[str, str] | None = None,
          status: int = HTTP_200_OK) -> Template:
    template = _template_of(kind, locale, form)
    stored = stored_template(tx, kind, locale)
    context = {
        "viewer": viewer, "unread": unread_count(tx, viewer.user.id), "section": "settings",
        "kind": kind, "kind_name": KIND_NAMES[kind], "locale": locale,
        "language": LOCALE_NAMES[locale], "form": form, "stored": stored, "notice": notice,
        "names": NAMES, "recipients": recipient_choices(tx), "abouts": about_choices(tx, kind),
        "recipient": str(_recipient(viewer, form)),
        "versions": template_versions(tx, kind, locale),
        "action": f"/settings/email-templates/{kind}/{locale}",
        **_preview_context(tx, viewer, template, form),
    }
    if problems is not None:
        context["problems"] = problems
    return Template("email_template_edit.html", status_code=status, context=context)


@get("/settings/email-templates", sync_to_thread=True)
def template_list(viewer: CurrentViewer) -> Template:
    _admin(viewer)
    with tenant_tx(viewer.tenant.slug) as tx:
        stored, unread = stored_templates(tx), unread_count(tx, viewer.user.id)
    return Template("email_templates.html", context={
        "viewer": viewer, "unread": unread, "section": "settings", "kinds": KIND_NAMES,
        "locales": {code: LOCALE_NAMES[code] for code in SHIPPED_LOCALES}, "stored": stored})


@get("/settings/email-templates/{kind:str}/{locale:str}", sync_to_thread=True)
def template_editor(
    viewer: CurrentViewer, kind: FromPath[str], locale: FromPath[str],
    done: Annotated[str | None, QueryParameter(max_length=20)] = None,
    recipient: Annotated[str, QueryParameter(max_length=20)] = "",
    about: Annotated[str, QueryParameter(max_length=40)] = "",
) -> Template:
    _admin(viewer)
    _known(kind, locale)
    with tenant_tx(viewer.tenant.slug) as tx:
        stored = stored_template(tx, kind, locale)
        current = stored.template if stored else default_template(kind, locale)
        form = TemplateForm(current.subject, current.preheader, current.body, recipient, about)
        return _page(tx, viewer, kind, locale, form, notice=DONE.get(done or "", ""))


@post("/settings/email-templates/{kind:str}/{locale:str}/preview", sync_to_thread=True,
      status_code=HTTP_200_OK)
def template_preview(viewer: CurrentViewer, kind: FromPath[str], locale: FromPath[str],
                     data: Annotated[TemplateForm, Body(media_type=RequestEncodingType.URL_ENCODED)]
                     ) -> Template:
    """The preview of the text being typed (kept as the admin's draft, never sent to anyone
    else): the problems with line and column, or the text part and the two frames."""
    _admin(viewer)
    _known(kind, locale)
    template = _template_of(kind, locale, data)
    with tenant_tx(viewer.tenant.slug) as tx:
        save_draft(tx, viewer.user.id, template)
        context = _preview_context(tx, viewer, template, data, draft=True)
    return Template("_email_template_preview.html", context=context)


# The email is a document of its own, framed by the page: its inline styles are what mail
# clients get, and the portal's policy (no inline styles) would strip them from a srcdoc frame.
_PREVIEW_POLICY = ("default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data: {portal}; "
                   "frame-ancestors 'self'; base-uri 'none'; form-action 'none'")


@get("/settings/email-templates/{kind:str}/{locale:str}/document", sync_to_thread=True)
def template_document(
    viewer: CurrentViewer, kind: FromPath[str], locale: FromPath[str],
    recipient: Annotated[int, QueryParameter(ge=1)],
    about: Annotated[str, QueryParameter(max_length=40)] = "",
    rev: Annotated[str, QueryParameter(max_length=64)] = "",
    draft: Annotated[int, QueryParameter(ge=0, le=1)] = 0,
) -> Response[str]:
    """The HTML part as the recipient would get it, from the admin's draft (the live
    preview's frames) or the template in use (the page's own)."""
    _admin(viewer)
    _known(kind, locale)
    with tenant_tx(viewer.tenant.slug) as tx:
        template = load_draft(tx, viewer.user.id, kind, locale) if draft else None
        if template is None:
            stored = stored_template(tx, kind, locale)
            template = stored.template if stored else default_template(kind, locale)
        html = _render(tx, template, recipient, about).html
    policy = _PREVIEW_POLICY.replace("{portal}", runtime.settings().portal_url)
    return Response(html, media_type="text/html",
                    headers={"Content-Security-Policy": policy, "X-Frame-Options": "SAMEORIGIN",
                             "Cache-Control": "private, no-store"})


@post("/settings/email-templates/{kind:str}/{locale:str}", sync_to_thread=True)
def template_save(viewer: CurrentViewer, kind: FromPath[str], locale: FromPath[str],
                  data: Annotated[TemplateForm, Body(media_type=RequestEncodingType.URL_ENCODED)]
                  ) -> Template | Redirect:
    _admin(viewer)
    _known(kind, locale)
    try:
        with tenant_tx(viewer.tenant.slug) as tx:
            save_template(tx, viewer.user.id, _template_of(kind, locale, data))
    except TemplateInvalid as invalid:
        with tenant_tx(viewer.tenant.slug) as tx:
            return _page(tx, viewer, kind, locale, data, problems=invalid.problems,
                         status=HTTP_422_UNPROCESSABLE_ENTITY)
    return Redirect(f"/settings/email-templates/{kind}/{locale}?done=saved", status_code=HTTP_303_SEE_OTHER)


@post("/settings/email-templates/{kind:str}/{locale:str}/test", sync_to_thread=True)
def template_test(viewer: CurrentViewer, kind: FromPath[str], locale: FromPath[str],
                  data: Annotated[TemplateForm, Body(media_type=RequestEncodingType.URL_ENCODED)]
                  ) -> Template | Redirect:
    """A test email of the text in the form (saved or not) to the admin who asks."""
    _admin(viewer)
    _known(kind, locale)
    try:
        with tenant_tx(viewer.tenant.slug) as tx:
            send_template_test(tx, viewer.user.id, _template_of(kind, locale, data), data.about)
    except TemplateInvalid as invalid:
        with tenant_tx(viewer.tenant.slug) as tx:
            return _page(tx, viewer, kind, locale, data, problems=invalid.problems,
                         status=HTTP_422_UNPROCESSABLE_ENTITY)
    query = urlencode({"done": "test", "recipient": data.recipient, "about": data.about})
    return Redirect(f"/settings/email-templates/{kind}/{locale}?{query}", status_code=HTTP_303_SEE_OTHER)


@post("/settings/email-templates/{kind:str}/{locale:str}/versions/{version:int}/restore",
      sync_to_thread=True)
def template_restore(viewer: CurrentViewer, kind: FromPath[str], locale: FromPath[str],
                     version: FromPath[int]) -> Redirect:
    _admin(viewer)
    _known(kind, locale)
    with tenant_tx(viewer.tenant.slug) as tx:
        restore_version(tx, viewer.user.id, kind, locale, version)
    return Redirect(f"/settings/email-templates/{kind}/{locale}?done=restored",
                    status_code=HTTP_303_SEE_OTHER)


assert tuple(KIND_NAMES) == KINDS
ROUTES = [template_list, template_editor, template_preview, template_document, template_save,
          template_test, template_restore]
