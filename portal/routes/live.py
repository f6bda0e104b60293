"""The inbox's event stream (Server-Sent Events): tells an open inbox page that its reader
has something new, so the page fetches it at once instead of at its next poll.

The stream carries no notification and no count, only "look now" (event `inbox`); the page
then asks /inbox/newer, the same request its poll makes, guarded like every other. So a
stream that is blocked, dropped or never opened costs liveness only, and a stream that
outlives its session shows nothing: the fetch it prompts needs a signed-in reader.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from litestar import Request, get
from litestar.exceptions import NotFoundException, ServiceUnavailableException
from litestar.response import ServerSentEvent, ServerSentEventMessage

from portal.auth import CurrentViewer
from portal.live import InboxListener, ListenerUnavailable, Watch
from portal.settings import PortalSettings

__all__ = ["EVENT", "HEARTBEAT_SECONDS", "RETRY_MILLISECONDS", "inbox_events", "inbox_stream"]

EVENT = "inbox"  # the page listens with hx-trigger="sse:inbox"
HEARTBEAT_SECONDS = 15.0  # a comment this often keeps proxies from closing an idle stream
RETRY_MILLISECONDS = 3_000  # how long the browser waits before reconnecting an ended stream


async def inbox_events(watch: Watch, lifetime: float) -> AsyncIterator[ServerSentEventMessage]:
    """`inbox` at once (anything committed between the page's render and this subscription
    is fetched), then once per message naming this reader; heartbeats between; the stream
    ends after ``lifetime`` seconds and the browser opens a new one."""
    arrived = watch.event
    try:
        yield ServerSentEventMessage(data=None, comment="watching", retry=RETRY_MILLISECONDS)
        arrived.set()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + lifetime
        while (left := deadline - loop.time()) > 0:
            try:
                await asyncio.wait_for(arrived.wait(), min(HEARTBEAT_SECONDS, left))
            except TimeoutError:
                yield ServerSentEventMessage(data=None, comment="heartbeat")
                continue
            arrived.clear()
            yield ServerSentEventMessage(event=EVENT, data="new")
    finally:
        watch.close()


@get("/inbox/stream")
async def inbox_stream(request: Request[Any, Any, Any], viewer: CurrentViewer) -> ServerSentEvent:
    settings: PortalSettings = request.app.state["portal_settings"]
    listener: InboxListener = request.app.state["inbox_listener"]
    if not settings.live_push:
        raise NotFoundException("live push is switched off; the inbox polls")
    try:
        await listener.start()
    except ListenerUnavailable as error:
        # The page's EventSource retries with a growing pause; its poll carries on meanwhile.
        raise ServiceUnavailableException(str(error)) from None
    # Over the cap: 429 or 503, which ends the page's EventSource; the htmx SSE extension
    # tries again later (backing off up to about a minute), and the page's poll carries on.
    watch = listener.admit(viewer.tenant.slug, viewer.user.id)
    return ServerSentEvent(inbox_events(watch, settings.inbox_stream_seconds))
