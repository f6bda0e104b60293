"""The events API's OpenAPI documentation, served by the portal to anyone (no session):
the schema at /schema/openapi.json and a page to read it at /schema (Swagger UI).

Only the JSON API (/api/v1/...) is described: the portal's HTML routes are pages for
people, not an interface. The fuzz tests ask for every route (`describe_portal`), so
that schemathesis reaches the HTML forms as well.
"""

from __future__ import annotations

from litestar import Router
from litestar.datastructures import ResponseHeader
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import JsonRenderPlugin, SwaggerRenderPlugin
from litestar.openapi.spec import Tag

from portal.auth import PUBLIC
from portal.routes import events_api

SCHEMA_PATH = "/schema"
SCHEMA_JSON = f"{SCHEMA_PATH}/openapi.json"
API_VERSION = "1"  # the /api/v1 of the paths

# Swagger UI loads its script and styles from a CDN and starts with an inline script, which
# the portal's own policy (script-src 'self') refuses; the documentation page alone may.
# It shows nothing but the schema we generate.
DOCS_CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self' 'unsafe-inline' https://cdn.jsdelivr.net; "
    "style-src 'self' 'unsafe-inline' https://cdn.jsdelivr.net; img-src 'self' data: https:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; "
    "object-src 'none'"
)

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
        render_plugins=[JsonRenderPlugin(), SwaggerRenderPlugin(path=["/", "/swagger"])],
        openapi_router=Router(
            SCHEMA_PATH, route_handlers=[], include_in_schema=False, opt={PUBLIC: True},
            response_headers=[ResponseHeader(name="Content-Security-Policy",
                                             value=DOCS_CONTENT_SECURITY_POLICY)]),
    )
