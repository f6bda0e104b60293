"""The pages of a CSV import, for the tenant's administrators, made once for each kind of
rows (clients: client_import.py, subjects: subject_import.py): the template, the upload
(checked whole: a file of the wrong shape, encoding or size is refused with what to fix), the
validation report per row before anything is written, then the import, all or nothing or the
valid rows only, with its progress shown live; an import interrupted by the end of its
process is resumed or started over (db/platform/imports.py)."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Annotated, Any

import anyio.to_thread
from litestar import Request, Response, get, post
from litestar.enums import RequestEncodingType
from litestar.handlers import HTTPRouteHandler
from litestar.params import Body, FromPath
from litestar.response import Redirect, Template
from litestar.status_codes import HTTP_303_SEE_OTHER, HTTP_400_BAD_REQUEST, HTTP_413_REQUEST_ENTITY_TOO_LARGE

from db.delivery.inbox import unread_count
from db.evidence.audit import current_actor
from db.platform.imports import (
    ImportJob,
    ImportWriter,
    get_import,
    restart_import,
    resume_import,
    run_import,
    stage_import,
    start_import,
)
from db.platform.tenancy import tenant_tx
from domain.csv_import import MAX_BYTES, MAX_ROWS, parse_csv
from domain.errors import Forbidden, InvalidInput
from portal.auth import CurrentViewer, Viewer

__all__ = ["PROBLEMS_SHOWN", "UPLOAD_MAX_BYTES", "ImportPages", "RunForm", "import_routes"]

PROBLEMS_SHOWN = 500  # problems listed on the page (the count says how many in all)
UPLOAD_MAX_BYTES = MAX_BYTES + 64 * 1024  # the file plus the form's other fields


@dataclass(frozen=True)
class ImportPages:
    """One kind of import in the portal."""

    base: str  # "/clients/import"
    writer: ImportWriter[Any]
    title: str  # "Import clients"
    things: str  # "clients", as in "Import 12 client(s)"
    thing: str  # "client(s)"
    back: tuple[str, str]  # (href, label) of the list the rows go to
    section: str  # the navigation's section
    lede: str  # what the upload page says first
    hint: str  # what it says about the columns and matching
    download: str  # the template's file name


@dataclass
class RunForm:
    mode: str = ""


def import_routes(pages: ImportPages) -> list[HTTPRouteHandler]:
    kind = pages.writer.kind.name
    base = pages.base

    def admin(viewer: Viewer) -> Viewer:
        if not viewer.is_admin:
            raise Forbidden(f"only administrators import {pages.things}")
        return viewer

    def page(viewer: Viewer, template_name: str, status: int = 200, **context: Any) -> Template:
        with tenant_tx(viewer.tenant.slug) as tx:
            unread = unread_count(tx, viewer.user.id)
        return Template(template_name, status_code=status, context={
            "viewer": viewer, "unread": unread, "section": pages.section, "pages": pages,
            "columns": pages.writer.kind.columns, "required": pages.writer.kind.required,
            "max_mb": MAX_BYTES // 1_048_576, "max_rows": MAX_ROWS} | context)

    def job_of(viewer: Viewer, import_id: int) -> ImportJob:
        with tenant_tx(viewer.tenant.slug) as tx:
            return get_import(tx, import_id, kind)

    def stage(viewer: Viewer, filename: str, data: bytes) -> int:
        parsed = parse_csv(pages.writer.kind, data)
        with tenant_tx(viewer.tenant.slug) as tx:
            return stage_import(tx, pages.writer, filename, parsed)

    def launch(viewer: Viewer, import_id: int, attempt: int) -> Redirect:
        # The rows are written in the background, in one transaction; the page shows the progress.
        threading.Thread(target=run_import,
                         args=(viewer.tenant.slug, import_id, current_actor(), pages.writer, attempt),
                         name=f"import-{import_id}", daemon=True).start()
        return Redirect(f"{base}/{import_id}", status_code=HTTP_303_SEE_OTHER)

    @get(base, sync_to_thread=True)
    def import_page(viewer: CurrentViewer) -> Template:
        admin(viewer)
        return page(viewer, "import.html", error=None)

    @get(f"{base}/template.csv", sync_to_thread=False)
    def template(viewer: CurrentViewer) -> Response[bytes]:
        admin(viewer)
        return Response(pages.writer.kind.template.encode(), media_type="text/csv; charset=utf-8",
                        headers={"Content-Disposition": f'attachment; filename="{pages.download}"'})

    @post(base, request_max_body_size=UPLOAD_MAX_BYTES)
    async def upload(request: Request[Any, Any, Any], viewer: CurrentViewer) -> Template | Redirect:
        admin(viewer)
        form = await request.form()
        file = form.get("file")
        if file is None or isinstance(file, str):
            return await anyio.to_thread.run_sync(lambda: page(
                viewer, "import.html", HTTP_400_BAD_REQUEST, error="Choose a CSV file to upload."))
        data = await file.read()
        try:
            import_id = await anyio.to_thread.run_sync(stage, viewer, file.filename or f"{kind}.csv", data)
        except InvalidInput as problem:
            status = HTTP_413_REQUEST_ENTITY_TOO_LARGE if len(data) > MAX_BYTES else HTTP_400_BAD_REQUEST
            text = str(problem)
            return await anyio.to_thread.run_sync(lambda: page(
                viewer, "import.html", status, error=f"{text[:1].upper()}{text[1:]}."))
        return Redirect(f"{base}/{import_id}", status_code=HTTP_303_SEE_OTHER)

    @get(f"{base}/{{import_id:int}}", sync_to_thread=True)
    def import_report(viewer: CurrentViewer, import_id: FromPath[int]) -> Template:
        admin(viewer)
        job = job_of(viewer, import_id)
        return page(viewer, "import_report.html", job=job, problems=job.problems[:PROBLEMS_SHOWN])

    @get(f"{base}/{{import_id:int}}/progress", sync_to_thread=True)
    def import_progress(viewer: CurrentViewer, import_id: FromPath[int]) -> Template:
        """The progress block alone, polled by the report page while the import runs."""
        admin(viewer)
        return Template("_import_progress.html", context={"job": job_of(viewer, import_id), "pages": pages})

    @post(f"{base}/{{import_id:int}}/run", sync_to_thread=True)
    def run(viewer: CurrentViewer, import_id: FromPath[int],
            data: Annotated[RunForm, Body(media_type=RequestEncodingType.URL_ENCODED)]) -> Redirect:
        admin(viewer)
        with tenant_tx(viewer.tenant.slug) as tx:
            attempt = start_import(tx, import_id, kind, data.mode[:20])
        return launch(viewer, import_id, attempt)

    @post(f"{base}/{{import_id:int}}/resume", sync_to_thread=True)
    def resume(viewer: CurrentViewer, import_id: FromPath[int]) -> Redirect:
        """An interrupted import run again, with the same rows and choice."""
        admin(viewer)
        with tenant_tx(viewer.tenant.slug) as tx:
            attempt = resume_import(tx, import_id, kind)
        return launch(viewer, import_id, attempt)

    @post(f"{base}/{{import_id:int}}/restart", sync_to_thread=True)
    def restart(viewer: CurrentViewer, import_id: FromPath[int]) -> Redirect:
        """An interrupted import back to its report, to choose again."""
        admin(viewer)
        with tenant_tx(viewer.tenant.slug) as tx:
            restart_import(tx, import_id, kind)
        return Redirect(f"{base}/{import_id}", status_code=HTTP_303_SEE_OTHER)

    return [import_page, template, upload, import_report, import_progress, run, resume, restart]
