"""Webhooks under the Procfile's processes, judged from outside: what a receiver on
127.0.0.1 got (every signature verified with the Standard Webhooks reference code) and what
the tables hold. The running scan claims a licence reminder; each claim becomes one
`notice.created` delivery per subscribed endpoint, which the worker calls."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from actors.webhooks import GROUP
from db.delivery.webhook_endpoints import Endpoint, create_endpoint, rotate_secret
from db.platform.tenancy import Tenant, tenant_tx
from tests.integration.builders import add_admin, add_client, scalar
from tests.integration.conftest import wait_until
from tests.support.procfile_stack import ProcfileStack
from tests.support.webhook_receiver import WebhookReceiver
from tests.system.outcomes import RECOVERY_LIMIT

FAST = {"WEBHOOK_RETRY_BASE_SECONDS": "0.2", "WEBHOOK_TIMEOUT_SECONDS": "1"}


def _due_in_a_week(tenant: Tenant, clients: int = 1) -> None:
    today = datetime.now(UTC).astimezone(ZoneInfo(tenant.time_zone)).date()
    for n in range(clients):
        add_client(tenant, today + timedelta(days=7), name=f"Hooked {n} Ltd", users=1)


def _endpoint(tenant: Tenant, url: str) -> Endpoint:
    with tenant_tx(tenant.slug) as tx:
        return create_endpoint(tx, url, ["notice.created"], allow_private=True)


def _deliveries(tenant: Tenant) -> dict[int, str]:
    with tenant_tx(tenant.slug) as tx:
        return {int(str(r[0])): str(r[1]) for r in tx.conn.execute(
            "SELECT id, status FROM webhook_deliveries ORDER BY id").fetchall()}


def _outcomes(tenant: Tenant, delivery_id: int) -> list[str]:
    with tenant_tx(tenant.slug) as tx:
        return [str(r[0]) for r in tx.conn.execute(
            "SELECT outcome FROM webhook_attempts WHERE delivery_id = %s ORDER BY attempt_no",
            [delivery_id]).fetchall()]


def test_a_receiver_failing_three_times_then_timing_out_gets_the_notice_once_with_every_attempt_kept(
    tenant: Tenant, procfile: Callable[..., ProcfileStack],
) -> None:
    answers: dict[int, int | str] = {1: 500, 2: 502, 3: 503, 4: "hang"}
    with WebhookReceiver(lambda n: answers.get(n, 200), hang_seconds=3.0) as receiver:
        endpoint = _endpoint(tenant, receiver.url)
        receiver.secrets.append(endpoint.secret)
        _due_in_a_week(tenant)
        stack = procfile(**FAST).start_all()
        wait_until(lambda: list(_deliveries(tenant).values()) == ["delivered"], "the notice delivered",
                   RECOVERY_LIMIT)
        stack.sweeps_done(2)  # later sweeps find nothing more to send
        calls = receiver.calls()
    [delivery_id] = _deliveries(tenant)
    assert [c.answered for c in calls] == [500, 502, 503, "hang", 200]
    assert {c.webhook_id for c in calls} == {f"tocsin_{tenant.slug}_{delivery_id}"}
    assert all(c.verified for c in calls)
    assert _outcomes(tenant, delivery_id) == ["retry", "retry", "retry", "unknown", "delivered"]


def test_a_410_disables_the_endpoint_and_each_admin_is_told_once(
    tenant: Tenant, procfile: Callable[..., ProcfileStack],
) -> None:
    admins = [add_admin(tenant, "one@gone.example"), add_admin(tenant, "two@gone.example")]
    with WebhookReceiver(lambda n: 410) as receiver:
        endpoint = _endpoint(tenant, receiver.url)
        _due_in_a_week(tenant, clients=3)
        stack = procfile(**FAST).start_all()
        wait_until(lambda: not bool(scalar(tenant, "SELECT enabled FROM webhook_endpoints WHERE id = %s",
                                           endpoint.id)), "the endpoint disabled", RECOVERY_LIMIT)
        stack.sweeps_done(2)
        assert len(receiver.calls()) == 1  # the first 410 stopped the rest
    statuses = Counter(_deliveries(tenant).values())
    assert statuses["failed"] == 1 and set(statuses) <= {"failed", "cancelled"}
    told = scalar(tenant, "SELECT array_agg(recipient_user_id ORDER BY recipient_user_id) FROM notifications "
                          "WHERE category = 'webhook_disabled'")
    assert told == sorted(a.id for a in admins)


def test_kill_9_of_the_worker_mid_call_loses_nothing_and_the_repeat_carries_the_same_webhook_id(
    tenant: Tenant, procfile: Callable[..., ProcfileStack],
) -> None:
    # The first call hangs (past the timeout, so the killed worker's thread would have
    # given up anyway); the worker is killed while it waits; the next call is answered.
    with WebhookReceiver(lambda n: "hang" if n == 1 else 200, hang_seconds=30.0) as receiver:
        endpoint = _endpoint(tenant, receiver.url)
        receiver.secrets.append(endpoint.secret)
        _due_in_a_week(tenant)
        stack = procfile(WEBHOOK_TIMEOUT_SECONDS="60").start_all()
        wait_until(lambda: len(receiver.calls()) == 1, "the first call in flight", RECOVERY_LIMIT)
        stack.line("worker").kill_everything()
        stack.start("worker")
        wait_until(lambda: list(_deliveries(tenant).values()) == ["delivered"],
                   "the delivery after the lease ran out", RECOVERY_LIMIT)
        calls = receiver.calls()
    [delivery_id] = _deliveries(tenant)
    assert len(calls) == 2 and calls[0].webhook_id == calls[1].webhook_id
    assert all(c.verified for c in calls)
    assert _outcomes(tenant, delivery_id) == ["unknown", "delivered"]


def test_a_secret_rotation_while_notices_flow_loses_none_and_every_call_verifies(
    tenant: Tenant, procfile: Callable[..., ProcfileStack],
) -> None:
    with WebhookReceiver() as receiver:
        endpoint = _endpoint(tenant, receiver.url)
        receiver.secrets.append(endpoint.secret)
        stack = procfile(**FAST).start_all()
        _due_in_a_week(tenant, clients=10)
        wait_until(lambda: len(receiver.calls()) >= 1, "the first notices", RECOVERY_LIMIT)
        with tenant_tx(tenant.slug) as tx:
            rotated = rotate_secret(tx, endpoint.id)
        receiver.secrets.append(rotated.secret)  # during the overlap the receiver holds both
        rotated_by = scalar(tenant, "SELECT now()")  # every call marked after this saw the rotation
        _due_in_a_week(tenant, clients=10)
        # One reminder claim per client, one notice.created delivery per claim.
        wait_until(lambda: list(_deliveries(tenant).values()) == ["delivered"] * 20,
                   "every notice delivered", RECOVERY_LIMIT)
        stack.sweeps_done(1)
        calls = receiver.calls()
    assert all(c.verified for c in calls), [c.number for c in calls if not c.verified]
    assert Counter(c.webhook_id for c in calls).most_common(1)[0][1] == 1
    assert len(calls) == len(_deliveries(tenant)) == 20
    # A receiver that has switched to the new secret verifies every call made after the rotation.
    with tenant_tx(tenant.slug) as tx:
        after = {int(str(r[0])) for r in tx.conn.execute(
            "SELECT delivery_id FROM webhook_attempts WHERE called_at > %s", [rotated_by])}
    assert after, "no call came after the rotation"
    new_only = WebhookReceiver(secrets=[rotated.secret])
    late = [c for c in calls if int(c.webhook_id.rsplit("_", 1)[1]) in after]
    assert all(new_only._verified(c.headers, c.body) for c in late)
    new_only.server.server_close()


def test_kill_9_mid_group_leaves_at_most_a_group_uncertain_and_every_repeat_is_recognisable(
    tenant: Tenant, procfile: Callable[..., ProcfileStack],
) -> None:
    # Eight notices in one message: the first group's calls are marked together; its first
    # call hangs and the worker is killed while it waits.
    with WebhookReceiver(lambda n: "hang" if n == 1 else 200, hang_seconds=30.0) as receiver:
        endpoint = _endpoint(tenant, receiver.url)
        receiver.secrets.append(endpoint.secret)
        _due_in_a_week(tenant, clients=8)
        stack = procfile(WEBHOOK_TIMEOUT_SECONDS="60").start_all()
        wait_until(lambda: len(receiver.calls()) == 1, "the first call in flight", RECOVERY_LIMIT)
        marked = scalar(tenant, "SELECT count(*) FROM webhook_attempts WHERE called_at IS NOT NULL")
        stack.line("worker").kill_everything()
        stack.start("worker")
        wait_until(lambda: list(_deliveries(tenant).values()) == ["delivered"] * 8,
                   "every delivery after the leases ran out", RECOVERY_LIMIT)
        calls = receiver.calls()
    assert 1 <= marked <= GROUP  # what a crash may leave uncertain: one group, not the message
    ids = {f"tocsin_{tenant.slug}_{d}" for d in _deliveries(tenant)}
    answered = Counter(c.webhook_id for c in calls if c.answered == 200)
    assert answered == Counter(ids)  # each notice accepted once by the receiver
    assert {c.webhook_id for c in calls} == ids and all(c.verified for c in calls)
    repeats = len(calls) - len(ids)
    assert 1 <= repeats <= GROUP  # only the hanging call was made twice here
    unknown = scalar(tenant, "SELECT count(*) FROM webhook_attempts WHERE outcome = 'unknown'")
    assert unknown == marked
