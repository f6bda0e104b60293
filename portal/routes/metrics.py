"""/metrics: this web process's Prometheus exposition (portal/metrics.py says what is in it).

Public like /healthz, so Prometheus scrapes it without a session; with METRICS_TOKEN set it
wants `Authorization: Bearer <token>` and refuses anything else with 401. It names no
tenant either way.
"""

from __future__ import annotations

import hmac
from typing import Any

from litestar import Request, get
from litestar.response import Response
from litestar.status_codes import HTTP_401_UNAUTHORIZED
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from prometheus_client.registry import CollectorRegistry

from portal.auth import PUBLIC
from portal.settings import PortalSettings

__all__ = ["metrics"]


def _authorised(header: str | None, token: str) -> bool:
    expected = f"Bearer {token}".encode()
    return header is not None and hmac.compare_digest(header.strip().encode(), expected)


@get("/metrics", opt={PUBLIC: True}, sync_to_thread=True)
def metrics(request: Request[Any, Any, Any]) -> Response[bytes]:
    portal_settings: PortalSettings = request.app.state.portal_settings
    token = portal_settings.metrics_token
    if token is not None and not _authorised(request.headers.get("authorization"), token):
        return Response(b"a valid bearer token is required\n", status_code=HTTP_401_UNAUTHORIZED,
                        media_type="text/plain", headers={"WWW-Authenticate": 'Bearer realm="metrics"'})
    registry: CollectorRegistry = request.app.state.metrics_registry
    # The process's own (HTTP latency, CPU, memory) and the product's, read now.
    return Response(generate_latest(REGISTRY) + generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
