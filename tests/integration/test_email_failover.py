"""Email failover to SMTP: SES made to fail (the fault-injecting endpoint) in a class the
tenant chose, the email arrives once at a local SMTP server (aiosmtpd) with the Message-ID SES
would have carried, and the attempt records both providers."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from actors.email import deliver_email
from db.delivery.email_failover import save_failover_policy
from db.notices.fanout import prepare_claims
from db.notices.licence_scan import claim_due_milestones
from db.platform.tenancy import Tenant, tenant_tx
from domain.delivery.failover import FailoverPolicy
from tests.integration.builders import add_client, scalar
from tests.integration.conftest import RunningWorker
from tests.support.faulty_ses import FaultySes
from tests.support.smtp_server import LocalSmtp
from tocsin.core.settings import load_settings
from tocsin.providers.ses import OutgoingEmail
from tocsin.providers.smtp import SmtpMailer, set_smtp_mailer
from tocsin.shell.services import EmbeddedServices, _start_local_smtp

AS_OF = datetime(2027, 9, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
def smtp() -> Iterator[LocalSmtp]:
    with LocalSmtp() as server:
        set_smtp_mailer(SmtpMailer(replace(load_settings(), smtp_url=server.url)))
        try:
            yield server
        finally:
            set_smtp_mailer(None)


def _one_delivery(tenant: Tenant, policy: FailoverPolicy) -> int:
    add_client(tenant, AS_OF.date() + timedelta(days=7), name="Relay Ltd", users=1)
    with tenant_tx(tenant.slug) as tx:
        save_failover_policy(tx, policy, None)
        claim_due_milestones(tx, AS_OF)
        prepare_claims(tx)
    return int(scalar(tenant, "SELECT id FROM notification_deliveries"))


def _attempts(tenant: Tenant) -> list[tuple[object, ...]]:
    with tenant_tx(tenant.slug) as tx:
        return tx.conn.execute(
            "SELECT attempt_no, outcome, providers, failover_reason, provider_message_id "
            "FROM delivery_attempts ORDER BY attempt_no").fetchall()


def _due_again(tenant: Tenant) -> None:
    with tenant_tx(tenant.slug) as tx:
        tx.conn.execute("UPDATE notification_deliveries SET send_after = now() WHERE status = 'pending'")


def test_ses_answering_5xx_sends_the_email_once_through_smtp_with_the_same_message_id(
    tenant: Tenant, worker: RunningWorker, faulty_ses: FaultySes, smtp: LocalSmtp
) -> None:
    faulty_ses.policy = lambda n: "fail"
    delivery_id = _one_delivery(tenant, FailoverPolicy(on_5xx=True, run_of_5xx=1))
    for _ in range(2):  # a repeated message sends nothing more
        deliver_email.send(tenant.slug, delivery_id)
        worker.drain()

    [mail] = smtp.messages()
    assert mail["Message-ID"] == f"<delivery-{delivery_id}.{tenant.slug}@tocsin.example>"
    assert mail["Subject"] == "Relay Ltd: one week until access pauses"
    assert faulty_ses.count("fail") == 1
    assert scalar(tenant, "SELECT status FROM notification_deliveries") == "accepted"
    [(number, outcome, providers, reason, provider_id)] = _attempts(tenant)
    assert (number, outcome, providers) == (1, "accepted", ["ses", "smtp"])
    assert "1 server error(s) in a row" in str(reason)
    assert provider_id == f"smtp:{mail['Message-ID']}"


def test_a_run_of_5xx_shorter_than_the_tenants_choice_is_retried_through_ses(
    tenant: Tenant, worker: RunningWorker, faulty_ses: FaultySes, smtp: LocalSmtp
) -> None:
    faulty_ses.policy = lambda n: "fail"
    delivery_id = _one_delivery(tenant, FailoverPolicy(on_5xx=True, run_of_5xx=2))
    deliver_email.send(tenant.slug, delivery_id)
    worker.drain()
    assert smtp.messages() == []
    assert scalar(tenant, "SELECT status FROM notification_deliveries") == "pending"

    _due_again(tenant)  # the retry: the second 5xx in a row completes the run
    deliver_email.send(tenant.slug, delivery_id)
    worker.drain()
    assert len(smtp.messages()) == 1
    assert [(a[1], a[2]) for a in _attempts(tenant)] == [("retry", ["ses"]), ("accepted", ["ses", "smtp"])]


def test_sending_paused_fails_over_at_once_when_chosen_and_fails_without_failover_otherwise(
    make_tenant: object, worker: RunningWorker, faulty_ses: FaultySes, smtp: LocalSmtp
) -> None:
    assert callable(make_tenant)
    faulty_ses.policy = lambda n: "paused"
    chose, did_not = make_tenant(), make_tenant()
    for tenant, policy in ((chose, FailoverPolicy(on_paused=True)), (did_not, FailoverPolicy(on_5xx=True))):
        deliver_email.send(tenant.slug, _one_delivery(tenant, policy))
        worker.drain()
    assert len(smtp.messages()) == 1
    assert scalar(chose, "SELECT status FROM notification_deliveries") == "accepted"
    assert "sending paused" in str(_attempts(chose)[0][3])
    assert scalar(did_not, "SELECT status FROM notification_deliveries") == "failed"
    assert [a[2] for a in _attempts(did_not)] == [["ses"]]


def test_an_smtp_server_that_refuses_leaves_the_delivery_to_retry_with_both_errors(
    tenant: Tenant, worker: RunningWorker, faulty_ses: FaultySes
) -> None:
    faulty_ses.policy = lambda n: "fail"
    set_smtp_mailer(SmtpMailer(replace(load_settings(), smtp_url="smtp://127.0.0.1:9")))
    try:
        delivery_id = _one_delivery(tenant, FailoverPolicy(on_5xx=True, run_of_5xx=1))
        deliver_email.send(tenant.slug, delivery_id)
        worker.drain()
    finally:
        set_smtp_mailer(None)
    assert scalar(tenant, "SELECT status FROM notification_deliveries") == "pending"
    error = str(scalar(tenant, "SELECT last_error FROM notification_deliveries"))
    assert "ServiceUnavailable" in error and "then through SMTP" in error
    assert _attempts(tenant)[0][1:3] == ("retry", ["ses", "smtp"])


def test_the_local_smtp_server_of_tocsin_up_keeps_each_message_in_its_maildir(tmp_path: Path) -> None:
    services = EmbeddedServices()
    try:
        _start_local_smtp(services, tmp_path)
        mailer = SmtpMailer(replace(load_settings(), smtp_url=services.env["SMTP_URL"]))
        mailer.send(OutgoingEmail("<delivery-1.demo@tocsin.example>", "someone@example.com", "Hello",
                                  "A failover email.\n", {}))
        assert services.local_maildir is not None
        [kept] = list((services.local_maildir / "new").iterdir())
        assert "Message-ID: <delivery-1.demo@tocsin.example>" in kept.read_text()
    finally:
        services.stop()
