"""The events API: `POST /api/v1/events` and `POST /api/v1/events/batch` (up to 500).

Authenticated by `Authorization: Bearer <key>` (a tenant API key; the key alone decides the
tenant), never by a session, and outside CSRF (no cookie is involved); a key sent in the
query string is refused (URLs end up in logs). Answers are JSON: 201 with the recorded ids;
400 for a body that is not JSON, nests deeper than MAX_JSON_DEPTH (checked before it is
parsed) or holds a number out of range; 401 for a missing, wrong or revoked key; 422 naming
the path of every problem (a batch is all or nothing); 429 with Retry-After over the key's
or the tenant's rate, or after too many wrong keys from one address. `Idempotency-Key` makes
a request safe to repeat: the same request is answered as the first time (header
`Idempotent-Replayed: true`), a different one under the same key is refused (422).
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from dataclasses import dataclass, field
from typing import Annotated, Any

import anyio.to_thread
import msgspec
from litestar import Request, Response, Router, post
from litestar.connection import ASGIConnection
from litestar.exceptions import HTTPException, ValidationException
from litestar.handlers.base import BaseRouteHandler
from litestar.openapi.datastructures import ResponseSpec
from litestar.openapi.spec import Components, SecurityScheme
from litestar.params import Body, HeaderParameter

from db.events.api_idempotency import Answer, answer_once
from db.events.api_keys import CallerKey, recognise_key
from db.events.outbox import Recorded, record_events
from db.evidence.audit import record_audit, set_actor
from db.platform.errors import DatabaseUnavailable, NotMigrated
from db.platform.tenancy import TenantTx, tenant_tx
from domain.audit import Actor, ActorKind
from domain.errors import Busy, InvalidInput, NotFound
from domain.events.intake import BATCH_LIMIT, EventIn, InvalidEvents, Problem, parse_batch, parse_event
from domain.events.json_input import MAX_JSON_DEPTH, NUMBER_WORDS, InvalidJson, body_problem
from portal.auth import PUBLIC, UnknownParameter
from portal.client_address import client_address
from portal.ratelimit import ApiKeyFailures, ApiKeyRateLimit
from portal.redaction import secret_query_names
from portal.settings import PortalSettings

__all__ = [
    "BATCH_MAX_BODY",
    "BEARER",
    "CALLER",
    "EVENT_DOC",
    "EVENT_MAX_BODY",
    "KEY_FAILURES",
    "KEY_IN_QUERY",
    "RATE_LIMIT",
    "SECURITY_COMPONENTS",
    "BatchOut",
    "ErrorOut",
    "IdempotencyKey",
    "KeyRefused",
    "ProblemOut",
    "RecordedOut",
    "api_error",
    "record_batch_request",
    "record_event_request",
    "refuse_hostile_json",
    "requires_api_key",
    "router",
]

log = logging.getLogger("tocsin.events_api")

CALLER = "tocsin.api_key"  # connection-state key of the request's CallerKey
RATE_LIMIT = "api_rate_limit"  # app-state key of the ApiKeyRateLimit
KEY_FAILURES = "api_key_failures"  # app-state key of the ApiKeyFailures
EVENT_MAX_BODY = 256 * 1024  # bytes of one event's body
BATCH_MAX_BODY = 4 * 1024 * 1024  # bytes of a batch of 500 events
BEARER = "bearer"  # the OpenAPI security scheme's name
KEY_IN_QUERY = ("an API key is never sent in the URL (URLs are written to logs and proxies): send "
                "it as the header `Authorization: Bearer <key>`, and revoke a key that was sent so")

EVENT_DOC = """One event about a subject of a product:

    {"product": "fraud", "type": "created" | "updated", "trigger": "assigned" (updates only),
     "occurred_at": "2024-05-01T09:30:00Z" (optional; default: now),
     "subject": {"kind": "case", "external_id": "C-1042", "title": "...",
                 "time_zone": "Europe/London", "status": "open",
                 "assignees": ["ana@example.com"],          (replaces the assignees)
                 "hierarchy": {"region": "north"},           (unit codes; replaces those levels)
                 "fields": {"amount": 1500000},              (merged)
                 "forms": {"intake": {"q1": "yes"}}},        (merged)
     "changes": {"field.x": {"from": 1, "to": 2}} (optional, explicit),
     "metadata": {"form": "intake"} (optional)}

The changes of an update are computed from the subject register for every fact it sets."""


@dataclass(frozen=True)
class ProblemOut:
    path: str
    message: str


@dataclass(frozen=True)
class ErrorOut:
    error: str  # unauthorized, bad_request, invalid, rate_limited, ...
    message: str
    problems: list[ProblemOut] = field(default_factory=list)
    invalid_indexes: list[int] = field(default_factory=list)  # a batch's invalid events


@dataclass(frozen=True)
class RecordedOut:
    event_id: int
    subject_id: int


@dataclass(frozen=True)
class BatchOut:
    results: list[RecordedOut]  # in the order of the request's events


class KeyRefused(Exception):
    """No key, or not a live one."""


async def refuse_hostile_json(request: Request[Any, Any, Any]) -> None:
    """The router's before-request hook, after the key's guard and before the body is
    parsed: a body nested deeper than MAX_JSON_DEPTH (the parser, and every walk of what it
    returns, recurses once per level) or holding NaN or Infinity is refused with a plain
    message. Judged in a thread: a 4 MiB body is a tenth of a second of scanning the event
    loop must not wait for."""
    body = await request.body()
    problem = await anyio.to_thread.run_sync(body_problem, body)
    if problem is not None:
        raise InvalidJson(problem)


async def requires_api_key(connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler) -> None:
    """The router's guard, before the body is read: the bearer key must be a live one. An
    address that presented too many wrong keys lately is refused before its key is looked
    up (portal/ratelimit.py ApiKeyFailures)."""
    scheme, _, key = connection.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise KeyRefused("send your API key as `Authorization: Bearer <key>`")
    settings: PortalSettings = connection.app.state.portal_settings
    address = client_address(connection.client.host if connection.client else None,
                             connection.headers.get("x-forwarded-for"), settings.trusted_proxies)
    failures: ApiKeyFailures = connection.app.state[KEY_FAILURES]
    caller = await anyio.to_thread.run_sync(_recognised, key.strip(), address, failures)
    if caller is None:
        raise KeyRefused("this API key is not valid (wrong, or revoked)")
    connection.state[CALLER] = caller
    set_actor(Actor(ActorKind.API_KEY, f"api_key:{caller.id}", None, address))


def _recognised(key: str, address: str, failures: ApiKeyFailures) -> CallerKey | None:
    failures.check(address)
    caller = recognise_key(key)
    if caller is None:
        failures.record_failure(address)
    return caller


def _request_hash(path: str, data: object) -> str:
    """The request as JSON with sorted keys: the same request however its JSON was spaced
    or ordered. Encoded by msgspec, in C (a batch of 500 events took json.dumps ~10 ms)."""
    canonical = msgspec.json.encode(data, order="sorted")
    return hashlib.sha256(path.encode() + b"\n" + canonical).hexdigest()


def _answer(request: Request[Any, Any, Any], data: object, events: list[EventIn], prefixes: list[str],
            idempotency_key: str | None, shape: Any) -> Response[Any]:
    caller: CallerKey = request.state[CALLER]
    if idempotency_key is not None and not 1 <= len(idempotency_key) <= 255:
        raise InvalidEvents([Problem("Idempotency-Key", "must be 1 to 255 characters")])
    limit: ApiKeyRateLimit = request.app.state[RATE_LIMIT]
    limit.spend(caller.id, caller.tenant_slug, len(events))

    # Only a request that may be repeated needs its fingerprint.
    request_hash = "" if idempotency_key is None else _request_hash(request.url.path, data)
    # One transaction: the idempotency record, the subject register and the event rows.
    with tenant_tx(caller.tenant_slug, generic_plans=True) as tx:
        answer = answer_once(tx, caller.id, idempotency_key, request_hash,
                             lambda: Answer(201, shape(_recorded(tx, events, prefixes, idempotency_key))))
    headers = {"Idempotent-Replayed": "true"} if answer.replayed else {}
    return Response(answer.body, status_code=answer.status, headers=headers)


def _recorded(tx: TenantTx, events: list[EventIn], prefixes: list[str],
              idempotency_key: str | None) -> list[Recorded]:
    """The events, with one audit row for the request (not one per event: a batch of 500 is
    one action of its key)."""
    recorded = record_events(tx, events, "api", prefixes)
    ids = [r.event_id for r in recorded]
    record_audit(tx, "events.record", "event", ids[0] if ids else None,
                 after={"count": len(ids), "first_event_id": min(ids, default=None),
                        "last_event_id": max(ids, default=None),
                        "idempotency_key": idempotency_key})
    return recorded


_ERRORS = {
    401: ResponseSpec(ErrorOut, description="No API key, or not a live one (wrong or revoked)"),
    400: ResponseSpec(ErrorOut, description=f"The body is not JSON, nests arrays and objects more than "
                                            f"{MAX_JSON_DEPTH} deep, or holds NaN, Infinity or a number "
                                            "out of range"),
    422: ResponseSpec(ErrorOut, description="Invalid events: every problem with its path; nothing "
                                            "is written. Also an Idempotency-Key reused for another request"),
    429: ResponseSpec(ErrorOut, description="Over the key's or its tenant's rate, or too many wrong keys "
                                            "from this address: try again after Retry-After seconds"),
}
IdempotencyKey = Annotated[str | None, HeaderParameter(
    name="Idempotency-Key", required=False,
    description="Makes the request safe to repeat: the same request gets the first answer again "
                "(with Idempotent-Replayed: true); a different one under the same key is refused")]


@post("/events", sync_to_thread=True, status_code=201, request_max_body_size=EVENT_MAX_BODY,
      summary="Record one event", description=EVENT_DOC, responses=_ERRORS,
      security=[{BEARER: []}], tags=["events"])
def record_event_request(request: Request[Any, Any, Any],
                         data: Annotated[dict[str, Any], Body(description=EVENT_DOC)],
                         idempotency_key: IdempotencyKey = None) -> Response[RecordedOut]:
    event, problems = parse_event(data)
    if event is None:
        raise InvalidEvents(problems)
    return _answer(request, data, [event], [""], idempotency_key, lambda recorded: recorded[0].as_json())


@post("/events/batch", sync_to_thread=True, status_code=201, request_max_body_size=BATCH_MAX_BODY,
      summary=f"Record up to {BATCH_LIMIT} events, all or none",
      description='`{"events": [event, ...]}`; each event as for POST /api/v1/events. The answer '
                  "lists, in order, each event's id; with any invalid event, nothing is written "
                  "and the 422 lists every invalid index.",
      responses=_ERRORS, security=[{BEARER: []}], tags=["events"])
def record_batch_request(request: Request[Any, Any, Any],
                         data: Annotated[dict[str, Any], Body(description='{"events": [event, ...]}')],
                         idempotency_key: IdempotencyKey = None) -> Response[BatchOut]:
    events, problems = parse_batch(data)
    if problems:
        raise InvalidEvents(problems)
    return _answer(request, data, events, [f"events[{n}]." for n in range(len(events))], idempotency_key,
                   lambda recorded: {"results": [r.as_json() for r in recorded]})


# -- errors, as JSON -----------------------------------------------------------------------


def _error(status: int, error: str, message: str, headers: dict[str, str] | None = None,
           problems: list[Problem] | None = None) -> Response[dict[str, Any]]:
    body: dict[str, Any] = {"error": error, "message": message}
    if problems is not None:
        body["problems"] = [p.as_json() for p in problems]
        indexes = sorted({int(p.path[7:p.path.index("]")]) for p in problems if p.path.startswith("events[")})
        if indexes:
            body["invalid_indexes"] = indexes
    return Response(body, status_code=status, headers=headers or {})


def api_error(request: Request[Any, Any, Any], exc: Exception) -> Response[dict[str, Any]]:
    """Every error of the events API, as JSON (never the portal's HTML pages)."""
    if isinstance(exc, KeyRefused):
        return _error(401, "unauthorized", str(exc), {"WWW-Authenticate": 'Bearer realm="tocsin"'})
    if isinstance(exc, UnknownParameter):  # the portal's app-wide guard, before the key's
        if secret_query_names(request.query_params.keys()):
            return _error(400, "bad_request", KEY_IN_QUERY)
        return _error(400, "bad_request", f"unknown query parameter: {exc}")
    if isinstance(exc, InvalidJson):
        return _error(400, "bad_request", str(exc))
    if isinstance(exc, InvalidEvents):
        return _error(422, "invalid", str(exc), problems=exc.problems)
    if isinstance(exc, InvalidInput):
        return _error(422, "invalid", str(exc))
    if isinstance(exc, NotFound):  # the key's tenant vanished between the two transactions
        return _error(401, "unauthorized", "this API key is not valid (wrong, or revoked)")
    if isinstance(exc, Busy):
        return _error(429 if exc.own_share else 503, "rate_limited" if exc.own_share else "busy",
                      str(exc), {"Retry-After": str(exc.retry_after)})
    if isinstance(exc, ValidationException):
        return _error(400, "bad_request", "the body must be a JSON object")
    if isinstance(exc, HTTPException) and exc.status_code == 413:
        return _error(413, "too_large", "the body is larger than this endpoint takes")
    if isinstance(exc, HTTPException) and 400 <= exc.status_code < 500:
        if "out of range" in str(exc.detail):  # msgspec's words for 1e999 or 5,000 digits
            return _error(exc.status_code, "bad_request", f"the body holds a number out of range: "
                                                          f"{NUMBER_WORDS}")
        return _error(exc.status_code, "bad_request", str(exc.detail))
    reference = secrets.token_hex(4).upper()
    log.error("events API error %s on %s %s", reference, request.method, request.url.path, exc_info=exc)
    if isinstance(exc, DatabaseUnavailable | NotMigrated):
        return _error(503, "unavailable", f"the database is unreachable; try again (reference {reference})",
                      {"Retry-After": "30"})
    return _error(500, "internal", f"something went wrong on our side (reference {reference})")


SECURITY_COMPONENTS = Components(security_schemes={
    BEARER: SecurityScheme(type="http", scheme="bearer", description="A tenant API key (tsk_...)")})

router = Router(
    path="/api/v1", route_handlers=[record_event_request, record_batch_request],
    guards=[requires_api_key], before_request=refuse_hostile_json, opt={PUBLIC: True},
    exception_handlers={Exception: api_error},
)
