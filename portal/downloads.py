"""Long downloads with a deadline: a route that streams from the database (the ledger
export) ends when its time is up, however slowly its reader reads. A reader that stops
reading blocks the response's writes, not the code that produces the chunks, so the limit
is kept around the whole request (an ASGI middleware), not between chunks: when it passes,
the response is abandoned unfinished, the server closes the connection (the reader sees a
broken download, never a short file that looks whole), and the chunk source is closed,
which ends its transaction and gives back its connection.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any, TypeVar

import anyio
import anyio.to_thread
from litestar import Request
from litestar.response import Stream
from litestar.types import ASGIApp, Receive, Scope, Send

from db.evidence.audit import current_actor, record_audit_alone
from db.evidence.export_budget import ExportBudget, ExportSlot
from db.platform.tenancy import TenantTx
from domain.audit import Actor
from portal.settings import PortalSettings
from tocsin.core.clock import utcnow

__all__ = ["CSV_LINES_PER_CHUNK", "T", "csv_download", "download_time_limit", "in_threads"]

log = logging.getLogger("tocsin.portal")

T = TypeVar("T")
CSV_LINES_PER_CHUNK = 500  # lines per chunk written to the socket


def download_time_limit(app: ASGIApp) -> ASGIApp:
    """Route middleware: the whole request, body included, within EXPORT_SECONDS."""

    async def limited(scope: Scope, receive: Receive, send: Send) -> None:
        settings: PortalSettings = scope["litestar_app"].state["portal_settings"]
        with anyio.move_on_after(settings.export_seconds) as deadline:
            await app(scope, receive, send)
        if deadline.cancelled_caught:
            log.warning("download %s stopped after its limit of %s seconds; connection closed",
                        scope["path"], settings.export_seconds)

    return limited


async def in_threads(chunks: Iterator[T]) -> AsyncIterator[T]:
    """A blocking chunk source (a database cursor) read in worker threads, and closed in
    one however the download ends: finished, abandoned by its reader, or out of time.
    (Litestar's own wrapper leaves closing to the garbage collector, on the event loop.)"""
    try:
        while (chunk := await anyio.to_thread.run_sync(next, chunks, None)) is not None:
            yield chunk
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            with anyio.CancelScope(shield=True):
                try:
                    await anyio.to_thread.run_sync(close)
                except Exception:
                    # The download is over either way (a connection the server already
                    # ended cannot roll back): note it, do not turn it into a second error.
                    log.exception("closing an abandoned download failed")


@dataclass(frozen=True)
class _ExportAudit:
    tenant_slug: str
    what: str
    query: str
    actor: Actor


def _csv_chunks(slot: ExportSlot, lines_of: Callable[[TenantTx], Iterator[str]],
                audit: _ExportAudit) -> Iterator[str]:
    """The CSV in chunks, read from the cursor as the socket takes them, on one of the
    exports' own connections; the transaction stays open for the stream's length (within
    the export budget's limits) and closes, giving back the slot, however it ends. The
    export is in the audit log before its first byte (in a transaction of its own: the
    export's reads may be on a read-only replica)."""
    try:
        record_audit_alone(audit.tenant_slug, f"export.{audit.what}", "export", audit.what,
                           after={"query": audit.query}, actor=audit.actor)
        with slot.transaction() as tx:
            lines = lines_of(tx)
            while chunk := "".join(islice(lines, CSV_LINES_PER_CHUNK)):
                yield chunk
    finally:
        slot.release()


def csv_download(request: Request[Any, Any, Any], tenant_slug: str, what: str,
                 lines_of: Callable[[TenantTx], Iterator[str]]) -> Stream:
    """A CSV export (the ledger, the obligations) as a streamed attachment within the
    export budget: 429 or 503 before any byte when the budget is spent."""
    budget: ExportBudget = request.app.state["export_budget"]
    slot = budget.reserve(tenant_slug)
    stamp = utcnow().strftime("%Y%m%d-%H%M%S")
    return Stream(
        in_threads(_csv_chunks(slot, lines_of, _ExportAudit(
            tenant_slug, what, request.scope.get("query_string", b"").decode("latin-1")[:1000],
            current_actor()))),
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition":
                 f'attachment; filename="tocsin-{what}-{tenant_slug}-{stamp}.csv"'},
    )
