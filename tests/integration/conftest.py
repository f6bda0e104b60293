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
from email.header import decode_header, make_header
from email.message import Message
from typing import Any

import pytest

from db.platform.migrations import drop_schema
from db.platform.pool import connection
from db.platform.tenancy import Tenant, create_tenant
from tests.support.faulty_ses import FaultySes
from tests.support.sns_signer import SnsSigner

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
        conn.execute("DELETE FROM control.api_keys WHERE tenant_id = %s", [tenant.id])
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
    ses_id: str  # the provider's id for this copy
    message_id: str
    to: str
    subject: str
    body: str  # the text/plain part
    headers: dict[str, str]
    html: str | None = None  # the text/html part, when the message is multipart/alternative
    content_type: str = "text/plain"


class SesOutbox:
    """What the local SES endpoint accepted, read through its own API."""

    def __init__(self, endpoint: str):
        self.endpoint = endpoint

    def reset(self) -> None:
        request = urllib.request.Request(f"{self.endpoint}/moto-api/reset", method="POST")
        urllib.request.urlopen(request, timeout=10).close()
        from tocsin.core import runtime
        from tocsin.monitoring.ops_alerts import prepare_local_aws

        prepare_local_aws(runtime.settings())

    def sent(self) -> list[SentEmail]:
        with urllib.request.urlopen(f"{self.endpoint}/moto-api/data.json", timeout=10) as r:
            data = json.load(r)
        out = []
        for raw in data.get("ses", {}).get("RawMessage", []):
            message: Message = email.message_from_string(raw["raw_data"])
            parts = {part.get_content_type(): part for part in message.walk()
                     if not part.is_multipart()}  # one text/plain part, and text/html with it
            payload = parts["text/plain"].get_payload(decode=True)
            assert isinstance(payload, bytes)
            html = parts["text/html"].get_payload(decode=True) if "text/html" in parts else None
            assert html is None or isinstance(html, bytes)
            out.append(SentEmail(str(raw["id"]), str(message["Message-ID"]), str(message["To"]),
                                 str(make_header(decode_header(str(message["Subject"])))),
                                 payload.decode(),
                                 {k: str(v) for k, v in message.items()},
                                 html.decode() if html is not None else None,
                                 message.get_content_type()))
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

        from tocsin.messaging.broker import current_broker

        self.broker = broker = current_broker()
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


@pytest.fixture
def faulty_ses(ses: SesOutbox) -> Iterator[FaultySes]:
    """The fault-injecting endpoint in front of the local SES, used by this process's
    mailer (its policy and delay are set by the test)."""
    from dataclasses import replace

    from tocsin.core.settings import load_settings
    from tocsin.providers.ses import SesMailer, set_mailer

    with FaultySes(ses.endpoint) as proxy:
        set_mailer(SesMailer(replace(load_settings(), ses_endpoint_url=proxy.url)))
        try:
            yield proxy
        finally:
            set_mailer(None)


@pytest.fixture
def sns_signer(monkeypatch: pytest.MonkeyPatch) -> Iterator[SnsSigner]:
    """Signs SNS messages from the allowed (local) topic with a test key whose certificate
    the hook may fetch from the signer's loopback origin."""
    import os

    signer = SnsSigner(os.environ["SNS_ALLOWED_TOPIC_ARNS"].split(",")[0])
    monkeypatch.setenv("SNS_TEST_CERT_ORIGIN", signer.base)
    yield signer
    signer.close()


class OpsInbox:
    """What was published to the ops SNS topic, read through an SQS queue subscribed to it
    on the local endpoint."""

    def __init__(self) -> None:
        from tocsin.core.settings import load_settings
        from tocsin.providers.ses import aws_client

        settings = load_settings()
        assert settings.ops_topic_arn, "the test services set OPS_TOPIC_ARN"
        self.sqs: Any = aws_client(settings, "sqs")
        sns: Any = aws_client(settings, "sns")
        self.url = self.sqs.create_queue(QueueName=f"ops-{uuid.uuid4().hex[:8]}")["QueueUrl"]
        arn = self.sqs.get_queue_attributes(QueueUrl=self.url, AttributeNames=["QueueArn"])
        sns.subscribe(TopicArn=settings.ops_topic_arn, Protocol="sqs",
                      Endpoint=arn["Attributes"]["QueueArn"], Attributes={"RawMessageDelivery": "true"})
        self.received: list[str] = []

    def messages(self) -> list[str]:
        while True:
            batch = self.sqs.receive_message(QueueUrl=self.url, MaxNumberOfMessages=10).get("Messages", [])
            if not batch:
                return list(self.received)
            for m in batch:
                self.received.append(m["Body"])
                self.sqs.delete_message(QueueUrl=self.url, ReceiptHandle=m["ReceiptHandle"])


@pytest.fixture
def ops_inbox(ses: SesOutbox) -> OpsInbox:
    return OpsInbox()

# The portal's fixtures (people, portal) live in tests/integration/portal_support.py,
# registered as a plugin by tests/conftest.py once the services are configured.


def use_settings(**changes: Any) -> None:
    """Point this process at changed settings for the rest of the test (the autouse
    process_settings fixture restores the session's afterwards)."""
    from dataclasses import replace

    from tocsin import boot
    from tocsin.core import runtime

    boot.start(replace(runtime.settings(), **changes))
