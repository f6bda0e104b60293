"""The sweeper and what it publishes, the digest email end to end, and the unsubscribe
link an email carries, all through the real send path and the local SES/SNS endpoint."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, time, timedelta
from urllib.parse import urlsplit

import pytest
from litestar.testing import TestClient

from actors.digest import run_digests
from actors.email import deliver_email
from db.delivery.deliveries import ClaimedEmail, claim_deliveries
from db.delivery.sweep import SweepReport, run_sweep
from db.notices.licence_scan import claim_due_milestones
from db.notices.scan import run_scan
from db.people.preferences import resolve_preference, save_schedule, save_user_preference
from db.platform.tenancy import Tenant, tenant_tx
from domain.delivery.preferences import Frequency, Preference
from tests.integration.builders import add_admin, add_client, run_concurrently, scalar
from tests.integration.conftest import OpsInbox, SesOutbox
from tocsin.boot.cli import main
from tocsin.boot.web import build_app

AS_OF = datetime(2027, 9, 1, 9, 0, tzinfo=UTC)


def _stuck_claim(tenant: Tenant) -> int:
    """A claim committed long ago whose notifications were never written (a bug, a lost
    recipient list): the case the sweeper cannot repair and must report."""
    client, _ = add_client(tenant, AS_OF.date() + timedelta(days=30), users=0)
    with tenant_tx(tenant.slug) as tx:
        row = tx.conn.execute(
            "INSERT INTO notification_ledger (rule, subject_kind, subject_id, threshold, due_on, "
            "local_date, claimed_at, prepared_at) VALUES ('licence', 'client', %s, 'd30', %s, %s, "
            "now() - interval '1 hour', now()) RETURNING id",
            [client.id, client.access_expires_on, AS_OF.date()]).fetchone()
    assert row is not None
    return int(str(row[0]))


def test_stuck_claims_are_listed_by_the_cli_and_published_to_ops_exactly_once(
    tenant: Tenant, ops_inbox: OpsInbox, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger_id = _stuck_claim(tenant)
    main(["stuck", "--tenant", tenant.slug])
    out = capsys.readouterr().out
    assert "1 claim(s) older than 30 minutes, not delivered" in out
    assert f"{ledger_id:>7}  licence" in out and "0/0" in out
    main(["stuck", "--tenant", tenant.slug, "--older-than", "90"])
    assert "No stuck claims" in capsys.readouterr().out

    # Two clocks sweep at the same moment, and again later: one alert, published once.
    assert run_concurrently(lambda: run_sweep(tenant.slug), lambda: run_sweep(tenant.slug)) == []
    run_sweep(tenant.slug)
    alerts = [m for m in ops_inbox.messages() if f"claim {ledger_id} " in m and tenant.slug in m]
    assert len(alerts) == 1 and "has not been delivered since" in alerts[0]
    assert scalar(tenant, "SELECT count(*) FROM ops_alerts WHERE published_at IS NOT NULL") == 1


def test_the_stuck_command_refuses_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["stuck", "--tenant", "No Such Tenant"])
    assert exit_.value.code == 2
    with pytest.raises(SystemExit) as exit_:
        main(["stuck", "--tenant", "acme", "--older-than", "0"])
    assert exit_.value.code == 2


def test_two_sweeps_at_once_do_the_work_of_one(tenant: Tenant, ses: SesOutbox) -> None:
    add_client(tenant, AS_OF.date() + timedelta(days=7), users=3)
    with tenant_tx(tenant.slug) as tx:
        claim_due_milestones(tx, AS_OF)  # three deliveries, never enqueued
        tx.conn.execute("UPDATE notification_deliveries SET enqueued_at = NULL")
        first = tx.conn.execute("SELECT min(id) FROM notification_deliveries").fetchone()
    assert first is not None
    with tenant_tx(tenant.slug) as tx:  # and one claimed by a worker that died before sending
        assert isinstance(claim_deliveries(tx, [int(str(first[0]))], 300)[0], ClaimedEmail)
        tx.conn.execute("UPDATE notification_deliveries SET lease_until = now() - interval '1 second' "
                        "WHERE status = 'sending'")
    reports: list[SweepReport] = []
    assert run_concurrently(lambda: reports.append(run_sweep(tenant.slug)),
                         lambda: reports.append(run_sweep(tenant.slug))) == []
    assert sum(r.leases.retried for r in reports) == 1  # the lease expired once, for one of them
    assert scalar(tenant, "SELECT count(*) FROM delivery_attempts WHERE outcome = 'abandoned'") == 1
    # Both may enqueue the same deliveries (a message is only a nudge): each is sent once.
    assert sum(r.enqueued for r in reports) >= 3
    for _ in range(2):
        for (delivery_id,) in _rows(tenant, "SELECT id FROM notification_deliveries"):
            deliver_email(tenant.slug, int(str(delivery_id)))
    assert len(ses.sent()) == 3
    assert scalar(tenant, "SELECT count(*) FROM notification_deliveries WHERE status = 'accepted'") == 3


def test_a_digest_email_is_sent_once_and_marks_its_items_delivered(
    tenant: Tenant, ses: SesOutbox
) -> None:
    reader = add_admin(tenant, f"reader-{uuid.uuid4().hex[:6]}@example.com")
    with tenant_tx(tenant.slug) as tx:
        save_user_preference(tx, reader.id, "license_expiring",
                             Preference(True, True, Frequency.DAILY_DIGEST))
        save_schedule(tx, reader.id, quiet=None, digest_time=time(8), weekly_day=1, zone="UTC")
    for n in range(3):
        add_client(tenant, AS_OF.date() + timedelta(days=7), name=f"Client {n}", users=0)
    run_scan(tenant.slug, AS_OF)
    assert scalar(tenant, "SELECT count(*) FROM notification_deliveries WHERE status = 'batched'") == 3

    [digest] = run_digests(tenant.slug, AS_OF + timedelta(days=1))
    for _ in range(2):  # the digest's message delivered twice: one email
        deliver_email(tenant.slug, digest.delivery_id)
    [sent] = ses.sent()
    assert sent.subject == "Daily digest: 3 notifications"
    assert all(f"Client {n}" in sent.body for n in range(3))
    assert sent.message_id == f"<delivery-{digest.delivery_id}.{tenant.slug}@tocsin.example>"
    assert scalar(tenant, "SELECT count(*) FROM notification_deliveries WHERE status = 'delivered' "
                          "AND in_digest_id = %s", digest.digest_id) == 3
    assert scalar(tenant, "SELECT count(*) FROM notification_ledger "
                          "WHERE status = 'claimed' AND delivered_at IS NULL") == 0


def test_an_email_carries_a_one_click_unsubscribe_that_opts_out_of_its_category(
    tenant: Tenant, ses: SesOutbox
) -> None:
    _, [user] = add_client(tenant, AS_OF.date() + timedelta(days=7), users=1)
    run_scan(tenant.slug, AS_OF)
    deliver_email(tenant.slug, int(scalar(tenant, "SELECT id FROM notification_deliveries")))
    [sent] = ses.sent()
    assert sent.headers["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    link = sent.headers["List-Unsubscribe"].strip("<>")
    assert link in sent.body

    with TestClient(app=build_app()) as mail_client:  # a mail client: no session, no CSRF token
        response = mail_client.post(urlsplit(link).path, content="List-Unsubscribe=One-Click",
                                    headers={"content-type": "application/x-www-form-urlencoded"})
    assert response.status_code == 200
    with tenant_tx(tenant.slug) as tx:
        assert resolve_preference(tx, user.id, "license_expiring").preference.email is False
    # The next reminder for this category writes the inbox row and sends no email.
    run_scan(tenant.slug, AS_OF + timedelta(days=6))
    assert scalar(tenant, "SELECT count(*) FROM notifications") == 2
    for (delivery_id,) in _rows(tenant, "SELECT id FROM notification_deliveries"):
        deliver_email(tenant.slug, int(str(delivery_id)))
    assert len(ses.sent()) == 1


def _rows(tenant: Tenant, query: str) -> list[tuple[object, ...]]:
    with tenant_tx(tenant.slug) as tx:
        return tx.conn.execute(query).fetchall()
