"""record_event on a host's own connection, and the subject register's diff."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

import psycopg
import pytest
from psycopg.rows import dict_row

from db.events.outbox import record_events
from db.platform.effects import WakeRelay
from db.platform.tenancy import Tenant, tenant_tx
from domain.errors import InvalidInput
from domain.events.intake import InvalidEvents, parse_event
from tests.integration.intake_support import Desk, case_event, events_of, fraud_desk
from tocsin.core.settings import load_settings
from tocsin.shell.outbox import record_event


@pytest.fixture
def desk(tenant: Tenant) -> Desk:
    return fraud_desk(tenant)


def host_connection() -> psycopg.Connection[dict[str, object]]:
    """A host application's own connection: not autocommit, rows as dicts."""
    return psycopg.connect(load_settings().database_url, row_factory=dict_row)


def test_an_event_of_a_rolled_back_host_transaction_does_not_exist(desk: Desk) -> None:
    with host_connection() as conn:
        record_event(conn, desk.tenant.slug, case_event("C-1"))
        conn.rollback()
    assert events_of(desk.tenant) == []
    with tenant_tx(desk.tenant.slug) as tx:
        assert tx.conn.execute("SELECT count(*) FROM subjects").fetchone() == (0,)


def test_an_event_of_a_committed_host_transaction_exists_once(desk: Desk) -> None:
    with host_connection() as conn:
        conn.execute("CREATE TEMPORARY TABLE host_cases (id text)")  # the host's own write
        conn.execute("INSERT INTO host_cases VALUES ('C-1')")
        event_id = record_event(conn, desk.tenant.slug, case_event("C-1", assignees=[desk.ana]))
        path = conn.execute("SHOW search_path").fetchone()
        conn.commit()
    assert [(e["id"], e["source"], e["status"]) for e in events_of(desk.tenant)] == \
        [(event_id, "host", "pending")]
    assert path == {"search_path": '"$user", public'}  # the host's session is left as it was


def test_record_event_refuses_a_connection_outside_a_transaction(desk: Desk) -> None:
    with psycopg.connect(load_settings().database_url, autocommit=True) as conn:
        with pytest.raises(InvalidInput, match="transaction"):
            record_event(conn, desk.tenant.slug, case_event("C-1"))
        with conn.transaction():
            record_event(conn, desk.tenant.slug, case_event("C-1"))
    assert len(events_of(desk.tenant)) == 1


def test_an_invalid_event_is_refused_and_leaves_the_host_transaction_usable(desk: Desk) -> None:
    with host_connection() as conn:
        with pytest.raises(InvalidEvents) as refused:
            record_event(conn, desk.tenant.slug, case_event("C-1", hierarchy={"region": "west"}))
        assert [p.path for p in refused.value.problems] == ["subject.hierarchy.region"]
        assert conn.execute("SELECT 1 AS one").fetchone() == {"one": 1}
        conn.commit()
    assert events_of(desk.tenant) == []


def test_a_host_value_json_cannot_hold_is_refused_naming_its_path(desk: Desk) -> None:
    event = case_event("C-1", fields={"amount": Decimal("1500000.00"), "seen": [date(2024, 5, 1)]},
                       forms={"intake": {"ratio": float("nan")}})
    event["metadata"] = {"ok": {"nested": [1, "two", None, True, 2.5]}}
    with host_connection() as conn:
        with pytest.raises(InvalidEvents) as refused:
            record_event(conn, desk.tenant.slug, event)
        conn.rollback()
    assert sorted(p.path for p in refused.value.problems) == [
        "subject.fields.amount", "subject.fields.seen[0]", "subject.forms.intake.ratio"]
    assert "not Decimal" in str(refused.value)
    assert events_of(desk.tenant) == []


def parsed(event: dict[str, object]) -> list:  # type: ignore[type-arg]
    value, problems = parse_event(event)
    assert value is not None, problems
    return [value]


def test_an_update_carries_the_register_diff_of_what_it_sets(desk: Desk) -> None:
    created = case_event("C-1", title="Card fraud", status="open", assignees=[desk.ana],
                         hierarchy={"region": "north"}, fields={"amount": 1000, "currency": "EUR"},
                         forms={"intake": {"q1": "no"}})
    update = case_event("C-1", "updated", status="escalated", assignees=[desk.ben],
                        hierarchy={"region": "south"}, fields={"amount": 1_500_000, "currency": "EUR"},
                        forms={"intake": {"q1": "yes"}})
    update["changes"] = {"message.posted": {"to": "hello"}}
    with tenant_tx(desk.tenant.slug) as tx:
        record_events(tx, parsed(created), "cli")
    with tenant_tx(desk.tenant.slug) as tx:
        record_events(tx, parsed(update), "cli")
        assigned = tx.conn.execute(
            "SELECT u.email FROM subject_assignees a JOIN users u ON u.id = a.user_id").fetchall()
    created_row, updated_row = events_of(desk.tenant)
    assert created_row["changes"] == {}
    assert updated_row["changes"] == {
        "subject.status": {"from": "open", "to": "escalated"},
        "subject.assignees": {"from": [desk.ana], "to": [desk.ben]},
        "hierarchy.region": {"from": "north", "to": "south"},
        "field.amount": {"from": 1000, "to": 1_500_000},
        "form.intake.q1": {"from": "no", "to": "yes"},
        "message.posted": {"from": None, "to": "hello"},
    }
    assert assigned == [(desk.ben,)]


def test_events_of_one_subject_in_one_batch_see_each_other(desk: Desk) -> None:
    events = [*parsed(case_event("C-1", fields={"amount": 1})),
              *parsed(case_event("C-1", "updated", fields={"amount": 2})),
              *parsed(case_event("C-1", "updated", fields={"amount": 3}))]
    with tenant_tx(desk.tenant.slug) as tx:
        recorded = record_events(tx, events, "cli")
        assert tx.pending(WakeRelay) == WakeRelay([r.event_id for r in recorded])
        stored = tx.conn.execute("SELECT value FROM subject_fields WHERE name = 'amount'").fetchall()
    assert [e["changes"] for e in events_of(desk.tenant)] == [
        {}, {"field.amount": {"from": 1, "to": 2}}, {"field.amount": {"from": 2, "to": 3}}]
    assert stored == [(3,)]


def test_a_batch_of_new_and_known_subjects_leaves_each_as_its_events_say(desk: Desk) -> None:
    # A subject first seen in a batch is written by its INSERT alone; a known one is updated.
    known = case_event("C-1", title="Known", status="open", assignees=[desk.ana], fields={"amount": 1})
    with tenant_tx(desk.tenant.slug) as tx:
        record_events(tx, parsed(known), "cli")
    batch = [*parsed(case_event("C-2", title="New", status="escalated", time_zone="Europe/Paris",
                                assignees=[desk.ben], hierarchy={"region": "north"},
                                fields={"amount": 7, "note": None}, forms={"intake": {"q1": None}})),
             *parsed(case_event("C-1", "updated", status="closed", assignees=[desk.ben],
                                fields={"amount": 2, "currency": "EUR", "note": None})),
             *parsed(case_event("C-2", "updated", fields={"amount": 8}))]
    with tenant_tx(desk.tenant.slug) as tx:
        record_events(tx, batch, "cli")
        subjects = tx.conn.execute(
            "SELECT s.external_id, s.title, s.status, s.time_zone, s.assigned_at IS NOT NULL, "
            "array_agg(u.email ORDER BY u.email) FROM subjects s "
            "JOIN subject_assignees a ON a.subject_id = s.id JOIN users u ON u.id = a.user_id "
            "GROUP BY s.id ORDER BY s.external_id").fetchall()
        fields = tx.conn.execute("SELECT s.external_id, f.name, f.value FROM subject_fields f "
                                 "JOIN subjects s ON s.id = f.subject_id ORDER BY 1, 2").fetchall()
        answers = tx.conn.execute("SELECT form, field, value FROM subject_form_answers").fetchall()
        levels = tx.conn.execute("SELECT h.level, u.code FROM subject_hierarchy h "
                                 "JOIN hierarchy_units u ON u.id = h.unit_id").fetchall()
    assert subjects == [("C-1", "Known", "closed", None, True, [desk.ben]),
                        ("C-2", "New", "escalated", "Europe/Paris", True, [desk.ben])]
    # a null value is stored as JSON null, on a new subject and a known one alike
    assert fields == [("C-1", "amount", 2), ("C-1", "currency", "EUR"), ("C-1", "note", None),
                      ("C-2", "amount", 8), ("C-2", "note", None)]
    assert answers == [("intake", "q1", None)]
    assert levels == [("region", "north")]
    assert [e["changes"] for e in events_of(desk.tenant)][1:] == [
        {},
        {"subject.status": {"from": "open", "to": "closed"},
         "subject.assignees": {"from": [desk.ana], "to": [desk.ben]},
         "field.amount": {"from": 1, "to": 2}, "field.currency": {"from": None, "to": "EUR"}},
        {"field.amount": {"from": 7, "to": 8}},
    ]
