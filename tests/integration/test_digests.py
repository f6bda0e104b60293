"""Digests over real Postgres: one per (user, period), every batched item in exactly one,
racing builders, the cut-off, and a weekly digest in a zone a day ahead of UTC."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, time, timedelta

from actors.digest import run_digests
from actors.email import deliver_email
from db.delivery.digests import build_due_digests, digest_email, mark_digest_items_delivered
from db.notices.licence_scan import claim_due_milestones
from db.people.preferences import save_schedule, save_user_preference, set_channel
from db.platform.tenancy import Tenant, tenant_tx
from domain.delivery.preferences import Channel, Frequency, Preference
from tests.integration.builders import add_admin, add_client, run_concurrently, scalar
from tests.integration.conftest import SesOutbox

LICENCE = "license_expiring"


def _digest_reader(tenant: Tenant, zone: str, frequency: Frequency, weekly_day: int = 1) -> int:
    admin = add_admin(tenant, f"reader-{uuid.uuid4().hex[:6]}@example.com")
    with tenant_tx(tenant.slug) as tx:
        save_user_preference(tx, admin.id, LICENCE, Preference(True, True, frequency))
        save_schedule(tx, admin.id, quiet=None, digest_time=time(8), weekly_day=weekly_day, zone=zone)
    return admin.id


def _event(tenant: Tenant, at: datetime, name: str) -> None:
    """One licence reminder claimed at ``at``: a new client a week from expiry, then a scan."""
    add_client(tenant, at.date() + timedelta(days=7), name=name, users=0)
    with tenant_tx(tenant.slug) as tx:
        claim_due_milestones(tx, at)


def _digests(tenant: Tenant) -> list[tuple[int, str, date, int]]:
    with tenant_tx(tenant.slug) as tx:
        rows = tx.conn.execute(
            "SELECT g.id, g.period, g.period_date, g.item_count FROM digests g ORDER BY g.id"
        ).fetchall()
    return [(int(str(r[0])), str(r[1]), r[2], int(str(r[3]))) for r in rows]  # type: ignore[misc]


def _waiting(tenant: Tenant) -> int:
    return int(scalar(tenant, "SELECT count(*) FROM notification_deliveries "
                              "WHERE status = 'batched' AND in_digest_id IS NULL"))


def test_fifty_events_over_a_day_make_one_daily_digest_listing_all_fifty(tenant: Tenant) -> None:
    user = _digest_reader(tenant, "Europe/Berlin", Frequency.DAILY_DIGEST)
    start = datetime(2027, 9, 1, 6, 0, tzinfo=UTC)  # 08:00 CEST: just after 1 September's digest
    for n in range(50):
        _event(tenant, start + timedelta(minutes=28 * n), f"Client {n:02d}")
    assert _waiting(tenant) == 50

    # 1 September's digest time has passed, but nothing was batched before it: nothing sent.
    assert run_digests(tenant.slug, datetime(2027, 9, 2, 5, 59, tzinfo=UTC)) == []
    [built] = run_digests(tenant.slug, datetime(2027, 9, 2, 6, 0, tzinfo=UTC))
    assert (built.user_id, built.period, built.items) == (user, "daily", 50)
    assert run_digests(tenant.slug, datetime(2027, 9, 2, 6, 15, tzinfo=UTC)) == []  # next tick
    assert _digests(tenant) == [(built.digest_id, "daily", date(2027, 9, 2), 50)]
    assert _waiting(tenant) == 0

    with tenant_tx(tenant.slug) as tx:
        subject, text = digest_email(tx, built.digest_id, "https://portal.example")
        ledger = tx.conn.execute(
            "SELECT rule, subject_kind, subject_id, threshold, due_on FROM notification_ledger "
            "WHERE rule = 'digest'").fetchall()
        email = tx.conn.execute(
            "SELECT status, notification_id FROM notification_deliveries WHERE digest_id = %s",
            [built.digest_id]).fetchall()
    assert subject == "Daily digest: 50 notifications"
    positions = [text.index(f"Client {n:02d}") for n in range(50)]
    assert positions == sorted(positions)  # in the order they were batched
    assert "https://portal.example/clients/" in text
    assert ledger == [("digest", "user", user, "daily", date(2027, 9, 2))]
    assert email == [("pending", None)]

    with tenant_tx(tenant.slug) as tx:
        assert mark_digest_items_delivered(tx, built.digest_id) == 50
        assert mark_digest_items_delivered(tx, built.digest_id) == 0
    assert scalar(tenant, "SELECT count(*) FROM notification_deliveries "
                          "WHERE in_digest_id IS NOT NULL AND status = 'delivered'") == 50
    assert scalar(tenant, "SELECT count(*) FROM notification_ledger WHERE delivered_at IS NULL "
                          "AND rule <> 'licence'") == 0


def test_two_events_a_second_apart_around_the_cutoff_land_in_one_digest_each(tenant: Tenant) -> None:
    _digest_reader(tenant, "America/Chicago", Frequency.DAILY_DIGEST)
    cutoff = datetime(2027, 11, 7, 14, 0, tzinfo=UTC)  # 08:00 CST, the day Chicago falls back
    _event(tenant, cutoff - timedelta(seconds=1), "Before")
    _event(tenant, cutoff, "After")
    [first] = run_digests(tenant.slug, cutoff + timedelta(minutes=15))
    [second] = run_digests(tenant.slug, cutoff + timedelta(days=1))
    with tenant_tx(tenant.slug) as tx:
        first_text = digest_email(tx, first.digest_id)[1]
        second_text = digest_email(tx, second.digest_id)[1]
    assert "Before" in first_text and "After" not in first_text
    assert "After" in second_text and "Before" not in second_text
    assert [(d[2], d[3]) for d in _digests(tenant)] == [(date(2027, 11, 7), 1), (date(2027, 11, 8), 1)]


def test_an_item_arriving_while_a_digest_is_built_goes_to_the_next_one(tenant: Tenant) -> None:
    _digest_reader(tenant, "Europe/Berlin", Frequency.DAILY_DIGEST)
    cutoff = datetime(2027, 9, 2, 6, 0, tzinfo=UTC)
    _event(tenant, cutoff - timedelta(hours=3), "Early")
    with tenant_tx(tenant.slug) as tx:
        [built] = build_due_digests(tx, cutoff)
        # Committed while the build is still open, and batched before the cut-off.
        _event(tenant, cutoff - timedelta(minutes=1), "Meanwhile")
    assert built.items == 1
    assert _waiting(tenant) == 1
    [later] = run_digests(tenant.slug, cutoff + timedelta(days=1))
    assert later.items == 1
    assert sum(d[3] for d in _digests(tenant)) == 2 and _waiting(tenant) == 0


def test_two_digest_builders_racing_produce_one_digest_email(tenant: Tenant, ses: SesOutbox) -> None:
    _digest_reader(tenant, "Australia/Sydney", Frequency.DAILY_DIGEST)
    for n in range(5):
        _event(tenant, datetime(2027, 10, 2, 1, 0, tzinfo=UTC) + timedelta(hours=n), f"Race {n}")
    as_of = datetime(2027, 10, 2, 22, 0, tzinfo=UTC)  # 09:00 AEDT on 3 October, after the jump
    results: list[int] = []
    assert run_concurrently(*[lambda: results.append(len(run_digests(tenant.slug, as_of)))] * 4) == []
    assert sorted(results) == [0, 0, 0, 1]
    assert scalar(tenant, "SELECT count(*) FROM notification_deliveries WHERE digest_id IS NOT NULL") == 1
    assert [(d[2], d[3]) for d in _digests(tenant)] == [(date(2027, 10, 3), 5)]
    # ... and that one delivery is one email, however often its message arrives.
    digest_delivery = int(scalar(tenant, "SELECT id FROM notification_deliveries WHERE digest_id > 0"))
    for _ in range(3):
        deliver_email(tenant.slug, digest_delivery)
    [email] = ses.sent()
    assert email.subject == "Daily digest: 5 notifications"
    # An HTML summary too, grouped by client and rule, each group with its count and due date.
    assert email.content_type == "multipart/alternative" and email.html is not None
    for n in range(5):
        assert f"Race {n} · Licence (1 notification)" in email.body
        assert f"Race {n} &#183; Licence" in email.html
    assert email.html.count("due 9 October 2027") == 5


def test_an_item_whose_recipient_opted_out_after_batching_is_cancelled_not_listed(tenant: Tenant) -> None:
    user = _digest_reader(tenant, "Europe/Berlin", Frequency.DAILY_DIGEST)
    _event(tenant, datetime(2027, 9, 1, 12, 0, tzinfo=UTC), "Opted out later")
    with tenant_tx(tenant.slug) as tx:
        set_channel(tx, user, LICENCE, Channel.EMAIL, False)
    assert run_digests(tenant.slug, datetime(2027, 9, 2, 6, 0, tzinfo=UTC)) == []  # nothing to send
    assert _digests(tenant) == []
    assert scalar(tenant, "SELECT status FROM notification_deliveries") == "cancelled"
    assert scalar(tenant, "SELECT count(*) FROM notifications WHERE archived_at IS NULL") == 1


def test_a_weekly_digest_follows_the_recipients_week_not_utcs(tenant: Tenant) -> None:
    # Kiritimati is UTC+14: its Monday 08:00 is Sunday 18:00 UTC.
    _digest_reader(tenant, "Pacific/Kiritimati", Frequency.WEEKLY, weekly_day=1)
    _event(tenant, datetime(2027, 1, 9, 12, 0, tzinfo=UTC), "Saturday UTC")
    _event(tenant, datetime(2027, 1, 10, 17, 0, tzinfo=UTC), "Sunday UTC")
    assert run_digests(tenant.slug, datetime(2027, 1, 10, 17, 59, tzinfo=UTC)) == []
    [built] = run_digests(tenant.slug, datetime(2027, 1, 10, 18, 0, tzinfo=UTC))
    assert (built.period, built.items) == ("weekly", 2)
    assert _digests(tenant) == [(built.digest_id, "weekly", date(2027, 1, 11), 2)]
    assert scalar(tenant, "SELECT threshold FROM notification_ledger WHERE rule = 'digest'") == "weekly"
