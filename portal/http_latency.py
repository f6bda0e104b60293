"""HTTP latency by route: a Prometheus histogram filled by a small pure ASGI middleware.

Labels: method, route (the template Litestar matched, /clients/{client_id}, never the raw
path) and status. Litestar's Prometheus plugin did the same at a cost that dominated the
badge's tail under 200 pollers (it built a Request, two label dicts and four metric lookups,
and kept an in-progress gauge, on every request); this one reads the template Litestar's
router already put in the scope and finds the histogram's child for (method, route, status)
with one dict lookup once the first such request has made it.

Left out: the scrapes (/metrics); unknown paths (404 probes), which have no template and
would let anyone add label values; and the live inbox stream, open for minutes by design
(tocsin_sse_connections counts those).
"""

from __future__ import annotations

import time
from typing import Any

from litestar.enums import ScopeType
from litestar.types import ASGIApp, Message, Receive, Scope, Send
from prometheus_client import Histogram

__all__ = ["HTTP_REQUEST_SECONDS", "NOT_TIMED", "HttpLatency"]

NOT_TIMED = frozenset({"/metrics", "/inbox/stream"})  # route templates

# In the process's default registry, which /metrics exports beside the portal's own.
HTTP_REQUEST_SECONDS = Histogram(
    "tocsin_http_request_duration_seconds",
    "Time from a request reaching the route's middleware to its response being sent "
    "(seconds), by method, route template and status; its _count counts the requests.",
    ["method", "route", "status"],
)

# (method, route, status) -> the histogram's child for those labels, made once each. The
# keys come from a short fixed set (routes are templates, methods the ones routes take).
_children: dict[tuple[str, str, int], Any] = {}


def _child(method: str, route: str, status: int) -> Any:
    key = (method, route, status)
    child = _children.get(key)
    if child is None:
        child = _children[key] = HTTP_REQUEST_SECONDS.labels(method, route, str(status))
    return child


class HttpLatency:
    """Litestar route middleware (first in the app's list, so it sees the answer the
    exception handlers made of a guard's or a handler's error)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = scope.get("path_template")
        if scope["type"] != ScopeType.HTTP or route is None or route in NOT_TIMED:
            await self.app(scope, receive, send)
            return
        method = scope["method"]
        started = time.perf_counter()
        status = 500  # unless a response starts: an error that escaped every handler

        async def timed_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, timed_send)
        finally:
            _child(method, route, status).observe(time.perf_counter() - started)
