"""The six experiments that decide whether "exactly one notification" holds, one test each,
against real Postgres, Redis and the local SES endpoint (behind a fault-injecting proxy
where the provider must misbehave). Persisted rows and provider acceptance counts are
inspected, not just return values."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, date, datetime, timedelta

import pytest
from litestar.testing import TestClient

from actors.email import deliver_email
from db.delivery.deliveries import ClaimedEmail, claim_deliveries
from db.delivery.sweep import run_sweep
from db.notices.licence_scan import claim_due_milestones
from db.notices.scan import run_scan
from db.people.clients import renew_licence
from db.platform.tenancy import Tenant, set_unknown_outcome_policy, tenant_tx
from tests.integration.builders import add_client, ledger, scalar, scan_concurrently
from tests.integration.conftest import OpsInbox, RunningWorker, SesOutbox, use_settings
from tests.support.faulty_ses import FaultySes
from tests.support.sns_signer import SnsSigner, ses_event
from tocsin.boot.web import build_app

AS_OF = datetime(2027, 9, 1, 9, 0, tzinfo=UTC)
DUE = AS_OF.date() + timedelta(days=7)  # the d7 reminder is due at AS_OF


def _one_claimed_reminder(tenant: Tenant, due: date = DUE) -> int:
    """A client whose d7 reminder is claimed at AS_OF; the id of its one email delivery,
    committed and not enqueued (the test decides who sends it, and when)."""
    add_client(tenant, due, name="Harbour Ltd", users=1)
    with tenant_tx(tenant.slug) as tx:
        claim_due_milestones(tx, AS_OF)
    return int(scalar(tenant, "SELECT id FROM notification_deliveries ORDER BY id DESC LIMIT 1"))


def _delivery(tenant: Tenant, delivery_id: int) -> tuple[str, int, str | None]:
    with tenant_tx(tenant.slug) as tx:
        row = tx.conn.execute(
            "SELECT status, attempts, status_reason FROM notification_deliveries WHERE id = %s",
            [delivery_id]).fetchone()
    assert row is not None
    return str(row[0]), int(str(row[1])), None if row[2] is None else str(row[2])


def _outcomes(tenant: Tenant, delivery_id: int) -> list[str]:
    with tenant_tx(tenant.slug) as tx:
        rows = tx.conn.execute(
            "SELECT outcome FROM delivery_attempts WHERE delivery_id = %s ORDER BY attempt_no",
            [delivery_id]).fetchall()
    return [str(r[0]) for r in rows]


def _expire_leases(tenant: Tenant) -> None:
    """The clock moves past every lease (the only way a test may wait five minutes)."""
    with tenant_tx(tenant.slug) as tx:
        tx.conn.execute("UPDATE notification_deliveries SET lease_until = now() - interval '1 second' "
                        "WHERE status = 'sending'")


def test_1_repeat_the_scan(tenant: Tenant, ses: SesOutbox) -> None:
    add_client(tenant, DUE, users=2)
    for hours in range(0, 48, 6):  # eight scans over two days, the client eligible throughout
        run_scan(tenant.slug, AS_OF + timedelta(hours=hours))
    rows = [r for r in ledger(tenant) if r["threshold"] == "d7"]
    assert len(rows) == 1 and rows[0]["status"] == "claimed"
    assert scalar(tenant, "SELECT count(*) FROM notifications n JOIN notification_ledger l "
                          "ON l.id = n.ledger_id WHERE l.threshold = 'd7'") == 2
    assert scalar(tenant, "SELECT count(*) FROM notification_deliveries") == 2


def test_2_race_two_inserts(tenant: Tenant) -> None:
    add_client(tenant, DUE, users=1)
    assert scan_concurrently(tenant, AS_OF, scans=2) == []  # no unique violation, no deadlock
    assert len([r for r in ledger(tenant) if r["threshold"] == "d7"]) == 1
    assert scalar(tenant, "SELECT count(*) FROM notification_deliveries") == 1


def test_3_stop_before_sending_and_recover_after_the_lease_expires(
    tenant: Tenant, ses: SesOutbox, worker: RunningWorker
) -> None:
    delivery_id = _one_claimed_reminder(tenant)
    with tenant_tx(tenant.slug) as tx:  # a worker claims it, then stops dead
        assert isinstance(claim_deliveries(tx, [delivery_id], lease_seconds=300)[0], ClaimedEmail)
    assert run_sweep(tenant.slug).leases.retried == 0  # the lease still holds: nobody takes it
    _expire_leases(tenant)
    report = run_sweep(tenant.slug)
    assert (report.leases.retried, report.leases.unknown) == (1, 0)  # never reached SES: safe
    worker.drain()
    assert _delivery(tenant, delivery_id)[:2] == ("accepted", 2)
    assert _outcomes(tenant, delivery_id) == ["abandoned", "accepted"]
    assert len(ses.sent()) == 1


def _drop_first_answer(faulty_ses: FaultySes, tenant: Tenant) -> int:
    faulty_ses.policy = lambda n: "drop" if n == 1 else "pass"
    delivery_id = _one_claimed_reminder(tenant)
    deliver_email(tenant.slug, delivery_id)  # SES accepts it; the answer never arrives
    assert _delivery(tenant, delivery_id)[0] == "unknown"
    assert _outcomes(tenant, delivery_id) == ["unknown"]
    return delivery_id


def test_4a_lose_the_acceptance_response_and_an_ses_event_arrives(
    tenant: Tenant, faulty_ses: FaultySes, ses: SesOutbox, sns_signer: SnsSigner,
    worker: RunningWorker, monkeypatch: pytest.MonkeyPatch,
) -> None:
    delivery_id = _drop_first_answer(faulty_ses, tenant)
    [copy] = ses.sent()
    event = sns_signer.notification(ses_event("Send", tenant.slug, delivery_id, copy.ses_id))
    with TestClient(app=build_app()) as portal:
        response = portal.post("/hooks/ses", content=json.dumps(event))
    assert response.status_code == 200, response.text

    use_settings(reconcile_window_seconds=0)
    run_sweep(tenant.slug)
    worker.drain()
    assert _delivery(tenant, delivery_id)[:2] == ("accepted", 1)
    assert scalar(tenant, "SELECT provider_message_id FROM notification_deliveries") == copy.ses_id
    assert len(ses.sent()) == 1  # proven sent: never resent


def test_4b_lose_the_acceptance_response_and_no_event_comes(
    tenant: Tenant, faulty_ses: FaultySes, ses: SesOutbox, worker: RunningWorker,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    delivery_id = _drop_first_answer(faulty_ses, tenant)
    assert run_sweep(tenant.slug).reconciled.resent == 0  # inside the window: wait for an event
    use_settings(reconcile_window_seconds=0)
    assert run_sweep(tenant.slug).reconciled.resent == 1
    worker.drain()
    assert _delivery(tenant, delivery_id)[:2] == ("accepted", 2)
    assert _outcomes(tenant, delivery_id) == ["unknown", "accepted"]
    copies = ses.sent()
    assert len(copies) == 2 and copies[0].message_id == copies[1].message_id  # recognisably one message


def test_4c_lose_the_acceptance_response_under_a_hold_policy(
    tenant: Tenant, faulty_ses: FaultySes, ses: SesOutbox, ops_inbox: OpsInbox,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    set_unknown_outcome_policy(tenant.slug, "hold")
    delivery_id = _drop_first_answer(faulty_ses, tenant)
    use_settings(reconcile_window_seconds=0)
    first, second = run_sweep(tenant.slug), run_sweep(tenant.slug)
    assert (first.reconciled.held, second.reconciled.held) == (1, 0)
    status, _, reason = _delivery(tenant, delivery_id)
    assert status == "unknown" and reason is not None and reason.startswith("held for review")
    assert len(ses.sent()) == 1
    assert [m for m in ops_inbox.messages() if f"delivery {delivery_id} is held" in m] != []


def test_5_change_eligibility_before_delivery(tenant: Tenant, ses: SesOutbox) -> None:
    renewed, _ = add_client(tenant, DUE, name="Renewed Ltd", users=1)
    moved, _ = add_client(tenant, DUE, name="Moved Ltd", users=1)
    gone, _ = add_client(tenant, DUE, name="Gone Ltd", users=1)
    run_scan(tenant.slug, AS_OF)
    assert scalar(tenant, "SELECT count(*) FROM notification_deliveries WHERE status = 'pending'") == 3
    with tenant_tx(tenant.slug) as tx:
        # The product's renewal cancels the pending reminder at once ...
        renew_licence(tx, renewed.id, AS_OF.date(), "user")
        # ... and changes made any other way are caught by the check in the claim.
        tx.conn.execute("UPDATE clients SET access_expires_on = access_expires_on + 30 WHERE id = %s",
                        [moved.id])
        tx.conn.execute("UPDATE users SET deactivated_at = now() WHERE client_id = %s", [gone.id])
    for delivery_id in _ids(tenant, "d7"):  # the scan's messages reach a worker now
        deliver_email(tenant.slug, delivery_id)

    reasons = dict(tenant_rows(
        tenant, "SELECT c.name, d.status || ': ' || d.status_reason FROM notification_deliveries d "
                "JOIN notifications n ON n.id = d.notification_id "
                "JOIN notification_ledger l ON l.id = n.ledger_id JOIN clients c ON c.id = l.subject_id "
                "WHERE l.threshold = 'd7'"))
    assert reasons == {
        "Renewed Ltd": "cancelled: licence renewed before delivery",
        "Moved Ltd": f"cancelled: licence renewed: this notice was for {DUE.isoformat()}",
        "Gone Ltd": "cancelled: recipient deactivated before the send",
    }
    assert ses.sent() == []
    assert sum(_attempts(tenant, "d7")) == 0
    # The in-app notifications stay: they record what was true when they were claimed.
    assert scalar(tenant, "SELECT count(*) FROM notifications n JOIN notification_ledger l "
                          "ON l.id = n.ledger_id WHERE l.threshold = 'd7'") == 3


_BY_THRESHOLD = ("SELECT d.id, d.attempts FROM notification_deliveries d "
                 "JOIN notifications n ON n.id = d.notification_id "
                 "JOIN notification_ledger l ON l.id = n.ledger_id WHERE l.threshold = '{}' ORDER BY d.id")


def _ids(tenant: Tenant, threshold: str) -> list[int]:
    return [int(str(r[0])) for r in tenant_rows(tenant, _BY_THRESHOLD.format(threshold))]


def _attempts(tenant: Tenant, threshold: str) -> list[int]:
    return [int(str(r[1])) for r in tenant_rows(tenant, _BY_THRESHOLD.format(threshold))]


def tenant_rows(tenant: Tenant, query: str) -> list[tuple[object, ...]]:
    with tenant_tx(tenant.slug) as tx:
        return tx.conn.execute(query).fetchall()


def test_6_a_later_occurrence_is_new_while_retries_of_the_first_stay_one_operation(
    tenant: Tenant, faulty_ses: FaultySes, ses: SesOutbox, worker: RunningWorker
) -> None:
    faulty_ses.policy = lambda n: "fail" if n <= 2 else "pass"  # two transient failures
    first = _one_claimed_reminder(tenant)
    for _ in range(3):  # each retry, once due, is the same delivery: same row, same Message-ID
        deliver_email.send(tenant.slug, first)
        worker.drain()
        with tenant_tx(tenant.slug) as tx:
            tx.conn.execute("UPDATE notification_deliveries SET send_after = now() WHERE status = 'pending'")
    assert _delivery(tenant, first)[:2] == ("accepted", 3)
    assert _outcomes(tenant, first) == ["retry", "retry", "accepted"]

    # The licence is renewed: its next d7 reminder is a new occurrence (a new due date).
    client_id = int(scalar(tenant, "SELECT id FROM clients"))
    with tenant_tx(tenant.slug) as tx:
        renewal = renew_licence(tx, client_id, AS_OF.date(), "user")
    assert renewal is not None
    later_due = renewal.client.access_expires_on
    later_scan = datetime.combine(later_due - timedelta(days=7), AS_OF.timetz())
    run_scan(tenant.slug, later_scan)
    run_scan(tenant.slug, later_scan + timedelta(hours=1))  # and a repeat changes nothing
    worker.drain()

    d7 = sorted((r["due_on"], r["status"]) for r in ledger(tenant) if r["threshold"] == "d7")
    assert d7 == [(DUE, "claimed"), (later_due, "claimed")]
    assert _attempts(tenant, "d7") == [3, 1]  # 3 attempts of the first, 1 of the second
    d7_ids = {f"<delivery-{i}.{tenant.slug}@tocsin.example>" for i in _ids(tenant, "d7")}
    sent = Counter(m.message_id for m in ses.sent() if m.message_id in d7_ids)
    assert sorted(sent.values()) == [1, 1]  # one accepted copy per occurrence
