"""An administrator's session on the real portal for the fuzz tests: signed in once, the
CSRF token sent as a header on every request (so generated forms reach their handlers), and
every response counted in the tally."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import httpx

from tests.fuzz.budget import TALLY
from tests.integration.portal_support import (
    People,
    PortalClient,
    csrf_token,
    forget_sign_in_failures,
    sign_in,
)

# Routes no generated input reaches: an endless event stream, and signing out (which would
# end the session every later request needs; it takes no input).
SKIPPED_ROUTES = frozenset({("GET", "/inbox/stream"), ("POST", "/logout")})


def as_text(value: object) -> str:
    """A generated value as a browser would send it in a query or form field."""
    if isinstance(value, str):
        return value
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, ensure_ascii=False)


def as_fields(values: Mapping[str, object]) -> list[tuple[str, str]]:
    """Fields for a query string or form body; a list becomes a repeated field."""
    fields: list[tuple[str, str]] = []
    for name, value in values.items():
        for item in value if isinstance(value, list) else [value]:
            fields.append((name, as_text(item)))
    return fields


def _utf8(text: str) -> str:
    # Lone surrogates cannot travel over HTTP at all: sent as the replacement character.
    return text.encode("utf-8", "replace").decode("utf-8")


class FuzzClient:
    def __init__(self, portal: PortalClient, people: People):
        self.portal = portal
        self.people = people
        self.sign_in()

    def sign_in(self) -> None:
        forget_sign_in_failures()
        self.portal.cookies.clear()
        # The old session's token would be sent with the sign-in and refused (a header wins
        # over the form's field): POST /login/sso sends a signed-in session to /login too.
        self.portal.headers.pop("X-CSRFToken", None)
        response = sign_in(self.portal, self.people.tenant.slug, self.people.admin.email)
        assert response.status_code == 303, "the fuzz session could not sign in"
        self.portal.headers["X-CSRFToken"] = csrf_token(self.portal.get("/").text)

    def send(self, method: str, path: str, query: Mapping[str, object] | None = None,
             form: Mapping[str, object] | None = None, content: bytes | None = None,
             headers: Mapping[str, str] | None = None) -> httpx.Response:
        params = [(_utf8(k), _utf8(v)) for k, v in as_fields(query or {})]
        data = None if form is None else [(_utf8(k), _utf8(v)) for k, v in as_fields(form)]
        kwargs: dict[str, Any] = {"params": params, "headers": dict(headers or {}),
                                  "follow_redirects": False}
        if data is not None:
            kwargs["content"] = httpx.QueryParams(data).__str__().encode()
            kwargs["headers"]["content-type"] = "application/x-www-form-urlencoded"
        elif content is not None:
            kwargs["content"] = content
        response = self.portal.request(method, _utf8(path), **kwargs)
        TALLY.record(method, path, response.status_code)
        location = response.headers.get("location", "")
        # The events API's 401 is about its key, never the session (it has none).
        session_ended = response.status_code == 401 and not path.startswith("/api/")
        if session_ended or location.startswith("/login"):
            self.sign_in()  # a generated request ended the session: carry on signed in
        return response
