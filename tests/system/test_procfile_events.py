"""Events in, under the Procfile's processes: a host's commit with no wake-up, the workers
killed in the middle of evaluating, a poison product beside a healthy one, a tenant whose
schema breaks. Events enter as integrators send them (a host's own transaction, the HTTP
API with the Python client); outcomes are read from outside: the ledger, the inbox rows,
the events' status, and the SES endpoint.
"""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

from db.events.api_keys import create_api_key
from db.platform.tenancy import Tenant, tenant_tx
from db.rules.definitions import create_rule
from tests.integration.conftest import SesOutbox, wait_until
from tests.integration.intake_support import case_event, fraud_desk
from tests.support.procfile_stack import ProcfileStack
from tests.system.outcomes import RECOVERY_LIMIT
from tocsin.core.settings import load_settings
from tocsin.shell.client import TocsinClient
from tocsin.shell.outbox import record_event

# Seconds: a dead worker's batch comes back after a short lease, a broken tenant is probed
# again soon, and the polling fallback comes round every two seconds.
EVENT_SETTINGS = {"RELAY_LEASE_SECONDS": "5", "EVENTS_POLL_SECONDS": "2", "RELAY_BATCH": "20",
                  "RELAY_BREAKER_RESET_SECONDS": "3", "RELAY_BREAKER_FAILURES": "2",
                  "SCAN_INTERVAL_SECONDS": "3600"}


def _rule(name: str, product: str = "fraud", *, title: str = "Case {{ subject.external_id }}",
          channels: tuple[str, ...] = ("in_app",)) -> dict[str, Any]:
    return {"name": name, "product": product, "kind": "created", "trigger": {},
            "conditions": {"all": [{"fact": "field.amount", "op": "greater", "value": 100}]},
            "actions": {"channels": list(channels), "category": "case_alert",
                        "recipients": [{"type": "assignees"}],
                        "template": {"title": title, "body": "Amount {{ field.amount }}"}}}


def _desk(tenant: Tenant, *rules: dict[str, Any]) -> str:
    fraud_desk(tenant)
    with tenant_tx(tenant.slug) as tx:
        for rule in rules or (_rule("Large case"),):
            create_rule(tx, rule, by="test")
    _, key = create_api_key(tenant.slug, "system test")
    return key


def _scalar(tenant: Tenant, query: str) -> int:
    with tenant_tx(tenant.slug) as tx:
        row = tx.conn.execute(query).fetchone()
    assert row is not None
    return int(str(row[0]))


def _case(n: int, product: str = "fraud") -> dict[str, Any]:
    event = case_event(f"C-{n}", assignees=["ana@example.com"], fields={"amount": 1_000 + n})
    event["product"] = product
    return event


def _ready(stack: ProcfileStack) -> bool:
    try:
        with urllib.request.urlopen(f"{stack.portal_url}/readyz", timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def _send(stack: ProcfileStack, key: str, events: list[dict[str, Any]]) -> None:
    with TocsinClient(stack.portal_url, key) as client:
        for start in range(0, len(events), 100):
            client.send_batch(events[start:start + 100])


def _alerts(tenant: Tenant) -> int:
    return _scalar(tenant, "SELECT count(*) FROM notifications WHERE category = 'case_alert'")


def _evaluated(tenant: Tenant) -> int:
    return _scalar(tenant, "SELECT count(*) FROM events WHERE status = 'evaluated'")


def _each_event_claimed_once(tenant: Tenant, events: int, rules: int = 1) -> None:
    assert _scalar(tenant, "SELECT count(*) FROM events WHERE status = 'evaluated'") == events
    assert _scalar(tenant, "SELECT count(*) FROM notification_ledger WHERE event_id IS NOT NULL") \
        == events * rules
    assert _scalar(tenant, "SELECT count(*) FROM (SELECT ledger_id FROM notifications "
                           "WHERE ledger_id IS NOT NULL GROUP BY ledger_id HAVING count(*) > 1) d") == 0
    assert _alerts(tenant) \
        == events * rules


HOST_COMMITS_THEN_DIES = """
import os, sys, psycopg
from tocsin.shell.outbox import record_event
with psycopg.connect(os.environ["DATABASE_URL"]) as conn:
    record_event(conn, sys.argv[1], {"product": "fraud", "type": "created", "subject": {
        "kind": "case", "external_id": "HOST-1", "assignees": ["ana@example.com"],
        "fields": {"amount": 5000}}})
    conn.commit()
    os._exit(0)  # the host process dies right after its commit: no wake-up, nothing else
"""


def test_a_host_rollback_records_nothing_and_a_commit_whose_process_dies_is_still_evaluated(
        tenant: Tenant, procfile: Callable[..., ProcfileStack]) -> None:
    _desk(tenant)
    # No wake-up at all (the clock does not listen): only the polling fallback finds it.
    stack = procfile(**EVENT_SETTINGS, EVENTS_WAKEUP="0").start_all()
    with psycopg.connect(load_settings().database_url) as conn:
        record_event(conn, tenant.slug, _case(1))
        conn.rollback()  # the host's own write failed: its event goes with it
    done = subprocess.run([sys.executable, "-c", HOST_COMMITS_THEN_DIES, tenant.slug],
                          env={**os.environ, "DATABASE_URL": load_settings().database_url},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    wait_until(lambda: _alerts(tenant) == 1,
               "the polling fallback to find the committed event", RECOVERY_LIMIT)
    assert _scalar(tenant, "SELECT count(*) FROM events") == 1
    assert _scalar(tenant, "SELECT count(*) FROM subjects WHERE external_id = 'C-1'") == 0
    assert "relay tick: 1 of" in stack.output("worker")


def test_a_hosts_commit_wakes_the_relay_through_the_database_without_waiting_for_a_poll(
        tenant: Tenant, procfile: Callable[..., ProcfileStack]) -> None:
    _desk(tenant)
    # The polling fallback comes round once at start and then not for an hour: only the
    # clock's listener, woken by the host's commit, can bring the event to the inbox.
    stack = procfile(**{**EVENT_SETTINGS, "EVENTS_POLL_SECONDS": "3600"}).start_all()
    wait_until(lambda: "listening for events committed by hosts" in stack.output("clock"),
               "the clock to listen for hosts' commits", RECOVERY_LIMIT)
    with psycopg.connect(load_settings().database_url) as conn:
        record_event(conn, tenant.slug, _case(7))
        conn.rollback()  # rolled back: no event, and no wake-up names it
        # The start's tick may still find this first one; once its notice exists, that
        # tick's look at the outbox is over, and the next is an hour away.
        record_event(conn, tenant.slug, _case(8))
        conn.commit()
        wait_until(lambda: _alerts(tenant) == 1, "the first event's notice", RECOVERY_LIMIT)
        record_event(conn, tenant.slug, _case(9))
        conn.commit()
    wait_until(lambda: _alerts(tenant) == 2, "the host's commit to wake the relay", RECOVERY_LIMIT)
    assert _scalar(tenant, "SELECT count(*) FROM events") == 2
    assert _scalar(tenant, "SELECT count(*) FROM subjects WHERE external_id = 'C-7'") == 0


def test_kill_9_of_the_workers_in_the_middle_of_evaluating_then_a_restart_claims_each_once(
        make_tenant: Callable[..., Tenant], procfile: Callable[..., ProcfileStack]) -> None:
    tenants = [make_tenant() for _ in range(3)]
    keys = [_desk(t, _rule("Large case"), _rule("Any case")) for t in tenants]
    stack = procfile(**EVENT_SETTINGS, WORKER_PROCESSES="2", WORKER_THREADS="2")
    stack.start("web")  # alone: /healthz says degraded (no worker yet), /readyz that it serves
    wait_until(lambda: _ready(stack), "the web process to answer")
    per_tenant = 300
    for key in keys:
        _send(stack, key, [_case(n) for n in range(per_tenant)])
    worker = stack.start("worker")
    stack.start("clock")
    wait_until(lambda: _evaluated(tenants[0]) > 0,
               "the first batch to be evaluated", RECOVERY_LIMIT)
    worker.kill_everything()  # mid-run: batches held under leases, messages in hand
    evaluated = sum(_evaluated(t) for t in tenants)
    assert evaluated < per_tenant * len(tenants), "the kill came too late to interrupt anything"
    stack.start("worker")
    for t in tenants:
        wait_until(lambda t=t: _evaluated(t)
                   == per_tenant, f"every event of {t.slug} to be evaluated", RECOVERY_LIMIT)
        wait_until(lambda t=t: _alerts(t)
                   == 2 * per_tenant, f"every notice of {t.slug}", RECOVERY_LIMIT)
    for t in tenants:
        _each_event_claimed_once(t, per_tenant, rules=2)


def test_a_poison_product_does_not_hold_up_another_products_events(
        tenant: Tenant, procfile: Callable[..., ProcfileStack]) -> None:
    # whistle's rule names a recipient nobody can resolve (saved before validation): every
    # preparation of it fails.
    poison = _rule("Every report", "whistle")
    key = _desk(tenant, _rule("Large case"))
    with tenant_tx(tenant.slug) as tx:
        from db.events.products import create_product

        create_product(tx, "whistle", "Whistleblowing", ("case",))
        create_rule(tx, poison, by="test")
        tx.conn.execute("UPDATE rule_versions v SET definition = jsonb_set(v.definition, "
                        "'{actions,recipients}', '[{\"type\": \"nobody\"}]') FROM rules r "
                        "WHERE r.id = v.rule_id AND r.product = 'whistle'")
    # Each run of a whistle message now fails every one of its claims; a backoff of a few
    # seconds keeps whistle failing while fraud's events are evaluated and prepared.
    stack = procfile(**EVENT_SETTINGS, PREPARE_MAX_ATTEMPTS="3", PREPARE_BACKOFF_MIN_SECONDS="8",
                     PREPARE_BACKOFF_MAX_SECONDS="8").start_all()
    _send(stack, key, [_case(n, "whistle") for n in range(40)])
    _send(stack, key, [_case(100 + n) for n in range(40)])

    def whistle_given_up() -> int:
        return _scalar(tenant, "SELECT count(*) FROM notification_ledger l JOIN rules r ON r.id = l.rule_id "
                               "WHERE r.product = 'whistle' AND l.prepare_failed_at IS NOT NULL")

    wait_until(lambda: _alerts(tenant) == 40,
               "every fraud notice", RECOVERY_LIMIT)
    assert whistle_given_up() < 40, "fraud's notices waited until whistle's failures were over"
    wait_until(lambda: whistle_given_up() == 40, "whistle's claims to be given up on", RECOVERY_LIMIT)
    assert _scalar(tenant, "SELECT count(*) FROM notification_ledger WHERE prepared_at IS NOT NULL "
                           "AND rule_id IS NOT NULL") == 40
    worker_log = stack.output("worker")
    assert "preparation failed" in worker_log and "giving up" in worker_log


def _rename(tenant: Tenant, old: str, new: str) -> None:
    with tenant_tx(tenant.slug) as tx:
        tx.conn.execute(sql.SQL("ALTER TABLE {}.{} RENAME TO {}").format(
            sql.Identifier(tenant.schema), sql.Identifier(old), sql.Identifier(new)))


def test_a_tenant_whose_schema_breaks_trips_its_breaker_recovers_and_no_other_tenant_waits(
        make_tenant: Callable[..., Tenant], procfile: Callable[..., ProcfileStack]) -> None:
    healthy, broken = make_tenant(), make_tenant()
    keys = {t.slug: _desk(t) for t in (healthy, broken)}
    _rename(broken, "rules", "rules_away")  # evaluation fails for this tenant only
    stack = procfile(**EVENT_SETTINGS, WORKER_PROCESSES="1").start_all()
    _send(stack, keys[broken.slug], [_case(n) for n in range(10)])
    wait_until(lambda: f"breaker tenant={broken.slug} closed -> open" in stack.output("worker"),
               "the broken tenant's breaker to open", RECOVERY_LIMIT)
    _send(stack, keys[healthy.slug], [_case(n) for n in range(10)])
    wait_until(lambda: _alerts(healthy) == 10,
               "the healthy tenant's notices", RECOVERY_LIMIT)
    assert _evaluated(broken) == 0
    _rename(broken, "rules_away", "rules")  # repaired: the next probe succeeds
    wait_until(lambda: _alerts(broken) == 10,
               "the repaired tenant's notices", RECOVERY_LIMIT)
    log = stack.output("worker")
    assert f"breaker tenant={broken.slug} open -> half-open" in log
    assert f"breaker tenant={broken.slug} half-open -> closed" in log
    _each_event_claimed_once(broken, 10)
    _each_event_claimed_once(healthy, 10)


def test_events_sent_through_the_api_reach_the_inbox_and_email_once(
        tenant: Tenant, procfile: Callable[..., ProcfileStack], ses: SesOutbox) -> None:
    key = _desk(tenant, _rule("Large case", channels=("in_app", "email")))
    stack = procfile(**EVENT_SETTINGS).start_all()
    _send(stack, key, [_case(n) for n in range(25)])
    wait_until(lambda: sum(1 for m in ses.sent() if f".{tenant.slug}@" in m.message_id) == 25,
               "25 emails at the SES endpoint", RECOVERY_LIMIT)
    _each_event_claimed_once(tenant, 25)
    assert {m.to for m in ses.sent() if f".{tenant.slug}@" in m.message_id} == {"ana@example.com"}
