"""The RabbitMQ path, end to end, on every run: BROKER_URL selects Dramatiq's RabbitMQ
broker with publisher confirms, a real worker delivers a scan's emails over it, and a
RabbitMQ that lost its queues loses no email (the sweeper's marker lives in RabbitMQ).

When the whole run is on RabbitMQ (`make test-rabbitmq`) these use its vhost; otherwise
each test gets a vhost of its own on this machine's RabbitMQ (127.0.0.1:5672), and is
skipped only when nothing answers there.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pika
import pytest
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from dramatiq.common import dq_name, xq_name
from litestar.testing import TestClient

from actors.email import EMAILS_PER_MESSAGE
from actors.scan import scan_tenant, tick
from actors.sweep import sweep
from db.platform.tenancy import Tenant
from tests.integration.builders import add_admin, add_client, delivery_statuses, ledger
from tests.integration.conftest import WAIT_LIMIT, RunningWorker, SesOutbox, wait_until
from tests.support.rabbitmq import LOCAL_RABBITMQ, create_vhost, delete_vhost, unreachable_reason
from tocsin import boot
from tocsin.boot.web import build_app
from tocsin.core import runtime
from tocsin.messaging.broker import current_broker
from tocsin.messaging.queues import QueueInspector
from tocsin.messaging.sweeper_marker import MARKER_NAME

TOCSIN = str(Path(sys.executable).parent / "tocsin")
AS_OF = datetime(2027, 3, 10, 9, 0, tzinfo=UTC)
TODAY = AS_OF.date()


@pytest.fixture
def rabbitmq() -> Iterator[str]:
    """This process on the RabbitMQ broker (a vhost of its own unless the run has one)."""
    if runtime.settings().broker_url is not None:
        yield runtime.settings().broker_url
        return
    reason = unreachable_reason(LOCAL_RABBITMQ)
    if reason is not None:
        pytest.skip(reason)
    vhost = f"tocsin-test-{uuid.uuid4().hex[:8]}"
    url = create_vhost(LOCAL_RABBITMQ, vhost)
    before = runtime.settings()
    boot.start_messaging(boot.start(replace(before, broker_url=url)))
    os.environ["BROKER_URL"] = url  # for anything that reads the environment again
    try:
        yield url
    finally:
        try:
            del os.environ["BROKER_URL"]
            boot.start_messaging(boot.start(before))  # closes the RabbitMQ broker's connections
        finally:
            delete_vhost(LOCAL_RABBITMQ, vhost)


def _delete_every_queue(url: str) -> None:
    """What a reset RabbitMQ node (or a deleted and recreated vhost) leaves: no queue at all."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        channel = connection.channel()
        for queue in sorted(current_broker().get_declared_queues()):
            for name in (queue, dq_name(queue), xq_name(queue)):
                channel.queue_delete(name)
        channel.queue_delete(f"{runtime.settings().dramatiq_namespace}.{MARKER_NAME}")
    finally:
        connection.close()


def test_a_scans_emails_are_delivered_by_a_real_worker_over_rabbitmq_with_confirms_on(
    rabbitmq: str, tenant: Tenant, ses: SesOutbox
) -> None:
    broker = current_broker()
    assert isinstance(broker, RabbitmqBroker) and broker.confirm_delivery
    add_admin(tenant)
    client, _ = add_client(tenant, TODAY + timedelta(days=7), users=2)
    worker = RunningWorker()
    try:
        scan_tenant.send(tenant.slug, AS_OF.isoformat())  # the scan itself runs in the worker
        worker.drain()
    finally:
        worker.stop()

    assert sorted(e.to for e in ses.sent()) == sorted(
        ["admin@example.com", f"user0.client{client.id}@example.com",
         f"user1.client{client.id}@example.com"])
    assert delivery_statuses(tenant) == {"accepted": 3}
    [claim] = [r for r in ledger(tenant) if r["status"] == "claimed"]
    assert claim["threshold"] == "d7" and claim["delivered_at"] is not None


def test_a_rabbitmq_that_lost_its_queues_loses_no_email_the_sweep_resends_every_due_one(
    rabbitmq: str, tenant: Tenant, ses: SesOutbox
) -> None:
    from db.notices.scan import run_scan

    broker = current_broker()
    add_admin(tenant)
    for offset in (1, 7, 14):
        add_client(tenant, TODAY + timedelta(days=offset), users=2)
    sweep()  # no worker yet: leaves the marker; the tenants' sweeps it sent are dropped
    broker.flush_all()
    run_scan(tenant.slug, AS_OF)  # the emails wait in RabbitMQ's email queue
    ready, _delayed, _dead = broker.get_queue_message_counts("email")
    assert delivery_statuses(tenant)["pending"] == 9
    assert ready == -(-9 // EMAILS_PER_MESSAGE)  # the tenant's deliveries, EMAILS_PER_MESSAGE a message

    _delete_every_queue(rabbitmq)  # the emails are gone with the queues, and so is the marker
    sweep()  # no marker: every due delivery is enqueued again, not only stale ones
    # Workers started after the reset (a fresh process declares every queue it consumes).
    worker = subprocess.Popen([TOCSIN, "worker", "--processes", "1", "--threads", "4"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: delivery_statuses(tenant) == {"accepted": 9}, "every email to be accepted")
    finally:
        worker.send_signal(signal.SIGTERM)
        output, _ = worker.communicate(timeout=WAIT_LIMIT)
    assert worker.returncode == 0, output.decode()

    copies = Counter(e.message_id for e in ses.sent())
    assert len(copies) == 9 and set(copies.values()) == {1}  # every email once, none twice


def _take_all(queue: str) -> list[tuple[object, ...]]:
    """The args of every message ready in ``queue``, taken off it."""
    taken = []
    consumer = current_broker().consume(queue, prefetch=100, timeout=500)  # milliseconds
    try:
        for message in consumer:
            if message is None:
                return taken
            taken.append(tuple(message.args))
            consumer.ack(message)
    finally:
        consumer.close()
    return taken


def test_a_send_to_a_queue_rabbitmq_no_longer_has_declares_it_again_instead_of_losing_the_message(
    rabbitmq: str,
) -> None:
    """RabbitMQ drops a message published to a queue that does not exist. The sender declares
    a queue before its first send and remembers it; if the queue is deleted after that (a node
    reset, a vhost recreated, an operator), the next send is returned unroutable (publisher
    confirms with the mandatory flag), and the broker declares the queue again and re-sends."""
    from actors.prepare import send_preparation

    broker = current_broker()
    broker.flush_all()
    send_preparation("a-tenant", "fraud", [1])  # the first send to prepare_fraud declares it
    assert _take_all("prepare_fraud") == [("a-tenant", [1])]

    connection = pika.BlockingConnection(pika.URLParameters(rabbitmq))
    try:
        channel = connection.channel()
        for name in ("prepare_fraud", dq_name("prepare_fraud"), xq_name("prepare_fraud")):
            channel.queue_delete(name)
    finally:
        connection.close()
    send_preparation("a-tenant", "fraud", [2])  # this process still believes it declared the queue

    assert _take_all("prepare_fraud") == [("a-tenant", [2])]


def tocsin_status(**env: str) -> tuple[int, str]:
    done = subprocess.run([TOCSIN, "status"], capture_output=True, text=True, timeout=WAIT_LIMIT,
                          env={**os.environ, **env})
    return done.returncode, done.stdout + done.stderr


def test_status_over_rabbitmq_counts_ready_and_delayed_messages_and_says_the_age_is_unknown(
    rabbitmq: str,
) -> None:
    broker = current_broker()
    broker.flush_all()
    inspector = QueueInspector.for_settings(runtime.settings())
    wait_until(lambda: all(q.consumers == 0 for q in inspector.states()),
               "earlier workers' records to expire")
    try:
        tick.send()
        tick.send()
        tick.send_with_options(delay=3_600_000)  # milliseconds: waits in RabbitMQ's scan.DQ

        scan = {q.name: q for q in inspector.states()}["scan"]
        code, out = tocsin_status()
    finally:
        broker.flush_all()

    assert (scan.ready, scan.delayed, scan.oldest_age_seconds, scan.consumers) == (2, 1, None, 0)
    assert code == 3, out
    assert "Queues (RabbitMQ amqp://guest:***@127.0.0.1:5672/" in out and "guest:guest" not in out
    [scan_row] = [line for line in out.splitlines() if line.startswith("scan ")]
    assert scan_row.split()[1:4] == ["2", "1", "unknown"] and scan_row.endswith("NO CONSUMER"), scan_row
    assert "queue 'scan' has no live consumer (2 ready, 1 delayed)" in out


def test_status_exits_1_when_rabbitmq_does_not_answer() -> None:
    code, out = tocsin_status(BROKER_URL="amqp://guest:guest@127.0.0.1:1/%2F")  # nothing listens there

    assert code == 1, out
    assert out.startswith("tocsin: error: RabbitMQ did not answer"), out


def test_healthz_over_rabbitmq_counts_the_messages_waiting_in_rabbitmq(rabbitmq: str) -> None:
    broker = current_broker()
    broker.flush_all()
    inspector = QueueInspector.for_settings(runtime.settings())
    wait_until(lambda: all(q.consumers == 0 for q in inspector.states()),
               "earlier workers' records to expire")
    try:
        tick.send()  # a scan tick nobody will run
        with TestClient(app=build_app(runtime.settings())) as portal:
            response = portal.get("/healthz")
    finally:
        broker.flush_all()

    assert response.status_code == 503, response.text
    assert "queue 'scan' has no live consumer (1 ready, 0 delayed)" in response.json()["problems"]
    [scan] = [q for q in response.json()["queues"] if q["name"] == "scan"]
    assert (scan["ready"], scan["consumers"], scan["unconsumed"]) == (1, 0, True)


def test_healthz_says_rabbitmq_did_not_answer_when_it_does_not() -> None:
    settings = replace(runtime.settings(), broker_url="amqp://guest:guest@127.0.0.1:1/%2F")  # nothing there
    with TestClient(app=build_app(settings)) as portal:
        response = portal.get("/healthz")

    assert response.status_code == 503
    assert response.json() == {"status": "degraded", "problems": ["RabbitMQ did not answer"]}
