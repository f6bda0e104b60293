"""Two health checks, for two audiences.

- /readyz: can this web process serve pages? 200 "ok" when PostgreSQL answers, 503 when it
  does not. For load balancers and process managers (and the tests that start a portal):
  a stopped worker must not take the web out of rotation.
- /healthz: is the whole product working? The `tocsin status` verdict as JSON: 200 with
  status "ok", or 503 with status "degraded" and the problems, when a queue has no live
  consumer, a tenant's sweep is overdue, or PostgreSQL or Redis does not answer. For
  monitoring and alerting. Public, so it names queues but no tenant (slugs are what people
  type to sign in): per-tenant detail is in `tocsin status`.

A failure is the route's answer rather than an error page, so it is returned, not raised.
"""

from __future__ import annotations

import logging
from typing import Any

from litestar import Request, get
from litestar.response import Response
from litestar.status_codes import HTTP_200_OK, HTTP_503_SERVICE_UNAVAILABLE

from db.platform.errors import DatabaseUnavailable
from db.platform.health import check_database
from domain.liveness import RunKind
from portal.auth import PUBLIC
from tocsin.core.settings import Settings
from tocsin.messaging.queues import QueueInspector, QueuesUnavailable
from tocsin.monitoring.status import MachineryStatus, machinery_status

__all__ = ["healthz", "readyz"]

log = logging.getLogger("tocsin.health")


@get("/readyz", opt={PUBLIC: True}, sync_to_thread=True, media_type="text/plain")
def readyz() -> Response[str]:
    try:
        check_database()
    except DatabaseUnavailable:
        return Response("database unavailable", status_code=HTTP_503_SERVICE_UNAVAILABLE)
    return Response("ok", status_code=HTTP_200_OK)


def _verdict(status: MachineryStatus) -> dict[str, Any]:
    sweep_ages = [t.age(RunKind.SWEEP) for t in status.tenants]
    overdue = sum(t.sweep_overdue for t in status.tenants)
    known = [a.total_seconds() for a in sweep_ages if a is not None]
    return {
        "status": "ok" if status.ok else "degraded",
        "problems": [*status.queue_problems,
                     *([f"{overdue} tenant(s) have an overdue sweep"] if overdue else [])],
        "queues": [
            {"name": q.name, "ready": q.ready, "delayed": q.delayed,
             "oldest_age_seconds": None if q.oldest_age_seconds is None else round(q.oldest_age_seconds, 1),
             "consumers": q.consumers, "unconsumed": q.unconsumed}
            for q in status.queues
        ],
        "tenants": {
            "active": len(status.tenants),
            "sweep_overdue": overdue,
            "never_swept": sum(a is None for a in sweep_ages),
            "oldest_sweep_age_seconds": round(max(known), 1) if known else None,
            "sweep_overdue_after_seconds": int(status.sweep_overdue_after.total_seconds()),
        },
    }


def _unavailable(service: str, error: Exception) -> Response[dict[str, Any]]:
    # The details (hosts, addresses) go to the log, not to an anonymous caller.
    log.warning("/healthz: %s", error)
    return Response({"status": "degraded", "problems": [f"{service} did not answer"]},
                    status_code=HTTP_503_SERVICE_UNAVAILABLE)


@get("/healthz", opt={PUBLIC: True}, sync_to_thread=True)
def healthz(request: Request[Any, Any, Any]) -> Response[dict[str, Any]]:
    settings: Settings = request.app.state.settings
    inspector: QueueInspector = request.app.state.queue_inspector
    try:
        status = machinery_status(inspector, settings.sweep_interval_seconds)
    except DatabaseUnavailable as error:
        return _unavailable("PostgreSQL", error)
    except QueuesUnavailable as error:
        return _unavailable(error.service, error)
    body = _verdict(status)
    return Response(body, status_code=HTTP_200_OK if status.ok else HTTP_503_SERVICE_UNAVAILABLE)
