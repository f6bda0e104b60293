"""Subjects without a host product, for the tenant's administrators: the built-in "manual"
product's subjects listed, created, edited and closed. Each save is an event through the
same intake as the events API (db/events/manual_subjects.py), so rules fire the same way."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Annotated

from litestar import get, post
from litestar.enums import RequestEncodingType
from litestar.params import Body, FromPath, QueryParameter
from litestar.response import Redirect, Template
from litestar.status_codes import HTTP_303_SEE_OTHER, HTTP_400_BAD_REQUEST, HTTP_409_CONFLICT

from db.delivery.inbox import unread_count
from db.events.manual_subjects import (
    close_manual_subject,
    create_manual_subject,
    edit_manual_subject,
    list_manual_subjects,
    manual_subject_form,
)
from db.platform.tenancy import tenant_tx
from domain.errors import Conflict, Forbidden, InvalidInput
from domain.events.intake import InvalidEvents, Problem
from domain.events.manual import ManualSubject
from domain.messages import N_
from portal.auth import CurrentViewer, Viewer

__all__ = ["DONE", "FIELD_MAX_LENGTH", "ROUTES", "SubjectForm", "close", "create", "edit",
           "edit_page", "new_page", "subjects"]

FIELD_MAX_LENGTH = 20_000  # characters of the longest text area (fields, one per line)
DONE = {"created": N_("Subject created. Rules watching it fire as for any product's subject."),
        "saved": N_("Saved."), "unchanged": N_("Nothing changed."), "closed": N_("Subject closed.")}

Form = Body(media_type=RequestEncodingType.URL_ENCODED)


def _admin(viewer: Viewer) -> Viewer:
    if not viewer.is_admin:
        raise Forbidden("only administrators write subjects")
    return viewer


@dataclass
class SubjectForm:
    kind: str = "obligation"
    external_id: str = ""
    title: str = ""
    due_on: str = ""
    time_zone: str = ""
    status: str = "open"
    assignees: str = ""
    hierarchy: str = ""
    fields: str = ""

    def subject(self) -> ManualSubject:
        if any(len(v) > FIELD_MAX_LENGTH for v in asdict(self).values()):
            raise InvalidInput("that is longer than any subject's details")
        return ManualSubject(**asdict(self))


@get("/subjects", sync_to_thread=True)
def subjects(viewer: CurrentViewer, closed: Annotated[bool, QueryParameter()] = False,
             done: Annotated[str | None, QueryParameter(max_length=20)] = None) -> Template:
    _admin(viewer)
    with tenant_tx(viewer.tenant.slug) as tx:
        rows = list_manual_subjects(tx, closed=closed)
        unread = unread_count(tx, viewer.user.id)
    return Template("subjects.html", context={
        "viewer": viewer, "unread": unread, "section": "obligations", "subjects": rows,
        "closed": closed, "notice": DONE.get(done or "")})


def _form_page(viewer: Viewer, form: SubjectForm, *, subject_id: int | None = None,
               problems: list[Problem] | None = None, error: str | None = None,
               status: int = 200) -> Template:
    with tenant_tx(viewer.tenant.slug) as tx:
        unread = unread_count(tx, viewer.user.id)
    return Template("subject_form.html", status_code=status, context={
        "viewer": viewer, "unread": unread, "section": "obligations", "form": form,
        "subject_id": subject_id, "problems": problems or [], "error": error})


def _problems(error: InvalidInput) -> list[Problem]:
    if isinstance(error, InvalidEvents):
        return error.problems
    return [Problem("", str(error))]


@get("/subjects/new", sync_to_thread=True)
def new_page(viewer: CurrentViewer) -> Template:
    _admin(viewer)
    return _form_page(viewer, SubjectForm())


@post("/subjects/new", sync_to_thread=True)
def create(viewer: CurrentViewer, data: Annotated[SubjectForm, Form]) -> Template | Redirect:
    _admin(viewer)
    try:
        with tenant_tx(viewer.tenant.slug) as tx:
            recorded = create_manual_subject(tx, data.subject())
    except Conflict as error:
        return _form_page(viewer, data, error=str(error), status=HTTP_409_CONFLICT)
    except InvalidInput as error:
        return _form_page(viewer, data, problems=_problems(error), status=HTTP_400_BAD_REQUEST)
    del recorded  # its page is /obligations/subjects/<id>, linked from the list
    return Redirect("/subjects?done=created", status_code=HTTP_303_SEE_OTHER)


@get("/subjects/{subject_id:int}/edit", sync_to_thread=True)
def edit_page(viewer: CurrentViewer, subject_id: FromPath[int]) -> Template:
    _admin(viewer)
    with tenant_tx(viewer.tenant.slug) as tx:
        current = manual_subject_form(tx, subject_id)
    return _form_page(viewer, SubjectForm(**asdict(current)), subject_id=subject_id)


@post("/subjects/{subject_id:int}/edit", sync_to_thread=True)
def edit(viewer: CurrentViewer, subject_id: FromPath[int],
         data: Annotated[SubjectForm, Form]) -> Template | Redirect:
    _admin(viewer)
    try:
        with tenant_tx(viewer.tenant.slug) as tx:
            recorded = edit_manual_subject(tx, subject_id, data.subject())
    except InvalidInput as error:
        return _form_page(viewer, data, subject_id=subject_id, problems=_problems(error),
                          status=HTTP_400_BAD_REQUEST)
    done = "unchanged" if recorded is None else "saved"
    return Redirect(f"/subjects?done={done}", status_code=HTTP_303_SEE_OTHER)


@post("/subjects/{subject_id:int}/close", sync_to_thread=True)
def close(viewer: CurrentViewer, subject_id: FromPath[int]) -> Redirect:
    _admin(viewer)
    with tenant_tx(viewer.tenant.slug) as tx:
        close_manual_subject(tx, subject_id)
    return Redirect("/subjects?done=closed", status_code=HTTP_303_SEE_OTHER)


ROUTES = [subjects, new_page, create, edit_page, edit, close]
