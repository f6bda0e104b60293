"""`tocsin calendar show|set` and `tocsin scan` beside the clock for time rules."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from db.platform.tenancy import Tenant, tenant_tx
from db.rules.calendar import load_calendar
from tests.integration.builders import run_concurrently
from tests.integration.test_cli import run
from tests.integration.time_rule_support import (
    add_certificate,
    add_metrology,
    add_time_rule,
    keys_once,
    rule_ledger,
)


def test_calendar_show_and_set(capsys: pytest.CaptureFixture[str], tenant: Tenant) -> None:
    code, out, _ = run(capsys, "calendar", "show", "--tenant", tenant.slug)
    assert code == 0 and "Working days: Mon, Tue, Wed, Thu, Fri" in out and "Holidays: none" in out
    code, out, _ = run(capsys, "calendar", "set", "--tenant", tenant.slug, "--working-days", "7,1,2,3,4",
                       "--holiday", "2026-12-25", "2027-01-01")
    assert code == 0 and "Holidays: 2026-12-25, 2027-01-01" in out
    with tenant_tx(tenant.slug) as tx:
        cal = load_calendar(tx)
    assert cal.working_days == frozenset({7, 1, 2, 3, 4})
    assert cal.holidays == frozenset({date(2026, 12, 25), date(2027, 1, 1)})


@pytest.mark.parametrize("argv", [
    ("--working-days", "0,9"), ("--working-days", "mon"), ("--holiday", "2026-02-30"), (),
])
def test_calendar_set_refuses_bad_input_and_changes_nothing(
    capsys: pytest.CaptureFixture[str], tenant: Tenant, argv: tuple[str, ...]
) -> None:
    code, _, err = run(capsys, "calendar", "set", "--tenant", tenant.slug, *argv)
    assert code != 0 and err
    with tenant_tx(tenant.slug) as tx:
        assert load_calendar(tx).working_days == frozenset({1, 2, 3, 4, 5})


def test_a_scan_run_by_hand_beside_the_clock_claims_nothing_twice(
    capsys: pytest.CaptureFixture[str], tenant: Tenant
) -> None:
    from db.notices.scan import run_scan

    add_metrology(tenant)
    add_time_rule(tenant)
    for n in range(-2, 31, 3):
        add_certificate(tenant, f"C{n}", datetime(2027, 6, 1).date() + timedelta(days=n))
    as_of = datetime(2027, 6, 1, 12, 0, tzinfo=UTC)
    # The clock's scans and a person's `tocsin scan` for the same instant, all at once.
    errors = run_concurrently(*[lambda: run_scan(tenant.slug, as_of)] * 3,
                              lambda: run(capsys, "scan", "--tenant", tenant.slug,
                                          "--as-of", as_of.isoformat()))
    assert errors == []
    code, out, _ = run(capsys, "scan", "--tenant", tenant.slug, "--as-of", as_of.isoformat())
    assert code == 0 and "time rules: claimed 0, skipped 0, cancelled 0" in out
    assert keys_once(tenant)
    assert len([r for r in rule_ledger(tenant) if r["status"] == "claimed"]) == 11
