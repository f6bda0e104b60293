"""The next-work summary (control.next_work): a tick visits only the tenants whose next
instant has come; every change to what a scan reads makes its tenant due in the same
transaction; the full pass finds and counts what the summary missed."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from actors.scan import scan_tenant
from db.notices.scan import run_scan
from db.platform.next_work import begin_scan_visit, record_next_scan, tenants_due_for_scan
from db.platform.pool import connection
from db.platform.tenancy import Tenant, tenant_tx
from tests.integration.builders import add_client, claimed
from tocsin.monitoring.metrics import WORKER_REGISTRY

AS_OF = datetime(2027, 9, 1, 9, 0, tzinfo=UTC)
FULL_SCAN_HOURS = 24.0


def due(tenants: list[Tenant], as_of: datetime) -> set[str]:
    ours = {t.slug for t in tenants}
    return {s for s in tenants_due_for_scan(as_of, FULL_SCAN_HOURS) if s in ours}


def summary(tenant: Tenant) -> str:
    """The tenant's next_scan_at as text ('-infinity', 'infinity' or an ISO instant in UTC)."""
    with connection() as conn:
        row = conn.execute(
            "SELECT CASE WHEN isfinite(next_scan_at) THEN to_char(next_scan_at AT TIME ZONE 'UTC', "
            "'YYYY-MM-DD\"T\"HH24:MI') ELSE next_scan_at::text END "
            "FROM control.next_work WHERE tenant_id = %s", [tenant.id]).fetchone()
    assert row is not None
    return str(row[0])


def missed_total() -> float:
    return WORKER_REGISTRY.get_sample_value("tocsin_scan_summary_missed_total") or 0.0


def test_a_scan_records_when_the_next_milestone_window_opens_in_the_clients_zone(
        make_tenant: Callable[..., Tenant]) -> None:
    london = make_tenant("Europe/London")
    idle = make_tenant("Europe/London")
    # Expires in 20 days: d30 is claimed now, d14 opens on 7 September at midnight in
    # New York (04:00 UTC in summer).
    add_client(london, AS_OF.date() + timedelta(days=20), zone="America/New_York")
    assert due([london, idle], AS_OF) == {london.slug, idle.slug}  # never scanned: due
    run_scan(london.slug, AS_OF)
    run_scan(idle.slug, AS_OF)
    assert summary(london) == "2027-09-07T04:00"
    assert summary(idle) == "infinity"  # no client: nothing can fall due without a change
    assert due([london, idle], AS_OF + timedelta(days=3)) == set()
    assert due([london, idle], datetime(2027, 9, 7, 4, 0, tzinfo=UTC)) == {london.slug}


def test_a_change_to_what_scans_read_makes_the_tenant_due_in_the_same_transaction(
        tenant: Tenant) -> None:
    run_scan(tenant.slug, AS_OF)
    assert due([tenant], AS_OF) == set()
    with pytest.raises(RuntimeError), tenant_tx(tenant.slug) as tx:
        tx.conn.execute("INSERT INTO clients (name, plan, access_expires_on) "
                        "VALUES ('Rolled back', 'standard', %s)", [AS_OF.date()])
        raise RuntimeError("the edit fails: nothing it wrote stays, nor its mark")
    assert due([tenant], AS_OF) == set()
    add_client(tenant, AS_OF.date() + timedelta(days=300))
    assert summary(tenant) == "-infinity"
    assert due([tenant], AS_OF) == {tenant.slug}


def test_a_change_committed_while_a_scan_runs_keeps_the_tenant_due(tenant: Tenant) -> None:
    visit = begin_scan_visit(tenant.slug, AS_OF)
    assert visit is not None
    add_client(tenant, AS_OF.date() + timedelta(days=300))  # after the scan looked
    assert not record_next_scan(visit, None)
    assert summary(tenant) == "-infinity"


def test_the_full_pass_finds_and_counts_work_changed_behind_the_summarys_back(
        tenant: Tenant, caplog: pytest.LogCaptureFixture) -> None:
    run_scan(tenant.slug, AS_OF)
    # Behind the summary's back: a client whose d7 window is open, written with the
    # triggers off (as a restore or a careless script might), the summary left as it was.
    with connection() as conn, conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")
        conn.execute(f"INSERT INTO {tenant.schema}.clients (name, plan, access_expires_on) "
                     "VALUES ('Sneaked in', 'standard', %s)", [AS_OF.date() + timedelta(days=5)])
    assert summary(tenant) == "infinity"
    assert due([tenant], AS_OF) == set()  # the summary misses it
    # FULL_SCAN_HOURS later (the last completed scan is that old), the tick visits it anyway.
    with connection() as conn:
        conn.execute("UPDATE control.completed_runs SET completed_at = completed_at - "
                     "make_interval(hours => %s) WHERE tenant_id = %s AND kind = 'scan'",
                     [int(FULL_SCAN_HOURS) + 1, tenant.id])
    assert due([tenant], AS_OF) == {tenant.slug}
    before = missed_total()
    with caplog.at_level(logging.WARNING, logger="tocsin.scan"):
        scan_tenant.fn(tenant.slug, AS_OF.isoformat())
    assert len(claimed(tenant)) == 1
    assert missed_total() == before + 1
    assert any("next-work summary said nothing was due" in r.getMessage() and tenant.slug in
               r.getMessage() for r in caplog.records)
    # The summary is right again, and a second full pass finds nothing more to count.
    assert summary(tenant) != "infinity"
    scan_tenant.fn(tenant.slug, AS_OF.isoformat())
    assert missed_total() == before + 1
