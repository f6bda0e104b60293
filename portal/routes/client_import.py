"""Importing clients from a CSV file, for the tenant's administrators: the template, the
upload (checked whole: a file of the wrong shape, encoding or size is refused with what to
fix), the validation report per row before anything is written, then the import, all or
nothing or the valid rows only, with its progress shown live (db/people/client_import.py)."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Annotated, Any

import anyio.to_thread
from litestar import Request, Response, get, post
from litestar.enums import RequestEncodingType
from litestar.params import Body, FromPath
from litestar.response import Redirect, Template
from litestar.status_codes import HTTP_303_SEE_OTHER, HTTP_400_BAD_REQUEST, HTTP_413_REQUEST_ENTITY_TOO_LARGE

from db.delivery.inbox import unread_count
from db.evidence.audit import current_actor
from db.people.client_import import ImportJob, get_import, run_import, stage_import, start_import
from db.platform.tenancy import tenant_tx
from domain.errors import Forbidden, InvalidInput
from domain.people.client_import import COLUMNS, MAX_BYTES, MAX_ROWS, parse_client_csv, template_csv
from portal.auth import CurrentViewer, Viewer

__all__ = ["PROBLEMS_SHOWN", "ROUTES", "RunForm", "import_page", "import_progress", "import_report",
           "run", "template", "upload"]

PROBLEMS_SHOWN = 500  # problems listed on the page (the count says how many in all)
UPLOAD_MAX_BYTES = MAX_BYTES + 64 * 1024  # the file plus the form's other fields


def _admin(viewer: Viewer) -> Viewer:
    if not viewer.is_admin:
        raise Forbidden("only administrators import clients")
    return viewer


def _page(viewer: Viewer, template_name: str, status: int = 200, **context: Any) -> Template:
    with tenant_tx(viewer.tenant.slug) as tx:
        unread = unread_count(tx, viewer.user.id)
    return Template(template_name, status_code=status, context={
        "viewer": viewer, "unread": unread, "section": "clients", "columns": COLUMNS,
        "max_mb": MAX_BYTES // 1_048_576, "max_rows": MAX_ROWS} | context)


@get("/clients/import", sync_to_thread=True)
def import_page(viewer: CurrentViewer) -> Template:
    _admin(viewer)
    return _page(viewer, "client_import.html", error=None)


@get("/clients/import/template.csv", sync_to_thread=False)
def template(viewer: CurrentViewer) -> Response[bytes]:
    _admin(viewer)
    return Response(template_csv().encode(), media_type="text/csv; charset=utf-8",
                    headers={"Content-Disposition": 'attachment; filename="tocsin-clients-template.csv"'})


def _stage(viewer: Viewer, filename: str, data: bytes) -> int:
    parsed = parse_client_csv(data)
    with tenant_tx(viewer.tenant.slug) as tx:
        return stage_import(tx, filename, parsed)


@post("/clients/import", request_max_body_size=UPLOAD_MAX_BYTES)
async def upload(request: Request[Any, Any, Any], viewer: CurrentViewer) -> Template | Redirect:
    _admin(viewer)
    form = await request.form()
    file = form.get("file")
    if file is None or isinstance(file, str):
        return await anyio.to_thread.run_sync(lambda: _page(
            viewer, "client_import.html", HTTP_400_BAD_REQUEST, error="Choose a CSV file to upload."))
    data = await file.read()
    try:
        import_id = await anyio.to_thread.run_sync(_stage, viewer, file.filename or "clients.csv", data)
    except InvalidInput as problem:
        status = HTTP_413_REQUEST_ENTITY_TOO_LARGE if len(data) > MAX_BYTES else HTTP_400_BAD_REQUEST
        text = str(problem)
        return await anyio.to_thread.run_sync(lambda: _page(
            viewer, "client_import.html", status, error=f"{text[:1].upper()}{text[1:]}."))
    return Redirect(f"/clients/import/{import_id}", status_code=HTTP_303_SEE_OTHER)


def _job(viewer: Viewer, import_id: int) -> ImportJob:
    with tenant_tx(viewer.tenant.slug) as tx:
        return get_import(tx, import_id)


@get("/clients/import/{import_id:int}", sync_to_thread=True)
def import_report(viewer: CurrentViewer, import_id: FromPath[int]) -> Template:
    _admin(viewer)
    job = _job(viewer, import_id)
    return _page(viewer, "client_import_report.html", job=job, problems=job.problems[:PROBLEMS_SHOWN])


@get("/clients/import/{import_id:int}/progress", sync_to_thread=True)
def import_progress(viewer: CurrentViewer, import_id: FromPath[int]) -> Template:
    """The progress block alone, polled by the report page while the import runs."""
    _admin(viewer)
    return Template("_import_progress.html", context={"job": _job(viewer, import_id)})


@dataclass
class RunForm:
    mode: str = ""


@post("/clients/import/{import_id:int}/run", sync_to_thread=True)
def run(viewer: CurrentViewer, import_id: FromPath[int],
        data: Annotated[RunForm, Body(media_type=RequestEncodingType.URL_ENCODED)]) -> Redirect:
    _admin(viewer)
    with tenant_tx(viewer.tenant.slug) as tx:
        start_import(tx, import_id, data.mode[:20])
    # The rows are written in the background, in one transaction; the page shows the progress.
    threading.Thread(target=run_import, args=(viewer.tenant.slug, import_id, current_actor()),
                     name=f"import-{import_id}", daemon=True).start()
    return Redirect(f"/clients/import/{import_id}", status_code=HTTP_303_SEE_OTHER)


ROUTES = [import_page, template, upload, import_report, import_progress, run]
