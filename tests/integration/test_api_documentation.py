"""The events API's OpenAPI documentation, served by the portal without a session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from litestar import Litestar
from litestar.testing import TestClient

from portal.app import create_app
from portal.openapi import SCHEMA_JSON, SCHEMA_PATH


@pytest.fixture
def visitor() -> Iterator[TestClient[Litestar]]:
    with TestClient(app=create_app()) as client:  # nobody signed in
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
    assert "swagger-ui-bundle.js" in response.text
    assert "/api/v1/events/batch" in response.text  # the schema, embedded in the page
    # the page's scripts come from the CDN: its policy lets them, the portal's pages stay strict
    assert "https://cdn.jsdelivr.net" in response.headers["content-security-policy"]
    assert "cdn.jsdelivr.net" not in visitor.get("/login").headers["content-security-policy"]


def test_the_fuzz_tests_schema_describes_the_portals_pages_too() -> None:
    paths = create_app(describe_portal=True).openapi_schema.to_schema()["paths"]
    assert "/login" in paths
    assert "/api/v1/events/batch" in paths
