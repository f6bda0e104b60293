"""The events API over the real app, PostgreSQL and Redis: keys, validation, idempotency,
rate limits, batches."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import TestClient

from db.events.api_keys import create_api_key, revoke_api_key
from db.platform.tenancy import Tenant
from portal.ratelimit import API_KEY_FAILURE_WINDOW_SECONDS, API_KEY_FAILURES
from portal.settings import load_portal_settings
from tests.integration.builders import run_concurrently
from tests.integration.intake_support import Desk, case_event, events_of, fraud_desk
from tests.integration.portal_support import forget_sign_in_failures
from tests.support.portal_server import serve_portal
from tocsin.boot.web import build_app
from tocsin.core.settings import load_settings
from tocsin.shell.client import TocsinApiError, TocsinClient

ApiClient = TestClient[Litestar]


@pytest.fixture
def desk(tenant: Tenant) -> Desk:
    return fraud_desk(tenant)


@pytest.fixture
def key(desk: Desk) -> str:
    return create_api_key(desk.tenant.slug, "case system")[1]


@pytest.fixture
def api() -> Iterator[ApiClient]:
    forget_sign_in_failures()  # wrong keys are counted per address: every test client shares one
    with TestClient(app=build_app()) as client:
        yield client


def bearer(key: str, **headers: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", **headers}


def test_an_event_is_recorded_for_the_tenant_of_the_key(api: ApiClient, desk: Desk, key: str) -> None:
    response = api.post("/api/v1/events", headers=bearer(key),
                        json=case_event(assignees=[desk.ana], hierarchy={"region": "north"},
                                        fields={"amount": 1_500_000}))
    assert response.status_code == 201, response.text
    recorded = events_of(desk.tenant)
    assert [(e["id"], e["event_type"], e["source"], e["status"], e["external_id"]) for e in recorded] == \
        [(response.json()["event_id"], "created", "api", "pending", "C-1042")]


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Basic dXNlcjpwdw=="},
                                     {"Authorization": "Bearer "}])
def test_a_request_without_a_bearer_key_is_refused(api: ApiClient, desk: Desk,
                                                   headers: dict[str, str]) -> None:
    response = api.post("/api/v1/events", headers=headers, json=case_event())
    assert response.status_code == 401
    assert response.json()["error"] == "unauthorized"
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert events_of(desk.tenant) == []


def test_a_wrong_key_is_refused(api: ApiClient, desk: Desk, key: str) -> None:
    response = api.post("/api/v1/events", headers=bearer(key[:-4] + "AAAA"), json=case_event())
    assert response.status_code == 401
    assert events_of(desk.tenant) == []


def test_a_revoked_key_is_refused_from_its_next_request(api: ApiClient, desk: Desk) -> None:
    record, key = create_api_key(desk.tenant.slug, "old system")
    assert api.post("/api/v1/events", headers=bearer(key), json=case_event("C-1")).status_code == 201
    revoke_api_key(desk.tenant.slug, record.id)
    response = api.post("/api/v1/events", headers=bearer(key), json=case_event("C-2"))
    assert response.status_code == 401
    assert [e["external_id"] for e in events_of(desk.tenant)] == ["C-1"]


def test_another_tenants_key_writes_only_to_its_own_tenant(
        api: ApiClient, desk: Desk, make_tenant: Callable[..., Tenant]) -> None:
    other = fraud_desk(make_tenant())
    other_key = create_api_key(other.tenant.slug, "their system")[1]
    response = api.post("/api/v1/events", headers=bearer(other_key), json=case_event("C-9"))
    assert response.status_code == 201
    assert events_of(desk.tenant) == []
    assert [e["external_id"] for e in events_of(other.tenant)] == ["C-9"]


def test_a_body_that_is_not_json_is_a_bad_request(api: ApiClient, desk: Desk, key: str) -> None:
    response = api.post("/api/v1/events", headers=bearer(key, **{"Content-Type": "application/json"}),
                        content=b'{"product": "fraud",')
    assert response.status_code == 400
    assert response.json()["error"] == "bad_request"


def test_a_query_parameter_the_api_does_not_take_is_a_bad_request(
        api: ApiClient, desk: Desk, key: str) -> None:
    # With or without a key: the portal's check of query parameters runs first.
    for headers in (bearer(key), {}):
        response = api.post("/api/v1/events?page=2", headers=headers, json=case_event())
        assert response.status_code == 400
        assert response.json() == {"error": "bad_request", "message": "unknown query parameter: page"}
    assert events_of(desk.tenant) == []


def test_invalid_events_are_refused_naming_each_path(api: ApiClient, desk: Desk, key: str) -> None:
    event = case_event(assignees=["not an email"], colour="blue")
    event["type"] = "deleted"
    del event["subject"]["kind"]
    response = api.post("/api/v1/events", headers=bearer(key), json=event)
    assert response.status_code == 422
    paths = {p["path"] for p in response.json()["problems"]}
    assert paths == {"type", "subject.kind", "subject.assignees[0]", "subject.colour"}
    assert events_of(desk.tenant) == []


def test_an_update_without_a_trigger_is_refused_even_as_null(api: ApiClient, desk: Desk, key: str) -> None:
    without = case_event("C-1", "updated")
    del without["trigger"]
    for event in (without, {**without, "trigger": None}):
        response = api.post("/api/v1/events", headers=bearer(key), json=event)
        assert response.status_code == 422, response.text
        assert [p["path"] for p in response.json()["problems"]] == ["trigger"]
    assert events_of(desk.tenant) == []


def test_the_nul_character_postgresql_cannot_store_is_refused_naming_each_path(
        api: ApiClient, desk: Desk, key: str) -> None:
    event = case_event("C-1", title="Card\x00fraud", fields={"note": ["a\x00b"]},
                       hierarchy={"region": "north\x00"})
    event["metadata"] = {"k\x00": 1}
    response = api.post("/api/v1/events", headers=bearer(key), json=event)
    assert response.status_code == 422, response.text
    assert sorted(p["path"] for p in response.json()["problems"]) == [
        "metadata.k\x00", "subject.fields.note[0]", "subject.hierarchy.region", "subject.title"]
    assert events_of(desk.tenant) == []


def test_unknown_products_people_and_units_are_refused_naming_each_path(
        api: ApiClient, desk: Desk, key: str) -> None:
    response = api.post("/api/v1/events", headers=bearer(key),
                        json=case_event(assignees=[desk.ana, "nobody@example.com"],
                                        hierarchy={"region": "west"}))
    assert response.status_code == 422
    problems = {p["path"]: p["message"] for p in response.json()["problems"]}
    assert set(problems) == {"subject.assignees[1]", "subject.hierarchy.region"}
    assert "nobody@example.com" in problems["subject.assignees[1]"]
    unknown = api.post("/api/v1/events", headers=bearer(key), json={**case_event(), "product": "whistle"})
    assert unknown.status_code == 422
    assert [p["path"] for p in unknown.json()["problems"]] == ["product"]
    assert events_of(desk.tenant) == []


def test_a_batch_answers_each_event_in_order(api: ApiClient, desk: Desk, key: str) -> None:
    events = [case_event("C-1"), case_event("C-2"), {**case_event("C-1", "updated", status="closed")}]
    response = api.post("/api/v1/events/batch", headers=bearer(key), json={"events": events})
    assert response.status_code == 201, response.text
    results = response.json()["results"]
    stored = events_of(desk.tenant)
    assert [r["event_id"] for r in results] == [e["id"] for e in stored]
    assert [e["external_id"] for e in stored] == ["C-1", "C-2", "C-1"]
    assert results[0]["subject_id"] == results[2]["subject_id"] != results[1]["subject_id"]
    assert stored[2]["changes"] == {"subject.status": {"from": "open", "to": "closed"}}


def test_a_batch_with_invalid_events_writes_nothing_and_lists_every_invalid_index(
        api: ApiClient, desk: Desk, key: str) -> None:
    events = [case_event("C-1"), {"product": "fraud"}, case_event("C-3"),
              case_event("C-4", assignees=["nobody@example.com"])]
    response = api.post("/api/v1/events/batch", headers=bearer(key), json={"events": events})
    assert response.status_code == 422
    assert response.json()["invalid_indexes"] == [1]  # the shape is checked first, for every event
    events[1] = case_event("C-2")
    response = api.post("/api/v1/events/batch", headers=bearer(key), json={"events": events})
    assert response.status_code == 422
    assert response.json()["invalid_indexes"] == [3]
    assert response.json()["problems"][0]["path"] == "events[3].subject.assignees[0]"
    assert events_of(desk.tenant) == []


def test_a_batch_over_the_limit_is_refused(api: ApiClient, desk: Desk, key: str) -> None:
    response = api.post("/api/v1/events/batch", headers=bearer(key),
                        json={"events": [case_event(f"C-{n}") for n in range(501)]})
    assert response.status_code == 422
    assert response.json()["problems"][0]["path"] == "events"


def test_a_repeated_request_is_answered_as_the_first_time(api: ApiClient, desk: Desk, key: str) -> None:
    headers = bearer(key, **{"Idempotency-Key": "case-C-1-created"})
    first = api.post("/api/v1/events", headers=headers, json=case_event("C-1"))
    again = api.post("/api/v1/events", headers=headers, json=case_event("C-1"))
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json()
    assert again.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.headers
    assert len(events_of(desk.tenant)) == 1


def test_the_same_idempotency_key_with_another_body_is_refused(api: ApiClient, desk: Desk, key: str) -> None:
    headers = bearer(key, **{"Idempotency-Key": "k-1"})
    assert api.post("/api/v1/events", headers=headers, json=case_event("C-1")).status_code == 201
    other = api.post("/api/v1/events", headers=headers, json=case_event("C-2"))
    assert other.status_code == 422
    assert "different request" in other.json()["message"]
    assert [e["external_id"] for e in events_of(desk.tenant)] == ["C-1"]


def test_concurrent_duplicates_record_one_event_and_get_the_same_answer(
        desk: Desk, key: str, tmp_path: Path) -> None:
    answers: list[tuple[dict[str, Any], bool]] = []
    with serve_portal(tmp_path / "portal.log") as url:
        clients = [TocsinClient(url, key) for _ in range(2)]

        def send(client: TocsinClient) -> None:
            answers.append((client.send_batch([case_event(f"C-{n}") for n in range(50)],
                                              idempotency_key="batch-7"), client.last_replayed))

        errors = run_concurrently(*[lambda c=c: send(c) for c in clients])
        for c in clients:
            c.close()
    assert errors == []
    assert answers[0][0] == answers[1][0]
    assert sorted(replayed for _, replayed in answers) == [False, True]
    assert len(events_of(desk.tenant)) == 50


def test_a_key_over_its_rate_is_told_when_to_come_back(desk: Desk, key: str) -> None:
    settings = load_settings()
    app = build_app(settings, replace(load_portal_settings(settings.portal_url), api_events_per_minute=500))
    with TestClient(app=app) as api:
        batch = {"events": [case_event(f"C-{n}") for n in range(500)]}
        assert api.post("/api/v1/events/batch", headers=bearer(key), json=batch).status_code == 201
        response = api.post("/api/v1/events", headers=bearer(key), json=case_event("C-late"))
    assert response.status_code == 429
    assert 1 <= int(response.headers["Retry-After"]) <= 60
    assert len(events_of(desk.tenant)) == 500


def test_a_tenants_keys_together_are_held_to_the_tenants_rate(
        desk: Desk, key: str, make_tenant: Callable[..., Tenant]) -> None:
    other = fraud_desk(make_tenant())
    other_key = create_api_key(other.tenant.slug, "other host")[1]
    second_key = create_api_key(desk.tenant.slug, "second system")[1]  # same tenant, fresh key
    settings = load_settings()
    limits = replace(load_portal_settings(settings.portal_url), api_events_per_minute=500,
                     api_tenant_events_per_minute=600)
    with TestClient(app=build_app(settings, limits)) as api:
        batch = {"events": [case_event(f"C-{n}") for n in range(400)]}
        assert api.post("/api/v1/events/batch", headers=bearer(key), json=batch).status_code == 201
        response = api.post("/api/v1/events/batch", headers=bearer(second_key), json=batch)
        assert response.status_code == 429, response.text
        assert "organisation's keys 600 together" in response.json()["message"]
        assert 1 <= int(response.headers["Retry-After"]) <= 60
        under = {"events": [case_event(f"D-{n}") for n in range(200)]}
        assert api.post("/api/v1/events/batch", headers=bearer(second_key), json=under).status_code == 201
        # Another tenant's share is its own.
        assert api.post("/api/v1/events/batch", headers=bearer(other_key), json=batch).status_code == 201
    assert len(events_of(desk.tenant)) == 600 and len(events_of(other.tenant)) == 400


def test_wrong_keys_from_one_address_are_throttled_before_any_lookup(
        api: ApiClient, desk: Desk, key: str) -> None:
    for n in range(API_KEY_FAILURES):
        wrong = api.post("/api/v1/events", headers=bearer(f"tsk_guess{n:04d}"), json=case_event())
        assert wrong.status_code == 401, (n, wrong.text)
        if n == API_KEY_FAILURES // 2:  # a right key in between clears nothing
            assert api.post("/api/v1/events", headers=bearer(key), json=case_event("C-ok")).status_code == 201
    throttled = api.post("/api/v1/events", headers=bearer("tsk_guess-more"), json=case_event())
    assert throttled.status_code == 429
    assert throttled.json()["message"].startswith("too many wrong API keys from this address")
    assert 1 <= int(throttled.headers["Retry-After"]) <= API_KEY_FAILURE_WINDOW_SECONDS
    # Refused before the lookup: from this address, a right key gets no answer either.
    assert api.post("/api/v1/events", headers=bearer(key), json=case_event("C-2")).status_code == 429
    assert [e["external_id"] for e in events_of(desk.tenant)] == ["C-ok"]


def test_the_client_raises_a_clear_error_for_a_refusal(desk: Desk, key: str, tmp_path: Path) -> None:
    with serve_portal(tmp_path / "portal.log") as url, TocsinClient(url, key) as client:
        answer = client.send_event(case_event("C-1"))
        with pytest.raises(TocsinApiError) as refused:
            client.send_event({**case_event("C-2"), "product": "nope"})
    assert refused.value.status == 422
    assert refused.value.body["problems"][0]["path"] == "product"
    assert [e["id"] for e in events_of(desk.tenant)] == [answer["event_id"]]
