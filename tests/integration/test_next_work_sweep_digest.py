"""The next-work summary of the sweep and the digest tick (control.next_work, control and
tenant migrations 0061): a sweep or a digest build records when its tenant can next have
work, the fan-out visits only the tenants whose instant has come, every change that gives a
sweep or a digest work makes its tenant due in the same transaction, and the full pass finds
and counts what the summary missed."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, time, timedelta

import pytest

from actors.digest import build_digests, run_digests
from actors.sweep import sweep_tenant
from db.delivery.deliveries import claim_deliveries
from db.delivery.sweep import run_sweep
from db.notices.licence_scan import claim_due_milestones
from db.people.preferences import save_schedule, save_user_preference
from db.platform.next_work import WorkKind, begin_visit, record_next, tenants_due
from db.platform.pool import connection
from db.platform.tenancy import Tenant, tenant_tx
from domain.delivery.preferences import Frequency, Preference
from tests.integration.builders import add_admin, add_client, scalar
from tocsin.monitoring.metrics import WORKER_REGISTRY

FULL_HOURS = 24.0


def due(kind: WorkKind, tenants: list[Tenant], as_of: datetime) -> set[str]:
    ours = {t.slug for t in tenants}
    return {s for s in tenants_due(kind, as_of, FULL_HOURS) if s in ours}


def summary(tenant: Tenant, kind: WorkKind) -> str:
    """The tenant's next instant of ``kind`` as text ('-infinity', 'infinity' or an ISO
    instant in UTC, to the second)."""
    with connection() as conn:
        row = conn.execute(
            f"SELECT CASE WHEN isfinite(next_{kind}_at) THEN to_char(next_{kind}_at AT TIME ZONE 'UTC', "
            f"'YYYY-MM-DD\"T\"HH24:MI:SS') ELSE next_{kind}_at::text END "
            "FROM control.next_work WHERE tenant_id = %s", [tenant.id]).fetchone()
    assert row is not None
    return str(row[0])


def as_text(tenant: Tenant, query: str) -> str:
    return str(scalar(tenant, f"SELECT to_char(({query}) AT TIME ZONE 'UTC', "
                              "'YYYY-MM-DD\"T\"HH24:MI:SS')"))


def missed(kind: str) -> float:
    return WORKER_REGISTRY.get_sample_value("tocsin_run_summary_missed_total", {"kind": kind}) or 0.0


def age_last_run(tenant: Tenant, kind: str) -> None:
    """As if the tenant's last run of ``kind`` completed FULL_HOURS (and one) ago."""
    with connection() as conn:
        conn.execute("UPDATE control.completed_runs SET completed_at = completed_at - "
                     "make_interval(hours => %s) WHERE tenant_id = %s AND kind = %s",
                     [int(FULL_HOURS) + 1, tenant.id, kind])


def one_delivery(tenant: Tenant) -> int:
    """A licence reminder claimed now for one user: its delivery, pending and enqueued."""
    add_client(tenant, datetime.now(UTC).date() + timedelta(days=7), users=1)
    with tenant_tx(tenant.slug) as tx:
        claim_due_milestones(tx, datetime.now(UTC))
        row = tx.conn.execute("SELECT max(id) FROM notification_deliveries").fetchone()
    assert row is not None
    return int(str(row[0]))


# ---- the sweep ---------------------------------------------------------------------------


def test_a_sweep_records_when_a_deferred_delivery_comes_due_and_an_idle_tenant_is_not_visited(
        make_tenant: Callable[..., Tenant]) -> None:
    busy, idle = make_tenant("Europe/London"), make_tenant("Europe/London")
    delivery = one_delivery(busy)
    with tenant_tx(busy.slug) as tx:  # quiet hours: deferred for two hours
        tx.conn.execute("UPDATE notification_deliveries SET status = 'deferred', enqueued_at = NULL, "
                        "send_after = now() + interval '2 hours' WHERE id = %s", [delivery])
    now = datetime.now(UTC)
    assert due("sweep", [busy, idle], now) == {busy.slug, idle.slug}  # never swept: due
    run_sweep(busy.slug)
    run_sweep(idle.slug)
    assert summary(busy, "sweep") == as_text(busy, f"SELECT send_after FROM notification_deliveries "
                                                   f"WHERE id = {delivery}")
    assert summary(idle, "sweep") == "infinity"  # nothing in flight: nothing until a change
    assert due("sweep", [busy, idle], now + timedelta(hours=1)) == set()
    assert due("sweep", [busy, idle], now + timedelta(hours=2, minutes=1)) == {busy.slug}


def test_a_delivery_leased_by_a_worker_makes_its_tenant_due_and_the_sweep_then_waits_for_the_lease(
        tenant: Tenant) -> None:
    delivery = one_delivery(tenant)
    run_sweep(tenant.slug)  # enqueued just now: due again only if its message goes stale
    assert summary(tenant, "sweep") == as_text(
        tenant, "SELECT enqueued_at + interval '10 minutes' FROM notification_deliveries "
                f"WHERE id = {delivery}")
    with tenant_tx(tenant.slug) as tx:
        claim_deliveries(tx, [delivery], 300)  # a worker takes it, in the same transaction
    assert summary(tenant, "sweep") == "-infinity"
    run_sweep(tenant.slug)
    assert summary(tenant, "sweep") == as_text(
        tenant, f"SELECT lease_until FROM notification_deliveries WHERE id = {delivery}")
    with tenant_tx(tenant.slug) as tx:  # the provider accepted it: nothing left for a sweep
        tx.conn.execute("UPDATE notification_deliveries SET status = 'accepted', lease_until = NULL, "
                        "accepted_at = now() WHERE id = %s", [delivery])
        tx.conn.execute("UPDATE notification_ledger SET delivered_at = now()")
    run_sweep(tenant.slug)
    assert summary(tenant, "sweep") == "infinity"


def test_a_change_committed_while_a_sweep_runs_keeps_the_tenant_due(tenant: Tenant) -> None:
    visit = begin_visit("sweep", tenant.slug, datetime.now(UTC))
    assert visit is not None
    with tenant_tx(tenant.slug) as tx:  # after the sweep looked
        tx.conn.execute("INSERT INTO ops_alerts (kind, ref_id, summary) VALUES ('failed_delivery', 1, 'x')")
    assert not record_next(visit, None)
    assert summary(tenant, "sweep") == "-infinity"


def test_the_full_pass_finds_and_counts_sweep_work_changed_behind_the_summarys_back(
        tenant: Tenant, caplog: pytest.LogCaptureFixture) -> None:
    run_sweep(tenant.slug)
    assert summary(tenant, "sweep") == "infinity"
    # Behind the summary's back: an alert waiting to be published, written with the
    # triggers off (as a restore or a careless script might).
    with connection() as conn, conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")
        conn.execute(f"INSERT INTO {tenant.schema}.ops_alerts (kind, ref_id, summary) "
                     "VALUES ('failed_delivery', 1, 'sneaked in')")
    now = datetime.now(UTC)
    assert due("sweep", [tenant], now) == set()  # the summary misses it
    age_last_run(tenant, "sweep")
    assert due("sweep", [tenant], now) == {tenant.slug}  # the full pass visits it anyway
    before = missed("sweep")
    with caplog.at_level(logging.WARNING, logger="tocsin.sweep"):
        sweep_tenant.fn(tenant.slug)
    assert missed("sweep") == before + 1
    assert any("said no sweep was due" in r.getMessage() and tenant.slug in r.getMessage()
               for r in caplog.records)
    # The summary knows it now (the alert still waits: due at every sweep), and the next
    # sweep is not counted.
    assert summary(tenant, "sweep") != "infinity"
    sweep_tenant.fn(tenant.slug)
    assert missed("sweep") == before + 1


# ---- digests -----------------------------------------------------------------------------

DIGEST_DAY = datetime(2027, 9, 1, 7, 0, tzinfo=UTC)  # 09:00 in Berlin, after its 08:00 digest


def _daily_reader_with_one_item(tenant: Tenant) -> int:
    admin = add_admin(tenant, f"reader-{uuid.uuid4().hex[:6]}@example.com")
    with tenant_tx(tenant.slug) as tx:
        save_user_preference(tx, admin.id, "license_expiring", Preference(True, True, Frequency.DAILY_DIGEST))
        save_schedule(tx, admin.id, quiet=None, digest_time=time(8), weekly_day=1, zone="Europe/Berlin")
    add_client(tenant, DIGEST_DAY.date() + timedelta(days=7), users=0)
    with tenant_tx(tenant.slug) as tx:  # batched for the reader's digest
        claim_due_milestones(tx, DIGEST_DAY)
    return admin.id


def test_a_digest_build_records_the_next_digest_time_and_a_tenant_with_nothing_batched_is_not_visited(
        make_tenant: Callable[..., Tenant]) -> None:
    busy, idle = make_tenant("Europe/Berlin"), make_tenant("Europe/Berlin")
    as_of = DIGEST_DAY + timedelta(minutes=15)
    run_digests(busy.slug, as_of)
    assert summary(busy, "digest") == "infinity"  # nothing batched yet
    _daily_reader_with_one_item(busy)
    assert summary(busy, "digest") == "-infinity"  # an item batched: due at the next tick
    assert run_digests(busy.slug, as_of) == []  # 1 September's digest time came before it
    assert run_digests(idle.slug, as_of) == []
    assert summary(busy, "digest") == "2027-09-02T06:00:00"  # 08:00 in Berlin the next day
    assert summary(idle, "digest") == "infinity"
    assert due("digest", [busy, idle], as_of + timedelta(hours=1)) == set()
    assert due("digest", [busy, idle], datetime(2027, 9, 2, 6, 0, tzinfo=UTC)) == {busy.slug}
    [built] = run_digests(busy.slug, datetime(2027, 9, 2, 6, 0, tzinfo=UTC))
    assert built.items == 1
    assert summary(busy, "digest") == "infinity"  # nothing waits any more


def test_the_full_pass_finds_and_counts_a_digest_changed_behind_the_summarys_back(
        tenant: Tenant, caplog: pytest.LogCaptureFixture) -> None:
    reader = _daily_reader_with_one_item(tenant)
    as_of = DIGEST_DAY + timedelta(minutes=15)
    run_digests(tenant.slug, as_of)
    assert summary(tenant, "digest") == "2027-09-02T06:00:00"
    # Behind the summary's back: the reader's digest time moved to 09:00 Berlin (07:00 UTC),
    # so 1 September's digest, at 07:00 UTC, is due by 07:15 with the item batched before it.
    with connection() as conn, conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")
        conn.execute(f"UPDATE {tenant.schema}.delivery_schedules SET digest_time = '09:00' "
                     "WHERE user_id = %s", [reader])
        conn.execute(f"UPDATE {tenant.schema}.notification_deliveries SET batched_at = %s",
                     [DIGEST_DAY - timedelta(minutes=30)])
    assert due("digest", [tenant], as_of) == set()  # the summary misses it
    age_last_run(tenant, "digest")
    assert due("digest", [tenant], as_of) == {tenant.slug}
    before = missed("digest")
    with caplog.at_level(logging.WARNING, logger="tocsin.digest"):
        build_digests.fn(tenant.slug, as_of.isoformat())
    assert missed("digest") == before + 1
    assert any("said no digest was due" in r.getMessage() and tenant.slug in r.getMessage()
               for r in caplog.records)
    assert summary(tenant, "digest") == "infinity"
