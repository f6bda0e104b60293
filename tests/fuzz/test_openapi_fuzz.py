"""Schemathesis against the portal's OpenAPI schema: requests that fit the schema and
requests that break it (wrong types, missing and extra fields), for every operation, sent by
a signed-in administrator; the events API's, as JSON with a tenant API key. None may be
answered with 500 or more."""

from __future__ import annotations

import json

import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.core import NotSet
from schemathesis.generation import GenerationMode

from db.events.api_keys import create_api_key
from tests.fuzz.budget import is_server_error, share
from tests.fuzz.client import SKIPPED_ROUTES, FuzzClient
from tests.fuzz.schema import openapi_schema
from tests.integration.portal_support import People, PortalClient


def _cases() -> st.SearchStrategy[schemathesis.Case]:
    schema = schemathesis.openapi.from_dict(openapi_schema())
    strategies = []
    for result in schema.get_all_operations():
        operation = result.ok()
        if (operation.method.upper(), operation.path) in SKIPPED_ROUTES:
            continue
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            strategies.append(operation.as_strategy(generation_mode=mode))
    return st.one_of(strategies)


def test_no_request_the_schema_describes_or_breaks_gets_a_server_error(
    portal: PortalClient, people: People
) -> None:
    client = FuzzClient(portal, people)
    api_key = create_api_key(people.tenant.slug, "fuzz")[1]

    @settings(max_examples=share(0.45), deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                     HealthCheck.filter_too_much])
    @given(case=_cases())
    def send(case: schemathesis.Case) -> None:
        body = None if isinstance(case.body, NotSet) else case.body
        if case.formatted_path.startswith("/api/"):
            # A host's request: JSON, its key, and the Idempotency-Key the case made up.
            headers = {"Authorization": f"Bearer {api_key}", "content-type": "application/json"}
            idempotency_key = (case.headers or {}).get("Idempotency-Key")
            if isinstance(idempotency_key, str) and idempotency_key.isascii() \
                    and idempotency_key.isprintable():
                headers["Idempotency-Key"] = idempotency_key
            # A negative case may make up raw bytes (a body that is not JSON at all).
            content = body if isinstance(body, bytes) else json.dumps(body, default=str).encode()
            response = client.send(case.method.upper(), case.formatted_path, query=case.query or {},
                                   content=content, headers=headers)
            assert not is_server_error(case.formatted_path, response.status_code), \
                f"{case.method} {case.formatted_path} {headers} {body!r}"
            return
        form = body if isinstance(body, dict) else None
        content = None if form is not None or body is None else str(body).encode("utf-8", "replace")
        response = client.send(case.method.upper(), case.formatted_path, query=case.query or {}, form=form,
                               content=content)
        assert not is_server_error(case.formatted_path, response.status_code), \
            f"{case.method} {case.formatted_path} {case.query} {body!r}"

    send()
