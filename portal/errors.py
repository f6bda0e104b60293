"""Every error becomes a response here, and only here: domain errors and HTTP errors get a
page a person can act on, anything unexpected a friendly 500 with a reference that is logged
with its traceback. Stack traces and internal codes never reach the browser."""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode, urlsplit

from litestar import Request, Response
from litestar.datastructures import Cookie
from litestar.exceptions import (
    HTTPException,
    NotAuthorizedException,
    PermissionDeniedException,
    ValidationException,
)
from litestar.response import Redirect, Template
from litestar.status_codes import (
    HTTP_303_SEE_OTHER,
    HTTP_401_UNAUTHORIZED,
    HTTP_402_PAYMENT_REQUIRED,
    HTTP_403_FORBIDDEN,
)
from litestar.types import ExceptionHandlersMap

from db.platform.errors import DatabaseUnavailable, NotMigrated
from domain.errors import Busy, Conflict, Forbidden, InvalidInput, NotFound
from domain.messages import N_
from domain.notices.licence import RenewalRefused
from portal.auth import AccessPaused, MustEnrol, UnknownParameter, login_url, requested_path, safe_next
from portal.language import error_text
from portal.sign_in_flow import TWO_FACTOR_SETUP_PATH

__all__ = [
    "BAD_REQUEST",
    "FORM_EXPIRED",
    "NOT_FOUND",
    "AnyRequest",
    "ErrorPage",
    "error_page_for",
    "exception_handlers",
    "handle_exception",
    "wall_url",
]

log = logging.getLogger("tocsin.portal")

AnyRequest = Request[Any, Any, Any]


@dataclass(frozen=True)
class ErrorPage:
    status: int
    title: str
    message: str
    reference: str | None = None
    retry_after: int | None = None  # seconds, sent as Retry-After
    # The message's {placeholders}: the page translates title and message (marked N_ here)
    # into the reader's language, then fills them. A message without values is shown as it is
    # when the catalogs do not know it (a domain error's own words).
    values: dict[str, str] = field(default_factory=dict)


NOT_FOUND = ErrorPage(
    404, N_("We couldn't find that page"),
    N_("The link may be out of date, or the page may belong to another account."),
)
FORM_EXPIRED = ErrorPage(
    403, N_("This page has expired"),
    N_("For your security, forms expire after a while. Reload the page and try again."),
)
BAD_REQUEST = ErrorPage(
    400, N_("We couldn't understand that request"),
    N_("Check the address or go back and try again."),
)


def _is_htmx(request: AnyRequest) -> bool:
    return request.headers.get("hx-request") == "true"


def _reference() -> str:
    return secrets.token_hex(4).upper()


def _invalid_fields(request: AnyRequest, exc: ValidationException) -> list[str]:
    """The query or form fields Litestar could not convert (a letter where a number goes),
    by the names the address or form uses (a parameter's alias, not its Python name)."""
    extra = exc.extra if isinstance(exc.extra, list) else []
    keys = {str(e["key"]) for e in extra if isinstance(e, dict) and e.get("key")}
    handler = request.scope.get("route_handler")  # absent if routing itself failed
    parameters = handler.parsed_fn_signature.parameters if handler is not None else {}
    names = set()
    for key in keys:
        field = parameters.get(key)
        definition = field.kwarg_definition if field is not None else None
        alias = getattr(definition, "name", None) or getattr(definition, "query", None)
        names.add(str(alias or key)[:40])
    return sorted(names)[:3]


def error_page_for(request: AnyRequest, exc: Exception) -> ErrorPage:
    if isinstance(exc, NotFound):
        return NOT_FOUND
    if isinstance(exc, Forbidden):
        return ErrorPage(403, N_("That page is for administrators"),
                         f"{str(exc)[:1].upper()}{str(exc)[1:]}.")
    if isinstance(exc, UnknownParameter):
        return ErrorPage(
            400, BAD_REQUEST.title,
            N_("This page doesn\u2019t take the option “{option}”. Check the address and try again."),
            values={"option": str(exc)},
        )
    if isinstance(exc, InvalidInput):  # in the reader's language when it is a catalog message
        return ErrorPage(400, N_("That didn't work"), f"{error_text(request, exc)}.")
    if isinstance(exc, RenewalRefused):
        return ErrorPage(403, N_("Renewal isn't available"), f"{str(exc)[:1].upper()}{str(exc)[1:]}.")
    if isinstance(exc, Conflict):
        return ErrorPage(409, N_("That already exists"), f"{str(exc)[:1].upper()}{str(exc)[1:]}.")
    if isinstance(exc, Busy):
        return ErrorPage(
            429 if exc.own_share else 503,
            N_("Too many at once") if exc.own_share else N_("Tocsin is busy"),
            f"{str(exc)[:1].upper()}{str(exc)[1:]}.", retry_after=exc.retry_after,
        )
    if isinstance(exc, PermissionDeniedException):
        return FORM_EXPIRED
    if isinstance(exc, HTTPException) and exc.status_code == 404:
        return NOT_FOUND
    if isinstance(exc, HTTPException) and exc.status_code == 405:
        return ErrorPage(405, N_("That action isn't available here"), N_("Go back and try again."))
    if isinstance(exc, HTTPException) and exc.status_code == 413:
        return ErrorPage(
            413, N_("That request is too large"),
            N_("What you sent is larger than any form of Tocsin takes. Go back and try again."),
        )
    if isinstance(exc, ValidationException) and _invalid_fields(request, exc):
        names = ", ".join(f"“{name}”" for name in _invalid_fields(request, exc))
        return ErrorPage(
            400, BAD_REQUEST.title,
            N_("We couldn\u2019t read {names}: check the address or the form and try again."),
            values={"names": names},
        )
    if isinstance(exc, HTTPException) and 400 <= exc.status_code < 500:
        return ErrorPage(exc.status_code, BAD_REQUEST.title, BAD_REQUEST.message)
    reference = _reference()
    log.error(
        "portal error %s on %s %s", reference, request.method, request.url.path, exc_info=exc
    )
    if isinstance(exc, DatabaseUnavailable | NotMigrated):
        return ErrorPage(
            503, N_("Tocsin is temporarily unavailable"),
            N_("We can't reach our database right now. Please try again in a few minutes."),
            reference,
        )
    return ErrorPage(
        500, N_("Something went wrong on our side"),
        N_("It's not something you did. Please try again; if it keeps happening, "
           "tell your administrator the reference below."),
        reference,
    )


def _htmx_current_path(request: AnyRequest) -> str:
    current = urlsplit(request.headers.get("hx-current-url", ""))
    return current.path + (f"?{current.query}" if current.query else "")


def wall_url(next_path: str) -> str:
    target = safe_next(next_path)
    return "/renew" if target == "/" else "/renew?" + urlencode({"next": target})


def _wall(request: AnyRequest, exc: AccessPaused) -> Response[Any]:
    """The Annual License Expired wall: 402 for htmx (which is sent to the wall page) and
    for any other method; a page navigation gets the wall itself, with renewal bringing the
    user back to the page they asked for."""
    if _is_htmx(request):
        return Response(
            content="", status_code=HTTP_402_PAYMENT_REQUIRED,
            headers={"HX-Redirect": wall_url(_htmx_current_path(request))},
        )
    back = requested_path(request) if request.method in ("GET", "HEAD") else "/"
    return Template(
        "wall.html", status_code=HTTP_402_PAYMENT_REQUIRED,
        context={"viewer": exc.viewer, "client": exc.viewer.client, "next": safe_next(back),
                 "walled": True},
    )


def _signed_out(request: AnyRequest) -> Response[Any]:
    """No (or no longer a) signed-in user: htmx is told to load the login page, a browser
    is sent there and brought back afterwards."""
    if _is_htmx(request):
        return Response(
            content="", status_code=HTTP_401_UNAUTHORIZED,
            headers={"HX-Redirect": login_url(_htmx_current_path(request))},
        )
    back = requested_path(request) if request.method in ("GET", "HEAD") else "/"
    return Redirect(login_url(back), status_code=HTTP_303_SEE_OTHER)


_EXPIRED_CSRF = Cookie(key="tocsin_csrf", value="", max_age=0, expires=0, httponly=True, samesite="lax")


def _enrol_first(request: AnyRequest) -> Response[Any]:
    """Two-factor is required of this admin and not set up yet: to its set-up page."""
    if _is_htmx(request):
        return Response(content="", status_code=HTTP_403_FORBIDDEN,
                        headers={"HX-Redirect": TWO_FACTOR_SETUP_PATH})
    return Redirect(TWO_FACTOR_SETUP_PATH, status_code=HTTP_303_SEE_OTHER)


def handle_exception(request: AnyRequest, exc: Exception) -> Response[Any]:
    if isinstance(exc, NotAuthorizedException):
        return _signed_out(request)
    if isinstance(exc, MustEnrol):
        return _enrol_first(request)
    if isinstance(exc, AccessPaused):
        return _wall(request, exc)
    page = error_page_for(request, exc)
    headers = {} if page.retry_after is None else {"Retry-After": str(page.retry_after)}
    # A CSRF cookie that no longer verifies (signed before a key rotation) would be reused by
    # every page as it is: drop it, so that reloading the page mints a fresh one.
    cookies = [_EXPIRED_CSRF] if page is FORM_EXPIRED else []
    if _is_htmx(request):
        # htmx swaps error responses (see the htmx-config meta tag) into the page's flash
        # region instead of the element that asked.
        return Template(
            "_flash.html", context={"page": page}, status_code=page.status,
            headers={"HX-Retarget": "#flash", "HX-Reswap": "innerHTML", **headers}, cookies=cookies,
        )
    return Template("error.html", context={"page": page}, status_code=page.status, headers=headers,
                    cookies=cookies)


exception_handlers: ExceptionHandlersMap = {Exception: handle_exception}
