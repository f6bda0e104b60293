"""Operators can see that the machinery runs: `tocsin status` and /healthz judge the queues
(depth, age of the next message, live consumers recorded by the workers' heartbeats) and
each tenant's last completed sweep (recorded in PostgreSQL)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import dramatiq
import pytest
from dramatiq import Message
from dramatiq.brokers.redis import RedisBroker
from dramatiq.common import q_name
from litestar.testing import TestClient

import actors  # noqa: F401  (declares every actor's queue, as the worker command does)
from actors.scan import tick
from db.delivery.sweep import run_sweep
from db.platform.pool import connection
from db.platform.tenancy import Tenant, list_tenants
from tests.integration.conftest import WAIT_LIMIT, RunningWorker, wait_until
from tests.integration.portal_support import People, PortalClient, signed_in
from tocsin.boot.web import build_app
from tocsin.core.settings import load_settings
from tocsin.messaging.queues import PRODUCT_QUEUES, QueueInspector, QueueState
from tocsin.shell.cli import EXIT_DEGRADED

TOCSIN = str(Path(sys.executable).parent / "tocsin")
NOWHERE = "redis://127.0.0.1:1/0"  # nothing listens there
AN_HOUR_AGO = "now() - interval '1 hour'"  # far past any overdue limit of the test settings


def current_broker() -> Any:
    """The broker this test process enqueues through (whichever way it was installed)."""
    return dramatiq.get_broker()


def tocsin_status(*args: str) -> tuple[int, str]:
    done = subprocess.run([TOCSIN, "status", *args], capture_output=True, text=True, timeout=WAIT_LIMIT)
    return done.returncode, done.stdout + done.stderr


def inspector() -> QueueInspector:
    return QueueInspector.for_settings(load_settings())


# What only the Redis broker can show (tests/integration/test_rabbitmq.py has RabbitMQ's).
redis_broker_only = pytest.mark.skipif(bool(os.environ.get("BROKER_URL")),
                                       reason="reads the Redis broker's keys; the run is on RabbitMQ")


def queues() -> dict[str, QueueState]:
    return {q.name: q for q in inspector().states()}


def every_queue_consumed() -> bool:
    return all(q.consumers >= 1 for q in inspector().states())


def no_queue_consumed() -> bool:
    return all(q.consumers == 0 for q in inspector().states())


def set_back(tenant: Tenant, sql: str) -> None:
    with connection() as conn:
        conn.execute(sql.format(ago=AN_HOUR_AGO), [tenant.id])


@pytest.fixture
def no_worker() -> Iterator[None]:
    """No worker consumes anything (records of an earlier test's worker are gone), and what
    the test enqueues is flushed after it."""
    current_broker().flush_all()
    wait_until(no_queue_consumed, "records of earlier workers to expire")
    yield
    current_broker().flush_all()


def test_the_product_queues_are_every_queue_the_actors_declare() -> None:
    assert {q_name(q) for q in current_broker().get_declared_queues()} == set(PRODUCT_QUEUES)


def test_status_exits_0_when_a_live_worker_consumes_every_queue_and_the_sweep_is_fresh(
    tenant: Tenant, worker: RunningWorker
) -> None:
    run_sweep(tenant.slug)
    wait_until(every_queue_consumed, "the worker's first heartbeat")

    code, out = tocsin_status("--tenant", tenant.slug)

    assert code == 0, out
    for name in PRODUCT_QUEUES:
        assert any(line.split()[:1] == [name] for line in out.splitlines()), out
    [row] = [line.split() for line in out.splitlines() if line.startswith(tenant.slug)]
    assert (row[1], row[3], row[4]) == ("never", "ago", "never")  # swept just now; no scan, no digest yet
    assert "OVERDUE" not in out and "NO CONSUMER" not in out
    assert "ok: every queue has a live consumer" in out


def test_status_refuses_an_unknown_tenant_with_exit_2() -> None:
    code, out = tocsin_status("--tenant", "no-such-tenant")

    assert code == 2 and "tocsin: error: unknown tenant 'no-such-tenant'" in out, out


def test_status_exits_1_when_redis_does_not_answer(tenant: Tenant) -> None:
    done = subprocess.run([TOCSIN, "status"], capture_output=True, text=True, timeout=WAIT_LIMIT,
                          env={**os.environ, "REDIS_URL": NOWHERE})

    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.startswith("tocsin: error: Redis did not answer")


def test_status_names_the_queue_no_worker_consumes_and_exits_3(tenant: Tenant, no_worker: None) -> None:
    tick.send()  # a scan tick nobody will run

    code, out = tocsin_status("--tenant", tenant.slug)

    assert code == EXIT_DEGRADED == 3, out
    assert "queue 'scan' has no live consumer (1 ready, 0 delayed)" in out
    [scan_row] = [line for line in out.splitlines() if line.startswith("scan ")]
    assert scan_row.split()[1:3] == ["1", "0"] and scan_row.endswith("NO CONSUMER")
    assert f"tenant {tenant.slug!r}" not in out  # a tenant created just now is not overdue


def test_status_exits_3_when_a_tenants_sweep_is_overdue(tenant: Tenant, worker: RunningWorker) -> None:
    run_sweep(tenant.slug)
    wait_until(every_queue_consumed, "the worker's first heartbeat")
    set_back(tenant, "UPDATE control.completed_runs SET completed_at = {ago} "
                     "WHERE tenant_id = %s AND kind = 'sweep'")

    code, out = tocsin_status("--tenant", tenant.slug)

    assert code == EXIT_DEGRADED, out
    [row] = [line for line in out.splitlines() if line.startswith(tenant.slug)]
    assert "1h 00m ago" in row and row.endswith("SWEEP OVERDUE")
    assert f"tenant {tenant.slug!r}: the sweep last completed 36" in out  # 3600 s and a little
    assert "NO CONSUMER" not in out  # the queues are fine: only the sweep is named


def test_a_tenant_created_long_ago_and_never_swept_is_overdue(tenant: Tenant, worker: RunningWorker) -> None:
    wait_until(every_queue_consumed, "the worker's first heartbeat")
    assert tocsin_status("--tenant", tenant.slug)[0] == 0  # new: its first sweep is not due yet
    set_back(tenant, "UPDATE control.tenants SET created_at = {ago} WHERE id = %s")

    code, out = tocsin_status("--tenant", tenant.slug)

    assert code == EXIT_DEGRADED, out
    assert f"tenant {tenant.slug!r}: the sweep has never completed" in out


@redis_broker_only
def test_the_oldest_age_is_the_age_of_the_next_message_and_delayed_ones_count_apart(
    no_worker: None,
) -> None:
    ten_minutes_ago_ms = int((time.time() - 600) * 1000)
    current_broker().enqueue(tick.message().copy(message_timestamp=ten_minutes_ago_ms))
    tick.send()  # younger, behind it
    tick.send_with_options(delay=3_600_000)  # milliseconds: waits in scan.DQ

    scan = queues()["scan"]
    code, out = tocsin_status()

    assert (scan.ready, scan.delayed, scan.consumers) == (2, 1, 0)
    assert scan.oldest_age_seconds is not None and 600 <= scan.oldest_age_seconds < 600 + WAIT_LIMIT
    [scan_row] = [line for line in out.splitlines() if line.startswith("scan ")]
    assert scan_row.split()[1:4] == ["2", "1", "10m"], scan_row
    assert queues()["email"].oldest_age_seconds is None  # nothing waits there
    assert code == EXIT_DEGRADED


@redis_broker_only
def test_status_finds_a_queue_no_actor_names_that_holds_messages_nobody_consumes(no_worker: None) -> None:
    settings = load_settings()
    elsewhere = RedisBroker(url=settings.redis_url, namespace=settings.dramatiq_namespace, middleware=[])
    elsewhere.declare_queue("reports")
    try:
        elsewhere.enqueue(Message(queue_name="reports", actor_name="build_report", args=(), kwargs={},
                                  options={}))
        code, out = tocsin_status()
    finally:
        elsewhere.flush("reports")
        elsewhere.close()

    assert code == EXIT_DEGRADED, out
    assert "queue 'reports' has no live consumer (1 ready, 0 delayed)" in out
    assert "reports" not in {q.name for q in inspector().states()}  # /healthz does not scan for it


def test_a_worker_that_stops_no_longer_counts_as_a_consumer(no_worker: None) -> None:
    running = RunningWorker()
    try:
        wait_until(every_queue_consumed, "the worker's first heartbeat")
        assert {q.name: q.consumers for q in inspector().states()} == dict.fromkeys(PRODUCT_QUEUES, 1)
    finally:
        running.stop()
    assert no_queue_consumed()  # at once: it withdrew its records on shutdown


def test_a_tocsin_worker_process_is_seen_consuming_every_queue_until_it_stops(
    tenant: Tenant, no_worker: None
) -> None:
    run_sweep(tenant.slug)
    worker = subprocess.Popen([TOCSIN, "worker", "--processes", "1", "--threads", "1"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_until(every_queue_consumed, "the worker process's first heartbeat")
        code, out = tocsin_status("--tenant", tenant.slug)
        assert code == 0, out
    finally:
        worker.send_signal(signal.SIGTERM)
        output, _ = worker.communicate(timeout=WAIT_LIMIT)
    assert worker.returncode == 0, output.decode()
    assert no_queue_consumed()
    code, out = tocsin_status("--tenant", tenant.slug)
    assert code == EXIT_DEGRADED and "queue 'email' has no live consumer" in out


def test_a_dedicated_email_worker_is_seen_consuming_only_the_email_queue(no_worker: None) -> None:
    email_only = subprocess.Popen(
        [TOCSIN, "worker", "--processes", "1", "--threads", "1", "--queues", "email"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: queues()["email"].consumers == 1, "the email worker's first heartbeat")
        assert {name: q.consumers for name, q in queues().items()} == {
            name: int(name == "email") for name in PRODUCT_QUEUES}
    finally:
        email_only.send_signal(signal.SIGTERM)
        output, _ = email_only.communicate(timeout=WAIT_LIMIT)
    assert email_only.returncode == 0, output.decode()


def test_the_worker_command_refuses_a_queue_the_product_does_not_have() -> None:
    done = subprocess.run([TOCSIN, "worker", "--queues", "emails"], capture_output=True, text=True,
                          timeout=WAIT_LIMIT)

    assert done.returncode == 2 and "'emails' is not a queue" in done.stderr, done.stderr


def test_healthz_says_degraded_with_503_when_redis_does_not_answer() -> None:
    settings = replace(load_settings(), redis_url=NOWHERE)
    with TestClient(app=build_app(settings)) as portal:
        response = portal.get("/healthz")

    assert response.status_code == 503
    assert response.json() == {"status": "degraded", "problems": ["Redis did not answer"]}


def sweep_every_active_tenant() -> None:
    """/healthz judges every active tenant, including any an earlier run left behind."""
    for t in list_tenants(active_only=True):
        run_sweep(t.slug)


def test_healthz_says_ok_with_200_when_the_machinery_runs(
    portal: PortalClient, tenant: Tenant, worker: RunningWorker
) -> None:
    sweep_every_active_tenant()
    wait_until(every_queue_consumed, "the worker's first heartbeat")

    response = portal.get("/healthz")

    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == "ok" and body["problems"] == []
    assert {q["name"] for q in body["queues"]} == set(PRODUCT_QUEUES)
    assert all(q["consumers"] >= 1 and not q["unconsumed"] for q in body["queues"])
    assert body["tenants"]["active"] >= 1 and body["tenants"]["sweep_overdue"] == 0
    assert body["tenants"]["oldest_sweep_age_seconds"] < body["tenants"]["sweep_overdue_after_seconds"]


def test_healthz_says_degraded_with_503_when_no_worker_runs(
    portal: PortalClient, tenant: Tenant, no_worker: None
) -> None:
    tick.send()

    response = portal.get("/healthz")

    assert response.status_code == 503, response.text
    body = response.json()
    assert body["status"] == "degraded"
    assert "queue 'scan' has no live consumer (1 ready, 0 delayed)" in body["problems"]
    scan = next(q for q in body["queues"] if q["name"] == "scan")
    assert scan["ready"] == 1 and scan["consumers"] == 0 and scan["unconsumed"] is True
    assert portal.get("/readyz").status_code == 200  # the web itself still serves pages


def test_healthz_says_degraded_with_503_when_a_sweep_is_overdue_without_naming_the_tenant(
    portal: PortalClient, tenant: Tenant, worker: RunningWorker
) -> None:
    sweep_every_active_tenant()
    wait_until(every_queue_consumed, "the worker's first heartbeat")
    set_back(tenant, "UPDATE control.completed_runs SET completed_at = {ago} "
                     "WHERE tenant_id = %s AND kind = 'sweep'")

    response = portal.get("/healthz")

    assert response.status_code == 503, response.text
    body = response.json()
    assert body["status"] == "degraded" and body["tenants"]["sweep_overdue"] == 1
    assert body["problems"] == ["1 tenant(s) have an overdue sweep"]
    assert body["tenants"]["oldest_sweep_age_seconds"] >= 3600
    assert tenant.slug not in response.text  # public: slugs are what people sign in with


NOT_PROCESSED = "Deliveries are not being processed"


def test_the_needs_attention_page_says_deliveries_are_not_processed_only_when_the_sweep_is_overdue(
    portal: PortalClient, people: People
) -> None:
    signed_in(portal, people, people.admin)
    tenant = people.tenant
    assert NOT_PROCESSED not in portal.get("/ledger/attention").text  # new tenant: not due yet

    set_back(tenant, "UPDATE control.tenants SET created_at = {ago} WHERE id = %s")
    page = portal.get("/ledger/attention").text
    assert NOT_PROCESSED in page and "has never completed for this organisation" in page

    run_sweep(tenant.slug)
    assert NOT_PROCESSED not in portal.get("/ledger/attention").text

    set_back(tenant, "UPDATE control.completed_runs SET completed_at = {ago} "
                     "WHERE tenant_id = %s AND kind = 'sweep'")
    page = portal.get("/ledger/attention").text
    assert NOT_PROCESSED in page and "last completed on" in page and "(1 hour ago)" in page
