"""The events API's OpenAPI documentation, served by the portal without a session."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from litestar import Litestar
from litestar.testing import TestClient

from portal.app import CONTENT_SECURITY_POLICY, STATIC
from portal.openapi import SCHEMA_JSON, SCHEMA_PATH, SWAGGER_UI_VERSION
from tocsin.boot.web import build_app

# swagger-ui-dist 5.35.0's swagger-ui-bundle.js, as `npm pack swagger-ui-dist@5.35.0` gives it
SWAGGER_UI_BUNDLE_SHA256 = "e6a898692f2d768e807c3ba4626068a69a2c5dd960dd6c76f3e4d3a3de180af2"


@pytest.fixture
def visitor() -> Iterator[TestClient[Litestar]]:
    with TestClient(app=build_app()) as client:  # nobody signed in
        yield client


def test_the_schema_describes_both_event_endpoints_behind_the_bearer_key(
        visitor: TestClient[Litestar]) -> None:
    response = visitor.get(SCHEMA_JSON)
    assert response.status_code == 200
    schema = response.json()
    assert schema["components"]["securitySchemes"]["bearer"] == {
        "type": "http", "scheme": "bearer", "description": "A tenant API key (tsk_...)"}
    for path in ("/api/v1/events", "/api/v1/events/batch"):
        operation = schema["paths"][path]["post"]
        assert operation["security"] == [{"bearer": []}]
        assert {"201", "400", "401", "422", "429"} <= set(operation["responses"])
        assert any(p["name"] == "Idempotency-Key" and p["in"] == "header" for p in operation["parameters"])


def test_the_schema_leaves_out_the_portals_pages(visitor: TestClient[Litestar]) -> None:
    paths = visitor.get(SCHEMA_JSON).json()["paths"]
    assert paths
    assert all(path.startswith("/api/v1/") for path in paths), sorted(paths)


def test_the_documentation_page_is_served_without_signing_in(visitor: TestClient[Litestar]) -> None:
    response = visitor.get(SCHEMA_PATH, follow_redirects=False)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert f'data-schema-url="{SCHEMA_JSON}"' in response.text  # the UI reads the schema from there


def test_the_documentation_page_loads_only_the_vendored_swagger_ui_under_the_portals_policy(
        visitor: TestClient[Litestar]) -> None:
    page = visitor.get(SCHEMA_PATH)
    # Nothing from another origin, and no inline script or style to allow.
    assert "http://" not in page.text and "https://" not in page.text and "//cdn" not in page.text
    assert [body for body in re.findall(r"<script[^>]*>(.*?)</script>", page.text, re.S)
            if body.strip()] == []  # every script is a file of its own
    assert "<style" not in page.text and "style=" not in page.text
    scripts = re.findall(r'<script src="([^"]+)"', page.text)
    styles = re.findall(r'<link rel="stylesheet" href="([^"]+)"', page.text)
    assert [urlsplit(s).path for s in scripts] == ["/static/swagger-ui-bundle.js", "/static/swagger-init.js"]
    assert [urlsplit(s).path for s in styles] == ["/static/swagger-ui.css"]
    for url in [*scripts, *styles]:
        asset = visitor.get(url)
        assert asset.status_code == 200, url
        assert asset.content == (STATIC / urlsplit(url).path.removeprefix("/static/")).read_bytes()
    policy = page.headers["content-security-policy"]
    assert policy == visitor.get("/login").headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert "unsafe-inline" not in policy and "https:" not in policy


def test_the_vendored_swagger_ui_is_the_version_and_licence_it_says() -> None:
    bundle = (STATIC / "swagger-ui-bundle.js").read_bytes()
    assert len(bundle) > 1_000_000 and b"SwaggerUIBundle" in bundle
    assert hashlib.sha256(bundle).hexdigest() == SWAGGER_UI_BUNDLE_SHA256  # as `npm pack` gave it
    licence = (STATIC / "swagger-ui.LICENSE").read_text()
    assert "Apache License" in licence and "Version 2.0" in licence and "SmartBear" in licence
    assert SWAGGER_UI_VERSION == "5.35.0" and (STATIC / "swagger-ui-bundle.js.LICENSE.txt").exists()


def test_the_fuzz_tests_schema_describes_the_portals_pages_too() -> None:
    paths = build_app(describe_portal=True).openapi_schema.to_schema()["paths"]
    assert "/login" in paths
    assert "/api/v1/events/batch" in paths
