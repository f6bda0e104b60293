"""The clock's fan-outs under many tenants: no fixed order starves the tail, and a tenant's
scan, sweep and digest build each cost one transaction."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import db.platform.tenancy
from actors.digest import run_digests
from db.delivery.sweep import run_sweep
from db.notices.scan import run_scan
from db.platform.runs import fan_out_order
from db.platform.tenancy import Tenant
from domain.liveness import RunKind
from tests.integration.builders import add_client

AS_OF = datetime(2027, 9, 1, 9, 0, tzinfo=UTC)


def test_the_fan_out_sends_the_tenants_run_longest_ago_first_and_new_ones_before_all(
        make_tenant: Callable[..., Tenant]) -> None:
    a, b, c = (make_tenant() for _ in range(3))
    ours = {a.slug, b.slug, c.slug}
    run_scan(b.slug, AS_OF)
    run_scan(a.slug, AS_OF)
    assert [s for s in fan_out_order(RunKind.SCAN) if s in ours] == [c.slug, b.slug, a.slug]
    # Each kind has its own order: nothing has been swept yet, so by slug.
    assert [s for s in fan_out_order(RunKind.SWEEP) if s in ours] == sorted(ours)


def test_under_a_budget_of_two_scans_per_tick_five_tenants_are_all_reached_in_three_ticks(
        make_tenant: Callable[..., Tenant]) -> None:
    tenants = [make_tenant() for _ in range(5)]
    ours = {t.slug for t in tenants}
    reached: list[set[str]] = []
    for tick in range(3):
        # The workers get through two scans before the tick's other messages age out.
        order = [s for s in fan_out_order(RunKind.SCAN) if s in ours]
        for slug in order[:2]:
            run_scan(slug, AS_OF + timedelta(minutes=tick))
        reached.append(set(order[:2]))
    assert set().union(*reached) == ours
    # The first tick's two go to the back: the fourth tick starts with the tail of the third.
    fourth = [s for s in fan_out_order(RunKind.SCAN) if s in ours]
    assert set(fourth[:1]) <= ours - reached[1] - reached[2]


@pytest.fixture
def transactions(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The tenant transactions opened (one entry per pool check-out by db.platform.tenancy)."""
    opened: list[str] = []
    real = db.platform.tenancy.connection

    @contextmanager
    def counted() -> Iterator[Any]:
        opened.append("tx")
        with real() as conn:
            yield conn

    monkeypatch.setattr(db.platform.tenancy, "connection", counted)
    return opened


def test_a_tenant_scan_sweep_and_digest_build_each_commit_one_transaction(
        tenant: Tenant, transactions: list[str]) -> None:
    add_client(tenant, AS_OF.date() + timedelta(days=7), name="Due Ltd", users=2)
    transactions.clear()
    report = run_scan(tenant.slug, AS_OF)
    assert report.counts.claimed == 1 and report.enqueued == 2  # one email per user
    assert len(transactions) == 1
    transactions.clear()
    run_sweep(tenant.slug)
    assert len(transactions) == 1
    transactions.clear()
    run_digests(tenant.slug, AS_OF)
    assert len(transactions) == 1
