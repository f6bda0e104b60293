"""The scan's time rules over real Postgres: the set-based claim records exactly what
domain/rules/obligation_dates.py says (due claimed, passed skipped), once per (rule, subject, offset,
due date) whatever happens to the scan, each subject on its own local date."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from db.notices.scan import run_scan
from db.platform.tenancy import Tenant, tenant_tx
from db.rules.calendar import save_calendar
from domain.rules.obligation_dates import Calendar, outcomes_on
from tests.integration.builders import local_instant, scan_concurrently
from tests.integration.time_rule_support import (
    add_certificate,
    add_metrology,
    add_time_rule,
    keys_once,
    outcomes,
    rule_ledger,
    time_rule,
)

AS_OF = datetime(2027, 6, 1, 12, 0, tzinfo=UTC)
TODAY = AS_OF.date()
OFFSETS = [-30, -7, -1, 0]


def expected(subject: int, due: date, today: date, offsets: list[int] = OFFSETS,
             business_days: bool = False, cal: Calendar | None = None) -> set[tuple[int, str, date, str]]:
    cal = cal or Calendar.default()
    return {(subject, m.threshold, due, "claimed" if o == "due" else "skipped")
            for m, o in outcomes_on(due, offsets, business_days, cal, today)}


@pytest.mark.parametrize("assignee_condition", [False, True], ids=["sql", "python"])
def test_the_claim_sql_agrees_with_the_domain_windows_on_every_day(
    tenant: Tenant, assignee_condition: bool
) -> None:
    """domain/rules/obligation_dates.py is the specification; the set-based SQL (and its Python
    fallback for conditions SQL cannot say) must record exactly its outcomes."""
    add_metrology(tenant)
    conditions = [{"fact": "subject.status", "op": "not_equals", "value": "closed"}]
    if assignee_condition:  # subject.assignees is evaluated in Python on the candidates
        conditions.append({"fact": "subject.assignees", "op": "empty"})
    add_time_rule(tenant, time_rule(conditions={"all": conditions}))
    subjects = {add_certificate(tenant, f"C{n}", TODAY + timedelta(days=n)): TODAY + timedelta(days=n)
                for n in range(-5, 40)}
    closed = add_certificate(tenant, "closed", TODAY, status="closed")

    report = run_scan(tenant.slug, AS_OF)

    want = set().union(*(expected(s, due, TODAY) for s, due in subjects.items()))
    assert outcomes(tenant) == want
    assert closed not in {r["subject_id"] for r in rule_ledger(tenant)}
    assert report.time.claimed == sum(1 for *_, s in want if s == "claimed")
    assert report.time.skipped == sum(1 for *_, s in want if s == "skipped")


def test_repeated_scans_for_the_same_instant_claim_once(tenant: Tenant) -> None:
    add_metrology(tenant)
    rule = add_time_rule(tenant)
    subject = add_certificate(tenant, "C1", TODAY + timedelta(days=7))

    reports = [run_scan(tenant.slug, AS_OF) for _ in range(3)]

    assert [r.time.claimed for r in reports] == [1, 0, 0]
    assert outcomes(tenant) == {(subject, "offset:-30", TODAY + timedelta(days=7), "skipped"),
                                (subject, "offset:-7", TODAY + timedelta(days=7), "claimed")}
    assert {(r["rule_id"], r["rule_version"]) for r in rule_ledger(tenant)} == {(rule, 1)}


def test_a_whole_day_of_scans_claims_nothing_new(tenant: Tenant) -> None:
    add_metrology(tenant)
    add_time_rule(tenant)
    for n in (-3, 0, 1, 7, 20, 30):
        add_certificate(tenant, f"C{n}", TODAY + timedelta(days=n))
    day_start = datetime(2027, 6, 1, 0, 5, tzinfo=UTC)
    run_scan(tenant.slug, day_start)
    before = outcomes(tenant)
    assert before

    for n in range(1, 48):
        report = run_scan(tenant.slug, day_start + timedelta(minutes=30 * n))
        assert report.time.claimed == 0 or n * 30 >= 60 * 11  # the UTC+ zones' next day

    assert keys_once(tenant)


def test_eight_concurrent_scans_give_one_row_per_key(tenant: Tenant) -> None:
    add_metrology(tenant)
    add_time_rule(tenant)
    add_time_rule(tenant, time_rule(name="Python-evaluated", conditions={"all": [
        {"fact": "subject.assignees", "op": "empty"}]}))
    for n in range(-10, 35):
        add_certificate(tenant, f"C{n}", TODAY + timedelta(days=n))

    errors = scan_concurrently(tenant, AS_OF, 8)

    assert errors == []
    assert keys_once(tenant)
    rows = rule_ledger(tenant)
    claimed_per_subject_rule = {(r["rule_id"], r["subject_id"]) for r in rows if r["status"] == "claimed"}
    begun = len([n for n in range(-10, 35) if n <= 30])  # a window has begun for these
    assert len([r for r in rows if r["status"] == "claimed"]) == len(claimed_per_subject_rule) == 2 * begun


@pytest.mark.parametrize("zone", ["Pacific/Pago_Pago", "Pacific/Kiritimati", "Europe/London",
                                  "Asia/Kolkata", "America/Los_Angeles"])
def test_each_zone_is_notified_on_its_own_local_date(make_tenant: object, zone: str) -> None:
    tenant: Tenant = make_tenant("UTC")  # type: ignore[operator]
    add_metrology(tenant)
    add_time_rule(tenant)
    due = date(2027, 6, 15)
    subject = add_certificate(tenant, "C1", due, zone=zone)
    # The -7 window opens on 8 June, local midnight: a minute before, nothing new.
    run_scan(tenant.slug, local_instant(zone, 2027, 6, 7, 23, 59))
    assert outcomes(tenant) == {(subject, "offset:-30", due, "claimed")}
    run_scan(tenant.slug, local_instant(zone, 2027, 6, 8, 0, 1))
    rows = {r["threshold"]: r for r in rule_ledger(tenant)}
    assert rows["offset:-7"]["status"] == "claimed"
    assert rows["offset:-7"]["local_date"] == date(2027, 6, 8)


def test_subjects_from_utc_minus_11_to_utc_plus_14_each_on_their_own_date(tenant: Tenant) -> None:
    add_metrology(tenant)
    add_time_rule(tenant)
    due = date(2027, 6, 15)
    pago = add_certificate(tenant, "pago", due, zone="Pacific/Pago_Pago")  # UTC-11
    kiri = add_certificate(tenant, "kiri", due, zone="Pacific/Kiritimati")  # UTC+14
    # 10:30 UTC on 7 June: 23:59 of 7 June... no: 00:30 of 8 June in Kiritimati, 23:30 of
    # 6 June in Pago Pago.
    as_of = datetime(2027, 6, 7, 10, 30, tzinfo=UTC)
    run_scan(tenant.slug, as_of)
    assert {(s, t) for s, t, _, st in outcomes(tenant) if st == "claimed"} == {
        (pago, "offset:-30"), (kiri, "offset:-7")}
    # 11:30 UTC on 8 June: 00:30 of 8 June in Pago Pago.
    run_scan(tenant.slug, datetime(2027, 6, 8, 11, 30, tzinfo=UTC))
    rows = [(r["subject_id"], r["threshold"], r["status"], r["local_date"]) for r in rule_ledger(tenant)]
    assert (pago, "offset:-7", "claimed", date(2027, 6, 8)) in rows
    assert (kiri, "offset:-7", "claimed", date(2027, 6, 8)) in rows
    assert keys_once(tenant)


@pytest.mark.parametrize(("zone", "transition"), [
    ("Europe/London", date(2027, 3, 28)),  # clocks go forward
    ("Europe/London", date(2027, 10, 31)),  # clocks go back: 01:00-02:00 happens twice
    ("America/New_York", date(2027, 11, 7)),
])
def test_a_dst_transition_between_two_scans_fires_nothing_twice(
    tenant: Tenant, zone: str, transition: date
) -> None:
    add_metrology(tenant)
    add_time_rule(tenant)
    due = transition + timedelta(days=1)  # the -1 window is the transition day itself
    subject = add_certificate(tenant, "C1", due, zone=zone)
    instants = [local_instant(zone, transition.year, transition.month, transition.day, h, m)
                for h, m in ((0, 30), (1, 30), (2, 30), (3, 30), (23, 30))]
    for as_of in instants + [i + timedelta(hours=1) for i in instants[:3]]:
        run_scan(tenant.slug, as_of)
    minus_one = [r for r in rule_ledger(tenant) if r["threshold"] == "offset:-1"]
    assert [(r["status"], r["local_date"]) for r in minus_one] == [("claimed", transition)]
    assert subject == minus_one[0]["subject_id"] and keys_once(tenant)


def test_a_missed_day_is_healed_by_the_window_and_a_late_observation_is_skipped(tenant: Tenant) -> None:
    add_metrology(tenant)
    add_time_rule(tenant)
    due = date(2027, 6, 15)
    subject = add_certificate(tenant, "C1", due)
    run_scan(tenant.slug, datetime(2027, 6, 1, 12, 0, tzinfo=UTC))  # inside -30
    # No scan on 8 June (the -7 window's first day): the 10th still claims it.
    run_scan(tenant.slug, datetime(2027, 6, 10, 12, 0, tzinfo=UTC))
    # The scans then stop until after the due date: -1 is recorded skipped, 0 claimed.
    run_scan(tenant.slug, datetime(2027, 6, 16, 12, 0, tzinfo=UTC))
    assert outcomes(tenant) == {
        (subject, "offset:-30", due, "claimed"), (subject, "offset:-7", due, "claimed"),
        (subject, "offset:-1", due, "skipped"), (subject, "offset:0", due, "claimed")}
    skipped = [r for r in rule_ledger(tenant) if r["status"] == "skipped"]
    assert skipped[0]["status_reason"] == "a later milestone's window had begun"
    assert skipped[0]["prepared_at"] is None


def test_business_day_offsets_count_across_a_weekend_and_a_holiday(tenant: Tenant) -> None:
    add_metrology(tenant)
    cal = Calendar.of([1, 2, 3, 4, 5], [date(2027, 12, 24)])  # Friday 24 December 2027
    with tenant_tx(tenant.slug) as tx:
        save_calendar(tx, cal)
    add_time_rule(tenant, time_rule(trigger={"subject_kind": "certificate", "due": {
        "fact": "field.calibration_due", "offsets": [-2, -1, 0, 1], "business_days": True}}))
    due = date(2027, 12, 27)  # Monday: -1 is Thursday 23, -2 Wednesday 22, +1 Tuesday 28
    subject = add_certificate(tenant, "C1", due)
    seen = []
    for day in range(21, 30):
        as_of = datetime(2027, 12, day, 12, 0, tzinfo=UTC)
        run_scan(tenant.slug, as_of)
        seen.append({(t, s) for _, t, _, s in outcomes(tenant)})
        begun = {t for _, t, _, _ in expected(subject, due, as_of.date(), [-2, -1, 0, 1], True, cal)}
        assert {t for _, t, _, _ in outcomes(tenant)} == begun
    by_local_date = {r["threshold"]: r["local_date"] for r in rule_ledger(tenant)}
    assert by_local_date == {"offset:-2": date(2027, 12, 22), "offset:-1": date(2027, 12, 23),
                             "offset:0": date(2027, 12, 27), "offset:+1": date(2027, 12, 28)}
    assert all(s == "claimed" for _, _, _, s in outcomes(tenant))
    assert seen[0] == set()  # 21 December: nothing has begun


def test_a_malformed_due_date_is_no_obligation_and_stops_nothing(tenant: Tenant) -> None:
    add_metrology(tenant)
    add_time_rule(tenant)
    for n, bad in enumerate(("2027-02-30", "next week", "2027-6-1", "")):
        add_certificate(tenant, f"bad{n}", bad)
    add_certificate(tenant, "number", None, fields={"calibration_due": 20270601})
    good = add_certificate(tenant, "good", TODAY)
    run_scan(tenant.slug, AS_OF)
    assert {r["subject_id"] for r in rule_ledger(tenant)} == {good}
