"""deliver_email through the real worker and the local SES endpoint: the claim commits
before the send, the result write is fenced, duplicates send once, failures are recorded."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from actors.email import deliver_email
from db.delivery.deliveries import Answer, ClaimedEmail, claim_deliveries, record_step
from db.notices.scan import run_scan
from db.platform.tenancy import Tenant, tenant_tx
from domain.delivery.states import ErrorClass
from tests.integration.builders import add_client, ledger, scalar
from tests.integration.conftest import RunningWorker, SesOutbox
from tocsin.core.settings import load_settings
from tocsin.providers.ses import Accepted, Mailer, OutgoingEmail, ProviderError, SesMailer, set_mailer

AS_OF = datetime(2027, 9, 1, 9, 0, tzinfo=UTC)


class FailingMailer:
    """Provider fault injection: the next ``failures`` sends raise, the rest go through."""

    def __init__(self, error_class: ErrorClass, failures: int):
        self.real: Mailer = SesMailer(load_settings())
        self.error_class = error_class
        self.failures = failures
        self.calls = 0

    def send(self, email: OutgoingEmail) -> Accepted:
        self.calls += 1
        if self.calls <= self.failures:
            raise ProviderError(self.error_class, f"injected {self.error_class.value} failure",
                                "req-injected")
        return self.real.send(email)


@pytest.fixture
def restore_mailer() -> Iterator[None]:
    yield
    set_mailer(None)


def _one_pending_delivery(tenant: Tenant) -> int:
    add_client(tenant, AS_OF.date() + timedelta(days=7), name="Mail Ltd", users=1)
    with tenant_tx(tenant.slug) as tx:
        from db.notices.fanout import prepare_claims
        from db.notices.licence_scan import claim_due_milestones

        claim_due_milestones(tx, AS_OF)
        prepare_claims(tx)
    return int(scalar(tenant, "SELECT id FROM notification_deliveries"))


def test_an_email_carries_a_deterministic_message_id_tags_and_a_deep_link(
    tenant: Tenant, worker: RunningWorker, ses: SesOutbox
) -> None:
    delivery_id = _one_pending_delivery(tenant)
    deliver_email.send(tenant.slug, delivery_id)
    worker.drain()

    [sent] = ses.sent()
    assert sent.message_id == f"<delivery-{delivery_id}.{tenant.slug}@tocsin.example>"
    assert sent.subject == "Mail Ltd: one week until access pauses"
    assert "/licence" in sent.body
    with tenant_tx(tenant.slug) as tx:
        row = tx.conn.execute(
            "SELECT status, provider_message_id, attempts, lease_until, accepted_at "
            "FROM notification_deliveries WHERE id = %s", [delivery_id]).fetchone()
        attempts = tx.conn.execute(
            "SELECT attempt_no, outcome, provider_message_id, provider_request_id, ended_at "
            "FROM delivery_attempts WHERE delivery_id = %s", [delivery_id]).fetchall()
    assert row is not None
    status, provider_id, count, lease, accepted_at = row
    assert (status, count, lease) == ("accepted", 1, None)
    assert provider_id and accepted_at is not None
    assert len(attempts) == 1
    assert attempts[0][:3] == (1, "accepted", provider_id)
    assert attempts[0][3] and attempts[0][4] is not None
    [claimed_row] = [r for r in ledger(tenant) if r["status"] == "claimed"]
    assert claimed_row["delivered_at"] is not None


def test_the_same_message_delivered_three_times_sends_once(
    tenant: Tenant, worker: RunningWorker, ses: SesOutbox
) -> None:
    delivery_id = _one_pending_delivery(tenant)
    for _ in range(3):
        deliver_email.send(tenant.slug, delivery_id)
    worker.drain()
    assert len(ses.sent()) == 1
    assert scalar(tenant, "SELECT attempts FROM notification_deliveries") == 1


def test_a_stale_workers_late_answer_is_recorded_on_its_own_attempt_and_leaves_the_new_claim_alone(
    tenant: Tenant, ses: SesOutbox
) -> None:
    delivery_id = _one_pending_delivery(tenant)
    with tenant_tx(tenant.slug) as tx:
        stale = claim_deliveries(tx, [delivery_id], lease_seconds=60)[0]
    assert isinstance(stale, ClaimedEmail)
    # The lease is taken over (as the sweeper will do once it has expired).
    with tenant_tx(tenant.slug) as tx:
        tx.conn.execute("UPDATE notification_deliveries SET status = 'pending' WHERE id = %s",
                        [delivery_id])
        fresh = claim_deliveries(tx, [delivery_id], lease_seconds=60)[0]
    assert isinstance(fresh, ClaimedEmail) and fresh.claim_token != stale.claim_token
    with tenant_tx(tenant.slug) as tx:
        late = record_step(tx, Answer(stale, "stale-provider-id", None), None)
        assert late.accepted == set() and late.late == {delivery_id}
        current = record_step(tx, Answer(fresh, "fresh-provider-id", None), None)
        assert current.accepted == {delivery_id} and current.late == set()
    assert scalar(tenant, "SELECT provider_message_id FROM notification_deliveries") == \
        "fresh-provider-id"
    # Both attempts stand in the history, each with the answer it got.
    with tenant_tx(tenant.slug) as tx:
        attempts = tx.conn.execute(
            "SELECT attempt_no, outcome, provider_message_id FROM delivery_attempts "
            "ORDER BY attempt_no").fetchall()
    assert attempts == [(1, "accepted", "stale-provider-id"), (2, "accepted", "fresh-provider-id")]


def test_a_transient_failure_is_recorded_and_left_pending_for_a_later_retry(
    tenant: Tenant, worker: RunningWorker, ses: SesOutbox, restore_mailer: None
) -> None:
    delivery_id = _one_pending_delivery(tenant)
    set_mailer(FailingMailer(ErrorClass.TRANSIENT, failures=1))
    deliver_email.send(tenant.slug, delivery_id)
    worker.drain()

    assert ses.sent() == []
    with tenant_tx(tenant.slug) as tx:
        row = tx.conn.execute(
            "SELECT status, send_after > now(), last_error_class, enqueued_at "
            "FROM notification_deliveries WHERE id = %s", [delivery_id]).fetchone()
        attempt = tx.conn.execute(
            "SELECT outcome, error_class, provider_request_id FROM delivery_attempts").fetchone()
    assert row == ("pending", True, "transient", None)
    assert attempt == ("retry", "transient", "req-injected")

    # Once due, the next scan re-enqueues it and it goes out.
    with tenant_tx(tenant.slug) as tx:
        tx.conn.execute("UPDATE notification_deliveries SET send_after = now()")
    run_scan(tenant.slug, AS_OF)
    worker.drain()
    assert len(ses.sent()) == 1
    assert scalar(tenant, "SELECT status FROM notification_deliveries") == "accepted"


def test_a_permanent_failure_ends_failed_at_once(
    tenant: Tenant, worker: RunningWorker, ses: SesOutbox, restore_mailer: None
) -> None:
    delivery_id = _one_pending_delivery(tenant)
    set_mailer(FailingMailer(ErrorClass.PERMANENT, failures=1))
    deliver_email.send(tenant.slug, delivery_id)
    worker.drain()
    run_scan(tenant.slug, AS_OF)  # nothing to re-enqueue: failed is final
    worker.drain()
    assert ses.sent() == []
    assert scalar(tenant, "SELECT status || ':' || attempts FROM notification_deliveries") == \
        "failed:1"


def test_a_recipient_deactivated_after_the_claim_is_not_emailed(
    tenant: Tenant, worker: RunningWorker, ses: SesOutbox
) -> None:
    delivery_id = _one_pending_delivery(tenant)
    with tenant_tx(tenant.slug) as tx:
        tx.conn.execute("UPDATE users SET deactivated_at = now()")
    deliver_email.send(tenant.slug, delivery_id)
    worker.drain()
    assert ses.sent() == []
    assert scalar(tenant, "SELECT status || ':' || status_reason FROM notification_deliveries") \
        == "cancelled:recipient deactivated before the send"


def _pending_deliveries(tenant: Tenant, users: int) -> list[int]:
    add_client(tenant, AS_OF.date() + timedelta(days=7), name="Batch Ltd", users=users)
    with tenant_tx(tenant.slug) as tx:
        from db.notices.fanout import prepare_claims
        from db.notices.licence_scan import claim_due_milestones

        claim_due_milestones(tx, AS_OF)
        prepare_claims(tx)
        return [int(str(r[0])) for r in tx.conn.execute(
            "SELECT id FROM notification_deliveries ORDER BY id").fetchall()]


def test_one_message_carrying_several_deliveries_sends_each_once_however_often_it_runs(
    tenant: Tenant, worker: RunningWorker, ses: SesOutbox
) -> None:
    ids = _pending_deliveries(tenant, users=5)
    assert len(ids) == 5
    for _ in range(3):  # redelivered, and run at once by several threads
        deliver_email.send(tenant.slug, *reversed(ids))
    worker.drain()
    assert sorted(m.message_id for m in ses.sent()) == sorted(
        f"<delivery-{i}.{tenant.slug}@tocsin.example>" for i in ids)
    with tenant_tx(tenant.slug) as tx:
        rows = tx.conn.execute(
            "SELECT d.status, d.attempts, a.outcome, a.provider_called_at IS NOT NULL "
            "FROM notification_deliveries d JOIN delivery_attempts a ON a.delivery_id = d.id"
        ).fetchall()
    assert rows == [("accepted", 1, "accepted", True)] * 5


class WorkerStopped(BaseException):
    """What Dramatiq raises in a worker thread on a time limit or a shutdown."""


class StoppingMailer:
    """Sends through the local endpoint until call ``stop_at``, which raises mid-request."""

    def __init__(self, stop_at: int):
        self.real: Mailer = SesMailer(load_settings())
        self.stop_at = stop_at
        self.calls = 0

    def send(self, email: OutgoingEmail) -> Accepted:
        self.calls += 1
        if self.calls == self.stop_at:
            raise WorkerStopped("stopped while the request was out")
        return self.real.send(email)


def test_a_worker_stopped_mid_message_records_what_was_sent_and_releases_the_rest(
    tenant: Tenant, ses: SesOutbox, restore_mailer: None
) -> None:
    ids = _pending_deliveries(tenant, users=5)
    set_mailer(StoppingMailer(stop_at=3))
    with pytest.raises(WorkerStopped):
        deliver_email(tenant.slug, *ids)

    assert len(ses.sent()) == 2
    with tenant_tx(tenant.slug) as tx:
        rows = tx.conn.execute(
            "SELECT d.status, a.outcome, CASE WHEN d.status = 'pending' THEN d.enqueued_at IS NULL "
            "AND d.send_after <= now() END "
            "FROM notification_deliveries d JOIN delivery_attempts a ON a.delivery_id = d.id "
            "ORDER BY d.id").fetchall()
    # The two answered are recorded, the one whose request was out is unknown, and the two
    # never handed to the provider are pending again, for the next scan or sweep to send.
    assert rows == [("accepted", "accepted", None)] * 2 + [("unknown", "unknown", None)] + \
        [("pending", "retry", True)] * 2


def test_the_step_before_each_call_runs_alone_on_one_kept_plan_and_an_unknown_tenant_is_not_found(
    tenant: Tenant, ses: SesOutbox
) -> None:
    """record_step_at_once is one statement in a transaction of its own. Its parameters keep
    PostgreSQL on the generic plan after its five custom ones: a statement planned afresh at
    every provider call costs as much again as running it."""
    import psycopg

    from db.delivery.deliveries import _step_in, _step_params, record_step_at_once
    from domain.errors import NotFound

    ids = [_one_pending_delivery(tenant)]
    for n in range(11):
        add_client(tenant, AS_OF.date() + timedelta(days=7), name=f"Plan {n} Ltd", users=1)
    with tenant_tx(tenant.slug) as tx:
        from db.notices.fanout import prepare_claims
        from db.notices.licence_scan import claim_due_milestones

        claim_due_milestones(tx, AS_OF)
        prepare_claims(tx)
        ids = [int(r[0]) for r in tx.conn.execute("SELECT id FROM notification_deliveries ORDER BY id")]
        claims = [c for c in claim_deliveries(tx, ids, lease_seconds=60) if isinstance(c, ClaimedEmail)]
    assert len(claims) == 12
    settings = load_settings()
    with psycopg.connect(settings.database_url, autocommit=True) as conn:  # one session, its own plans
        statement = _step_in(tenant.slug)
        answered: Answer | None = None
        for claim in claims:
            rows = conn.execute(statement, _step_params(answered, claim), prepare=True).fetchall()
            assert ("marked", claim.delivery_id) in rows
            answered = Answer(claim, f"provider-{claim.delivery_id}", None)
        conn.execute(statement, _step_params(answered, None), prepare=True)
        custom, generic = conn.execute(
            "SELECT custom_plans, generic_plans FROM pg_prepared_statements "
            "WHERE statement LIKE '%%WITH accepted AS%%'").fetchone() or (None, None)
    assert custom == 5 and generic == 8  # five custom plans tried, then the one generic plan kept
    assert scalar(tenant, "SELECT count(*) FROM notification_deliveries WHERE status = 'accepted'") == 12
    assert scalar(tenant, "SELECT count(*) FROM delivery_attempts WHERE provider_request_id IS NULL") == 12
    with pytest.raises(NotFound):
        record_step_at_once("no-such-tenant", None, claims[0])
