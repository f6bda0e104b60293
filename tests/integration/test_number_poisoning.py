"""A number no double holds (a field of 1 followed by 400 zeros) against intake, the relay,
the pages and the scan, over the real app, PostgreSQL, Redis and a Dramatiq worker. It is
refused at intake (API, batch, record_event) with a 422 naming its path; written straight
into the tables by a host (the table contract) it is compared exactly, never through
float(); an event whose own evaluation raises fails alone, and the innocent event in its
batch is notified with its tenant's breaker closed; the pages and the CSV answer in full;
a time rule that fails in the scan undoes only its own claims, never the licence's."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from actors.relay import breaker, relay_tick
from db.events.api_keys import create_api_key
from db.people.clients import create_client
from db.platform.tenancy import Tenant, tenant_tx
from db.rules.definitions import create_rule
from domain.events.intake import InvalidEvents
from tests.integration.conftest import RunningWorker, wait_until
from tests.integration.intake_support import Desk, case_event, fraud_desk
from tests.integration.portal_support import People, PortalClient, local_today, signed_in
from tests.integration.test_cli import run
from tocsin.core.settings import load_settings
from tocsin.shell.outbox import record_event

HUGE = 10**400  # a field of 1 followed by 400 zeros: float() of it raises OverflowError
HUGE_JSON = "1" + "0" * 400


def large_case_rule(**changes: Any) -> dict[str, Any]:
    rule = {"name": "Large case", "product": "fraud", "kind": "created", "trigger": {},
            "conditions": {"all": [{"fact": "field.amount", "op": "greater", "value": 1_000}]},
            "actions": {"channels": ["in_app"], "category": "case_alert",
                        "recipients": [{"type": "assignees"}],
                        "template": {"title": "Large case {{ subject.external_id }}",
                                     "body": "Amount {{ field.amount }}"}}}
    return {**rule, **changes}


@pytest.fixture
def desk(tenant: Tenant) -> Desk:
    desk = fraud_desk(tenant)
    with tenant_tx(tenant.slug) as tx:
        create_rule(tx, large_case_rule(), by="test")
    return desk


def notices(tenant: Tenant) -> list[str]:
    with tenant_tx(tenant.slug) as tx:
        rows = tx.conn.execute("SELECT title FROM notifications WHERE category = 'case_alert' "
                               "ORDER BY title").fetchall()
    return [str(r[0]) for r in rows]


def claims_prepared(tenant: Tenant) -> bool:
    """Every claim in the ledger has its notices written (the evaluation commits first, its
    claims are prepared just after: a test that reads notices waits for this)."""
    with tenant_tx(tenant.slug) as tx:
        row = tx.conn.execute("SELECT count(*) FROM notification_ledger "
                              "WHERE status = 'claimed' AND prepared_at IS NULL").fetchone()
    return row is not None and row[0] == 0


def event_statuses(tenant: Tenant) -> dict[str, tuple[str, str | None]]:
    with tenant_tx(tenant.slug) as tx:
        rows = tx.conn.execute("SELECT s.external_id, e.status, e.last_error FROM events e "
                               "JOIN subjects s ON s.id = e.subject_id").fetchall()
    return {str(r[0]): (str(r[1]), None if r[2] is None else str(r[2])) for r in rows}


def raw_event(external_id: str, amount_json: str) -> str:
    text = json.dumps(case_event(external_id, assignees=["ana@example.com"], fields={"amount": 0}))
    return text.replace('"amount": 0', f'"amount": {amount_json}')


def test_a_number_no_double_holds_is_refused_at_intake_and_the_innocent_event_is_notified(
        portal: PortalClient, desk: Desk, worker: RunningWorker) -> None:
    key = create_api_key(desk.tenant.slug, "case system")[1]
    headers = {"Authorization": f"Bearer {key}", "content-type": "application/json"}

    batch = portal.post("/api/v1/events/batch", headers=headers,
                        content=f'{{"events": [{raw_event("C-1", "5000")}, {raw_event("C-2", HUGE_JSON)}]}}')
    assert batch.status_code == 422, batch.text
    assert batch.json()["invalid_indexes"] == [1]
    assert [p["path"] for p in batch.json()["problems"]] == ["events[1].subject.fields.amount"]
    single = portal.post("/api/v1/events", headers=headers, content=raw_event("C-2", HUGE_JSON))
    assert single.status_code == 422
    assert [p["path"] for p in single.json()["problems"]] == ["subject.fields.amount"]
    with psycopg.connect(load_settings().database_url) as conn, pytest.raises(InvalidEvents) as refused:
        record_event(conn, desk.tenant.slug, case_event("C-2", fields={"amount": HUGE}))
    assert [p.path for p in refused.value.problems] == ["subject.fields.amount"]

    # The innocent event, sent again on its own (a batch is all or nothing), is notified.
    innocent = portal.post("/api/v1/events", headers=headers, content=raw_event("C-1", "5000"))
    assert innocent.status_code == 201, innocent.text
    wait_until(lambda: notices(desk.tenant) == ["Large case C-1"], "the innocent event's notice")
    assert event_statuses(desk.tenant) == {"C-1": ("evaluated", None)}
    assert breaker(desk.tenant.slug).current_state == "closed"


def host_writes(tenant: Tenant, external_id: str, *, amount: object,
                metadata: object = None) -> None:
    """An event written by a host through the table contract (README: its own subject row,
    its fields, the event row), bypassing record_event and its validation."""
    with psycopg.connect(load_settings().database_url) as conn:
        host_writes_in(conn, tenant, external_id, amount=amount, metadata=metadata)


def host_writes_in(conn: psycopg.Connection[Any], tenant: Tenant, external_id: str, *,
                   amount: object, metadata: object = None) -> None:
    schema = tenant.schema
    subject = conn.execute(
        f'INSERT INTO "{schema}".subjects (product, kind, external_id, title) '
        "VALUES ('fraud', 'case', %s, 'Written by the host') RETURNING id", [external_id]).fetchone()
    assert subject is not None
    conn.execute(f'INSERT INTO "{schema}".subject_fields VALUES (%s, %s, %s)',
                 [subject[0], "amount", Jsonb(amount)])
    conn.execute(f'INSERT INTO "{schema}".subject_assignees (subject_id, user_id) '
                 f'SELECT %s, id FROM "{schema}".users WHERE email = %s', [subject[0], "ana@example.com"])
    conn.execute(
        f'INSERT INTO "{schema}".events (product, subject_id, event_type, metadata, occurred_at, source) '
        "VALUES ('fraud', %s, 'created', %s, now(), 'host')", [subject[0], Jsonb(metadata or {})])


def test_a_huge_number_a_host_wrote_into_the_tables_is_compared_exactly_beside_an_innocent_event(
        desk: Desk, worker: RunningWorker) -> None:
    with psycopg.connect(load_settings().database_url) as conn:  # one host transaction: one batch
        record_event(conn, desk.tenant.slug, case_event("C-1", assignees=["ana@example.com"],
                                                        fields={"amount": 5_000}))
        host_writes_in(conn, desk.tenant, "C-2", amount=HUGE)
        host_writes_in(conn, desk.tenant, "C-3", amount=-HUGE)
    relay_tick.send()  # what the clock sends: no wake-up comes from a host's process
    wait_until(lambda: len(event_statuses(desk.tenant)) == 3 and all(
        status == "evaluated" for status, _ in event_statuses(desk.tenant).values()),
        "the batch to be evaluated")
    wait_until(lambda: claims_prepared(desk.tenant), "the claims' notices")
    assert notices(desk.tenant) == ["Large case C-1", "Large case C-2"]  # -10**400 is not greater
    assert breaker(desk.tenant.slug).current_state == "closed"


@pytest.mark.parametrize("metadata", [[1, 2], "text", 42])
def test_an_event_whose_evaluation_raises_fails_alone_and_its_batch_is_notified(
        desk: Desk, worker: RunningWorker, metadata: object) -> None:
    with tenant_tx(desk.tenant.slug) as tx:  # a rule that reads the event's metadata
        create_rule(tx, large_case_rule(name="Intake form", trigger={"metadata": {"form": "intake"}},
                                        conditions={"all": []}), by="test")
    with psycopg.connect(load_settings().database_url) as conn:  # one host transaction: one batch
        record_event(conn, desk.tenant.slug, case_event("C-1", assignees=["ana@example.com"],
                                                        fields={"amount": 5_000}))
        host_writes_in(conn, desk.tenant, "C-2", amount=7_000, metadata=metadata)
        record_event(conn, desk.tenant.slug, case_event("C-3", assignees=["ana@example.com"],
                                                        fields={"amount": 9_000}))
    relay_tick.send()  # what the clock sends: no wake-up comes from a host's process
    wait_until(lambda: event_statuses(desk.tenant).get("C-2", ("",))[0] == "failed"
               and event_statuses(desk.tenant)["C-3"][0] == "evaluated", "the batch to be evaluated")
    wait_until(lambda: claims_prepared(desk.tenant), "the claims' notices")
    statuses = event_statuses(desk.tenant)
    assert statuses["C-1"] == ("evaluated", None) and statuses["C-3"] == ("evaluated", None)
    error = statuses["C-2"][1]
    assert error is not None and error.startswith("evaluation failed: ")
    wait_until(lambda: notices(desk.tenant) == ["Large case C-1", "Large case C-3"], "the innocent notices")
    assert breaker(desk.tenant.slug).current_state == "closed"


# --- the pages and the scan ---------------------------------------------------------------


TIME_RULE = {
    "name": "Review due", "product": "fraud", "kind": "time",
    "trigger": {"subject_kind": "case", "due": {"fact": "field.review_due", "offsets": [-7, 0]}},
    "conditions": {"all": [{"fact": "field.amount", "op": "greater", "value": 1_000}]},
    "actions": {"channels": ["in_app"], "recipients": [{"type": "assignees"}],
                "template": {"title": "Review {{ subject.external_id }}", "body": "Due {{ due.date }}"}},
}


@pytest.fixture
def watched(people: People) -> Iterator[int]:
    """A case due for review in three days whose amount no double holds, written by a host
    through the tables, watched by a time rule comparing that amount."""
    fraud_desk(people.tenant)
    with tenant_tx(people.tenant.slug) as tx:
        create_rule(tx, TIME_RULE, by="test")
    host_writes(people.tenant, "C-HUGE", amount=HUGE)
    due = (local_today(people.tenant) + timedelta(days=3)).isoformat()
    with tenant_tx(people.tenant.slug) as tx:
        row = tx.conn.execute("SELECT id FROM subjects WHERE external_id = 'C-HUGE'").fetchone()
        assert row is not None
        tx.conn.execute("INSERT INTO subject_fields VALUES (%s, 'review_due', %s)", [row[0], Jsonb(due)])
    yield int(str(row[0]))


def test_the_obligation_pages_and_export_answer_in_full_for_a_subject_holding_a_huge_number(
        portal: PortalClient, people: People, watched: int) -> None:
    signed_in(portal, people, people.admin)
    page = portal.get("/obligations")
    assert page.status_code == 200 and "C-HUGE" in page.text
    assert portal.get(f"/obligations/subjects/{watched}").status_code == 200
    export = portal.get("/obligations.csv")
    assert export.status_code == 200 and export.text.endswith("\r\n")
    rows = list(csv.DictReader(io.StringIO(export.text, newline="")))
    assert [(r["external_id"], r["watching"]) for r in rows] == [("C-HUGE", "True")]


def test_the_scan_claims_for_a_huge_number_and_a_failing_time_rule_keeps_the_licence_claims(
        people: People, watched: int, capsys: pytest.CaptureFixture[str]) -> None:
    tenant = people.tenant
    with tenant_tx(tenant.slug) as tx:  # a licence whose 30-day reminder is due today
        create_client(tx, "Harbour Freight", local_today(tenant) + timedelta(days=30))
        # A time rule saved before validation, whose condition PostgreSQL cannot compile:
        # the scan's statement for it fails.
        broken = {**TIME_RULE, "name": "Broken",
                  "conditions": {"all": [{"fact": "field.review_due", "op": "before",
                                          "value": "2027-02-30"}]}}
        rule = tx.conn.execute(
            "INSERT INTO rules (product, name, kind, definition) VALUES ('fraud', 'Broken', 'time', %s) "
            "RETURNING id", [Jsonb(broken)]).fetchone()
        assert rule is not None
        tx.conn.execute("INSERT INTO rule_versions (rule_id, version, definition, enabled, changed_by) "
                        "VALUES (%s, 1, %s, true, 'test')", [rule[0], Jsonb(broken)])

    code, out, err = run(capsys, "scan", "--tenant", tenant.slug)

    assert code == 0, err
    assert f"rule {rule[0]}: " in out and "failed alone" in out
    with tenant_tx(tenant.slug) as tx:
        claims = tx.conn.execute(
            "SELECT l.rule, l.threshold FROM notification_ledger l "
            "LEFT JOIN clients c ON c.id = l.subject_id AND l.subject_kind = 'client' "
            "WHERE c.name = 'Harbour Freight' OR l.subject_kind = 'subject' ORDER BY 1, 2").fetchall()
        working = tx.conn.execute("SELECT id FROM rules WHERE name = 'Review due'").fetchone()
    assert working is not None
    # The licence's reminder and the working rule's claim (the huge amount compared exactly)
    # were both committed; the broken rule claimed nothing.
    assert [(str(r[0]), str(r[1])) for r in claims] == [
        ("licence", "d30"), (f"rule:{working[0]}", "offset:-7")]
