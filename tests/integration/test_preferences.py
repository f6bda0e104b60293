"""Preferences at prepare time and at send time, over real Postgres (and, for the deferred
email, the real worker and the local SES endpoint). The clock is injected."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, time, timedelta

import pytest

from actors.email import deliver_email
from db.delivery.sweep import run_sweep
from db.notices.scan import run_scan
from db.people.preferences import (
    apply_send_check,
    email_send_checks,
    resolve_preference,
    resolve_preferences,
    save_category_default,
    save_schedule,
    save_user_preference,
    set_channel,
)
from db.platform.tenancy import Tenant, TenantTx, tenant_tx
from domain.delivery.preferences import (
    CATEGORIES,
    Channel,
    Frequency,
    Preference,
    SendAction,
    SendCheck,
    TenantDefault,
    resolve,
)
from domain.delivery.quiet_hours import QuietHours, quiet_hours_end
from tests.integration.builders import add_client, scalar
from tests.integration.conftest import RunningWorker, SesOutbox
from tocsin.core.clock import pinned

LICENCE = "license_expiring"



def email_send_check(tx: TenantTx, user: int, category: str, now: datetime) -> SendCheck:
    """email_send_checks, as the claim asks it, for one email."""
    return email_send_checks(tx, [(user, category, False)], now)[(user, category, False)]

def _client_user(tenant: Tenant, expires_in_days: int = 7, as_of: datetime | None = None) -> int:
    as_of = as_of or datetime(2027, 9, 1, 9, 0, tzinfo=UTC)
    _, [user] = add_client(tenant, as_of.date() + timedelta(days=expires_in_days), name="Acme")
    return user.id


def _email_rows(tenant: Tenant) -> list[tuple[str, str | None, datetime, str | None]]:
    with tenant_tx(tenant.slug) as tx:
        rows = tx.conn.execute(
            "SELECT status, status_reason, send_after, batch_period FROM notification_deliveries "
            "WHERE channel = 'email' ORDER BY id"
        ).fetchall()
    return [(str(r[0]), None if r[1] is None else str(r[1]), r[2], None if r[3] is None else str(r[3]))
            for r in rows]  # type: ignore[misc]


def test_the_sql_resolution_agrees_with_the_domain_on_every_combination(tenant: Tenant) -> None:
    # Each category gets one tenant-default state; each user one choice per category.
    states: list[TenantDefault | None] = [None]
    for frequency, locked in itertools.product(Frequency, (False, True)):
        states.append(TenantDefault(Preference(True, frequency is not Frequency.OFF, frequency), locked,
                                    "Required by our auditors" if locked else None, critical=locked))
    choices: list[Preference | None] = [None] + [
        Preference(in_app, email, f) for f in Frequency for in_app in (True, False) for email in (True, False)
    ]
    users = []
    with tenant_tx(tenant.slug) as tx:
        for n in range(len(choices)):
            users.append(int(str(tx.conn.execute(
                "INSERT INTO users (email, role) VALUES (%s, 'member') RETURNING id", [f"m{n}@x.example"]
            ).fetchone()[0])))  # type: ignore[index]
    expected = {}
    pairs = []
    # More states than categories: go round the tenant states in several passes.
    for start in range(0, len(states), len(CATEGORIES)):
        with tenant_tx(tenant.slug) as tx:
            tx.conn.execute("DELETE FROM notification_preferences")
            tx.conn.execute("DELETE FROM category_defaults")
            for category, state in zip(CATEGORIES, states[start:start + len(CATEGORIES)], strict=False):
                if state is not None:
                    save_category_default(tx, category, state.preference, locked=state.locked,
                                          lock_reason=state.lock_reason, critical=state.critical,
                                          by_user_id=users[0])
            for user, choice in zip(users, choices, strict=True):
                for category in CATEGORIES:
                    if choice is not None:
                        tx.conn.execute(
                            "INSERT INTO notification_preferences "
                            "(user_id, category, in_app, email, frequency) VALUES (%s, %s, %s, %s, %s)",
                            [user, category, choice.in_app, choice.email, choice.frequency.value])
            chunk = states[start:start + len(CATEGORIES)]
            pairs = [(u, c) for u in users for c in CATEGORIES[:len(chunk)]]
            got = resolve_preferences(tx, pairs)
            by_category = dict(zip(CATEGORIES, chunk, strict=False))
            for user, choice in zip(users, choices, strict=True):
                for category in CATEGORIES[:len(chunk)]:
                    expected[(user, category)] = resolve(choice, by_category[category])
                    assert got[(user, category)] == expected[(user, category)], choice
                    assert resolve_preference(tx, user, category) == expected[(user, category)]
    assert len(expected) == len(users) * min(len(states), len(CATEGORIES))


QUIET_CASES = [
    ("Europe/Berlin", datetime(2027, 3, 27, 22, 0, tzinfo=UTC), QuietHours(time(22), time(2, 30))),
    ("Europe/Berlin", datetime(2027, 10, 30, 21, 0, tzinfo=UTC), QuietHours(time(22), time(2, 30))),
    ("Europe/Berlin", datetime(2027, 10, 31, 1, 10, tzinfo=UTC), QuietHours(time(22), time(2, 30))),
    ("America/Chicago", datetime(2027, 3, 14, 5, 0, tzinfo=UTC), QuietHours(time(23), time(2, 15))),
    ("America/Chicago", datetime(2027, 11, 7, 4, 0, tzinfo=UTC), QuietHours(time(22), time(1, 30))),
    ("Australia/Sydney", datetime(2027, 10, 2, 12, 0, tzinfo=UTC), QuietHours(time(21), time(2, 30))),
    ("Australia/Sydney", datetime(2027, 4, 3, 11, 0, tzinfo=UTC), QuietHours(time(21), time(2, 30))),
    ("Pacific/Kiritimati", datetime(2027, 1, 1, 9, 30, tzinfo=UTC), QuietHours(time(22), time(7))),
]


def test_the_sql_quiet_hours_end_agrees_with_the_domain_across_transition_days(tenant: Tenant) -> None:
    checked = 0
    with tenant_tx(tenant.slug) as tx:
        for zone, around, quiet in QUIET_CASES:
            for minutes in range(-180, 300, 10):
                now = around + timedelta(minutes=minutes)
                row = tx.conn.execute("SELECT quiet_hours_end(%s, %s, %s, %s)",
                                      [now, zone, quiet.start, quiet.end]).fetchone()
                assert row is not None
                assert row[0] == quiet_hours_end(now, zone, quiet), (zone, now)
                checked += 1
    assert checked == len(QUIET_CASES) * 48


def _with_preference(tenant: Tenant, user: int, *, email: bool = True, in_app: bool = True,
                     frequency: Frequency = Frequency.INSTANT) -> None:
    with tenant_tx(tenant.slug) as tx:
        save_user_preference(tx, user, LICENCE, Preference(in_app, email, frequency))


def test_prepare_cancels_the_email_of_an_opted_out_user_and_keeps_the_inbox_row(tenant: Tenant) -> None:
    user = _client_user(tenant)
    _with_preference(tenant, user, email=False)
    run_scan(tenant.slug, datetime(2027, 9, 1, 9, 0, tzinfo=UTC))
    [(status, reason, _, _)] = _email_rows(tenant)
    assert status == "cancelled" and reason and "off" in reason
    assert scalar(tenant, "SELECT count(*) FROM notifications WHERE archived_at IS NULL") == 1


def test_prepare_hides_the_inbox_row_when_in_app_is_off(tenant: Tenant) -> None:
    user = _client_user(tenant)
    _with_preference(tenant, user, in_app=False)
    run_scan(tenant.slug, datetime(2027, 9, 1, 9, 0, tzinfo=UTC))
    assert [r[0] for r in _email_rows(tenant)] == ["pending"]
    assert scalar(tenant, "SELECT count(*) FROM notifications WHERE archived_at IS NOT NULL") == 1


def test_prepare_batches_digest_frequencies(tenant: Tenant) -> None:
    user = _client_user(tenant)
    _with_preference(tenant, user, frequency=Frequency.WEEKLY)
    as_of = datetime(2027, 9, 1, 9, 0, tzinfo=UTC)
    run_scan(tenant.slug, as_of)
    [(status, _, _, period)] = _email_rows(tenant)
    assert (status, period) == ("batched", "weekly")
    assert scalar(tenant, "SELECT batched_at FROM notification_deliveries") == as_of


def test_prepare_defers_inside_quiet_hours_unless_the_category_is_critical(tenant: Tenant) -> None:
    user = _client_user(tenant, as_of=datetime(2027, 1, 1, 9, 30, tzinfo=UTC))
    with tenant_tx(tenant.slug) as tx:
        save_schedule(tx, user, quiet=QuietHours(time(22), time(7)), digest_time=time(8), weekly_day=1,
                      zone="Pacific/Kiritimati")
    # 23:30 on 1 January in Kiritimati (UTC+14): deferred to 07:00 local = 17:00 UTC.
    run_scan(tenant.slug, datetime(2027, 1, 1, 9, 30, tzinfo=UTC))
    [(status, _, send_after, _)] = _email_rows(tenant)
    assert (status, send_after) == ("deferred", datetime(2027, 1, 1, 17, 0, tzinfo=UTC))
    assert scalar(tenant, "SELECT count(*) FROM notifications WHERE archived_at IS NULL") == 1

    other = _client_user(tenant, as_of=datetime(2027, 1, 1, 9, 30, tzinfo=UTC))
    with tenant_tx(tenant.slug) as tx:
        save_schedule(tx, other, quiet=QuietHours(time(22), time(7)), digest_time=time(8), weekly_day=1,
                      zone="Pacific/Kiritimati")
        save_category_default(tx, LICENCE, Preference(True, True, Frequency.INSTANT), locked=False,
                              lock_reason=None, critical=True, by_user_id=other)
    run_scan(tenant.slug, datetime(2027, 1, 1, 9, 30, tzinfo=UTC))
    assert sorted(r[0] for r in _email_rows(tenant)) == ["deferred", "pending"]


SWEEP_CASES = [
    # zone, scan instant (inside quiet hours), window, expected end (UTC)
    # Berlin springs forward: 02:30 does not exist; 03:00 CEST = 01:00 UTC.
    ("Europe/Berlin", datetime(2027, 3, 27, 22, 0, tzinfo=UTC), QuietHours(time(22), time(2, 30)),
     datetime(2027, 3, 28, 1, 0, tzinfo=UTC)),
    # Chicago falls back: 01:30 happens twice; the first (CDT) is 06:30 UTC.
    ("America/Chicago", datetime(2027, 11, 7, 4, 0, tzinfo=UTC), QuietHours(time(22), time(1, 30)),
     datetime(2027, 11, 7, 6, 30, tzinfo=UTC)),
    # Sydney springs forward: 03:00 AEDT = 16:00 UTC the day before.
    ("Australia/Sydney", datetime(2027, 10, 2, 12, 0, tzinfo=UTC), QuietHours(time(21), time(2, 30)),
     datetime(2027, 10, 2, 16, 0, tzinfo=UTC)),
    # UTC+14: 07:00 on 2 January in Kiritimati is 17:00 UTC on 1 January.
    ("Pacific/Kiritimati", datetime(2027, 1, 1, 9, 30, tzinfo=UTC), QuietHours(time(22), time(7)),
     datetime(2027, 1, 1, 17, 0, tzinfo=UTC)),
]


@pytest.mark.parametrize(("zone", "as_of", "quiet", "end"), SWEEP_CASES)
def test_a_deferred_email_is_sent_once_by_the_sweeper_when_quiet_hours_end(
    tenant: Tenant, worker: RunningWorker, ses: SesOutbox, zone: str, as_of: datetime,
    quiet: QuietHours, end: datetime,
) -> None:
    user = _client_user(tenant, as_of=as_of)
    with tenant_tx(tenant.slug) as tx:
        save_schedule(tx, user, quiet=quiet, digest_time=time(8), weekly_day=1, zone=zone)
    run_scan(tenant.slug, as_of)
    worker.drain()
    [(status, _, send_after, _)] = _email_rows(tenant)
    assert (status, send_after) == ("deferred", end)
    assert ses.sent() == []
    # The in-app row is written at once: it makes no sound.
    assert scalar(tenant, "SELECT count(*) FROM notifications WHERE archived_at IS NULL") == 1

    with pinned(end - timedelta(seconds=1)):
        assert run_sweep(tenant.slug).enqueued == 0  # a second early: still quiet
    worker.drain()
    assert ses.sent() == []
    # The sweeper runs at the end and again an hour later (in a repeated hour, the same wall
    # time comes round again): the email is released and sent once.
    delivery_id = int(scalar(tenant, "SELECT id FROM notification_deliveries"))
    for sweep_at in (end, end + timedelta(hours=1)):
        with pinned(sweep_at):
            with tenant_tx(tenant.slug) as tx:
                assert email_send_check(tx, user, LICENCE, sweep_at).action is SendAction.SEND
            run_sweep(tenant.slug)
            deliver_email.send(tenant.slug, delivery_id)  # a duplicate message changes nothing
            worker.drain()
    assert len(ses.sent()) == 1
    assert [r[0] for r in _email_rows(tenant)] == ["accepted"]


def test_an_opt_out_after_the_claim_cancels_the_pending_email_and_the_inbox_row_remains(
    tenant: Tenant, worker: RunningWorker, ses: SesOutbox
) -> None:
    as_of = datetime(2027, 9, 1, 9, 0, tzinfo=UTC)
    user = _client_user(tenant, as_of=as_of)
    with tenant_tx(tenant.slug) as tx:
        from db.notices.fanout import prepare_claims
        from db.notices.licence_scan import claim_due_milestones

        claim_due_milestones(tx, as_of)
        prepare_claims(tx, as_of)
    delivery_id = int(scalar(tenant, "SELECT id FROM notification_deliveries"))
    assert _email_rows(tenant)[0][0] == "pending"

    with tenant_tx(tenant.slug) as tx:
        set_channel(tx, user, LICENCE, Channel.EMAIL, False)
    with tenant_tx(tenant.slug) as tx:
        check = email_send_check(tx, user, LICENCE, as_of)
        assert check.action is SendAction.CANCEL
    # The send path re-checks the preference in its claim, right before the provider call.
    with pinned(as_of):
        deliver_email.send(tenant.slug, delivery_id)
        deliver_email.send(tenant.slug, delivery_id)
        worker.drain()
    with tenant_tx(tenant.slug) as tx:
        assert not apply_send_check(tx, delivery_id, check)  # settled: it moves no more
    assert ses.sent() == []
    [(status, reason, _, _)] = _email_rows(tenant)
    assert status == "cancelled" and reason
    assert scalar(tenant, "SELECT count(*) FROM notifications WHERE archived_at IS NULL") == 1


def test_the_send_check_sees_quiet_hours_digests_and_locks(tenant: Tenant) -> None:
    user = _client_user(tenant)
    night = datetime(2027, 1, 1, 9, 30, tzinfo=UTC)  # 23:30 in Kiritimati
    with tenant_tx(tenant.slug) as tx:
        assert email_send_check(tx, user, LICENCE, night).action is SendAction.SEND
        save_schedule(tx, user, quiet=QuietHours(time(22), time(7)), digest_time=time(8), weekly_day=1,
                      zone="Pacific/Kiritimati")
        deferred = email_send_check(tx, user, LICENCE, night)
        assert (deferred.action, deferred.until) == (SendAction.DEFER, datetime(2027, 1, 1, 17, tzinfo=UTC))
        save_user_preference(tx, user, LICENCE, Preference(True, True, Frequency.DAILY_DIGEST))
        batched = email_send_check(tx, user, LICENCE, night)
        assert (batched.action, batched.period) == (SendAction.BATCH, "daily")
        set_channel(tx, user, LICENCE, Channel.EMAIL, False)
        assert email_send_check(tx, user, LICENCE, night).action is SendAction.CANCEL
        save_category_default(tx, LICENCE, Preference(True, True, Frequency.INSTANT), locked=True,
                              lock_reason="Licence notices are mandatory", critical=True, by_user_id=user)
        assert email_send_check(tx, user, LICENCE, night).action is SendAction.SEND


def test_members_cannot_change_a_locked_category(tenant: Tenant) -> None:
    from db.people.preferences import CategoryLocked

    user = _client_user(tenant)
    with tenant_tx(tenant.slug) as tx:
        save_category_default(tx, LICENCE, Preference(True, True, Frequency.INSTANT), locked=True,
                              lock_reason="Licence notices are mandatory", critical=False, by_user_id=user)
    with pytest.raises(CategoryLocked, match="mandatory"), tenant_tx(tenant.slug) as tx:
        set_channel(tx, user, LICENCE, Channel.EMAIL, False)
    assert scalar(tenant, "SELECT count(*) FROM notification_preferences") == 0
