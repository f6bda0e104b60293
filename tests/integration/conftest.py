"""Fixtures over real services: a fresh tenant per test, the local SES outbox, and a real
Dramatiq worker consuming from Redis."""

from __future__ import annotations

import email
import json
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from email.message import Message

import pytest

from db.migrations import drop_schema
from db.pool import connection
from db.tenancy import Tenant, create_tenant

WAIT_LIMIT = 60.0  # seconds an eventually-true condition may take before the test fails


def wait_until(condition: Callable[[], bool], what: str, limit: float = WAIT_LIMIT) -> None:
    """Poll for a condition; the limit only bounds a hang, no assertion depends on speed."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def new_tenant(zone: str = "Europe/London") -> Tenant:
    return create_tenant(f"t{uuid.uuid4().hex[:10]}", "Test Tenant", zone)


def remove_tenant(tenant: Tenant) -> None:
    with connection() as conn, conn.transaction():
        drop_schema(conn, tenant.schema)
        conn.execute("DELETE FROM control.schema_migrations WHERE schema_name = %s", [tenant.schema])
        conn.execute("DELETE FROM control.tenants WHERE id = %s", [tenant.id])


@pytest.fixture
def tenant() -> Iterator[Tenant]:
    t = new_tenant()
    yield t
    remove_tenant(t)


@pytest.fixture
def make_tenant() -> Iterator[Callable[..., Tenant]]:
    made: list[Tenant] = []

    def make(zone: str = "Europe/London") -> Tenant:
        t = new_tenant(zone)
        made.append(t)
        return t

    yield make
    for t in made:
        remove_tenant(t)


@dataclass(frozen=True)
class SentEmail:
    message_id: str
    to: str
    subject: str
    body: str


class SesOutbox:
    """What the local SES endpoint accepted, read through its own API."""

    def __init__(self, endpoint: str):
        self.endpoint = endpoint

    def reset(self) -> None:
        request = urllib.request.Request(f"{self.endpoint}/moto-api/reset", method="POST")
        urllib.request.urlopen(request, timeout=10).close()
        from actors.ses import SesMailer
        from tocsin.config import load_settings

        SesMailer(load_settings()).ensure_sender_identity()

    def sent(self) -> list[SentEmail]:
        with urllib.request.urlopen(f"{self.endpoint}/moto-api/data.json", timeout=10) as r:
            data = json.load(r)
        out = []
        for raw in data.get("ses", {}).get("RawMessage", []):
            message: Message = email.message_from_string(raw["raw_data"])
            payload = message.get_payload(decode=True)
            assert isinstance(payload, bytes)
            out.append(SentEmail(str(message["Message-ID"]), str(message["To"]),
                                 str(message["Subject"]), payload.decode()))
        return out


@pytest.fixture
def ses() -> SesOutbox:
    import os

    outbox = SesOutbox(os.environ["SES_ENDPOINT_URL"])
    outbox.reset()
    return outbox


class RunningWorker:
    """A real Dramatiq worker (threads in this process) consuming the test namespace."""

    def __init__(self) -> None:
        import dramatiq

        from actors.broker import broker

        self.broker = broker
        broker.flush_all()
        self.worker = dramatiq.Worker(broker, worker_timeout=100, worker_threads=4)
        self.worker.start()

    def drain(self) -> None:
        """Wait until every queue is empty and every message in hand has been processed."""
        for _ in range(3):  # actors enqueue follow-ups: join until nothing new appears
            for queue in sorted(self.broker.get_declared_queues()):
                self.broker.join(queue, timeout=int(WAIT_LIMIT * 1000))
            self.worker.join()

    def stop(self) -> None:
        self.worker.stop()
        self.broker.flush_all()


@pytest.fixture
def worker() -> Iterator[RunningWorker]:
    running = RunningWorker()
    yield running
    running.stop()


# The portal's fixtures (people in a fresh tenant, a test client over the real app).
from tests.integration.portal_support import people, portal  # noqa: E402, F401
