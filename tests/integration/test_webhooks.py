"""Outbound webhooks through the real worker to receivers on 127.0.0.1: signed with the
Standard Webhooks reference code, retried on failure with every attempt kept, disabled on
410 with the admins told once, refused by the SSRF guard before any connection, a claim
announced once per endpoint, a rotation that loses nothing, and a lost answer repeated with
the same webhook-id."""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime, timedelta

from db.delivery.webhook_deliveries import (
    claim_webhooks,
    mark_called,
    queue_test_event,
    redeliver,
    sweep_webhooks,
)
from db.delivery.webhook_endpoints import Endpoint, create_endpoint, get_endpoint, rotate_secret
from db.notices.scan import run_scan
from db.platform.effects import SendWebhooks
from db.platform.tenancy import Tenant, tenant_tx
from tests.integration.builders import add_admin, add_client, scalar
from tests.integration.conftest import RunningWorker, use_settings, wait_until
from tests.support.webhook_receiver import WebhookReceiver

AS_OF = datetime(2027, 9, 1, 9, 0, tzinfo=UTC)


BOTH = ("notice.created", "webhook.test")


def _endpoint(tenant: Tenant, url: str, kinds: tuple[str, ...] = BOTH) -> Endpoint:
    with tenant_tx(tenant.slug) as tx:
        return create_endpoint(tx, url, kinds, description="tests", allow_private=True)


def _test_event(tenant: Tenant, endpoint: Endpoint) -> int:
    with tenant_tx(tenant.slug) as tx:
        return queue_test_event(tx, endpoint.id, "a test")


def _status(tenant: Tenant, delivery_id: int) -> str:
    return str(scalar(tenant, "SELECT status FROM webhook_deliveries WHERE id = %s", delivery_id))


def _outcomes(tenant: Tenant, delivery_id: int) -> list[str]:
    with tenant_tx(tenant.slug) as tx:
        rows = tx.conn.execute("SELECT outcome FROM webhook_attempts WHERE delivery_id = %s "
                               "ORDER BY attempt_no", [delivery_id]).fetchall()
    return [str(r[0]) for r in rows]


def test_a_test_event_reaches_the_receiver_signed_with_the_delivery_id_and_is_logged(
    tenant: Tenant, worker: RunningWorker,
) -> None:
    with WebhookReceiver() as receiver:
        endpoint = _endpoint(tenant, receiver.url)
        receiver.secrets.append(endpoint.secret)
        delivery_id = _test_event(tenant, endpoint)
        wait_until(lambda: _status(tenant, delivery_id) == "delivered", "the test event delivered")
        [call] = receiver.calls()
    assert call.verified
    assert call.webhook_id == f"tocsin_{tenant.slug}_{delivery_id}"
    assert b'"type": "webhook.test"' in call.body or b'"type":"webhook.test"' in call.body
    assert _outcomes(tenant, delivery_id) == ["delivered"]
    assert scalar(tenant, "SELECT response FROM webhook_attempts WHERE delivery_id = %s", delivery_id) == "ok"


def test_failing_three_times_then_timing_out_then_answering_delivers_once_with_every_attempt_recorded(
    tenant: Tenant, worker: RunningWorker,
) -> None:
    use_settings(webhook_retry_base_seconds=0.05, webhook_timeout_seconds=1.0)
    answers: dict[int, int | str] = {1: 500, 2: 503, 3: 500, 4: "hang"}
    with WebhookReceiver(lambda n: answers.get(n, 200), hang_seconds=2.0) as receiver:
        endpoint = _endpoint(tenant, receiver.url)
        receiver.secrets.append(endpoint.secret)
        delivery_id = _test_event(tenant, endpoint)
        wait_until(lambda: _status(tenant, delivery_id) == "delivered", "the delivery after the failures", 30)
        worker.drain()
        calls = receiver.calls()
    assert [c.answered for c in calls] == [500, 503, 500, "hang", 200]
    assert {c.webhook_id for c in calls} == {f"tocsin_{tenant.slug}_{delivery_id}"}
    assert all(c.verified for c in calls)
    assert _outcomes(tenant, delivery_id) == ["retry", "retry", "retry", "unknown", "delivered"]
    codes = scalar(tenant, "SELECT array_agg(status_code ORDER BY attempt_no) FROM webhook_attempts "
                           "WHERE delivery_id = %s", delivery_id)
    assert codes == [500, 503, 500, None, 200]
    kept = scalar(tenant, "SELECT max(octet_length(response)) FROM webhook_attempts WHERE delivery_id = %s",
                  delivery_id)
    assert kept == 1024  # the receiver's 5,000-byte error page, kept to its first kilobyte
    with tenant_tx(tenant.slug) as tx:
        assert get_endpoint(tx, endpoint.id).consecutive_failures == 0  # the success healed it


def test_a_410_disables_the_endpoint_cancels_what_waits_and_tells_each_admin_once(
    tenant: Tenant, worker: RunningWorker,
) -> None:
    admins = [add_admin(tenant, "one@hooks.example"), add_admin(tenant, "two@hooks.example")]
    with WebhookReceiver(lambda n: 410) as receiver:
        endpoint = _endpoint(tenant, receiver.url)
        first = _test_event(tenant, endpoint)
        wait_until(lambda: _status(tenant, first) == "failed", "the 410 to fail the delivery")
        worker.drain()
        assert len(receiver.calls()) == 1
    with tenant_tx(tenant.slug) as tx:
        gone = get_endpoint(tx, endpoint.id)
    assert not gone.enabled and gone.disabled_reason == "the endpoint answered 410 Gone"
    notices = scalar(tenant, "SELECT array_agg(recipient_user_id ORDER BY recipient_user_id) "
                             "FROM notifications WHERE category = 'webhook_disabled'")
    assert notices == sorted(a.id for a in admins)
    assert _outcomes(tenant, first) == ["failed"]


def test_with_private_addresses_not_allowed_the_guard_refuses_before_any_connection(
    tenant: Tenant, worker: RunningWorker,
) -> None:
    use_settings(webhook_allow_private=False, webhook_retry_base_seconds=60.0)
    with WebhookReceiver() as receiver:
        endpoint = _endpoint(tenant, receiver.url)
        delivery_id = _test_event(tenant, endpoint)
        wait_until(lambda: _outcomes(tenant, delivery_id) == ["refused"], "the guard's refusal")
        assert receiver.calls() == []  # (its retry waits a minute: the test ends before it)
    error = str(scalar(tenant, "SELECT error FROM webhook_attempts WHERE delivery_id = %s", delivery_id))
    assert "127.0.0.1, a loopback address: refused" in error
    called = scalar(tenant, "SELECT called_at FROM webhook_attempts WHERE delivery_id = %s", delivery_id)
    assert called is None
    assert _status(tenant, delivery_id) == "pending"  # retried later, in case the name moves


def test_each_claim_is_announced_once_to_each_subscribed_endpoint_however_often_it_is_scanned(
    tenant: Tenant, worker: RunningWorker,
) -> None:
    add_client(tenant, AS_OF.date() + timedelta(days=7), name="Hooked Ltd", users=2)
    with WebhookReceiver() as one, WebhookReceiver() as two, WebhookReceiver() as tests_only:
        a, b = _endpoint(tenant, one.url), _endpoint(tenant, two.url)
        _endpoint(tenant, tests_only.url, ("webhook.test",))
        for receiver, endpoint in ((one, a), (two, b)):
            receiver.secrets.append(endpoint.secret)
        run_scan(tenant.slug, AS_OF)
        run_scan(tenant.slug, AS_OF)
        claims = int(scalar(tenant, "SELECT count(DISTINCT ledger_id) FROM notifications"))
        assert claims >= 1
        wait_until(lambda: len(one.calls()) == claims and len(two.calls()) == claims, "every claim announced")
        worker.drain()
        run_scan(tenant.slug, AS_OF)
        worker.drain()
        assert Counter(c.webhook_id for c in one.calls() + two.calls()).most_common(1)[0][1] == 1
        assert all(c.verified for c in one.calls() + two.calls())
        assert b'"type": "notice.created"' in one.calls()[0].body
        assert tests_only.calls() == []


def test_during_a_rotation_every_call_verifies_with_either_the_old_or_the_new_secret(
    tenant: Tenant, worker: RunningWorker,
) -> None:
    with WebhookReceiver() as old_only, WebhookReceiver() as new_only:
        endpoint = _endpoint(tenant, old_only.url)
        old_only.secrets.append(endpoint.secret)
        with tenant_tx(tenant.slug) as tx:
            rotated = rotate_secret(tx, endpoint.id)
            tx.conn.execute("UPDATE webhook_endpoints SET url = %s WHERE id = %s",
                            [new_only.url, endpoint.id])
        new_only.secrets.append(rotated.secret)
        assert rotated.secret != endpoint.secret and rotated.previous_secret == endpoint.secret
        delivery_id = _test_event(tenant, endpoint)
        wait_until(lambda: _status(tenant, delivery_id) == "delivered", "the event after the rotation")
        [call] = new_only.calls()
    old_only.secrets[:] = [endpoint.secret]
    assert call.verified  # with the new secret
    assert old_only._verified(call.headers, call.body)  # and with the old one
    assert len(call.headers["webhook-signature"].split(" ")) == 2


def test_a_call_whose_answer_was_lost_is_repeated_with_the_same_webhook_id_after_its_lease(
    tenant: Tenant, worker: RunningWorker,
) -> None:
    with WebhookReceiver() as receiver:
        endpoint = _endpoint(tenant, receiver.url)
        receiver.secrets.append(endpoint.secret)
        with tenant_tx(tenant.slug) as tx:
            delivery_id = queue_test_event(tx, endpoint.id, "a test")
            tx.take(SendWebhooks)  # no wake-up: this "worker" claims it itself
        # A worker claims it, marks the call and dies before any answer is recorded.
        [claim] = claim_webhooks(tenant.slug, [delivery_id], lease_seconds=0.3)
        assert mark_called(tenant.slug, claim).secrets == [endpoint.secret]
        time.sleep(0.4)
        swept = sweep_webhooks(tenant.slug)
        assert swept.retried == 1 and swept.enqueued == 1
        wait_until(lambda: _status(tenant, delivery_id) == "delivered", "the repeat after the lease")
        [call] = receiver.calls()
    assert call.webhook_id == f"tocsin_{tenant.slug}_{delivery_id}" and call.verified
    assert _outcomes(tenant, delivery_id) == ["unknown", "delivered"]


def test_redeliver_sends_a_finished_delivery_again_with_the_same_webhook_id(
    tenant: Tenant, worker: RunningWorker,
) -> None:
    with WebhookReceiver() as receiver:
        endpoint = _endpoint(tenant, receiver.url)
        delivery_id = _test_event(tenant, endpoint)
        wait_until(lambda: _status(tenant, delivery_id) == "delivered", "the first delivery")
        with tenant_tx(tenant.slug) as tx:
            redeliver(tx, delivery_id)
        wait_until(lambda: len(receiver.calls()) == 2, "the redelivery")
        calls = receiver.calls()
    assert calls[0].webhook_id == calls[1].webhook_id
    wait_until(lambda: _outcomes(tenant, delivery_id) == ["delivered", "delivered"], "the second attempt")


def test_a_410_in_a_group_stops_the_groups_other_calls_to_that_endpoint_and_the_chain_verifies(
    tenant: Tenant, worker: RunningWorker,
) -> None:
    from db.evidence.chain import seal_tenant
    from db.evidence.verify import verify_tenant

    with WebhookReceiver(lambda n: 410) as receiver:
        endpoint = _endpoint(tenant, receiver.url)
        with tenant_tx(tenant.slug) as tx:  # three events committed together: one message, one group
            ids = [queue_test_event(tx, endpoint.id, "a test") for _ in range(3)]
        wait_until(lambda: {_status(tenant, i) for i in ids} <= {"failed", "cancelled"}
                   and _status(tenant, ids[0]) == "failed", "the 410 and what it stopped")
        worker.drain()
        assert len(receiver.calls()) == 1  # the calls marked with it never left
    assert [_status(tenant, i) for i in ids] == ["failed", "cancelled", "cancelled"]
    for stopped in ids[1:]:
        assert _outcomes(tenant, stopped) == ["refused"]
        reason = scalar(tenant, "SELECT status_reason FROM webhook_deliveries WHERE id = %s", stopped)
        assert reason == "not sent: the endpoint was disabled by an earlier answer"
    seal_tenant(tenant.slug)
    report = verify_tenant(tenant.slug)
    assert report.ok, [b.describe() for b in report.breaks]
