"""Exactly one claim per (rule, subject, threshold, due date), whatever happens to the
scan: repeated, replayed all day, raced eight ways, or killed between commit and enqueue."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

from dramatiq import Broker

from actors.email import deliver_email
from actors.scan import scan_tenant, tick
from db.delivery.deliveries import REENQUEUE_AFTER_SECONDS, schedule_due_deliveries
from db.delivery.sweep import run_sweep
from db.notices.fanout import prepare_claims
from db.notices.licence_scan import claim_due_milestones
from db.notices.scan import run_scan
from db.platform.effects import SendEmails
from db.platform.tenancy import Tenant, tenant_tx
from tests.integration.builders import (
    add_admin,
    add_client,
    claimed,
    delivery_statuses,
    ledger,
    scalar,
    scan_concurrently,
)
from tests.integration.conftest import RunningWorker, SesOutbox, wait_until
from tocsin.messaging.broker import current_broker

AS_OF = datetime(2027, 3, 10, 9, 0, tzinfo=UTC)
TODAY = AS_OF.date()


def _recipients_per_claim(tenant: Tenant) -> int:
    return int(scalar(tenant, "SELECT count(*) FROM notifications"))


def test_three_scans_for_the_same_instant_claim_once(
    tenant: Tenant, worker: RunningWorker, ses: SesOutbox
) -> None:
    add_admin(tenant)
    client, _ = add_client(tenant, TODAY + timedelta(days=7), users=2)

    reports = [run_scan(tenant.slug, AS_OF) for _ in range(3)]
    worker.drain()

    assert [r.counts.claimed for r in reports] == [1, 0, 0]
    assert claimed(tenant) == {(client.id, "d7")}
    sent = ses.sent()
    assert sorted(e.to for e in sent) == sorted(
        ["admin@example.com", f"user0.client{client.id}@example.com",
         f"user1.client{client.id}@example.com"]
    )
    assert len({e.message_id for e in sent}) == 3
    assert delivery_statuses(tenant) == {"accepted": 3}


def test_replaying_a_whole_day_of_ticks_creates_no_new_rows_and_no_new_emails(
    tenant: Tenant, worker: RunningWorker, ses: SesOutbox
) -> None:
    add_admin(tenant)
    for offset in (-30, -14, -7, -1, 0, 1, 3, 7, 14):
        add_client(tenant, TODAY - timedelta(days=offset))
    day_start = datetime(2027, 3, 10, 0, 5, tzinfo=UTC)
    run_scan(tenant.slug, day_start)
    worker.drain()
    rows_before, emails_before = len(ledger(tenant)), len(ses.sent())
    assert rows_before > 0 and emails_before > 0

    # The rest of the day's ticks, one every 15 minutes, through the real actor and worker.
    for n in range(1, 96):
        scan_tenant.send(tenant.slug, (day_start + timedelta(minutes=15 * n)).isoformat())
    worker.drain()

    assert len(ledger(tenant)) == rows_before
    assert len(ses.sent()) == emails_before


def test_eight_concurrent_scans_give_one_row_per_key_and_one_email_per_recipient(
    tenant: Tenant, worker: RunningWorker, ses: SesOutbox
) -> None:
    add_admin(tenant)
    clients = [
        add_client(tenant, TODAY + timedelta(days=offset), name=f"C{offset}", users=2)[0]
        for offset in (-10, -5, -2, 0, 1, 2, 5, 7, 9, 14, 20, 30)
    ]
    errors = scan_concurrently(tenant, AS_OF, 8)
    worker.drain()

    assert errors == []
    rows = ledger(tenant)
    keys = [(r["subject_id"], r["threshold"], r["due_on"]) for r in rows]
    assert len(keys) == len(set(keys))
    assert {c for c, _ in claimed(tenant)} == {c.id for c in clients}  # one current milestone each
    deliveries = int(scalar(tenant, "SELECT count(*) FROM notification_deliveries"))
    assert deliveries == _recipients_per_claim(tenant) == len(clients) * 3
    sent = ses.sent()
    assert len(sent) == deliveries
    assert len({(e.to, e.subject) for e in sent}) == deliveries


def test_a_scan_that_dies_after_commit_before_enqueueing_is_healed_by_the_sweeper(
    tenant: Tenant, worker: RunningWorker, ses: SesOutbox
) -> None:
    add_admin(tenant)
    for offset in (1, 7, 14, 30):
        add_client(tenant, TODAY + timedelta(days=offset), users=2)

    # The first scan's transaction commits its claims and deliveries, marked enqueued...
    with tenant_tx(tenant.slug) as tx:
        claim_due_milestones(tx, AS_OF)
        prepare_claims(tx)
        pending = schedule_due_deliveries(tx)
        tx.take(SendEmails)  # ...and the process dies before the wake-up,
    for delivery_id in pending[: len(pending) // 3]:  # after only some of its emails left
        deliver_email.send(tenant.slug, delivery_id)
    worker.drain()
    assert len(ses.sent()) == len(pending) // 3

    run_scan(tenant.slug, AS_OF)  # a re-run right away sends nothing twice
    worker.drain()
    assert len(ses.sent()) == len(pending) // 3

    # Once the wake-up is overdue, the sweeper sends what is still waiting.
    with tenant_tx(tenant.slug) as tx:
        tx.conn.execute("UPDATE notification_deliveries SET enqueued_at = enqueued_at - "
                        "make_interval(secs => %s)", [REENQUEUE_AFTER_SECONDS + 1])
    assert run_sweep(tenant.slug).enqueued == len(pending) - len(pending) // 3
    worker.drain()

    sent = ses.sent()
    assert len(pending) == 12
    assert len(sent) == len(pending)
    assert len({e.message_id for e in sent}) == len(pending)
    assert delivery_statuses(tenant) == {"accepted": len(pending)}
    assert all(r["delivered_at"] is not None for r in ledger(tenant) if r["status"] == "claimed")


def test_three_scans_at_the_same_moment_enqueue_each_email_once(tenant: Tenant) -> None:
    add_admin(tenant)
    for offset in (1, 7, 14, 30):
        add_client(tenant, TODAY + timedelta(days=offset), users=2)
    broker = current_broker()
    broker.flush_all()  # no worker runs: every message sent stays in the email queue

    assert scan_concurrently(tenant, AS_OF, 3) == []

    with tenant_tx(tenant.slug) as tx:
        deliveries = [int(str(r[0])) for r in tx.conn.execute(
            "SELECT id FROM notification_deliveries").fetchall()]
    assert len(deliveries) == 12
    # Every delivery named by exactly one queued message, not three times.
    assert _queued_delivery_ids(broker) == Counter(deliveries)
    broker.flush_all()


def _queued_delivery_ids(broker: Broker) -> Counter[int]:
    """The delivery ids the deliver_email messages in the email queue carry (taken off it)."""
    named: Counter[int] = Counter()
    consumer = broker.consume("email", prefetch=100, timeout=500)  # milliseconds
    try:
        for message in consumer:
            if message is None:
                break
            named.update(int(i) for i in message.args[1:])
            consumer.ack(message)
    finally:
        consumer.close()
    return named


def test_a_scan_that_dies_inside_its_transaction_leaves_nothing_and_the_rerun_claims_all(
    tenant: Tenant, worker: RunningWorker, ses: SesOutbox
) -> None:
    add_client(tenant, TODAY + timedelta(days=7))

    class Crash(Exception):
        pass

    try:
        with tenant_tx(tenant.slug) as tx:
            claim_due_milestones(tx, AS_OF)
            raise Crash
    except Crash:
        pass
    assert ledger(tenant) == []

    run_scan(tenant.slug, AS_OF)
    worker.drain()
    assert len(claimed(tenant)) == 1
    assert len(ses.sent()) == 1


def test_the_tick_fans_out_one_scan_per_tenant(
    make_tenant: object, worker: RunningWorker, ses: SesOutbox
) -> None:
    tenants = [make_tenant() for _ in range(2)]  # type: ignore[operator]
    for t in tenants:
        add_client(t, TODAY + timedelta(days=7))

    tick.send(AS_OF.isoformat())
    worker.drain()

    for t in tenants:
        wait_until(lambda t=t: len(claimed(t)) == 1, "each tenant's claim")
    def sent_for(t: Tenant) -> list[str]:
        return [e.to for e in ses.sent() if e.message_id.endswith(f".{t.slug}@tocsin.example>")]

    for t in tenants:  # one reminder per tenant, to its one client user
        wait_until(lambda t=t: sent_for(t) != [], "each tenant's email")
        assert sent_for(t) == ["user0.client1@example.com"]


def test_a_claim_committed_without_its_notifications_is_notified_by_the_next_scan(
    tenant: Tenant, worker: RunningWorker, ses: SesOutbox
) -> None:
    client, users = add_client(tenant, TODAY + timedelta(days=7), users=1)
    # A claim written by a path that does not notify in the same transaction.
    with tenant_tx(tenant.slug) as tx:
        tx.conn.execute(
            "INSERT INTO notification_ledger (rule, subject_kind, subject_id, threshold, due_on, "
            "local_date) VALUES ('licence', 'client', %s, 'd7', %s, %s)",
            [client.id, client.access_expires_on, TODAY],
        )

    reports = [run_scan(tenant.slug, AS_OF) for _ in range(2)]
    worker.drain()

    assert [r.prepared for r in reports] == [1, 0]
    assert [e.to for e in ses.sent()] == [users[0].email]
    assert scalar(tenant, "SELECT count(*) FROM notification_ledger WHERE prepared_at IS NULL "
                          "AND status = 'claimed'") == 0
