"""Webhook deliveries and their attempts are chained facts, as email deliveries and attempts
are: a delivery, each status move, each attempt once it is called or ends, and its outcome.
The chain verifies after retries and after a guard's refusal; editing or deleting a webhook
attempt by hand makes verify name it."""

from __future__ import annotations

from collections import Counter

from db.delivery.webhook_deliveries import queue_test_event
from db.delivery.webhook_endpoints import create_endpoint
from db.evidence.chain import seal_tenant
from db.evidence.verify import verify_tenant
from db.platform.tenancy import Tenant, tenant_tx
from tests.integration.builders import scalar
from tests.integration.conftest import RunningWorker, use_settings, wait_until
from tests.support.webhook_receiver import WebhookReceiver


def _delivery(tenant: Tenant, url: str) -> tuple[int, str]:
    with tenant_tx(tenant.slug) as tx:
        endpoint = create_endpoint(tx, url, ("webhook.test",), description="evidence", allow_private=True)
        return queue_test_event(tx, endpoint.id, "a test"), endpoint.secret


def _status(tenant: Tenant, delivery_id: int) -> str:
    return str(scalar(tenant, "SELECT status FROM webhook_deliveries WHERE id = %s", delivery_id))


def _kinds(tenant: Tenant) -> Counter[str]:
    with tenant_tx(tenant.slug) as tx:
        rows = tx.conn.execute("SELECT kind FROM evidence_chain WHERE kind LIKE 'webhook%'").fetchall()
    return Counter(str(r[0]) for r in rows)


def _sealed_report(tenant: Tenant) -> str:
    seal_tenant(tenant.slug)
    report = verify_tenant(tenant.slug)
    return "OK" if report.first_break is None else report.first_break.describe()


def test_retried_webhook_attempts_are_chained_and_an_edited_or_deleted_attempt_is_named(
        tenant: Tenant, worker: RunningWorker) -> None:
    use_settings(webhook_retry_base_seconds=0.05)
    answers = {1: 500, 2: 503}
    with WebhookReceiver(lambda n: answers.get(n, 200)) as receiver:
        delivery_id, secret = _delivery(tenant, receiver.url)
        receiver.secrets.append(secret)
        wait_until(lambda: _status(tenant, delivery_id) == "delivered", "the delivery after two failures", 30)
    assert _sealed_report(tenant) == "OK"
    kinds = _kinds(tenant)
    assert kinds["webhook_delivery"] == 1 and kinds["webhook_attempt"] == 3
    assert kinds["webhook_attempt_outcome"] == 3 and kinds["webhook_delivery_status"] >= 4

    first = int(scalar(tenant, "SELECT id FROM webhook_attempts WHERE delivery_id = %s AND attempt_no = 1",
                       delivery_id))
    seq = scalar(tenant, "SELECT seq FROM evidence_chain WHERE kind = 'webhook_attempt' AND ref = %s",
                 str(first))
    with tenant_tx(tenant.slug) as tx:  # the first call moved back an hour
        tx.conn.execute("UPDATE webhook_attempts SET called_at = called_at - interval '1 hour' WHERE id = %s",
                        [first])
    said = _sealed_report(tenant)
    assert said.startswith(f"sequence {seq}, webhook_attempts {first}: called_at is '"), said
    assert "the chain says '" in said

    with tenant_tx(tenant.slug) as tx:  # with the triggers off, the failure made a success
        tx.conn.execute("SET LOCAL session_replication_role = replica")
        tx.conn.execute("UPDATE webhook_attempts SET called_at = called_at + interval '1 hour', "
                        "status_code = 200 WHERE id = %s", [first])
    outcome_seq = scalar(tenant, "SELECT seq FROM evidence_chain WHERE kind = 'webhook_attempt_outcome' "
                         "AND ref = %s", str(first))
    assert _sealed_report(tenant) == (
        f"sequence {outcome_seq}, webhook_attempts {first}: status_code is 200, the chain says 500")


def test_a_deleted_webhook_attempt_is_named_and_a_refused_uncalled_attempt_verifies(
        tenant: Tenant, worker: RunningWorker) -> None:
    use_settings(webhook_allow_private=False, webhook_retry_base_seconds=60.0)
    with WebhookReceiver() as receiver:
        delivery_id, _secret = _delivery(tenant, receiver.url)
        wait_until(lambda: scalar(tenant, "SELECT count(*) FROM webhook_attempts WHERE delivery_id = %s "
                                  "AND outcome = 'refused'", delivery_id) == 1, "the guard's refusal")
    assert _sealed_report(tenant) == "OK"
    assert _kinds(tenant)["webhook_attempt"] == 1  # ended without a call: chained all the same

    attempt = int(scalar(tenant, "SELECT id FROM webhook_attempts WHERE delivery_id = %s", delivery_id))
    seq = scalar(tenant, "SELECT seq FROM evidence_chain WHERE kind = 'webhook_attempt' AND ref = %s",
                 str(attempt))
    with tenant_tx(tenant.slug) as tx:
        tx.conn.execute("DELETE FROM webhook_attempts WHERE id = %s", [attempt])
    assert _sealed_report(tenant) == (
        f"sequence {seq}, webhook_attempts {attempt}: the row is missing (deleted)")
