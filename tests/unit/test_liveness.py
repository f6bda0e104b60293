"""When a tenant's sweep counts as overdue (domain/liveness.py)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

from domain.liveness import RunKind, sweep_is_overdue, sweep_overdue_after

NOW = datetime(2027, 3, 28, 12, 0, tzinfo=UTC)
LONG_AGO = NOW - timedelta(days=30)
MIGRATION = Path(__file__).resolve().parents[2] / "db/platform/migrations/control/0006_run_heartbeats.sql"


def test_a_sweep_is_overdue_after_three_intervals_and_a_minute() -> None:
    assert sweep_overdue_after(60) == timedelta(minutes=4)
    assert sweep_overdue_after(5) == timedelta(seconds=75)


def test_a_sweep_within_the_limit_is_not_overdue_and_one_past_it_is() -> None:
    assert not sweep_is_overdue(NOW - timedelta(minutes=4), LONG_AGO, NOW, 60)
    assert sweep_is_overdue(NOW - timedelta(minutes=4, seconds=1), LONG_AGO, NOW, 60)


def test_a_tenant_never_swept_is_judged_from_its_creation() -> None:
    assert not sweep_is_overdue(None, NOW - timedelta(minutes=1), NOW, 60)
    assert sweep_is_overdue(None, LONG_AGO, NOW, 60)


def test_the_table_accepts_exactly_the_run_kinds_the_domain_names() -> None:
    check = re.search(r"kind IN \(([^)]*)\)", MIGRATION.read_text())
    assert check is not None
    assert {k.strip(" '") for k in check.group(1).split(",")} == {k.value for k in RunKind}
