"""The health check a load balancer or process manager polls."""

from __future__ import annotations

from litestar import get
from litestar.response import Response
from litestar.status_codes import HTTP_200_OK, HTTP_503_SERVICE_UNAVAILABLE

from db.errors import DatabaseUnavailable
from db.health import check_database
from portal.auth import PUBLIC


@get("/healthz", opt={PUBLIC: True}, sync_to_thread=True, media_type="text/plain")
def healthz() -> Response[str]:
    """200 "ok" when PostgreSQL answers a query, 503 when it does not. The failure is this
    route's answer rather than an error page, so it is returned, not raised."""
    try:
        check_database()
    except DatabaseUnavailable:
        return Response("database unavailable", status_code=HTTP_503_SERVICE_UNAVAILABLE)
    return Response("ok", status_code=HTTP_200_OK)
