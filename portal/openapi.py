"""The events API's OpenAPI documentation, served by the portal to anyone (no session):
the schema at /schema/openapi.json and a page to read it at /schema (Swagger UI, vendored
under static/: swagger-ui-dist SWAGGER_UI_VERSION, Apache-2.0, `npm pack swagger-ui-dist`;
only swagger-ui-bundle.js and swagger-ui.css, beside their licence files). The page loads
nothing from another origin and runs no inline script, so it is served under the portal's
own content security policy.

Only the JSON API (/api/v1/...) is described: the portal's HTML routes are pages for
people, not an interface. The fuzz tests ask for every route (`describe_portal`), so
that schemathesis reaches the HTML forms as well.
"""

from __future__ import annotations

import html
from typing import Any

from litestar import Request, Router
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import JsonRenderPlugin, OpenAPIRenderPlugin
from litestar.openapi.spec import Tag

from portal.auth import PUBLIC
from portal.routes import events_api

__all__ = [
    "API_VERSION",
    "DESCRIPTION",
    "SCHEMA_JSON",
    "SCHEMA_PATH",
    "SWAGGER_UI_VERSION",
    "VendoredSwaggerUI",
    "api_documentation",
]

SCHEMA_PATH = "/schema"
SCHEMA_JSON = f"{SCHEMA_PATH}/openapi.json"
API_VERSION = "1"  # the /api/v1 of the paths

SWAGGER_UI_VERSION = "5.35.0"  # static/swagger-ui-bundle.js and static/swagger-ui.css


class VendoredSwaggerUI(OpenAPIRenderPlugin):
    """Swagger UI from the portal's own /static, started by static/swagger-init.js with the
    schema's URL (no CDN, no inline script or style: the portal's policy holds here too)."""

    def __init__(self) -> None:
        super().__init__(path=["/", "/swagger"])

    def render(self, request: Request[Any, Any, Any], openapi_schema: dict[str, Any]) -> bytes:
        title = html.escape(str(openapi_schema["info"]["title"]))
        return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">
<link rel="stylesheet" href="/static/swagger-ui.css?v={SWAGGER_UI_VERSION}">
<script src="/static/swagger-ui-bundle.js?v={SWAGGER_UI_VERSION}" defer></script>
<script src="/static/swagger-init.js?v={SWAGGER_UI_VERSION}" defer></script>
</head>
<body>
<div id="swagger-ui" data-schema-url="{html.escape(SCHEMA_JSON)}"></div>
</body>
</html>
""".encode()


DESCRIPTION = """Events in: host products tell Tocsin what happens to their records
(a case created, reassigned, its amount changed), and the tenant's rules decide who is told.

Authenticate with a tenant API key (`tocsin apikey create <tenant> <label>`) as
`Authorization: Bearer tsk_...`. Send `Idempotency-Key` to make a request safe to repeat.
Every error is JSON: `{"error", "message", "problems": [{"path", "message"}]}`."""


def api_documentation(*, describe_portal: bool = False) -> OpenAPIConfig:
    """The OpenAPI configuration of the portal: the events API with its bearer key scheme,
    served at SCHEMA_PATH without a session."""
    title = "Tocsin portal" if describe_portal else "Tocsin events API"
    return OpenAPIConfig(
        title=title, version=API_VERSION, description=DESCRIPTION,
        components=[events_api.SECURITY_COMPONENTS],
        tags=[Tag(name="events", description="Record events about the subjects of a product")],
        render_plugins=[JsonRenderPlugin(), VendoredSwaggerUI()],
        openapi_router=Router(SCHEMA_PATH, route_handlers=[], include_in_schema=False,
                              opt={PUBLIC: True}),
    )
