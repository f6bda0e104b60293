"""Due dates are calendar dates in the subject's own zone: DST never fires a milestone
twice, the date line does not move it, and a missed run heals on the next one."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from db.notices.scan import run_scan
from db.people.clients import create_client
from db.platform.tenancy import Tenant, tenant_tx
from domain.notices.licence import Outcome, milestone_outcomes
from domain.people.identity import Plan
from tests.integration.builders import (
    add_admin,
    add_client,
    claimed,
    ledger,
    local_instant,
    skipped,
)
from tests.integration.conftest import RunningWorker, SesOutbox


def test_the_claim_sql_agrees_with_the_domain_cadence_on_every_day_and_plan(
    tenant: Tenant,
) -> None:
    """domain/notices/licence.py is the specification; the set-based SQL must record exactly its
    outcomes: claimed where the domain says due, skipped where it says skipped."""
    today = date(2027, 6, 1)
    clients = {}
    with tenant_tx(tenant.slug) as tx:
        for plan in Plan:
            for offset in range(-100, 21):
                expires = today - timedelta(days=offset)
                client = create_client(tx, f"{plan.value} {offset}", expires, plan)
                clients[client.id] = (expires, plan)

    run_scan(tenant.slug, datetime(2027, 6, 1, 12, 0, tzinfo=UTC))

    recorded: dict[int, set[tuple[str, str]]] = {cid: set() for cid in clients}
    for row in ledger(tenant):
        recorded[row["subject_id"]].add((row["threshold"], row["status"]))
    for cid, (expires, plan) in clients.items():
        expected = {
            (m.threshold, "claimed" if outcome is Outcome.DUE else "skipped")
            for m, outcome in milestone_outcomes(expires, plan, today)
        }
        assert recorded[cid] == expected, (plan, (today - expires).days)


def _d7_rows(tenant: Tenant, client_id: int) -> list[dict[str, object]]:
    return [r for r in ledger(tenant) if r["subject_id"] == client_id and r["threshold"] == "d7"]


@pytest.mark.parametrize(
    ("zone", "transition"),
    [
        ("Europe/London", date(2027, 3, 28)),  # clocks go forward at 01:00
        ("Europe/London", date(2027, 10, 31)),  # clocks go back at 02:00; 01:30 happens twice
        ("America/New_York", date(2027, 3, 14)),  # forward at 02:00
        ("America/New_York", date(2027, 11, 7)),  # back at 02:00; 01:30 happens twice
    ],
)
def test_scans_around_a_dst_transition_claim_one_milestone_for_that_local_date(
    tenant: Tenant, zone: str, transition: date
) -> None:
    client, _ = add_client(tenant, transition + timedelta(days=7), zone=zone, users=0)
    eve = transition - timedelta(days=1)
    after = transition + timedelta(days=1)

    run_scan(tenant.slug, local_instant(zone, eve.year, eve.month, eve.day, 23, 30))
    assert _d7_rows(tenant, client.id) == []  # still the 14-day window on the eve

    instants = [
        local_instant(zone, transition.year, transition.month, transition.day, 0, 30),
        local_instant(zone, transition.year, transition.month, transition.day, 1, 30, fold=0),
        local_instant(zone, transition.year, transition.month, transition.day, 1, 30, fold=1),
        local_instant(zone, transition.year, transition.month, transition.day, 3, 0),
        local_instant(zone, transition.year, transition.month, transition.day, 23, 30),
        local_instant(zone, after.year, after.month, after.day, 0, 30),
    ]
    for instant in instants:
        run_scan(tenant.slug, instant.astimezone(UTC))

    rows = _d7_rows(tenant, client.id)
    assert len(rows) == 1
    assert rows[0]["status"] == "claimed"
    assert rows[0]["local_date"] == transition
    assert claimed(tenant) == {(client.id, "d14"), (client.id, "d7")}


def test_clients_on_either_side_of_the_date_line_get_their_d7_on_their_own_local_day(
    tenant: Tenant,
) -> None:
    expires = date(2027, 6, 15)
    d7_day = expires - timedelta(days=7)
    kiritimati, _ = add_client(tenant, expires, name="Line Islands", zone="Pacific/Kiritimati",
                               users=0)
    pago_pago, _ = add_client(tenant, expires, name="Samoa", zone="Pacific/Pago_Pago", users=0)

    # 00:30 on the d7 day in Kiritimati (UTC+14) is still the day before in Pago Pago (UTC-11).
    first = local_instant("Pacific/Kiritimati", d7_day.year, d7_day.month, d7_day.day, 0, 30)
    run_scan(tenant.slug, first.astimezone(UTC))
    assert [r["local_date"] for r in _d7_rows(tenant, kiritimati.id)] == [d7_day]
    assert _d7_rows(tenant, pago_pago.id) == []

    # 25 hours later it is the d7 day in Pago Pago too.
    second = local_instant("Pacific/Pago_Pago", d7_day.year, d7_day.month, d7_day.day, 0, 30)
    assert second - first == timedelta(hours=25)
    run_scan(tenant.slug, second.astimezone(UTC))
    assert [r["local_date"] for r in _d7_rows(tenant, pago_pago.id)] == [d7_day]
    assert len(_d7_rows(tenant, kiritimati.id)) == 1


def test_after_three_days_without_a_scan_the_current_milestone_is_sent_and_missed_ones_skipped(
    tenant: Tenant, worker: RunningWorker, ses: SesOutbox
) -> None:
    expires = date(2027, 5, 20)
    client, _ = add_client(tenant, expires, name="Quiet Ltd", users=1)
    add_admin(tenant)

    run_scan(tenant.slug, datetime(2027, 5, 18, 9, 0, tzinfo=UTC))  # day -2: d7
    worker.drain()
    assert len(ses.sent()) == 2
    # No scan on day -1 (d1), day 0 (expiry) or day +1; the next one runs on day +2.
    run_scan(tenant.slug, datetime(2027, 5, 22, 9, 0, tzinfo=UTC))
    worker.drain()

    assert claimed(tenant) == {(client.id, "d7"), (client.id, "grace1")}
    assert skipped(tenant) >= {(client.id, "d1"), (client.id, "expiry")}
    subjects = sorted(e.subject for e in ses.sent())
    assert len(subjects) == 4
    assert sum("access paused" in s for s in subjects) == 2  # grace1, once per recipient
    assert not any("last day" in s for s in subjects)  # the missed d1 was not sent late
