"""The relay and the evaluation, on real PostgreSQL and Redis with a real Dramatiq worker:
events recorded in a host's transaction end as rule claims and inbox rows; the claim is by
status and lease; a batch delivered three times claims once; the polling fallback and its
rotating cursor; one batch in flight per tenant; the per-tenant breaker."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg import sql

from actors.relay import breaker, relay_tenant, relay_tick
from db.events.relay import claim_events, tenants_with_ready_events
from db.platform.tenancy import Tenant, tenant_tx
from db.rules.definitions import create_rule
from db.rules.evaluations import evaluate_claimed, stored_traces
from tests.integration.conftest import RunningWorker, use_settings, wait_until
from tests.integration.intake_support import case_event, fraud_desk
from tests.integration.test_cli import run
from tocsin.core import runtime
from tocsin.shell.outbox import record_event

BIG_CASE_RULE: dict[str, Any] = {
    "name": "Large case created", "product": "fraud", "kind": "created",
    "trigger": {"subject_kind": "case"},
    "conditions": {"all": [{"fact": "field.amount", "op": "greater", "value": 1_000_000}]},
    "actions": {"channels": ["in_app"], "category": "case_alert",
                "recipients": [{"type": "assignees"}],
                "template": {"title": "Large case {{ subject.external_id }}",
                             "body": "Amount {{ field.amount }}"}},
}


def _desk_with_rule(tenant: Tenant) -> int:
    fraud_desk(tenant)
    with tenant_tx(tenant.slug) as tx:
        return create_rule(tx, BIG_CASE_RULE, by="test").id


def _host_event(tenant: Tenant, external_id: str, amount: int, *, commit: bool = True) -> int:
    """A host application's own connection and transaction."""
    with psycopg.connect(runtime.settings().database_url) as conn:
        event_id = record_event(conn, tenant.slug, case_event(
            external_id, assignees=["ana@example.com"], fields={"amount": amount}))
        if not commit:
            conn.rollback()
    return event_id


def _count(tenant: Tenant, query: str, params: list[Any] | None = None) -> int:
    with tenant_tx(tenant.slug) as tx:
        row = tx.conn.execute(query, params or []).fetchone()
    assert row is not None
    return int(str(row[0]))


def _notices(tenant: Tenant) -> int:
    return _count(tenant, "SELECT count(*) FROM notifications WHERE category = 'case_alert'")


def test_a_committed_event_fires_its_rule_into_the_inbox_and_the_ledger_names_the_version(
        tenant: Tenant, worker: RunningWorker) -> None:
    rule_id = _desk_with_rule(tenant)
    big = _host_event(tenant, "C-1", 2_000_000)
    small = _host_event(tenant, "C-2", 10)
    relay_tick.send()  # no wake-up comes from a host's process: the polling fallback
    worker.drain()
    with tenant_tx(tenant.slug) as tx:
        ledger = tx.conn.execute(
            "SELECT rule, threshold, rule_id, rule_version, event_id, prepared_at IS NOT NULL "
            "FROM notification_ledger WHERE rule_id IS NOT NULL").fetchall()
        inbox = tx.conn.execute(
            "SELECT u.email, n.title, n.body FROM notifications n JOIN users u ON u.id = n.recipient_user_id "
            "WHERE n.category = 'case_alert'").fetchall()
        events = dict(tx.conn.execute("SELECT id, status FROM events").fetchall())
        trace = tx.conn.execute("SELECT trace FROM events WHERE id = %s", [small]).fetchone()
    assert ledger == [(f"rule:{rule_id}", f"event:{big}", rule_id, 1, big, True)]
    assert inbox == [("ana@example.com", "Large case C-1", "Amount 2000000")]
    assert events == {big: "evaluated", small: "evaluated"}
    assert trace is not None
    [outcome] = trace[0]
    assert outcome["fired"] is False and outcome["phase"] == 3
    assert outcome["conditions"][0]["seen"] == 10


def test_a_host_transaction_that_rolls_back_leaves_no_event(tenant: Tenant) -> None:
    _desk_with_rule(tenant)
    _host_event(tenant, "C-9", 5_000_000, commit=False)
    assert _count(tenant, "SELECT count(*) FROM events") == 0
    assert _count(tenant, "SELECT count(*) FROM subjects") == 0


def test_the_evaluation_message_delivered_three_times_claims_and_notifies_once(
        tenant: Tenant, worker: RunningWorker) -> None:
    _desk_with_rule(tenant)
    event_id = _host_event(tenant, "C-3", 3_000_000)
    for _ in range(3):
        relay_tenant.send(tenant.slug)
    worker.drain()
    assert _count(tenant, "SELECT count(*) FROM notification_ledger WHERE event_id = %s", [event_id]) == 1
    assert _notices(tenant) == 1


def test_a_batch_evaluated_again_after_its_lease_ran_out_claims_nothing_more(tenant: Tenant) -> None:
    """A worker evaluates a batch, commits, and its lease runs out before anything else is
    recorded (or a slow first worker and a reclaiming second one overlap): evaluating the
    same events again claims nothing more. The ledger's unique key is what guarantees it."""
    _desk_with_rule(tenant)
    event_id = _host_event(tenant, "C-5", 3_000_000)
    for _ in range(3):
        with tenant_tx(tenant.slug) as tx:
            # Processing again once evaluated is a move the event machine refuses: the
            # overlap is staged with the trigger off for this write only.
            tx.conn.execute("SET LOCAL session_replication_role = replica")
            tx.conn.execute("UPDATE events SET status = 'processing', lease_until = now() "
                            "WHERE id = %s", [event_id])
            tx.conn.execute("SET LOCAL session_replication_role = origin")
            evaluate_claimed(tx, [event_id])
    assert _count(tenant, "SELECT count(*) FROM notification_ledger WHERE event_id = %s", [event_id]) == 1


def test_a_stored_trace_names_its_shared_phase_two_part_which_is_stored_once(tenant: Tenant) -> None:
    """The rules phase 2 dropped (here: a rule for cases that came by branch, on events
    without that metadata) are the same
    for every event with the same phase-2 answer: that part of the trace is stored once in
    trace_parts and named by each event's trace; read back, each trace is whole."""
    rule_id = _desk_with_rule(tenant)
    with tenant_tx(tenant.slug) as tx:
        branch = create_rule(tx, {**BIG_CASE_RULE, "name": "Large case by branch",
                                  "trigger": {"subject_kind": "case", "metadata": {"channel": "branch"}}},
                             by="test").id
    events = [_host_event(tenant, f"C-{n}", amount) for n, amount in ((11, 2_000_000), (12, 5))]
    with tenant_tx(tenant.slug) as tx:
        tx.conn.execute("UPDATE events SET status = 'processing', lease_until = now() + interval '1 minute'")
        evaluate_claimed(tx, events)
    with tenant_tx(tenant.slug) as tx:
        parts = tx.conn.execute("SELECT count(*) FROM trace_parts").fetchone()
        named = tx.conn.execute(
            "SELECT count(*) FROM events WHERE trace::text LIKE '%%trace_part%%'").fetchone()
        traces = stored_traces(tx, events)
        assert stored_traces(tx, [10**9]) == {}  # no such event: no trace
    assert parts == (1,) and named == (2,)
    for event_id, fired in zip(events, (True, False), strict=True):
        phase_three, dropped = traces[event_id]
        assert phase_three["rule_id"] == rule_id and phase_three["fired"] is fired
        assert dropped["phase"] == 2 and dropped["fired"] is False and "trace_part" not in dropped
        assert [r[0] for r in dropped["rules"]] == [branch]


def test_a_trace_part_lost_with_an_unflushed_commit_is_stored_again(tenant: Tenant) -> None:
    """The relay's evaluations commit without waiting for the flush, so a crash of
    PostgreSQL can lose the transaction that stored a part while this process still
    remembers it as stored (here the part is deleted, as the crash would have lost it):
    the next batch that names it finds it missing and stores it again."""
    _desk_with_rule(tenant)
    with tenant_tx(tenant.slug) as tx:
        create_rule(tx, {**BIG_CASE_RULE, "name": "Large case by branch",
                         "trigger": {"subject_kind": "case", "metadata": {"channel": "branch"}}},
                    by="test")

    def evaluate(external_id: str) -> int:
        event_id = _host_event(tenant, external_id, 10)
        with tenant_tx(tenant.slug) as tx:
            tx.conn.execute("UPDATE events SET status = 'processing', "
                            "lease_until = now() + interval '1 minute' WHERE id = %s", [event_id])
            evaluate_claimed(tx, [event_id])
        return event_id

    evaluate("C-21")  # stores the part; this process now knows it
    with tenant_tx(tenant.slug) as tx:
        tx.conn.execute("DELETE FROM trace_parts")
    second = evaluate("C-22")  # names the same part
    with tenant_tx(tenant.slug) as tx:
        assert tx.conn.execute("SELECT count(*) FROM trace_parts").fetchone() == (1,)
        trace = stored_traces(tx, [second])[second]
    assert trace[1]["phase"] == 2 and "rules" in trace[1]


def test_the_claim_is_by_status_and_lease_one_batch_in_flight_per_tenant(tenant: Tenant) -> None:
    _desk_with_rule(tenant)
    first = [_host_event(tenant, f"C-{n}", n) for n in range(3)]
    with tenant_tx(tenant.slug) as tx:
        batch = claim_events(tx, limit=2, lease_seconds=60, max_attempts=5)
    assert batch.event_ids == first[:2]
    with tenant_tx(tenant.slug) as tx:  # the first batch is in flight: nothing more for now
        second = claim_events(tx, limit=2, lease_seconds=60, max_attempts=5)
    assert second.in_flight and second.event_ids == []
    with tenant_tx(tenant.slug) as tx:  # the worker that held it died: its lease runs out
        tx.conn.execute("UPDATE events SET lease_until = now() - interval '1 second' "
                        "WHERE status = 'processing'")
    with tenant_tx(tenant.slug) as tx:
        reclaimed = claim_events(tx, limit=10, lease_seconds=60, max_attempts=5)
    assert reclaimed.event_ids == first
    assert _count(tenant, "SELECT max(attempts) FROM events") == 2


def test_an_event_never_evaluated_is_failed_after_its_attempts_never_dropped(tenant: Tenant) -> None:
    _desk_with_rule(tenant)
    event_id = _host_event(tenant, "C-4", 1)
    for _ in range(3):
        with tenant_tx(tenant.slug) as tx:
            batch = claim_events(tx, limit=10, lease_seconds=60, max_attempts=3)
            tx.conn.execute("UPDATE events SET lease_until = now() - interval '1 second'")
        assert batch.event_ids == [event_id]
    with tenant_tx(tenant.slug) as tx:
        last = claim_events(tx, limit=10, lease_seconds=60, max_attempts=3)
        row = tx.conn.execute("SELECT status, last_error FROM events").fetchone()
    assert last.failed == 1 and last.event_ids == []
    assert row is not None and row[0] == "failed" and "3 attempts" in str(row[1])


def test_the_polling_fallback_finds_every_tenant_with_ready_events(
        make_tenant: Callable[..., Tenant], worker: RunningWorker) -> None:
    tenants = [make_tenant() for _ in range(3)]
    for t in tenants:
        _desk_with_rule(t)
    _host_event(tenants[0], "A-1", 2_000_000)
    _host_event(tenants[2], "C-1", 2_000_000)
    assert tenants_with_ready_events(tenants) == [tenants[0].slug, tenants[2].slug]
    relay_tick.send()
    worker.drain()
    assert [_notices(t) for t in tenants] == [1, 0, 1]
    assert tenants_with_ready_events(tenants) == []


def _break(tenant: Tenant, broken: bool) -> None:
    names = ("rules", "rules_broken") if broken else ("rules_broken", "rules")
    with tenant_tx(tenant.slug) as tx:
        tx.conn.execute(sql.SQL("ALTER TABLE {}.{} RENAME TO {}").format(
            sql.Identifier(tenant.schema), sql.Identifier(names[0]), sql.Identifier(names[1])))


@pytest.fixture
def quick_breaker() -> None:
    # A batch the open breaker skipped stays leased: short, so that the probe comes soon.
    use_settings(relay_breaker_failures=2, relay_breaker_reset_seconds=1, relay_lease_seconds=3)


def test_a_tenant_with_a_broken_schema_trips_its_breaker_and_recovers_while_others_go_on(
        make_tenant: Callable[..., Tenant], worker: RunningWorker, quick_breaker: None) -> None:
    healthy, broken = make_tenant(), make_tenant()
    for t in (healthy, broken):
        _desk_with_rule(t)
    _break(broken, True)
    for n in range(2):  # two failed evaluations open the breaker
        _host_event(broken, f"B-{n}", 2_000_000)
        relay_tick.send()
        worker.drain()
    assert breaker(broken.slug).current_state == "open"
    _host_event(healthy, "H-1", 2_000_000)
    relay_tick.send()
    worker.drain()
    assert _notices(healthy) == 1  # the healthy tenant did not wait for the broken one
    assert _count(broken, "SELECT count(*) FROM events WHERE status = 'evaluated'") == 0
    _break(broken, False)
    # After the pause the breaker lets one probe through; it succeeds and closes it.
    wait_until(lambda: breaker(broken.slug).current_state != "open" or _probe(worker), "a probe")
    wait_until(lambda: _probe(worker) and _notices(broken) == 2, "the broken tenant to recover")
    assert breaker(broken.slug).current_state == "closed"


def _probe(worker: RunningWorker) -> bool:
    relay_tick.send()
    worker.drain()
    return True


def test_events_status_shows_each_tenant_and_products_backlog_and_the_oldest_age(
        capsys: pytest.CaptureFixture[str], make_tenant: Callable[..., Tenant],
        worker: RunningWorker) -> None:
    busy, quiet = make_tenant(), make_tenant()
    for t in (busy, quiet):
        _desk_with_rule(t)
    waiting = [_host_event(busy, f"C-{n}", 2_000_000) for n in range(3)]
    with tenant_tx(busy.slug) as tx:  # one waiting an hour, one given up on
        tx.conn.execute("UPDATE events SET recorded_at = now() - interval '1 hour' WHERE id = %s",
                        [waiting[0]])
        tx.conn.execute("UPDATE events SET status = 'failed' WHERE id = %s", [waiting[2]])

    code, out, _ = run(capsys, "events", "status")
    assert code == 0
    rows = [line.split() for line in out.splitlines() if line.startswith((busy.slug, quiet.slug))]
    # tenant, product, pending, in flight, failed, and the oldest waiting event's age
    assert [row[:5] for row in rows] == [[busy.slug, "fraud", "2", "0", "1"]]
    assert rows[0][5:] == ["1h", "00m"]
    code, out, _ = run(capsys, "events", "status", "--tenant", quiet.slug)
    assert code == 0 and out.startswith("No events waiting or failed in 1 tenant(s).")

    relay_tick.send()
    worker.drain()
    code, out, _ = run(capsys, "events", "status", "--tenant", busy.slug)
    assert [line.split()[:5] for line in out.splitlines() if line.startswith(busy.slug)] == [
        [busy.slug, "fraud", "0", "0", "1"]]  # the failed one stays listed until someone acts
    code, _, err = run(capsys, "events", "status", "--tenant", "no-such-tenant")
    assert code == 2 and "no-such-tenant" in err
