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
from collections.abc import AsyncIterator, Iterator
from typing import TypeVar

import anyio
import anyio.to_thread
from litestar.types import ASGIApp, Receive, Scope, Send

from portal.settings import PortalSettings

log = logging.getLogger("tocsin.portal")

T = TypeVar("T")


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
